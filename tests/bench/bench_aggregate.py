#!/usr/bin/env python3
"""End-to-end fold rate: Redis stream entries → ldptel fold worker → committed sketches (one worker, one shard).

Prints one JSON line per figure:

* ``xread_bare``: redis-py XREAD alone over the same entries (the worker's read, without a consumer group),
  the ceiling for any consumer written with redis-py in this run;
* ``fold_core_only``: the protocol core's :func:`ldptel.client.fold` alone over the same decoded batches, in
  calls of ``--batch`` entries (no Redis): the ceiling the fold sets for the end-to-end figure;
* ``fold_end_to_end``: :class:`ldptel.aggregator.worker.Worker` with ``once``: read, decode, fold (cms,
  k = 2048, m = 1024), commit (sketch blob + checkpoint + folded count in one MULTI/EXEC), from the first read to the
  last commit. Goal: ≥ 2,000,000 reports/s.

Usage::

    .venv/bin/python tests/bench/bench_aggregate.py [--reports 4000000] [--per-entry 1000] [--batch 1000] [--aof]

Uses ``LDPTEL_REDIS_URL`` when set (the db is flushed!), else a private embedded server (AOF off unless
``--aof``). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import redis as redis_lib

from ldptel.aggregator.worker import Worker, WorkerConfig
from ldptel.client import CmsParams, MetricSpec, SketchState, decode_batch, encode_batch, fold, privatize_batch
from ldptel.storage import keys, registry
from ldptel.storage import sketches as store
from ldptel.storage.embedded import EmbeddedRedis

METRIC = "bench.cms"


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def fill(r: redis_lib.Redis, params: CmsParams, *, reports: int, per_entry: int, day: str) -> int:
    """XADD ``reports`` privatized cms reports as entries of ``per_entry`` (distinct batches, reused bytes)."""
    rng = np.random.default_rng(7)
    distinct = 16
    values = [f"/page/{i}" for i in rng.zipf(1.3, size=per_entry * distinct) % 5000]
    blobs = []
    for i in range(distinct):
        batch = privatize_batch(values[i * per_entry : (i + 1) * per_entry], params, rng=rng)
        blobs.append(encode_batch(metric=METRIC, version=1, batch_id=os.urandom(16), batch=batch, params=params))
    entries = reports // per_entry
    stream = keys.stream(METRIC, 0)
    pipe = r.pipeline(transaction=False)
    for i in range(entries):
        pipe.xadd(stream, {"d": day, "v": 1, "n": per_entry, "b": blobs[i % distinct]})
        if i % 50 == 49:
            pipe.execute()
    pipe.execute()
    return entries


def bare_read(r: redis_lib.Redis, *, batch: int) -> tuple[int, float]:
    stream = keys.stream(METRIC, 0)
    entries = 0
    after: bytes | str = "0"
    start = time.perf_counter()
    while True:
        resp = r.xread({stream: after}, count=batch)
        if not resp or not resp[0][1]:
            break
        entries += len(resp[0][1])
        after = resp[0][1][-1][0]
    elapsed = time.perf_counter() - start
    return entries, elapsed


def core_fold(r: redis_lib.Redis, params: CmsParams, *, batch: int) -> tuple[int, float]:
    """Decode every entry once, then time only the core fold in calls of ``batch`` entries."""
    batches = [decode_batch(fields[b"b"], params)[1] for _, fields in r.xrange(keys.stream(METRIC, 0))]
    state = SketchState.empty(params)
    start = time.perf_counter()
    for lo in range(0, len(batches), batch):
        fold(params, batches[lo : lo + batch], into=state)
    elapsed = time.perf_counter() - start
    return state.n, elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", type=int, default=4_000_000)
    ap.add_argument("--per-entry", type=int, default=1000, help="reports per stream entry (one ingest batch)")
    ap.add_argument("--batch", type=int, default=1000, help="entries per XREAD (the worker's default)")
    ap.add_argument("--aof", action="store_true", help="embedded server with AOF everysec")
    ap.add_argument("--repeat", type=int, default=2, help="runs; each figure's best and all runs are printed")
    args = ap.parse_args()

    url = os.environ.get("LDPTEL_REDIS_URL")
    server = None if url else EmbeddedRedis(appendonly=args.aof).start()
    try:
        r = redis_lib.Redis.from_url(url or server.url, socket_timeout=120)  # type: ignore[union-attr]
        params = CmsParams(epsilon=4.0, k=2048, m=1024)
        day = "2026-01-01"
        for run in range(args.repeat):
            r.flushdb()
            registry.create_metric(r, MetricSpec(name=METRIC, params=params), shards=1)
            entries = fill(r, params, reports=args.reports, per_entry=args.per_entry, day=day)
            n = entries * args.per_entry
            got, bare_s = bare_read(r, batch=args.batch)
            assert got == entries
            emit(figure="xread_bare", run=run, reports=n, entries=entries, batch=args.batch,
                 seconds=round(bare_s, 3), reports_per_s=round(n / bare_s), aof=args.aof)

            folded, core_s = core_fold(r, params, batch=args.batch)
            assert folded == n
            emit(figure="fold_core_only", run=run, reports=n, batch=args.batch, k=params.k, m=params.m,
                 seconds=round(core_s, 3), reports_per_s=round(n / core_s))

            worker = Worker(r, WorkerConfig(metrics=(METRIC,), once=True, batch=args.batch,
                                            checkpoint_every=10**9, checkpoint_seconds=1.0, retention_seconds=86_400))
            start = time.perf_counter()
            stats = worker.run()
            fold_s = time.perf_counter() - start
            state, found = store.sum_sketches(r, METRIC, params=params, pairs=[(0, 1, day)])
            assert stats.reports == n and state.n == n and found == 1, (stats, state.n, n)
            emit(figure="fold_end_to_end", run=run, reports=n, entries=entries, batch=args.batch, k=params.k, m=params.m,
                 commits=stats.commits, seconds=round(fold_s, 3), reports_per_s=round(n / fold_s),
                 vs_bare=round(bare_s / fold_s, 3), goal_reports_per_s=2_000_000, aof=args.aof)
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
