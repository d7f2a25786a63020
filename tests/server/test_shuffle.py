"""The shuffle stage (ldptel.storage.shuffle, issue 28): what it releases, when, exactly once, and what it counts.

Real Redis (the session server). The uniformity of the CSPRNG permutation is checked with a chi-square at the
suite's α = 1e-6 (unseeded: the stage must never take a seed); everything else is exact.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis as redis_lib

from ldptel.aggregator.worker import WorkerConfig
from ldptel.client import CmsParams, GrrParams, MetricSpec, fold, privatize_batch
from ldptel.client.mechanisms import mechanisms
from ldptel.client.protocol.wire import decode_batch, encode_batch
from ldptel.storage import keys, registry
from ldptel.storage.append import BatchAppender, utc_day
from ldptel.storage.connection import refused_write
from ldptel.storage.embedded import EmbeddedRedis
from ldptel.storage.shuffle import (
    ZERO_BATCH_ID,
    ReleaseStats,
    ShuffleConfig,
    Shuffler,
    permutation,
    release_stats,
    shuffle_batches,
)
from tests.aggregator.agg_helpers import Ingested, append_reports, create, drain
from tests.client.test_longitudinal_adversarial import _example
from tests.server.srv_helpers import fill_to_maxmemory, lift_maxmemory
from tests.stats import assert_chi_square

CMS = MetricSpec(name="sh", params=CmsParams(epsilon=4.0, k=8, m=64), reports_per_day=100)


def _shuffler(r: redis_lib.Redis, **config: Any) -> Shuffler:
    config.setdefault("max_block_uploads", 0)
    return Shuffler(r, lambda metric, version: registry.spec_for(registry.get_metric(r, metric), version).params,
                    ShuffleConfig(**config))


def _uploads(r: redis_lib.Redis, count: int, *, per: int = 5, day: str | None = None, seed: int = 1) -> Ingested:
    record = registry.get_metric(r, CMS.name) if r.hexists(keys.registry(), CMS.name) else create(r, CMS, shards=1)
    return append_reports(r, record, [f"v{i % 7}" for i in range(count * per)], np.random.default_rng(seed),
                          day=day or utc_day(), batch_size=per)


def _released(r: redis_lib.Redis, metric: str = CMS.name) -> list[tuple[bytes, dict[bytes, bytes]]]:
    return r.xrange(keys.stream(metric, 0))  # type: ignore[no-any-return]


# -------------------------------------------------------------------------------------------- the block
@pytest.mark.parametrize("mech", sorted(mechanisms(), key=lambda m: m.name), ids=lambda m: m.name)
def test_every_mechanism_folds_the_same_through_the_shuffle(mech: Any) -> None:
    """The block holds exactly the uploads' reports (same fold, bit for bit), in another order, with no batch id."""
    params, lo, mid, hi = _example(mech)
    rng = np.random.default_rng(zlib_seed(mech.name))
    batches = [privatize_batch([lo, mid, hi, lo, hi][: 1 + i % 5] * 7, params, rng=rng) for i in range(9)]
    data = [encode_batch(metric="m", version=1, batch_id=os.urandom(16), batch=b, params=params) for b in batches]
    block, n, distinct, ids = shuffle_batches(data, metric="m", version=1, params=params)
    header, shuffled = decode_batch(block, params)
    assert header.batch_id == ZERO_BATCH_ID and n == header.n == sum(b.n for b in batches)
    assert ids == [decode_batch(d, params)[0].batch_id for d in data]
    assert fold(params, [shuffled]).equals(fold(params, batches))
    assert 1 <= distinct <= n


def zlib_seed(text: str) -> int:
    import zlib

    return zlib.crc32(text.encode())


def test_the_permutation_is_uniform() -> None:
    """All 24 orders of 4 reports equally likely (χ², α = 1e-6), drawn from the OS CSPRNG (no seed exists)."""
    orders = {p: i for i, p in enumerate(itertools.permutations(range(4)))}
    counts = np.zeros(len(orders), dtype=np.int64)
    for _ in range(4800):
        counts[orders[tuple(int(x) for x in permutation(4))]] += 1
    assert_chi_square(counts, np.full(len(orders), 1 / len(orders)), what="orders of 4")


def test_a_block_scatters_an_uploads_reports() -> None:
    """Reports of one upload end up anywhere in the block: the position of an upload's first report is uniform."""
    params = CMS.params
    rng = np.random.default_rng(5)
    uploads, per = 10, 4
    positions = np.zeros(uploads * per, dtype=np.int64)
    for _ in range(120):  # 15 expected per cell of the χ²
        batches = [privatize_batch(["x"] * per, params, rng=rng) for _ in range(uploads)]
        data = [encode_batch(metric="m", version=1, batch_id=os.urandom(16), batch=b, params=params) for b in batches]
        block, *_ = shuffle_batches(data, metric="m", version=1, params=params)
        rows = decode_batch(block, params)[1].bits
        first = batches[0].bits[0]
        positions[int(np.flatnonzero((rows == first).all(axis=1))[0])] += 1
    assert_chi_square(positions.reshape(8, 5).sum(axis=1), np.full(8, 1 / 8), what="position of a report")


# ----------------------------------------------------------------------------------------- the release
def test_a_block_waits_for_n_min_uploads_then_takes_them_all(redis: redis_lib.Redis) -> None:
    shuffler = _shuffler(redis, n_min=5, hold_seconds=3600)
    sent = _uploads(redis, 4)
    assert shuffler.shuffle(CMS.name, 0).held == 4 and _released(redis) == []
    sent.batches += _uploads(redis, 2, seed=2).batches
    done = shuffler.shuffle(CMS.name, 0)
    assert (done.blocks, done.uploads, done.reports, done.below_n_min) == (1, 6, 30, 0)
    assert redis.xlen(keys.held(CMS.name, 0)) == 0
    (eid, fields), = _released(redis)
    assert set(fields) == {b"d", b"v", b"n", b"b"} and fields[b"d"] == utc_day().encode() and fields[b"n"] == b"30"
    assert eid.decode().split("-")[0] == str(int(time.time()) // 86400 * 86_400_000)  # the day, nothing finer
    header, block = decode_batch(fields[b"b"], CMS.params)
    assert header.batch_id == ZERO_BATCH_ID and fold(CMS.params, [block]).equals(sent.expected_state())
    stats = release_stats(redis, CMS.name, version=1, days=[utc_day(), "2020-01-01"], shards=1)
    assert stats == {utc_day(): ReleaseStats(reports=30, blocks=1, smallest_block=30, smallest_block_uploads=6,
                                             n_min=5, below_n_min=0, distinct_smallest=30)}
    assert stats[utc_day()].applicable


def test_released_uploads_keep_their_dedupe_but_lose_the_content_digest(redis: redis_lib.Redis) -> None:
    """A retry of a released upload is still a duplicate; its dedupe key no longer holds a digest of its bytes
    (with the batch id in the key name, a digest would let a reader find a small upload's reports in the block)."""
    record = create(redis, CMS, shards=1)
    batch = privatize_batch(["a", "b"], CMS.params, rng=np.random.default_rng(3))
    bid = os.urandom(16)
    data = encode_batch(metric=CMS.name, version=1, batch_id=bid, batch=batch, params=CMS.params)
    appender = BatchAppender(redis)
    append = dict(metric=CMS.name, shards=record.shards, batch_id=bid, version=1, n=2, data=data, day=utc_day(),
                  dedupe_days=1)
    assert not appender.append(**append).duplicate  # type: ignore[arg-type]
    seen = keys.seen(CMS.name, 0, bid.hex())
    assert redis.get(seen).startswith(b"d2:") and (ttl := redis.pttl(seen)) > 0
    assert _shuffler(redis, n_min=1).shuffle(CMS.name, 0).blocks == 1
    assert redis.get(seen) == b"1" and 0 < redis.pttl(seen) <= ttl  # same day-boundary expiry
    assert appender.append(**append).duplicate  # type: ignore[arg-type]
    assert redis.xlen(keys.held(CMS.name, 0)) == 0


def test_the_hold_bound_releases_a_short_group_marked_below_n_min(redis: redis_lib.Redis) -> None:
    """Fewer than n_min uploads by the hold bound: released anyway (acknowledged data is never dropped) and
    counted, so the central ε of that day says "not applicable"."""
    shuffler = _shuffler(redis, n_min=100, hold_seconds=0.3)
    sent = _uploads(redis, 3)
    assert shuffler.shuffle(CMS.name, 0).blocks == 0  # first seen now
    time.sleep(0.35)
    done = shuffler.shuffle(CMS.name, 0)
    assert (done.blocks, done.uploads, done.below_n_min) == (1, 3, 1)
    stats = release_stats(redis, CMS.name, version=1, days=[utc_day()], shards=1)[utc_day()]
    assert stats.below_n_min == 1 and stats.smallest_block_uploads == 3 and not stats.applicable
    assert fold(CMS.params, [decode_batch(_released(redis)[0][1][b"b"], CMS.params)[1]]).equals(sent.expected_state())


def test_blocks_never_mix_versions_days_or_cells(redis: redis_lib.Redis) -> None:
    _uploads(redis, 3, day="2026-01-01")
    _uploads(redis, 2, day="2026-01-02", seed=2)
    held = keys.held(CMS.name, 0)
    fields = dict(redis.xrange(held)[0][1])
    redis.xadd(held, {**fields, b"c": b"os=ios"}, id=f"{int(time.time()) // 86400 * 86_400_000}-*")
    assert _shuffler(redis, n_min=1).shuffle(CMS.name, 0).blocks == 3
    groups = sorted((f[b"d"], f.get(b"c", b""), int(f[b"n"])) for _, f in _released(redis))
    assert groups == [(b"2026-01-01", b"", 15), (b"2026-01-01", b"os=ios", 5), (b"2026-01-02", b"", 10)]


def test_a_large_group_is_cut_into_blocks_of_at_least_n_min(redis: redis_lib.Redis) -> None:
    _uploads(redis, 23)
    done = _shuffler(redis, n_min=5, max_block_uploads=10).shuffle(CMS.name, 0)
    assert done.blocks == 2 and done.uploads == 20  # 10 + 10; the 3 left wait for more (or the hold bound)
    assert redis.xlen(keys.held(CMS.name, 0)) == 3


def test_two_shufflers_racing_for_the_same_uploads_release_them_once(redis: redis_lib.Redis) -> None:
    """The script checks every consumed held entry still exists: the loser of a race writes nothing."""
    sent = _uploads(redis, 6)
    late = _shuffler(redis, n_min=1)
    entries = redis.xrange(keys.held(CMS.name, 0))
    assert _shuffler(redis, n_min=1).shuffle(CMS.name, 0).blocks == 1
    group = {k: v for k, v in entries[0][1].items() if k not in (b"b", b"n")}
    assert late._release_block(CMS.name, 0, group, entries, n_min=1) is None
    assert len(_released(redis)) == 1 and drain(redis).reports == sent.n
    assert release_stats(redis, CMS.name, version=1, days=[utc_day()], shards=1)[utc_day()].blocks == 1


def test_memoized_repeats_stay_and_count_once_among_distinct_payloads(redis: redis_lib.Redis) -> None:
    """§5 condition 1: a device's memoized repeats are identical reports. They are kept (counts unchanged) and the
    central ε treats a device's reports_per_day reports as one randomizer; the stats also say how many payloads
    of the smallest block are distinct."""
    record = create(redis, CMS, shards=1)
    rng = np.random.default_rng(11)
    appender = BatchAppender(redis)
    batches = []
    for _ in range(4):
        one = privatize_batch(["same"], CMS.params, rng=rng)
        memo = privatize_batch(["same"] * 3, CMS.params, rng=rng)
        memo = type(memo)(mechanism=memo.mechanism, n=3, rows=np.repeat(one.rows, 3), bits=np.repeat(one.bits, 3, axis=0))
        bid = os.urandom(16)
        data = encode_batch(metric=CMS.name, version=1, batch_id=bid, batch=memo, params=CMS.params)
        appender.append(metric=CMS.name, shards=record.shards, batch_id=bid, version=1, n=3, data=data, day=utc_day(),
                        dedupe_days=1)
        batches.append(memo)
    _shuffler(redis, n_min=4).shuffle(CMS.name, 0)
    stats = release_stats(redis, CMS.name, version=1, days=[utc_day()], shards=1)[utc_day()]
    assert (stats.smallest_block, stats.distinct_smallest) == (12, 4)
    assert drain(redis).reports == 12


# ------------------------------------------------------------------------------------------ the worker
def test_estimates_through_the_shuffle_equal_those_without_it(redis: redis_lib.Redis) -> None:
    """The fold worker with a realistic stage (n_min 10, blocks of any size): the stored sketches equal the fold of
    the uploads themselves, counter for counter."""
    spec = MetricSpec(name="col", params=GrrParams(epsilon=1.0, domain=("a", "b", "c")), reports_per_day=100)
    record = create(redis, spec, shards=2)
    sent = append_reports(redis, record, ["a", "b", "c", "a"] * 150, np.random.default_rng(2), day=utc_day(),
                          batch_size=12)
    stats = drain(redis, shuffle=ShuffleConfig(n_min=10, max_block_uploads=0, hold_seconds=3600))
    held = sum(redis.xlen(keys.held("col", s)) for s in range(2))
    assert held == 0 and stats.reports == sent.n and stats.entries < 50 / 10 + 2  # blocks, not uploads
    from ldptel.aggregator.query import estimate_metric

    assert estimate_metric(redis, "col").n == sent.n
    total = registry.get_metric(redis, "col")
    from ldptel.storage import sketches as store

    index = store.sketch_index(redis, "col", total.shards)
    pairs = [(s, v, d) for s, members in index.items() for v, d in members]
    assert store.sum_sketches(redis, "col", params=spec.params, pairs=pairs)[0].equals(sent.expected_state())
    days = release_stats(redis, "col", version=1, days=[utc_day()], shards=2)[utc_day()]
    assert days.reports == sent.n and days.smallest_block_uploads >= 10 and days.applicable


def test_a_worker_without_the_stage_folds_only_released_blocks(redis: redis_lib.Redis) -> None:
    """``shuffle=None`` (a separate shuffler process runs it): held uploads are never read by the fold."""
    _uploads(redis, 3)
    assert drain(redis, shuffle=None).reports == 0
    assert redis.xlen(keys.held(CMS.name, 0)) == 3
    assert WorkerConfig(shuffle=None).shuffle is None


def test_bad_settings_are_refused() -> None:
    from ldptel.client.errors import InvalidParameterError

    for bad in ({"n_min": 0}, {"hold_seconds": -1.0}, {"max_block_uploads": -1}):
        with pytest.raises(InvalidParameterError):
            ShuffleConfig(**bad)  # type: ignore[arg-type]
    assert ShuffleConfig(n_min=3, n_min_by_metric=(("x", 7),)).n_min_for("x") == 7
    assert math.isfinite(ShuffleConfig().hold_seconds)


def test_a_metrics_n_min_in_the_registry_applies_to_a_running_worker_unless_overridden(redis: redis_lib.Redis) -> None:
    """``shuffle_n_min`` in the registry (``ldptel metrics shuffle-n-min``, a metrics file) sets the metric's block
    size for every shuffler, read while it runs; only a shuffler's own per-metric override beats it."""
    from ldptel.aggregator.worker.specs import MetricSpecs

    specs = MetricSpecs(redis)
    worker = Shuffler(redis, specs.params, ShuffleConfig(n_min=2, hold_seconds=3600, max_block_uploads=0),
                      n_min_of=specs.shuffle_n_min)
    _uploads(redis, 3)
    assert registry.set_shuffle_n_min(redis, CMS.name, 5).shuffle_n_min == 5
    assert worker.shuffle(CMS.name, 0).held == 3 and _released(redis) == []  # 3 ≥ the stage's 2, < the metric's 5
    _uploads(redis, 2, seed=2)
    done = worker.shuffle(CMS.name, 0)
    assert (done.blocks, done.uploads, done.below_n_min) == (1, 5, 0)
    assert release_stats(redis, CMS.name, version=1, days=[utc_day()], shards=1)[utc_day()].n_min == 5

    assert registry.get_metric(redis, CMS.name).to_dict()["shuffle_n_min"] == 5  # stored, and served as such
    overridden = Shuffler(redis, specs.params, ShuffleConfig(n_min=50, n_min_by_metric=((CMS.name, 2),),
                                                             hold_seconds=3600, max_block_uploads=0),
                          n_min_of=specs.shuffle_n_min)
    _uploads(redis, 2, seed=3)
    assert overridden.shuffle(CMS.name, 0).blocks == 1  # the override's 2, not the registry's 5 nor the stage's 50
    assert registry.set_shuffle_n_min(redis, CMS.name, None).to_dict().get("shuffle_n_min") is None
    with pytest.raises(registry.InvalidParameterError, match="shuffle_n_min"):
        registry.set_shuffle_n_min(redis, CMS.name, 0)


def test_a_stale_index_is_rebuilt_and_nothing_is_released_twice(redis: redis_lib.Redis) -> None:
    """A shuffler indexes uploads between passes; when another shuffler released some of them meanwhile, its
    release writes nothing and it reads the held stream afresh."""
    slow, fast = _shuffler(redis, n_min=3), _shuffler(redis, n_min=1)
    sent = _uploads(redis, 2)
    assert slow.shuffle(CMS.name, 0).held == 2
    assert fast.shuffle(CMS.name, 0).uploads == 2
    sent.batches += _uploads(redis, 2, seed=2).batches
    assert slow.shuffle(CMS.name, 0).blocks == 0  # 4 indexed, 2 of them gone: nothing written, index dropped
    assert slow.shuffle(CMS.name, 0).held == 2
    sent.batches += _uploads(redis, 1, seed=3).batches
    assert slow.shuffle(CMS.name, 0).uploads == 3
    assert slow._cached == 0 and redis.xlen(keys.held(CMS.name, 0)) == 0
    released = [decode_batch(f[b"b"], CMS.params)[1] for _, f in _released(redis)]
    assert fold(CMS.params, released).equals(sent.expected_state())


@pytest.mark.slow  # CLI subprocesses
def test_ldptel_shuffle_is_the_only_reader_of_held_uploads_beside_no_shuffle_workers(
        redis: redis_lib.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The split deployment: `ldptel shuffle` releases, `ldptel aggregate --no-shuffle` folds only blocks."""
    import json

    monkeypatch.setenv("LDPTEL_SHUFFLE_MAX_BLOCK_UPLOADS", "0")  # blocks of any size (the suite's default is 1)
    from tests.aggregator.agg_helpers import ldptel

    sent = _uploads(redis, 6)
    folded = ldptel("aggregate", "--once", "--no-shuffle", redis_url=redis_url)
    assert folded.returncode == 0 and json.loads(folded.stdout)["reports"] == 0, folded.stderr
    assert ldptel("metrics", "shuffle-n-min", CMS.name, "--uploads", "7", redis_url=redis_url).returncode == 0
    done = ldptel("shuffle", "--once", "--n-min", "4", redis_url=redis_url)  # the metric's 7 beats the stage's 4
    assert done.returncode == 0 and json.loads(done.stdout)["blocks"] == 0, done.stderr
    assert ldptel("metrics", "shuffle-n-min", CMS.name, "--default", redis_url=redis_url).returncode == 0
    done = ldptel("shuffle", "--once", "--n-min", "4", redis_url=redis_url)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) | {"purge_seconds": 0} == {"blocks": 1, "uploads": 6, "reports": 30,
                                                              "below_n_min": 0, "purge_seconds": 0}
    folded = ldptel("aggregate", "--once", "--no-shuffle", redis_url=redis_url)
    assert json.loads(folded.stdout)["reports"] == sent.n


def test_a_metrics_file_sets_shuffle_n_min_with_the_specs(redis: redis_lib.Redis, redis_url: str,
                                                           monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """``shuffle_n_min`` in a metrics file: planned, applied in the specs' one transaction, refused when bad."""
    import json

    from tests.aggregator.agg_helpers import run_cli

    monkeypatch.setenv("LDPTEL_REDIS_URL", redis_url)
    path = tmp_path / "metrics.toml"
    path.write_text('[metrics.s1]\nmechanism = "rr"\nepsilon = 1\nshuffle_n_min = 300\n'
                    '[metrics.s2]\nmechanism = "rr"\nepsilon = 1\n')
    code, out, err = run_cli("metrics", "plan", str(path))
    assert code == 0 and "~ s1: shuffle_n_min default → 300" in out and "s2: shuffle_n_min" not in out, err
    assert registry.list_metrics(redis) == []  # plan writes nothing
    code, out, err = run_cli("metrics", "apply", str(path), "--format", "json")
    assert code == 0 and json.loads(out)["shuffle_n_min"] == [{"name": "s1", "before": None, "after": 300}], err
    assert [registry.get_metric(redis, n).shuffle_n_min for n in ("s1", "s2")] == [300, None]
    assert json.loads(run_cli("metrics", "show", "s1")[1])["shuffle_n_min"] == 300
    path.write_text('[metrics.s1]\nmechanism = "rr"\nepsilon = 1\nshuffle_n_min = 0\n'
                    '[metrics.s2]\nmechanism = "rr"\nepsilon = 2\n')
    code, out, err = run_cli("metrics", "apply", str(path))
    assert code != 0 and "'shuffle_n_min'" in err and "s1" in err
    assert registry.get_metric(redis, "s1").shuffle_n_min == 300 and registry.get_metric(redis, "s2").current_version == 1
    code, out, err = run_cli("metrics", "shuffle-n-min", "s1", "--uploads", "0")
    assert code != 0 and registry.get_metric(redis, "s1").shuffle_n_min == 300


def test_a_release_refused_for_memory_says_so_on_a_stream_not_created_yet(tmp_path: Path) -> None:
    """Regression: the release script took any error of its XADD for "an id smaller than the stream's last" and
    read that last id. Refused for memory on a stream not created yet (a shard's first block), the read raised
    "no such key", which nobody knows as "Redis refuses writes": the aggregate worker died instead of waiting
    (tests/aggregator/test_workers.py's maxmemory test saw it in a full run). Nothing may be consumed either."""
    with EmbeddedRedis(data_dir=tmp_path / "redis") as server, server.client() as r:
        shuffler = _shuffler(r, n_min=1, hold_seconds=0)
        sent = _uploads(r, 2)
        assert not r.exists(keys.stream(CMS.name, 0))
        fill_to_maxmemory(r)
        with pytest.raises(redis_lib.ResponseError) as raised:
            shuffler.shuffle(CMS.name, 0)
        assert (refused_write(raised.value) or "").startswith("OOM command not allowed"), raised.value.args
        assert r.xlen(keys.held(CMS.name, 0)) == 2 and not r.exists(keys.stream(CMS.name, 0))
        lift_maxmemory(r)
        assert shuffler.shuffle(CMS.name, 0).uploads == 2
        (_, fields), = _released(r)
        assert fold(CMS.params, [decode_batch(fields[b"b"], CMS.params)[1]]).equals(sent.expected_state())
