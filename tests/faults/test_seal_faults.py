"""Sealing under kill -9 (issue 26): a sealer process is killed with SIGKILL before each of its Redis round trips in
turn (every point at which its writes can stop), and after each kill: every range still reads the exact sum of its
days (a reader never sees a day twice or misses one), and a rerun finishes the job with every day counted once.

The sealer is a forked child with its own connection; it counts the packets it sends and sends itself SIGKILL
before the n-th one, for n = 1, 2, … until it completes (so every prefix of its writes is tried)."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import os
import signal
import threading
from typing import Any

import numpy as np
import pytest
import redis as redis_lib

from ldptel.client import CmsParams, MetricSpec, SketchState
from ldptel.storage import keys, registry, sealed
from ldptel.storage import sketches as store

pytestmark = pytest.mark.slow

PARAMS = CmsParams(epsilon=4.0, k=4, m=8)
SHARDS = 2
DAYS = [(dt.date(2026, 1, 27) + dt.timedelta(days=i)).isoformat() for i in range(9)]  # crosses 2/4/8/16/32-day edges
TODAY = dt.date(2026, 4, 1)
RETENTION = 30  # the 32-day block of 2026-01-27 … 2026-02-27 is past it: the drop runs too


def _seed(r: redis_lib.Redis, rng: np.random.Generator) -> dict[str, SketchState]:
    r.flushdb()
    registry.create_metric(r, MetricSpec(name="m", params=PARAMS), shards=SHARDS)
    per_day = {}
    pipe = r.pipeline(transaction=False)  # the set-up in one round trip
    for day in DAYS:
        total = SketchState.empty(PARAMS)
        for shard in range(SHARDS):
            row_counts = rng.integers(1, 50, PARAMS.k).astype(np.int64)
            state = SketchState(PARAMS.mechanism, rng.binomial(row_counts[:, None], 0.4, (PARAMS.k, PARAMS.m)), row_counts)
            pipe.set(keys.sketch("m", shard, 1, day), state.to_bytes())
            pipe.sadd(keys.sketch_index("m", shard), store.index_member(1, day))
            total.add_inplace(state)
        per_day[day] = total
    pipe.execute()
    return per_day


def _sealer(url: str, kill_before: int) -> None:
    """Child: seal with retention, SIGKILL itself before its ``kill_before``-th packet to Redis."""
    sent = [0]
    original = redis_lib.connection.AbstractConnection.send_packed_command

    def counting(self: Any, command: Any, check_health: bool = True) -> None:
        sent[0] += 1
        if sent[0] == kill_before:
            os.kill(os.getpid(), signal.SIGKILL)
        original(self, command, check_health)

    redis_lib.connection.AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]
    r = redis_lib.Redis.from_url(url)
    sealed.seal_metric(r, "m", horizon_days=3, today=TODAY, retention_days=RETENTION)
    os._exit(0)


def _check_reads(r: redis_lib.Redis, per_day: dict[str, SketchState], *, quiet: bool = True) -> None:
    """Every range reads the exact sum of the days it says it covers, which are the days asked unless retention left
    only 32-day roll-ups (checked when ``quiet``: no sealer runs meanwhile, so the view read here is current).

    Quiet, every range is read in one :func:`~ldptel.storage.sealed.summed_states` call (one plan, one pipelined
    fetch: what a per-day series reads), which with nothing writing meanwhile reads what 45 single-range
    :func:`~ldptel.storage.sealed.summed_state` calls would; while a sealer runs, each range is its own call (a
    plan per range, so the sealer's writes interleave between them)."""
    view = sealed.read_view(r, "m")
    spans = [(lo, hi) for i, lo in enumerate(DAYS) for hi in DAYS[i:]]
    if quiet:
        reads = sealed.summed_states(r, "m", params=PARAMS, version=1, shards=SHARDS, spans=spans)
    else:
        reads = (sealed.summed_state(r, "m", params=PARAMS, version=1, shards=SHARDS, day_from=lo, day_to=hi)
                 for lo, hi in spans)
    for (lo, hi), got in zip(spans, reads, strict=True):
        want = SketchState.empty(PARAMS)
        for day in got.days:
            want.add_inplace(per_day[day])
        assert got.state.equals(want), (lo, hi, view)
        assert set(got.days) >= {d for d in DAYS if lo <= d <= hi}
        if quiet and view.dropped is None:
            assert got.days == tuple(d for d in DAYS if lo <= d <= hi)


def test_a_sealer_killed_before_any_round_trip_loses_and_doubles_nothing(redis_url: str) -> None:
    r = redis_lib.Redis.from_url(redis_url)
    ctx = multiprocessing.get_context("fork")
    rng = np.random.default_rng(26)
    killed = 0
    for kill_before in range(1, 400):
        per_day = _seed(r, rng)
        child = ctx.Process(target=_sealer, args=(redis_url, kill_before))
        child.start()
        child.join(60)
        assert child.exitcode in (0, -signal.SIGKILL), child.exitcode
        _check_reads(r, per_day)  # a reader between the crash and the rerun
        if child.exitcode == 0:
            break
        killed += 1
        r.delete(keys.seal_lease("m"))  # the lease of a dead sealer would expire; no need to wait for it here
        report = sealed.seal_metric(r, "m", horizon_days=3, today=TODAY, retention_days=RETENTION)
        assert report.through is not None and report.dropped is not None
        _check_reads(r, per_day)
        assert not any(store.sketch_index(r, "m", SHARDS).values())  # every shard state removed, once sealed
        assert not r.keys(keys.sketch("m", 0, 1, "*")) and not r.keys(keys.sketch("m", 1, 1, "*"))
        assert sealed.read_view(r, "m").days == {(1, sealed.day_number(d)): per_day[d].n for d in DAYS}
    assert killed > 30  # every round trip of the full job was a kill point


def test_readers_see_exact_sums_while_a_sealer_runs(redis_url: str) -> None:
    r = redis_lib.Redis.from_url(redis_url)
    failures: list[str] = []
    reads = [0]
    for seed in range(3):
        per_day = _seed(r, np.random.default_rng(seed))
        done = threading.Event()

        def read(per_day: dict[str, SketchState] = per_day, done: threading.Event = done) -> None:
            reader = redis_lib.Redis.from_url(redis_url)
            while not done.is_set():
                try:
                    _check_reads(reader, per_day, quiet=False)
                    reads[0] += 1
                except AssertionError as exc:  # reported by the test thread
                    failures.append(str(exc))
                    return

        thread = threading.Thread(target=read)
        thread.start()
        try:
            sealed.seal_metric(r, "m", horizon_days=3, today=TODAY, retention_days=RETENTION)
        finally:
            done.set()
            thread.join(60)
        _check_reads(r, per_day)
    assert failures == [] and reads[0] > 0
