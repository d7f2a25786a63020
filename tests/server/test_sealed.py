"""Sealed days, roll-ups and retention at the storage layer (:mod:`ldptel.storage.sealed`), on synthetic folded states
written where the fold worker writes them: every range is the exact sum of its days, read from O(log range) states."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest
import redis as redis_lib

from ldptel.client import CmsParams, MetricSpec, SketchState
from ldptel.storage import keys, registry, sealed
from ldptel.storage import sketches as store

PARAMS = CmsParams(epsilon=4.0, k=8, m=16)
SHARDS = 3
FIRST = dt.date(2025, 12, 20)
TODAY = dt.date(2026, 6, 1)


def _write(r: redis_lib.Redis, metric: str, days: list[str], rng: np.random.Generator,
           shards: int = SHARDS) -> dict[tuple[int, str], SketchState]:
    """A random per-shard state of each day in some shards (not always all: sealing must cope), as the fold leaves it."""
    out = {}
    for day in days:
        for shard in range(shards):
            if rng.random() < 0.3:
                continue
            row_counts = rng.integers(0, 300, PARAMS.k).astype(np.int64)
            counts = rng.binomial(row_counts[:, None], 0.3, size=(PARAMS.k, PARAMS.m)).astype(np.int64)
            state = SketchState(PARAMS.mechanism, counts, row_counts)
            r.set(keys.sketch(metric, shard, 1, day), state.to_bytes())
            r.sadd(keys.sketch_index(metric, shard), store.index_member(1, day))
            out[(shard, day)] = state
    return out


def _sum(states: dict[tuple[int, str], SketchState], lo: str, hi: str) -> SketchState:
    total = SketchState.empty(PARAMS)
    for (_shard, day), state in states.items():
        if lo <= day <= hi:
            total.add_inplace(state)
    return total


@pytest.fixture
def metric(redis: redis_lib.Redis, rng: np.random.Generator) -> tuple[str, dict[tuple[int, str], SketchState], list[str]]:
    registry.create_metric(redis, MetricSpec(name="pages", params=PARAMS), shards=SHARDS)
    days = [(FIRST + dt.timedelta(days=i)).isoformat() for i in range(140) if i % 11 != 5]  # gaps
    return "pages", _write(redis, "pages", days, rng), days


def _ranges(days: list[str], rng: np.random.Generator, count: int) -> list[tuple[str, str]]:
    out = [(days[0], days[-1])]
    for _ in range(count):
        a, b = sorted(rng.integers(0, len(days), 2))
        out.append((days[a], days[b]))
    return out


def test_every_range_is_the_exact_sum_of_its_days_before_and_after_sealing(
    redis: redis_lib.Redis, metric: tuple[str, dict[tuple[int, str], SketchState], list[str]], rng: np.random.Generator,
) -> None:
    name, states, days = metric
    ranges = _ranges(days, rng, 40)
    before = {rg: sealed.summed_state(redis, name, params=PARAMS, version=1, shards=SHARDS, day_from=rg[0], day_to=rg[1])
              for rg in ranges}
    for (lo, hi), got in before.items():
        assert got.state.equals(_sum(states, lo, hi))
    report = sealed.seal_metric(redis, name, horizon_days=3, today=TODAY)
    assert report.days_sealed == len({day for _, day in states}) and report.shard_states_merged == len(states)
    assert report.through == (TODAY - dt.timedelta(days=5)).isoformat()
    for shard in range(SHARDS):  # every per-shard state was removed with its index entry
        assert redis.smembers(keys.sketch_index(name, shard)) == set()
        assert not redis.keys(keys.sketch(name, shard, 1, "*"))
    for (lo, hi), want in before.items():
        got = sealed.summed_state(redis, name, params=PARAMS, version=1, shards=SHARDS, day_from=lo, day_to=hi)
        assert got.state.equals(want.state) and got.days == want.days and got.coarse == ()
        span = sealed.day_number(hi) - sealed.day_number(lo) + 1
        assert got.states <= 2 * math.ceil(math.log2(span + 1)) + 1, (lo, hi, got.states)  # O(log range) states
    assert store.available_days(redis, name, SHARDS, version=1) == sorted({day for _, day in states})
    again = sealed.seal_metric(redis, name, horizon_days=3, today=TODAY)  # idempotent: nothing left to do
    assert (again.days_sealed, again.rollups_built, again.shard_states_merged) == (0, 0, 0)


def test_only_days_past_the_horizon_are_sealed_and_the_rest_is_read_from_the_shards(
    redis: redis_lib.Redis, metric: tuple[str, dict[tuple[int, str], SketchState], list[str]],
) -> None:
    name, states, days = metric
    today = dt.date.fromisoformat(days[70]) + dt.timedelta(days=5)  # horizon 3: days up to today - 5
    sealed.seal_metric(redis, name, horizon_days=3, today=today)
    cut = (today - dt.timedelta(days=5)).isoformat()
    left = {d for shard in range(SHARDS) for _, d in store.sketch_index(redis, name, SHARDS)[shard]}
    assert left == {day for _, day in states if day > cut}
    got = sealed.summed_state(redis, name, params=PARAMS, version=1, shards=SHARDS)
    assert got.state.equals(_sum(states, days[0], days[-1]))  # sealed and unsealed days together


def test_a_day_with_unfolded_entries_is_not_sealed(redis: redis_lib.Redis, rng: np.random.Generator) -> None:
    registry.create_metric(redis, MetricSpec(name="late", params=PARAMS), shards=2)
    days = ["2026-01-01", "2026-01-02", "2026-01-03"]
    _write(redis, "late", days, rng, shards=2)
    # an entry of 2026-01-02 in shard 1's stream after its checkpoint: that day, and every later one, waits
    start = sealed.day_number("2026-01-02") * sealed.DAY_MS
    redis.xadd(keys.stream("late", 1), {"d": "2026-01-02"}, id=f"{start}-1")
    assert sealed.sealable_through(redis, "late", 2, today=TODAY, horizon_days=3) == sealed.day_number("2026-01-02") - 2
    written = {d for pairs in store.sketch_index(redis, "late", 2).values() for _, d in pairs}
    # its id could also be a 2026-01-01 batch appended after midnight by an ingest with a slow clock: 01-01 waits too
    assert sealed.seal_metric(redis, "late", horizon_days=3, today=TODAY).days_sealed == 0
    assert {d for pairs in store.sketch_index(redis, "late", 2).values() for _, d in pairs} == written
    redis.set(keys.checkpoint("late", 1), f"{start}-1")  # folded and committed: now it can be sealed
    sealed.seal_metric(redis, "late", horizon_days=3, today=TODAY)
    assert not {d for pairs in store.sketch_index(redis, "late", 2).values() for _, d in pairs}


def test_retention_keeps_32_day_roll_ups_and_widens_old_ranges_to_them(
    redis: redis_lib.Redis, metric: tuple[str, dict[tuple[int, str], SketchState], list[str]], rng: np.random.Generator,
) -> None:
    name, states, days = metric
    today = dt.date.fromisoformat(days[-1]) + dt.timedelta(days=6)
    sealed.seal_metric(redis, name, horizon_days=3, today=today)
    full = sealed.summed_state(redis, name, params=PARAMS, version=1, shards=SHARDS)
    report = sealed.seal_metric(redis, name, horizon_days=3, today=today, retention_days=30)
    assert report.states_dropped > 0 and report.dropped is not None
    dropped = sealed.day_number(report.dropped)
    assert (dropped + 1) % 32 == 0 and dropped < sealed.day_number(today.isoformat()) - 30
    view = sealed.read_view(redis, name)
    assert not [m for m in view.index if m[1] < sealed.KEEP_LEVEL and sealed.block_days(m[1], m[2])[1] <= dropped]
    assert sealed.summed_state(redis, name, params=PARAMS, version=1, shards=SHARDS).state.equals(full.state)
    for lo, hi in _ranges(days, rng, 30):
        got = sealed.summed_state(redis, name, params=PARAMS, version=1, shards=SHARDS, day_from=lo, day_to=hi)
        a, b = sealed.day_number(lo), sealed.day_number(hi)
        wa = a if a > dropped else a >> 5 << 5
        wb = b if b > dropped else (b >> 5 << 5) + 31
        assert got.state.equals(_sum(states, sealed.day_name(wa), sealed.day_name(wb))), (lo, hi)
        assert bool(got.coarse) == (a <= dropped)
        assert got.first is not None and got.first <= lo and got.last is not None and got.last >= min(hi, days[-1])
    spans = sealed.periods(redis, name, version=1, shards=SHARDS)
    assert [f for f, t in spans if f != t] and all(sealed.day_number(f) % 32 == 0 for f, t in spans if f != t)
    assert all(f == t for f, t in spans if sealed.day_number(f) > dropped)
    assert store.available_days(redis, name, SHARDS, version=1) == sorted({day for _, day in states})  # still listed


def test_blobs_are_stored_in_the_narrowest_width(redis: redis_lib.Redis,
                                                 metric: tuple[str, dict[tuple[int, str], SketchState], list[str]]) -> None:
    name, states, days = metric
    sealed.seal_metric(redis, name, horizon_days=3, today=TODAY)
    size = PARAMS.k * PARAMS.m
    day_blob = redis.get(keys.sealed_state(name, 1, 0, days[0]))
    assert day_blob is not None and len(day_blob) < 16 + size * 2 + PARAMS.k * 4  # ≤ 900 per cell over 3 shards: u2
    view = sealed.read_view(redis, name)
    big = max((m for m in view.index if m[1] == 7), key=lambda m: m[2])
    blob = redis.get(keys.sealed_state(name, 1, 7, sealed.day_name(big[2])))
    assert blob is not None
    state = SketchState.from_bytes(blob, PARAMS)

    def width(a: np.ndarray) -> int:
        return next(w for w in (1, 2, 4, 8) if int(a.max()) < 1 << (8 * w))

    assert int(state.counts.max()) >= 256  # a 128-day roll-up: wider than a day, still only as wide as needed
    assert len(blob) == 16 + size * width(state.counts) + PARAMS.k * width(state.row_counts)


def test_a_shard_state_written_after_its_day_was_sealed_is_kept_not_deleted_or_summed(
    redis: redis_lib.Redis, metric: tuple[str, dict[tuple[int, str], SketchState], list[str]], rng: np.random.Generator,
) -> None:
    name, states, days = metric
    sealed.seal_metric(redis, name, horizon_days=3, today=TODAY)
    before = sealed.summed_state(redis, name, params=PARAMS, version=1, shards=SHARDS)
    late = _write(redis, name, [days[3]], rng)  # as a fold of an entry that arrived days late would leave it
    assert late
    report = sealed.seal_metric(redis, name, horizon_days=3, today=TODAY)
    assert sorted(report.late_states) == sorted(f"1:{days[3]}:{shard}" for shard, _ in late)
    for (shard, day), state in late.items():  # still there, for an operator to see (the worker logs an error)
        raw = redis.get(keys.sketch(name, shard, 1, day))
        assert raw is not None and SketchState.from_bytes(raw, PARAMS).equals(state)
    assert sealed.summed_state(redis, name, params=PARAMS, version=1, shards=SHARDS).state.equals(before.state)


def test_a_series_reads_every_span_as_summed_state_does_and_replans_when_a_state_goes_mid_read(
    redis: redis_lib.Redis, metric: tuple[str, dict[tuple[int, str], SketchState], list[str]], rng: np.random.Generator,
) -> None:
    """summed_states (one plan, one pipelined fetch for a per-day series) gives each span exactly what summed_state
    gives it, also for spans widened to 32-day roll-ups, unsealed days and empty spans; a state removed by a sealer
    after the plan (while the first spans were already yielded) makes it plan the rest again, never lose a day."""
    name, states, days = metric
    sealed.seal_metric(redis, name, horizon_days=3, today=FIRST + dt.timedelta(days=90), retention_days=20)
    spans = [(f, t) for f, t in sealed.periods(redis, name, version=1, shards=SHARDS)]
    spans += [(days[3], days[60]), ("2020-01-01", "2020-02-01"), (None, None)]
    assert any(f != t for f, t in spans[:-3]) and any(f == t for f, t in spans[:-3])  # coarse and daily spans

    def one(span: tuple[str | None, str | None]) -> sealed.Summed:
        return sealed.summed_state(redis, name, params=PARAMS, version=1, shards=SHARDS, day_from=span[0], day_to=span[1])

    want = [one(s) for s in spans]
    got = list(sealed.summed_states(redis, name, params=PARAMS, version=1, shards=SHARDS, spans=spans))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.state.equals(w.state) and (g.days, g.first, g.last, g.coarse, g.states) == (w.days, w.first, w.last,
                                                                                               w.coarse, w.states)
    # the last daily spans are unsealed per-shard states: seal them after the plan, between two yields
    unsealed = [(f, t) for f, t in spans[:-3] if f == t and f > (FIRST + dt.timedelta(days=85)).isoformat()]
    assert len(unsealed) > 10
    reader = sealed.summed_states(redis, name, params=PARAMS, version=1, shards=SHARDS, spans=unsealed)
    first = next(reader)  # planned on per-shard states; the first chunk of blobs is read
    report = sealed.seal_metric(redis, name, horizon_days=3, today=TODAY)
    assert report.days_sealed >= len(unsealed)
    rest = list(reader)
    for g, span in zip([first, *rest], unsealed, strict=True):
        assert g.state.equals(_sum(states, span[0], span[1])) and g.days == (span[0],)
