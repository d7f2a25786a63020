#!/usr/bin/env python3
"""Sealed days and roll-ups (issue 26) against today's path, in one run (cms, k = 2048, m = 1024, 4 shards).

Prints one JSON line per figure:

* ``baseline_*``: today's path: every (shard, day) state kept as the fold leaves it, in the old int32 encoding,
  a range read by summing shards × days (``--baseline-days``, default 90; the year is extrapolated ×365/90:
  holding it would take ~12 GB of Redis). ``baseline_query_latency`` (estimate of ``--candidates`` values over
  the range), ``baseline_fetch_sum``, ``baseline_series`` (a per-day series of the range: one fetch per day),
  ``baseline_redis_bytes`` (INFO used_memory) and the year's extrapolation.
* ``seal_per_day``: seconds to seal one day (sum its 4 shard states, write it, remove them) and build the roll-ups
  it completes, over the baseline's days.
* ``year_*``: a year sealed 30 days at a time as a worker would, with daily retention ``--retention`` (default 90):
  ``year_query_latency`` (the whole year; ``first_ask_*``: a candidate list never asked before, no cached hashes),
  ``year_fetch_sum``, ``series_90d`` (estimate_by_day of the last 90 days, ``--series-candidates`` values, as the
  dashboard plots; ``per_span_*``: the same days as one query each, as estimate_by_day did before),
  ``year_redis_bytes``, ``year_estimate_only`` (the estimate of the candidates on the summed state, against main's
  estimator before the change on the same state); each with its ratio to the baseline measured above. Times are
  the best wall time of ``--repeat`` runs and that run's process CPU seconds (the machine is shared).
* ``encoding``: bytes of a per-shard state, a sealed day and roll-ups in the narrowest width, against int32, and
  zstd / lz4 (when installed) ratios and costs on them (on a real fold of privatized reports and on the seeded
  sketches).

Usage::

    .venv/bin/python tests/bench/bench_sealed.py [--baseline-days 90] [--year-days 365] [--candidates 100000]

Uses ``LDPTEL_REDIS_URL`` when set (the db is flushed!), else a private embedded server. Peak Redis memory is
the baseline's (days × 4 × 8 MiB: 2.9 GB at 90 days). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import datetime as dt
import struct
import sys
import time

import numpy as np
import redis as redis_lib
from seed_sketches import bench_redis, emit  # the script directory is on sys.path

from ldptel.aggregator.query import estimate_by_day, estimate_metric
from ldptel.client import CmsParams, MetricSpec, SketchState, estimate, fold, privatize_batch
from ldptel.storage import keys, registry, sealed
from ldptel.storage import sketches as store

METRIC = "bench.sealed"
SHARDS = 4
FIRST = dt.date(2025, 1, 1)
POOL = 12  # distinct seeded per-shard states (each 500,000 reports): days reuse them, Redis stores copies


def _v1_bytes(state: SketchState) -> bytes:
    """A state as today's main stores it (format 1: one int32 width for counts and row counts)."""
    rows, cols = state.counts.shape
    head = struct.pack("<4sBBBxII", b"LDPS", 1, 3, 1, rows, cols)  # cms is mechanism code 3
    return head + state.counts.astype("<i4").tobytes() + state.row_counts.astype("<i4").tobytes()


def _v1_bytes_checked(state: SketchState) -> bytes:
    """What main's to_bytes did: the int32-or-int64 range check (min and max of both arrays), then int32."""
    for a in (state.counts, state.row_counts):
        assert int(a.min()) >= -(1 << 31) and int(a.max()) < 1 << 31
    return _v1_bytes(state)


def _pool(params: CmsParams, seed: int) -> list[SketchState]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(POOL):
        row_counts = rng.multinomial(500_000, np.full(params.k, 1 / params.k)).astype(np.int64)
        counts = rng.binomial(row_counts[:, None], 0.12, size=(params.k, params.m)).astype(np.int64)
        out.append(SketchState(params.mechanism, counts, row_counts))
    return out


def _day(i: int) -> str:
    return (FIRST + dt.timedelta(days=i)).isoformat()


def _seed(r: redis_lib.Redis, days: range, pool: list[bytes]) -> None:
    for i in days:
        pipe = r.pipeline(transaction=False)
        for shard in range(SHARDS):
            pipe.set(keys.sketch(METRIC, shard, 1, _day(i)), pool[(i * SHARDS + shard) % len(pool)])
            pipe.sadd(keys.sketch_index(METRIC, shard), store.index_member(1, _day(i)))
        pipe.execute()


def _used(r: redis_lib.Redis) -> int:
    """Bytes Redis uses for every key (sum of MEMORY USAGE): unlike INFO's used_memory, not moved by a lazy free
    of the previous phase still running in the background."""
    return sealed.memory_of(r, r.scan_iter(count=1000))


CPU: dict[str, float] = {}  # process CPU seconds of the last _timed call's best run (all threads)


def _timed(fn, repeat: int):  # type: ignore[no-untyped-def]
    """Best wall time of ``repeat`` runs (the machine is shared: the best is the least disturbed), and its result;
    the CPU seconds of that run are in CPU["last"] (wall on a loaded machine waits for a core; CPU does not)."""
    best = float("inf")
    out = None
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        out = fn()
        took = time.perf_counter() - start
        if took < best:
            best, CPU["last"] = took, time.process_time() - cpu
    return best, out


def _cpu() -> float:
    return round(CPU["last"], 3)


def _old_estimate(params: CmsParams, state: SketchState, candidates: list[str]) -> np.ndarray:
    """The cms estimate as main computed it before this change (same numbers): every candidate hashed with mmh3 per
    query, k row passes summing the raw counts in int64, F2 from the float64 k x m cells; for the baseline."""
    from ldptel.client.mechanisms import cms
    from ldptel.client.mechanisms._sketch import collision_variance, family_of

    fam = family_of(params)
    bases = fam.bases(candidates)
    rows = np.ascontiguousarray(state.counts, dtype=np.int64)
    acc = np.zeros(bases.size, dtype=np.int64)
    idx = np.empty(bases.size, dtype=np.uint64)
    buf = np.empty(bases.size, dtype=np.int64)
    for j in range(fam.k):
        fam.row_hash(bases, j, out=idx)
        np.take(rows[j], idx.view(np.int64), mode="wrap", out=buf)
        acc += buf
    n, m, p, q = state.n, params.m, params.p, params.q
    est = m / (m - 1) * ((acc.astype(np.float64) - q * n) / (p - q) - n / m)
    f2 = cms.cells(params, state).f2()
    var = cms.variance(params, est, n) + collision_variance(params, f2=f2, counts=np.clip(est, 0, n))
    return np.asarray(np.sqrt(var))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-days", type=int, default=90)
    ap.add_argument("--year-days", type=int, default=365)
    ap.add_argument("--retention", type=int, default=90)
    ap.add_argument("--candidates", type=int, default=100_000)
    ap.add_argument("--series-candidates", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    params = CmsParams(epsilon=4.0, k=2048, m=1024)
    candidates = [f"/page/{i}" for i in range(args.candidates)]
    series_candidates = candidates[: args.series_candidates]
    states = _pool(params, seed=3)
    common = {"k": params.k, "m": params.m, "shards": SHARDS}

    with bench_redis() as r:
        # ------------------------------------------------------------------ today's path (int32, per shard)
        registry.create_metric(r, MetricSpec(name=METRIC, params=params), shards=SHARDS)
        empty = _used(r)
        nb = args.baseline_days
        _seed(r, range(nb), [_v1_bytes(s) for s in states])
        base_bytes = _used(r) - empty
        lo, hi = _day(0), _day(nb - 1)
        pairs = [(s, 1, _day(i)) for s in range(SHARDS) for i in range(nb)]
        base_fetch, _ = _timed(lambda: store.sum_sketches(r, METRIC, params=params, pairs=pairs), args.repeat)
        base_query, res = _timed(lambda: estimate_metric(r, METRIC, day_from=lo, day_to=hi, candidates=candidates,
                                                         postprocess="norm-sub"), args.repeat)
        assert len(res.days) == nb
        base_series, daily = _timed(lambda: estimate_by_day(r, METRIC, day_from=lo, day_to=hi,
                                                            candidates=series_candidates), 1)
        assert len(daily.results) == nb
        emit(figure="baseline_fetch_sum", days=nb, seconds=round(base_fetch, 3), blobs=nb * SHARDS, **common)
        emit(figure="baseline_query_latency", days=nb, seconds=round(base_query, 3), candidates=args.candidates, **common)
        emit(figure="baseline_series", days=nb, seconds=round(base_series, 3), candidates=args.series_candidates, **common)
        emit(figure="baseline_redis_bytes", days=nb, bytes=base_bytes, **common)
        per_day = base_bytes / nb
        emit(figure="baseline_year_extrapolated", days=args.year_days, bytes=round(per_day * args.year_days),
             query_seconds=round(base_query * args.year_days / nb, 2), **common)

        # ------------------------------------------------------------------ sealing those days
        today = FIRST + dt.timedelta(days=nb + 5)
        start = time.perf_counter()
        rep = sealed.seal_metric(r, METRIC, horizon_days=3, today=today)
        seal_s = time.perf_counter() - start
        assert rep.days_sealed == nb
        emit(figure="seal_per_day", days=nb, seconds_per_day=round(seal_s / nb, 3), rollups=rep.rollups_built,
             seconds_total=round(seal_s, 2), **common)
        sealed_query, res2 = _timed(lambda: estimate_metric(r, METRIC, day_from=lo, day_to=hi, candidates=candidates,
                                                            postprocess="norm-sub"), args.repeat)
        assert res2.to_dict() == res.to_dict()
        emit(figure="sealed_query_latency", days=nb, seconds=round(sealed_query, 3), ratio=round(sealed_query / base_query, 3),
             candidates=args.candidates, **common)
        emit(figure="sealed_redis_bytes", days=nb, bytes=_used(r) - empty, ratio=round((_used(r) - empty) / base_bytes, 3),
             **common)
        r.flushdb()

        # ------------------------------------------------------------------ a year, sealed as it goes
        registry.create_metric(r, MetricSpec(name=METRIC, params=params), shards=SHARDS)
        registry.set_retention(r, METRIC, args.retention)
        empty = _used(r)
        blobs = [s.to_bytes() for s in states]  # what the fold worker writes now (narrowest width)
        seal_total = 0.0
        ny = args.year_days
        for chunk in range(0, ny, 30):
            days = range(chunk, min(chunk + 30, ny))
            _seed(r, days, blobs)
            start = time.perf_counter()
            sealed.seal_metric(r, METRIC, horizon_days=3, today=FIRST + dt.timedelta(days=days[-1] + 5),
                               retention_days=args.retention)
            seal_total += time.perf_counter() - start
        emit(figure="year_seal_per_day", days=ny, seconds_per_day=round(seal_total / ny, 3), retention_days=args.retention,
             **common)
        year_bytes = _used(r) - empty
        year_base = per_day * ny
        emit(figure="year_redis_bytes", days=ny, bytes=year_bytes, baseline_bytes=round(year_base),
             ratio=round(year_bytes / year_base, 4), retention_days=args.retention, **common)
        lo, hi = _day(0), _day(ny - 1)
        summed_s, summed = _timed(lambda: sealed.summed_state(r, METRIC, params=params, version=1, shards=SHARDS,
                                                               day_from=lo, day_to=hi), args.repeat)
        emit(figure="year_fetch_sum", days=ny, seconds=round(summed_s, 3), states=summed.states,
             baseline_extrapolated=round(base_fetch * ny / nb, 2), ratio=round(summed_s / (base_fetch * ny / nb), 4),
             **common)
        fresh = [f"/fresh/{i}" for i in range(args.candidates)]  # a list never asked before: no cached hashes
        cold_q, _ = _timed(lambda: estimate_metric(r, METRIC, candidates=fresh, postprocess="norm-sub"), 1)
        cold_cpu = _cpu()
        year_q, yres = _timed(lambda: estimate_metric(r, METRIC, candidates=candidates, postprocess="norm-sub"), args.repeat)
        emit(figure="year_query_latency", days=ny, seconds=round(year_q, 3), cpu_seconds=_cpu(),
             first_ask_seconds=round(cold_q, 3), first_ask_cpu_seconds=cold_cpu, candidates=args.candidates,
             first=yres.days[0], last=yres.days[-1], baseline_extrapolated=round(base_query * ny / nb, 2),
             ratio=round(year_q / (base_query * ny / nb), 4), **common)
        old_s, old_err = _timed(lambda: _old_estimate(params, summed.state, candidates), args.repeat)
        old_cpu = _cpu()
        est_s, est = _timed(lambda: estimate(params, summed.state, candidates=candidates), args.repeat)
        assert np.allclose(est.stderr, old_err, rtol=1e-12, atol=0)
        emit(figure="year_estimate_only", days=ny, seconds=round(est_s, 3), cpu_seconds=_cpu(),
             baseline_seconds=round(old_s, 3), baseline_cpu_seconds=old_cpu, ratio=round(est_s / old_s, 3),
             candidates=args.candidates, baseline="main's estimator before this change, same state, same run", **common)
        s_lo = _day(ny - 90)
        spans = sealed.periods(r, METRIC, version=1, shards=SHARDS, day_from=s_lo, day_to=hi)

        def per_span():  # type: ignore[no-untyped-def]  # what estimate_by_day did before: a whole query per day
            return [estimate_metric(r, METRIC, day_from=f, day_to=t, candidates=series_candidates) for f, t in spans]

        span_s, span_res = _timed(per_span, args.repeat)
        span_cpu = _cpu()
        series_s, series = _timed(lambda: estimate_by_day(r, METRIC, day_from=s_lo, day_to=hi,
                                                          candidates=series_candidates), args.repeat)
        assert [x.to_dict() for x in series.results] == [x.to_dict() for x in span_res]
        emit(figure="series_90d", days=90, seconds=round(series_s, 3), cpu_seconds=_cpu(), results=len(series.results),
             candidates=args.series_candidates, per_span_seconds=round(span_s, 3), per_span_cpu_seconds=span_cpu,
             baseline_seconds=round(base_series * 90 / nb, 3), ratio=round(series_s / (base_series * 90 / nb), 4),
             ratio_to_per_span=round(series_s / span_s, 3), **common)

        # ------------------------------------------------------------------ encoding and compression
        view = sealed.read_view(r, METRIC)
        samples = {"shard_day": blobs[0]}
        for level in (0, 3, 6, 8):
            member = max((m for m in view.index if m[1] == level), key=lambda m: m[2], default=None)
            if member is not None:
                raw = r.get(keys.sealed_state(METRIC, 1, level, sealed.day_name(member[2])))
                assert raw is not None
                samples[f"level{level}"] = raw
    rng = np.random.default_rng(5)
    real = fold(params, [privatize_batch([f"/page/{int(x)}" for x in rng.zipf(1.3, 50_000) % 5000], params, rng=rng)
                         for _ in range(4)])  # 200,000 real privatized reports, one shard's day
    samples["real_fold_200k"] = real.to_bytes()
    int32 = params.k * params.m * 4
    # the one change on the fold path: a commit serializes its dirty states in the narrowest width
    old_s, _ = _timed(lambda: _v1_bytes_checked(real), 5)
    new_s, _ = _timed(real.to_bytes, 5)
    emit(figure="commit_encode", old_int32_s=round(old_s, 4), narrow_s=round(new_s, 4), ratio=round(new_s / old_s, 3),
         **common)
    for name, blob in samples.items():
        emit(figure="encoding", sample=name, bytes=len(blob), int32_bytes=int32, ratio=round(len(blob) / int32, 3), **common)
        _compress(name, blob)
    return 0


def _compress(name: str, blob: bytes) -> None:
    try:
        import zstandard
    except ModuleNotFoundError:
        zstandard = None  # type: ignore[assignment]
    try:
        import lz4.frame as lz4f
    except ModuleNotFoundError:
        lz4f = None  # type: ignore[assignment]
    codecs = []
    if zstandard is not None:
        for level in (1, 3, 9):
            c, d = zstandard.ZstdCompressor(level=level), zstandard.ZstdDecompressor()
            codecs.append((f"zstd-{level}", c.compress, d.decompress))
    if lz4f is not None:
        codecs.append(("lz4", lz4f.compress, lz4f.decompress))
    for codec, comp, decomp in codecs:
        start = time.perf_counter()
        packed = comp(blob)
        c_s = time.perf_counter() - start
        start = time.perf_counter()
        assert decomp(packed) == blob
        d_s = time.perf_counter() - start
        emit(figure="compression", sample=name, codec=codec, bytes=len(blob), packed=len(packed),
             ratio=round(len(packed) / len(blob), 3), compress_mb_s=round(len(blob) / c_s / 1e6),
             decompress_mb_s=round(len(blob) / d_s / 1e6))


if __name__ == "__main__":
    sys.exit(main())
