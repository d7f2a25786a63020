"""Secret sampling on the device: whether this device takes part in a metric on a UTC day (``sample_rate`` β).

The rule (the TypeScript SDK mirrors it exactly):

* The period is the **budget day** of the ledger (:func:`ldptel.client.sdk.ledger.state`: the UTC day of the
  clock, or the latest day ever recorded if the clock went back), the day the report would be charged to.
* The first time a metric is reported on a day, the device draws ``U = int.from_bytes(os.urandom(8),
  "little") >> 11`` (53 uniform bits from the OS CSPRNG) and stores it in the table
  ``sampling(metric, day, draw)`` (same sqlite transaction as the report). Every later report of that metric
  on that day reads the stored U: the decision is made once per metric and day, and survives restarts. A
  report the daily budget or the lifetime ledger refuses still keeps the draw (only its charges are undone), so
  a refused first report does not give the day a second draw (tests/client/test_sampling.py::
  test_a_refused_report_keeps_the_days_draw); the same for the release of a period of an on-device metric.
* The device takes part iff ``U < floor(β · 2^53)`` (β = the spec's ``sample_rate``; float64 β times 2^53 is
  exact, so the threshold is the same integer in every language). β = 1 needs no draw: every device takes part.
  The draw is kept per metric *name*, not per version: a new version with another β reuses U (so raising β
  only adds devices).
* A device that does not take part sends nothing for that metric that day, spends no privacy budget, and the
  report call answers ``"not_sampled"``. Rows of earlier days are deleted when the budget day moves on.

The draw is independent of every value and of the device secret, so storing it reveals nothing about what
the device holds; it is never sent.
"""

from __future__ import annotations

import math
import os
import sqlite3

DRAW_BITS = 53


def threshold(sample_rate: float) -> int:
    """floor(β · 2^53): a device takes part iff its draw is below it."""
    return math.floor(sample_rate * (1 << DRAW_BITS))


def new_draw() -> int:
    """53 uniform bits from the OS CSPRNG."""
    return int.from_bytes(os.urandom(8), "little") >> (64 - DRAW_BITS)


def takes_part(conn: sqlite3.Connection, metric: str, day: int, sample_rate: float) -> bool:
    """Whether the device takes part in ``metric`` on budget ``day`` (draws and stores U the first time).

    Runs in the caller's transaction."""
    if sample_rate >= 1.0:
        return True
    row = conn.execute("SELECT draw FROM sampling WHERE metric = ? AND day = ?", (metric, day)).fetchone()
    if row is None:
        draw = new_draw()
        conn.execute("INSERT INTO sampling(metric, day, draw) VALUES (?, ?, ?)", (metric, day, draw))
    else:
        draw = int(row[0])
    return draw < threshold(sample_rate)


def stored(conn: sqlite3.Connection, metric: str, day: int) -> int | None:
    """The draw stored for ``metric`` on ``day``, None when there is none."""
    row = conn.execute("SELECT draw FROM sampling WHERE metric = ? AND day = ?", (metric, day)).fetchone()
    return None if row is None else int(row[0])


def keep(conn: sqlite3.Connection, metric: str, day: int, draw: int | None) -> None:
    """Store ``draw`` (from :func:`stored`) for ``metric`` on ``day`` again after a rollback took it away (no-op for
    None or a draw already there): a rolled-back report keeps the day's decision."""
    if draw is not None:
        conn.execute("INSERT OR IGNORE INTO sampling(metric, day, draw) VALUES (?, ?, ?)", (metric, day, draw))


def prune(conn: sqlite3.Connection, day: int) -> None:
    """Forget the decisions of days before ``day``."""
    conn.execute("DELETE FROM sampling WHERE day < ?", (day,))
