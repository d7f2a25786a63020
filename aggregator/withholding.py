"""Reporting thresholds: estimates over too few reports are withheld (Cobalt's ``reporting_threshold``).

A metric's ``min_reports`` (:attr:`~ldptel.storage.registry.MetricRecord.min_reports`, 0 = off) is compared with
the RAW number of reports of a unit (a UTC day, a 32-day roll-up where retention left only those, or a breakdown
combination), never with a noisy estimate: :func:`withheld` is the one test, and its :class:`Withheld` carries the
one-line reason shown where the estimate would have been. Nothing derived from a withheld unit's reports is shown:
not its estimates, not its report count.

Differencing. Withholding a day while showing a 7-day total and the 6-day total without it would reveal the day;
so a withheld unit is left out of EVERY sum: a range's estimate is the sum of its released units only
(:func:`release_plan` cuts the range into runs of released units, each summed on its own), so the 7-day total equals
the 6-day one and no pair of ranges differs by a withheld day. A 32-day roll-up (past the metric's retention its
days can no longer be read one by one) is withheld whole when any of its days has fewer than ``min_reports``
reports: its days were readable one by one before retention dropped them, so the block minus those days would
otherwise be the withheld day. A range whose every unit is withheld raises :class:`WithheldRangeError` (an empty
range: CLI and dashboard show the reason, JSON has no rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis as redis_lib

from ldptel.storage import sealed
from ldptel.storage import sketches as store
from ldptel.storage.registry import MetricRecord

REASON = "withheld: fewer than {min_reports:,} reports (the metric's min_reports)"


@dataclass(frozen=True)
class Withheld:
    """A unit whose estimates are not shown: ``what`` names it (a day, ``first..last`` for a roll-up, a
    combination), ``reason`` says why in one line (never the unit's report count)."""

    what: str
    min_reports: int

    @property
    def reason(self) -> str:
        return REASON.format(min_reports=self.min_reports)

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "reason": self.reason}


def withheld(n: int, min_reports: int, *, what: str = "") -> Withheld | None:
    """The one threshold test: a :class:`Withheld` when the RAW report count ``n`` of a unit (a day, a roll-up, a
    breakdown combination) is below ``min_reports`` (0: never), else None. Never call it on a noisy estimate."""
    return Withheld(what, min_reports) if min_reports > 0 and n < min_reports else None


def threshold_of(record: MetricRecord) -> int:
    return int(getattr(record, "min_reports", 0) or 0)


@dataclass(frozen=True)
class ReleasePlan:
    """A range cut by the threshold: ``runs`` of released (first, last) day spans (each summed on its own; no run
    crosses a withheld unit) and the ``withheld`` units, in day order."""

    runs: tuple[tuple[str, str], ...]
    withheld: tuple[Withheld, ...]
    spans: tuple[tuple[str, str], ...]  # every released unit (a day, or a roll-up's first and last day)


def day_counts(r: redis_lib.Redis, record: MetricRecord, version: int, days: Sequence[str],
               cells: Sequence[str] = ("",)) -> dict[str, int]:
    """Raw reports of ``version`` on each of ``days``, summed over breakdown ``cells`` (unsealed: the per-shard
    states' row counts, read without the counters; sealed: the count kept beside the sealed state, also past
    retention). Days without reports are 0."""
    wanted = set(days)
    total = dict.fromkeys(days, 0)
    for cell in cells:
        pairs = [(shard, v, day) for shard, members in store.sketch_index(r, record.name, record.shards, cell=cell).items()
                 for v, day in members if v == version and day in wanted]
        counts = store.day_reports(r, record.name, params=record.versions[version].params, pairs=pairs, cell=cell)
        for day, n in sealed.sealed_reports(r, record.name, version=version, cell=cell).items():
            if day in wanted:
                counts[day] = n  # sealed wins: a sealer may not have removed a sealed day's shard states yet
        for day in days:
            total[day] += counts.get(day, 0)
    return total


def release_plan(r: redis_lib.Redis, record: MetricRecord, version: int, days: Sequence[str],
                 cells: Sequence[str] = ("",)) -> ReleasePlan:
    """Which units of the range [days[0], days[-1]] (``days``: those with reports) are released, and the runs of
    released units to sum (module docstring), counting the reports of every breakdown cell in ``cells`` (a query's
    cells: its total over them is what it shows). With no threshold: nothing is read, nothing withheld."""
    threshold = threshold_of(record)
    if not days or threshold <= 0:
        return ReleasePlan(((days[0], days[-1]),) if days else (), (), ())
    spans = sorted({span for cell in cells for span in sealed.periods(
        r, record.name, version=version, shards=record.shards, day_from=days[0], day_to=days[-1], cell=cell)})
    counts = day_counts(r, record, version, sorted({d for f, t in spans for d in _days_in(f, t)}), cells)
    runs: list[tuple[str, str]] = []
    held: list[Withheld] = []
    released: list[tuple[str, str]] = []
    open_run = False
    for first, last in spans:
        inside = [counts.get(d, 0) for d in _days_in(first, last)]
        what = first if first == last else f"{first}..{last}"
        # a day: its count; a roll-up: any of its days with reports below the threshold withholds it whole
        out = withheld(min((n for n in inside if n > 0), default=0), threshold, what=what)
        if out is not None:
            held.append(out)
            open_run = False
            continue
        released.append((first, last))
        if open_run:
            runs[-1] = (runs[-1][0], last)
        else:
            runs.append((first, last))
            open_run = True
    return ReleasePlan(tuple(runs), tuple(held), tuple(released))


def _days_in(first: str, last: str) -> list[str]:
    a, b = sealed.day_number(first), sealed.day_number(last)
    return [sealed.day_name(d) for d in range(a, b + 1)]


def counts_shown(counts: Mapping[str, int], record: MetricRecord) -> dict[str, int | None]:
    """Per-day report counts as a list may show them: None for a day below the threshold (its count is derived
    from its reports too)."""
    threshold = threshold_of(record)
    return {day: (None if withheld(n, threshold) is not None else n) for day, n in counts.items()}


__all__ = ["REASON", "ReleasePlan", "Withheld", "counts_shown", "day_counts", "release_plan", "threshold_of", "withheld"]
