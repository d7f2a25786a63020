"""Sealed days and roll-ups: what a metric keeps once its days can no longer change, and how a range is read.

A fold worker writes one state per (shard, version, UTC day) (:mod:`ldptel.storage.sketches`). Once a day can
no longer receive reports it is *sealed*: its shards' states are summed into one state per (version, day) in
the metric's sealed hash tag (:func:`ldptel.storage.keys.sealed_tag`, one Redis Cluster slot for every sealed
state of the metric), and the per-shard states are removed.

When a day is sealable. Ingest stores a batch under its UTC arrival day, and a stream entry's id carries the
start of that day (or of the next day, when another ingest's clock is already past midnight: see
``append.lua``). So day D is sealable when

* D is at least ``horizon + 2`` days before today (``LDPTEL_RETRY_HORIZON_DAYS``: no ingest can still be on
  day D, even with a skewed clock, and no retry of a batch of D is still deduplicated against it), where today
  is the earlier of the sealer's clock and Redis's ``TIME`` (one fast host clock cannot seal an open day), and
* on every shard, the first stream entry after the committed checkpoint (if any) has an id after the start of
  day D + 1, i.e. every entry that can carry day D is folded and committed. New entries get ids of today.

Exactly once (kill -9 at any moment). A sealable day's per-shard states never change again, so sealing is a
pure function of them: sum them, then in ONE MULTI/EXEC in the sealed slot write the day's state, add it to
the sealed index and record its reports (WATCHing the index: a second sealer, or a rerun after a crash,
finds the day sealed and skips the sum). Only then are the per-shard states removed (one MULTI/EXEC per
shard). A reader that finds a day in the sealed index reads only the sealed state and ignores per-shard
states left by a sealer killed before it removed them; a reader that planned on per-shard states and then
finds one gone (the sealer removed it meanwhile) plans again (:func:`summed_state`). Nothing is summed twice
and nothing is lost.

Roll-ups: power-of-two aligned blocks. Level j ≥ 1 holds, per version, the sum of the 2**j days
[i·2**j, (i+1)·2**j) counted from 1970-01-01, for j = 1 … :data:`LEVELS` (2 to 512 days). Any range of R days
is the disjoint union of at most 2·log2(R) such blocks plus days at its edges, so a year is read from at most
~16 states instead of 365 × shards. Why aligned blocks and not ISO weeks and months: a year from weeks and
months is up to ~40 states (months do not nest in weeks, so the edges need days and weeks), and a range of
years from months grows linearly; aligned blocks nest, so one recursive plan serves every range with a
logarithmic bound, and every block is one key in the metric's sealed slot (no cross-slot read is needed to
build it: it is the sum of its two halves). The cost is that a block is not a calendar period, so a range
answered coarser than a day says which days it covers (``first … last``), never "a week". A block is built
once, when the last of its days is sealed, from its two halves (idempotent: rebuilding gives the same bytes);
an empty block is not stored.

Retention (a metric's ``retention_days``): daily states, and roll-ups finer than :data:`KEEP_LEVEL` (32 days),
are dropped once the whole 32-day block that holds them is older than the retention and has been built. Older
ranges are then answered in 32-day blocks: a range that starts or ends in them is widened to the block's edges
(:class:`Summed` says which days were read). The reports per sealed day are kept (a small hash), so a
dashboard still lists the days and their report counts.
"""

from __future__ import annotations

import bisect
import datetime as dt
import hashlib
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import redis as redis_lib

from ldptel.client import SketchState
from ldptel.client.errors import LdpError
from ldptel.client.protocol.specs import Params
from ldptel.storage import keys
from ldptel.storage import sketches as store
from ldptel.storage.sketches import StoreError, format_id, parse_id

__all__ = [
    "KEEP_LEVEL",
    "LEVELS",
    "SealReport",
    "SealedView",
    "Summed",
    "block_days",
    "coarse_note",
    "days_with_reports",
    "memory_of",
    "periods",
    "sealed_reports",
    "day_name",
    "day_number",
    "read_view",
    "seal_metric",
    "sealable_through",
    "summed_state",
    "summed_states",
]

LEVELS = 9  # roll-up levels 1..9: aligned blocks of 2, 4, ..., 512 days
KEEP_LEVEL = 5  # blocks of 32 days and coarser are kept forever; finer states follow the daily retention
DAY_MS = 86_400_000
_EPOCH = dt.date(1970, 1, 1).toordinal()
_READ_ATTEMPTS = 8  # plans of one read (a sealer or retention removed a planned state meanwhile: plan again)
_SEAL_LEASE_TTL_MS = 600_000


# --------------------------------------------------------------------------------------------------- days
def day_number(day: str) -> int:
    """Days since 1970-01-01 of a UTC day ``YYYY-MM-DD``."""
    return dt.date.fromisoformat(day).toordinal() - _EPOCH


def day_name(number: int) -> str:
    return dt.date.fromordinal(number + _EPOCH).isoformat()


def block_days(level: int, start: int) -> tuple[int, int]:
    """First and last day number of the level-``level`` block that starts on day number ``start``."""
    return start, start + (1 << level) - 1


def _member(version: int, level: int, start: int) -> str:
    return f"{version}:{level}:{day_name(start)}"


def _key(metric: str, version: int, level: int, start: int, cell: str = "") -> str:
    return keys.sealed_state(metric, version, level, day_name(start), cell)


# --------------------------------------------------------------------------------------------------- view
@dataclass(frozen=True)
class SealedView:
    """One consistent snapshot of a metric's sealed slot (read in one MULTI/EXEC).

    index: (version, level, start day number) of every sealed state; days: (version, day number) → reports of
    every sealed day (also those whose state retention dropped); through: every day up to it is sealed and its
    roll-ups built (None: nothing sealed yet); dropped: daily and fine states of days up to it may be gone.
    """

    index: frozenset[tuple[int, int, int]]
    days: dict[tuple[int, int], int]
    through: int | None
    dropped: int | None

    def days_of(self, version: int) -> list[int]:
        return sorted(d for v, d in self.days if v == version)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def read_view(r: redis_lib.Redis, metric: str, cell: str = "") -> SealedView:
    """The sealed slot of one breakdown ``cell`` ("" without breakdown); the marks are the metric's (shared)."""
    pipe = r.pipeline(transaction=True)
    pipe.smembers(keys.sealed_index(metric, cell))
    pipe.hgetall(keys.sealed_days(metric, cell))
    pipe.hgetall(keys.sealed_marks(metric))
    members, days_raw, marks_raw = pipe.execute()
    index = set()
    for member in members:
        version, level, day = _text(member).split(":")
        index.add((int(version), int(level), day_number(day)))
    days: dict[tuple[int, int], int] = {}
    for k, v in days_raw.items():
        version, _, day = _text(k).partition(":")
        days[(int(version), day_number(day))] = int(v)
    marks = {_text(k): day_number(_text(v)) for k, v in marks_raw.items()}
    return SealedView(frozenset(index), days, marks.get("through"), marks.get("dropped"))


# ------------------------------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class Summed:
    """The summed state of a metric version over a range of days, and what it was read from.

    days: the UTC days with reports that the state covers; first / last: the range covered, wider than the one
    asked when retention left only 32-day roll-ups at an edge (None when the range holds no reports);
    coarse: the spans (first, last) read as roll-ups whose days are no longer available one by one (empty when
    every day in the range could still be read on its own); states: blobs read.
    """

    state: SketchState
    days: tuple[str, ...]
    first: str | None
    last: str | None
    coarse: tuple[tuple[str, str], ...] = ()
    states: int = 0


@dataclass
class _Plan:
    keys: list[str] = field(default_factory=list)
    coarse: list[tuple[int, int]] = field(default_factory=list)


def _shard_days(r: redis_lib.Redis, metric: str, shards: int, version: int, cell: str = "") -> dict[int, list[int]]:
    """Day number → shards that hold an unsealed per-shard state of ``version`` (in ``cell``) for it."""
    out: dict[int, list[int]] = {}
    for shard, pairs in store.sketch_index(r, metric, shards, cell=cell).items():
        for v, day in pairs:
            if v == version:
                out.setdefault(day_number(day), []).append(shard)
    return out


def _snap(day: int, view: SealedView, *, end: bool) -> int:
    """Widen a range edge that falls where retention left only KEEP_LEVEL blocks to that block's edge."""
    if view.dropped is None or day > view.dropped:
        return day
    start = day >> KEEP_LEVEL << KEEP_LEVEL
    return block_days(KEEP_LEVEL, start)[1] if end else start


def _plan(metric: str, version: int, a: int, b: int, shard_days: dict[int, list[int]], view: SealedView,
          data: list[int], cell: str = "") -> _Plan:
    """The states to read for days [a, b]: aligned blocks fully inside that exist, else their halves, down to
    sealed days, else per-shard states. ``data``: sorted day numbers that have reports (to skip empty spans)."""
    plan = _Plan()

    def has_data(lo: int, hi: int) -> bool:
        i = bisect.bisect_left(data, lo)
        return i < len(data) and data[i] <= hi

    def visit(level: int, start: int) -> None:
        first, last = block_days(level, start)
        lo, hi = max(first, a), min(last, b)
        if lo > hi or not has_data(lo, hi):
            return
        inside = first >= a and last <= b
        if inside and (version, level, start) in view.index:
            plan.keys.append(_key(metric, version, level, start, cell))
            if view.dropped is not None and level >= KEEP_LEVEL and first <= view.dropped:
                plan.coarse.append((first, last))
            return
        if level == 0:
            if start in shard_days:
                plan.keys.extend(keys.sketch(metric, s, version, day_name(start), cell) for s in shard_days[start])
            elif (version, start) in view.days:
                # a sealed day with reports whose state is gone (retention since the view, or a view that raced a
                # sealer): the caller plans again from a new view
                raise _Replan(f"day {day_name(start)} of {metric!r} is no longer stored on its own")
            return
        half = 1 << (level - 1)
        visit(level - 1, start)
        visit(level - 1, start + half)

    top = LEVELS
    for i in range(a >> top, (b >> top) + 1):
        visit(top, i << top)
    return plan


class _Replan(LdpError):
    pass


def summed_state(
    r: redis_lib.Redis,
    metric: str,
    *,
    params: Params,
    version: int,
    shards: int,
    day_from: str | None = None,
    day_to: str | None = None,
    cell: str = "",
) -> Summed:
    """The sum over every shard of a metric version's reports on the days [day_from, day_to] (None: open), in one
    breakdown ``cell`` ("": a metric without breakdown).

    Reads the fewest states there are: aligned roll-ups, sealed days, and per-shard states of days not sealed
    yet. Consistent while a sealer runs: the per-shard index is read before the sealed slot (so a day is seen
    either unsealed, with every shard's state, or sealed), and a plan whose state has meanwhile been removed is
    planned again.
    """
    return next(summed_states(r, metric, params=params, version=version, shards=shards, spans=[(day_from, day_to)],
                              cell=cell))


def summed_states(
    r: redis_lib.Redis,
    metric: str,
    *,
    params: Params,
    version: int,
    shards: int,
    spans: Sequence[tuple[str | None, str | None]],
    cell: str = "",
) -> Iterator[Summed]:
    """:func:`summed_state` of each span (day_from, day_to), in order, from one read of the indexes and one
    pipelined fetch of every state the spans need (a per-day series reads its days in a few round trips, not a
    query each). A span's state is yielded as soon as its last blob is read, so memory holds one summed state
    at a time, not one per span. Where a planned state was removed meanwhile, the spans not yet yielded are
    planned again (each span is read from one consistent plan)."""
    bounds = [(None if f is None else day_number(f), None if t is None else day_number(t)) for f, t in spans]
    done = 0
    for _attempt in range(_READ_ATTEMPTS):
        shard_days = _shard_days(r, metric, shards, version, cell)  # first: see module docs
        view = read_view(r, metric, cell)
        data = sorted(set(shard_days) | set(view.days_of(version)))
        try:
            planned = [_plan_span(metric, version, lo, hi, shard_days, view, data, cell) for lo, hi in bounds[done:]]
        except _Replan:
            continue
        blobs = store.get_blobs(r, [name for p in planned if p is not None for name in p[2].keys])
        try:
            for p in planned:
                if p is None:
                    yield Summed(SketchState.empty(params), (), None, None)
                    done += 1
                    continue
                a, b, plan = p
                total: SketchState | None = None
                for name in plan.keys:
                    _name, raw = next(blobs)  # in the order of the plans
                    if raw is None:
                        raise _Replan(f"{name} was removed while being read")
                    if total is None and len(plan.keys) == 1:
                        total = _decode(name, raw, params)  # one state: read it as is, nothing to add it to
                    else:
                        total = total or SketchState.empty(params)
                        store.add_blob(total, name, raw, params)
                covered = [day_name(d) for d in data if a <= d <= b]
                coarse = tuple((day_name(f), day_name(t)) for f, t in sorted(plan.coarse))
                yield Summed(total or SketchState.empty(params), tuple(covered), day_name(a) if covered else None,
                             day_name(b) if covered else None, coarse, len(plan.keys))
                done += 1
            return
        except _Replan:
            continue
    raise StoreError(f"the states of {metric!r} kept changing while being read ({_READ_ATTEMPTS} plans); try again")


def _plan_span(metric: str, version: int, lo: int | None, hi: int | None, shard_days: dict[int, list[int]],
               view: SealedView, data: list[int], cell: str) -> tuple[int, int, _Plan] | None:
    """(first, last, plan) of the days [lo, hi] (None: open) clipped to the data and widened to the 32-day blocks
    retention left; None when no day of the range has reports."""
    if not data:
        return None
    a = data[0] if lo is None else max(lo, data[0])
    b = data[-1] if hi is None else min(hi, data[-1])
    if a > b:
        return None
    a, b = _snap(a, view, end=False), _snap(b, view, end=True)  # may widen past the data: no harm
    return a, b, _plan(metric, version, a, b, shard_days, view, data, cell)


def _decode(name: str, raw: bytes, params: Params) -> SketchState:
    try:
        return SketchState.from_bytes(raw, params)
    except (LdpError, ValueError) as exc:
        raise StoreError(f"sketch {name} is unreadable: {exc}") from None


def periods(
    r: redis_lib.Redis, metric: str, *, version: int, shards: int, day_from: str | None = None, day_to: str | None = None,
    cell: str = "",
) -> list[tuple[str, str]]:
    """The finest spans (first, last) the days with reports in [day_from, day_to] can be read in, in order: one
    day each where the day's state (sealed or per shard) is kept, a 32-day block where retention dropped them."""
    shard_days = _shard_days(r, metric, shards, version, cell)
    view = read_view(r, metric, cell)
    data = sorted(set(shard_days) | set(view.days_of(version)))
    lo = None if day_from is None else day_number(day_from)
    hi = None if day_to is None else day_number(day_to)
    out: list[tuple[int, int]] = []
    for d in data:
        if (lo is not None and d < lo) or (hi is not None and d > hi):
            continue
        if view.dropped is not None and d <= view.dropped and d not in shard_days:
            first = _snap(d, view, end=False)
            span = (first, _snap(d, view, end=True))
            if not out or out[-1] != span:
                out.append(span)
        else:
            out.append((d, d))
    return [(day_name(f), day_name(t)) for f, t in out]


def days_with_reports(r: redis_lib.Redis, metric: str, *, version: int, shards: int, cell: str = "") -> list[str]:
    """Sorted UTC days with reports of ``version`` (in ``cell``): unsealed (a per-shard state) or sealed (kept or not)."""
    shard_days = _shard_days(r, metric, shards, version, cell)
    view = read_view(r, metric, cell)
    return [day_name(d) for d in sorted(set(shard_days) | set(view.days_of(version)))]


def sealed_reports(r: redis_lib.Redis, metric: str, *, version: int, cell: str = "") -> dict[str, int]:
    """Reports per sealed day of ``version`` in ``cell`` (from the small hash kept for every sealed day)."""
    view = read_view(r, metric, cell)
    return {day_name(d): n for (v, d), n in sorted(view.days.items()) if v == version}


# ------------------------------------------------------------------------------------------------- sealing
@dataclass
class SealReport:
    """What one :func:`seal_metric` did."""

    metric: str
    days_sealed: int = 0
    shard_states_merged: int = 0
    rollups_built: int = 0
    states_dropped: int = 0
    through: str | None = None
    dropped: str | None = None
    seconds: float = 0.0
    skipped: str | None = None  # why nothing was done (another worker holds the metric's seal lease)
    # "<version>:<day>:<shard>" of shard states written after their day was sealed: kept, not counted (see _seal_day)
    late_states: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def sealable_through(r: redis_lib.Redis, metric: str, shards: int, *, today: dt.date, horizon_days: int) -> int:
    """The last day number that can be sealed now (see the module docs).

    "Today" is the earlier of ``today`` (this host's clock) and Redis's own ``TIME``: a sealer whose clock runs
    days ahead must not seal a day ingest can still stamp (the fold would then dead-letter acknowledged
    reports). Only the day of ``TIME`` is used; it is never stored."""
    redis_day = int(r.time()[0]) // 86_400
    limit = min(today.toordinal() - _EPOCH, redis_day) - horizon_days - 2
    pipe = r.pipeline(transaction=False)
    for shard in range(shards):
        pipe.get(keys.checkpoint(metric, shard))
    checkpoints = [parse_id(raw) if raw else store.ZERO_ID for raw in pipe.execute()]
    pipe = r.pipeline(transaction=False)
    for shard, ckpt in enumerate(checkpoints):
        low = "-" if ckpt == store.ZERO_ID else "(" + format_id(ckpt)
        pipe.xrange(keys.stream(metric, shard), min=low, max="+", count=1)
        pipe.xrange(keys.held(metric, shard), min="-", max="+", count=1)  # not yet released (ldptel.storage.shuffle)
    for entries in pipe.execute():
        if entries:
            first_unfolded_day = parse_id(entries[0][0])[0] // DAY_MS
            limit = min(limit, first_unfolded_day - 2)
    return limit


_RELEASE_LUA = """
redis.set_repl(redis.REPL_NONE)
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_CLAIM_LUA = """
redis.set_repl(redis.REPL_NONE)
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
"""


def seal_metric(
    r: redis_lib.Redis,
    metric: str,
    *,
    horizon_days: int,
    retention_days: int | None = None,
    today: dt.date | None = None,
    max_days: int | None = None,
    owner: str = "ldptel-seal",
) -> SealReport:
    """Seal every sealable day of ``metric`` (all versions), build the roll-ups those days complete and apply
    the daily retention; safe to run at any time, concurrently and after a crash (see the module docs).

    ``max_days`` bounds the days sealed in one call (a worker seals a backlog a few days per pass).
    Takes the metric's seal lease for the call (another holder: returns a report with ``skipped``).
    """
    from ldptel.storage import registry  # registry imports sketches; keep this module light to import

    started = time.perf_counter()
    report = SealReport(metric=metric)
    today = today or dt.datetime.now(dt.UTC).date()
    lease = keys.seal_lease(metric)
    token = f"{owner}:{uuid.uuid4().hex[:12]}"  # no time in Redis values (not even coordination ones)
    if r.eval(_CLAIM_LUA, 1, lease, token, _SEAL_LEASE_TTL_MS) is None:
        report.skipped = "another worker is sealing this metric"
        return report
    try:
        record = registry.get_metric(r, metric)
        limit = sealable_through(r, metric, record.shards, today=today, horizon_days=horizon_days)
        # Breakdown cells ("" last): each is sealed like a metric of its own; the marks are the metric's, written
        # once every cell is done (a rerun after a crash redoes the cells idempotently).
        cells = [*store.cells(r, metric, record.shards), ""]
        todos: dict[str, dict[tuple[int, int], list[int]]] = {}
        for cell in cells:
            todo = todos[cell] = {}
            for shard, pairs in store.sketch_index(r, metric, record.shards, cell=cell).items():
                for version, day in pairs:
                    d = day_number(day)
                    if d <= limit:
                        todo.setdefault((d, version), []).append(shard)
        days = sorted({d for todo in todos.values() for d, _ in todo})
        if max_days is not None and len(days) > max_days:
            limit = days[max_days] - 1  # seal the first max_days days; the rest on the next call
        through = read_view(r, metric).through
        advance = False
        for cell, todo in todos.items():
            view = read_view(r, metric, cell)
            sealed_index = set(view.index)
            for (d, version), shards in sorted(todo.items()):
                if d > limit:
                    continue
                params = registry.spec_for(record, version).params
                if _seal_day(r, metric, version, d, shards, params, sealed_index, report, cell):
                    report.days_sealed += 1
                    report.shard_states_merged += len(shards)
            view = read_view(r, metric, cell)
            data = sorted({d for _, d in view.days} | {d for d, _ in todo})
            start = (through + 1) if through is not None else (data[0] if data else None)
            if start is not None and limit >= start:
                advance = True
                versions = sorted({v for v, _ in view.days} | {v for _, v in todo})
                sealed_index = set(view.index)
                for level in range(1, LEVELS + 1):
                    size = 1 << level
                    for i in range(-(-(start + 1) // size) - 1, (limit + 1) // size):
                        for version in versions:
                            params = registry.spec_for(record, version).params
                            if _build_block(r, metric, version, level, i * size, params, sealed_index, cell):
                                report.rollups_built += 1
        if advance:
            r.hset(keys.sealed_marks(metric), "through", day_name(limit))
        if retention_days is not None:
            for cell in cells:  # "" last: it writes the metric's "dropped" mark
                report.states_dropped += _drop(r, metric, today=today, retention_days=retention_days, cell=cell)
        view = read_view(r, metric)
        report.through = None if view.through is None else day_name(view.through)
        report.dropped = None if view.dropped is None else day_name(view.dropped)
    finally:
        r.eval(_RELEASE_LUA, 1, lease, token)
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def _sum_keys(r: redis_lib.Redis, names: Iterable[str], params: Params) -> tuple[SketchState, list[str]]:
    """Sum of the named blobs and the names that were missing."""
    total, missing, _digests = _sum_blobs(r, names, params)
    return total, missing


def _sum_blobs(r: redis_lib.Redis, names: Iterable[str], params: Params) -> tuple[SketchState, list[str], list[str]]:
    """Sum of the named blobs, the names that were missing, and the SHA-1 (hex) of each blob found, in order."""
    total = SketchState.empty(params)
    missing: list[str] = []
    digests: list[str] = []
    for name, raw in store.get_blobs(r, list(names)):
        if raw is None:
            missing.append(name)
            continue
        store.add_blob(total, name, raw, params)
        digests.append(hashlib.sha1(raw, usedforsecurity=False).hexdigest())
    return total, missing, digests


# Remove a shard state summed into a sealed day, only if it is still byte for byte the state that was summed
# (its SHA-1 was recorded with the sealed day). KEYS: the shard state, the shard's index; ARGV: SHA-1, member.
_REMOVE_SUMMED_LUA = """
local blob = redis.call('GET', KEYS[1])
if not blob then
  redis.call('SREM', KEYS[2], ARGV[2])
  return 1
end
if redis.sha1hex(blob) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[2])
return 1
"""


def _seal_day(r: redis_lib.Redis, metric: str, version: int, d: int, shards: list[int], params: Params,
              sealed_index: set[tuple[int, int, int]], report: SealReport, cell: str = "") -> bool:
    """Seal (version, day d) from its per-shard states, then remove them; True if this call sealed it.

    A shard state is removed only while it is exactly the state that was summed (its SHA-1 is recorded with the
    sealed day, in the same transaction). One that differs was written after the day was sealed (a fold of an
    entry that arrived past every bound, e.g. an ingest clock days off): it is kept, counted in the report's
    ``late_states`` and logged by the worker, never summed twice nor deleted unseen.
    """
    day = day_name(d)
    index_key = keys.sealed_index(metric, cell)
    sources_key = keys.sealed_sources(metric, cell)
    member = _member(version, 0, d)
    sealed_now = False
    if (version, 0, d) not in sealed_index:
        names = [keys.sketch(metric, s, version, day, cell) for s in shards]
        total, missing, digests = _sum_blobs(r, names, params)
        with r.pipeline(transaction=True) as pipe:
            pipe.watch(index_key)  # type: ignore[no-untyped-call]
            if pipe.sismember(index_key, member):  # another sealer (or a run before a crash) sealed it
                pipe.unwatch()
            else:
                if missing:
                    pipe.unwatch()
                    raise StoreError(f"cannot seal {metric!r} v{version} {day}: indexed states are missing: {missing}")
                pipe.multi()
                pipe.set(_key(metric, version, 0, d, cell), total.to_bytes())
                pipe.sadd(index_key, member)
                pipe.hset(keys.sealed_days(metric, cell), f"{version}:{day}", total.n)
                if cell:
                    pipe.sadd(keys.sealed_cells(metric), cell)
                pipe.hset(sources_key, mapping={f"{version}:{day}:{s}": h for s, h in zip(shards, digests, strict=True)})
                try:
                    pipe.execute()
                    sealed_now = True
                except redis_lib.WatchError:
                    if not r.sismember(index_key, member):
                        raise StoreError(f"sealing {metric!r} v{version} {day} raced an unknown writer") from None
        sealed_index.add((version, 0, d))
    recorded = r.hmget(sources_key, [f"{version}:{day}:{s}" for s in shards])
    for s, digest in zip(shards, recorded, strict=True):  # only now: the sealed state exists, readers prefer it
        removed = 0
        if digest is not None:
            removed = int(r.eval(_REMOVE_SUMMED_LUA, 2, keys.sketch(metric, s, version, day, cell),
                                 keys.sketch_index(metric, s, cell), _text(digest), store.index_member(version, day)))
        if not removed:
            report.late_states.append(f"{version}:{day}:{s}" + (f":{cell}" if cell else ""))
    return sealed_now


def _build_block(r: redis_lib.Redis, metric: str, version: int, level: int, start: int, params: Params,
                 sealed_index: set[tuple[int, int, int]], cell: str = "") -> bool:
    """Store the block (version, level, start) as the sum of its two halves (absent halves are empty)."""
    if (version, level, start) in sealed_index:
        return False
    half = 1 << (level - 1)
    names = [_key(metric, version, level - 1, s, cell) for s in (start, start + half)
             if (version, level - 1, s) in sealed_index]
    if not names:
        return False
    total, missing = _sum_keys(r, names, params)
    if missing:
        raise StoreError(f"cannot build roll-up {_member(version, level, start)} of {metric!r}: missing {missing}")
    pipe = r.pipeline(transaction=True)
    pipe.set(_key(metric, version, level, start, cell), total.to_bytes())
    pipe.sadd(keys.sealed_index(metric, cell), _member(version, level, start))
    pipe.execute()
    sealed_index.add((version, level, start))
    return True


def _drop(r: redis_lib.Redis, metric: str, *, today: dt.date, retention_days: int, cell: str = "") -> int:
    """Remove daily and fine roll-up states of the KEEP_LEVEL blocks that are sealed, built and entirely older
    than ``retention_days``; for the cell "" records the new ``dropped`` mark in the same transaction (the other
    cells are dropped first). Returns states removed."""
    view = read_view(r, metric, cell)
    if view.through is None:
        return 0
    oldest_kept = today.toordinal() - _EPOCH - retention_days  # days before it are past the retention
    size = 1 << KEEP_LEVEL
    edge = min(view.through + 1, oldest_kept) // size * size - 1  # last day of the last droppable block
    if edge < 0 or (view.dropped is not None and edge <= view.dropped):
        return 0
    gone = [(v, lvl, s) for v, lvl, s in view.index if lvl < KEEP_LEVEL and block_days(lvl, s)[1] <= edge]
    pipe = r.pipeline(transaction=True)
    for v, lvl, s in gone:
        pipe.delete(_key(metric, v, lvl, s, cell))
    if gone:
        pipe.srem(keys.sealed_index(metric, cell), *(_member(v, lvl, s) for v, lvl, s in gone))
    if not cell:
        pipe.hset(keys.sealed_marks(metric), "dropped", day_name(edge))
    pipe.execute()
    return len(gone)


def memory_of(r: redis_lib.Redis, names: Iterable[str]) -> int:
    """Bytes Redis uses for the named keys (the sum of MEMORY USAGE; for the benchmarks)."""
    pipe = r.pipeline(transaction=False)
    for name in names:
        pipe.memory_usage(name, samples=0)
    return int(np.sum([x or 0 for x in pipe.execute()]))


def coarse_note(summed: Summed) -> str:
    """A sentence for a result read (partly) from roll-ups coarser than a day, else ""."""
    if not summed.coarse:
        return ""
    spans = ", ".join(f"{f} … {t}" for f, t in summed.coarse)
    return (f"Coarser than a day: {spans} read as whole {1 << KEEP_LEVEL}-day roll-ups (their daily states are past "
            f"the metric's retention), so the range covers {summed.first} … {summed.last}.")
