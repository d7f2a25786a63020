"""On-device aggregation state (issue 29): what ``Reporter.count(metric)`` keeps between reports.

One row per metric in the device database (table ``tallies``, :mod:`ldptel.client.sdk.store`):

* ``day``: the latest UTC day (days since 1970-01-01) with a ``count()`` of the metric: never earlier than the
  budget day of the ledger, and it never moves backwards (a clock set back keeps counting into the latest day);
* ``count``: the ``count()`` calls of that day (saturating at :data:`MAX_COUNT`);
* ``seen``: a bitmap of the last :data:`BITMAP_DAYS` days: bit i set = at least one ``count()`` on day − i;
* ``released``: the last reporting period already reported (or skipped), so a period is reported at most once.

Nothing finer than the UTC day is kept (no time, no order of calls), the row is bounded (four integers, whatever
the number of calls or days) and it is deleted with the metric's retirement (:func:`forget`). It lives in the same
sqlite database and transactions as the queue and the ledger, so it survives a kill of the app exactly as they do
(``synchronous=NORMAL``: a crash of the app loses nothing committed; see :mod:`ldptel.client.sdk.store`).

Reporting (:func:`take_due`): a mechanism with the :class:`~ldptel.client.mechanisms.capabilities.OnDevice`
capability has W-day periods aligned on day 0; during period p + 1 the device reports period p's value once (0 /
false when it counted nothing then), computed from the row before the new day is recorded. Periods before p that
were never reported (the SDK did not run during their next period) are skipped, never reported late: a report
always describes the period just before the one it is sent in.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass

BITMAP_DAYS = 30  # the longest window (unique-devices: 30 days)
_MASK = (1 << BITMAP_DAYS) - 1
MAX_COUNT = (1 << 62) - 1  # a day's count saturates here (sqlite integers are 64-bit)
MAX_CALL = 1 << 31  # most events one count() call adds


@dataclass(frozen=True, slots=True)
class Tally:
    """One metric's row (module docstring)."""

    day: int
    count: int
    seen: int
    released: int

    def counts(self, first: int, last: int) -> list[int]:
        """The count of each day in [first, last] (oldest first): the exact count of :attr:`day`, 1 for an
        earlier day in the bitmap with a call, else 0."""
        out = []
        for d in range(first, last + 1):
            age = self.day - d
            if age == 0:
                out.append(self.count)
            elif 0 < age < BITMAP_DAYS and self.seen >> age & 1:
                out.append(1)
            else:
                out.append(0)
        return out


def get(conn: sqlite3.Connection, metric: str) -> Tally | None:
    row = conn.execute("SELECT day, count, seen, released FROM tallies WHERE metric = ?", (metric,)).fetchone()
    return None if row is None else Tally(int(row[0]), int(row[1]), int(row[2]), int(row[3]))


def metrics(conn: sqlite3.Connection) -> list[str]:
    """The metrics that have a tally on this device."""
    return [str(r[0]) for r in conn.execute("SELECT metric FROM tallies ORDER BY metric")]


def take_due(
    conn: sqlite3.Connection, metric: str, today: int, period_days: int, value_of: Callable[[Sequence[int]], object]
) -> tuple[int, object] | None:
    """(period, value) to report now for ``metric``, marked as reported; None when nothing is due.

    Due: the period before the one of ``today`` (the later of ``today`` and the row's day), if not reported yet.
    Runs in the caller's transaction (rolled back with it).
    """
    tally = get(conn, metric)
    if tally is None:
        return None
    today = max(today, tally.day)
    prev = today // period_days - 1
    if tally.released >= prev:
        return None
    value = value_of(tally.counts(prev * period_days, prev * period_days + period_days - 1))
    conn.execute("UPDATE tallies SET released = ? WHERE metric = ?", (prev, metric))
    return prev, value


def record(conn: sqlite3.Connection, metric: str, today: int, n: int, period_days: int) -> Tally:
    """Add ``n`` events of ``today`` (the later of it and the row's day) to ``metric``'s tally, creating it.

    A new tally marks the period before today's as reported: the device knows nothing about it.
    Call :func:`take_due` first in the same transaction (the bitmap is shifted to the new day here).
    """
    tally = get(conn, metric)
    if tally is None:
        tally = Tally(day=today, count=0, seen=0, released=today // period_days - 1)
    elif today > tally.day:
        shift = today - tally.day
        seen = (tally.seen << shift) & _MASK if shift < BITMAP_DAYS else 0
        tally = Tally(day=today, count=0, seen=seen, released=tally.released)
    new = Tally(day=tally.day, count=min(tally.count + n, MAX_COUNT), seen=tally.seen | (1 if n > 0 else 0),
                released=tally.released)
    conn.execute(
        "INSERT OR REPLACE INTO tallies(metric, day, count, seen, released) VALUES (?, ?, ?, ?, ?)",
        (metric, new.day, new.count, new.seen, new.released),
    )
    return new


def forget(conn: sqlite3.Connection, metric: str) -> bool:
    """Delete ``metric``'s tally (its retirement); True when there was one. Runs in the caller's transaction."""
    return conn.execute("DELETE FROM tallies WHERE metric = ?", (metric,)).rowcount > 0
