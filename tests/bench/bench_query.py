#!/usr/bin/env python3
"""Query latency: 100,000 candidates over a 30-day range (cms, k = 2048, m = 1024, several shards).

Prints one JSON line per figure and run:

* ``query_latency``: :func:`ldptel.aggregator.query.estimate_metric` end to end (registry read, sketch
  index, pipelined GETs and sum of shards × days blobs, debias of every candidate, norm-sub);
* ``query_fetch_sum``: only reading and summing the sketch blobs;
* ``query_estimate_only``: only the core :func:`ldptel.client.estimate` on the summed state.

Usage::

    .venv/bin/python tests/bench/bench_query.py [--candidates 100000] [--days 30] [--shards 2] [--repeat 3]

Uses ``LDPTEL_REDIS_URL`` when set (the db is flushed!), else a private embedded server. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import sys
import time

from seed_sketches import bench_redis, emit, seed_cms_days  # the script directory is on sys.path

from ldptel.aggregator.query import estimate_metric
from ldptel.client import CmsParams, estimate
from ldptel.storage import sketches as store

METRIC = "bench.query"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--candidates", type=int, default=100_000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    with bench_redis() as r:
        params = CmsParams(epsilon=4.0, k=2048, m=1024)
        # A plausible day of 500,000 reports per shard, bits set with probability ~0.12.
        days = seed_cms_days(r, METRIC, params, shards=args.shards, days=args.days, reports_per_shard_day=500_000, seed=3)
        candidates = [f"/page/{i}" for i in range(args.candidates)]
        blobs = args.shards * args.days
        for run in range(args.repeat):
            start = time.perf_counter()
            result = estimate_metric(r, METRIC, day_from=days[0], day_to=days[-1], candidates=candidates,
                                     postprocess="norm-sub")
            total_s = time.perf_counter() - start
            assert len(result.labels) == args.candidates and len(result.days) == args.days

            start = time.perf_counter()
            pairs = [(s, 1, d) for s in range(args.shards) for d in days]
            state, found = store.sum_sketches(r, METRIC, params=params, pairs=pairs)
            fetch_s = time.perf_counter() - start
            assert found == blobs

            start = time.perf_counter()
            estimate(params, state, candidates=candidates)
            est_s = time.perf_counter() - start
            common = {"run": run, "candidates": args.candidates, "days": args.days, "shards": args.shards,
                      "blobs": blobs, "k": params.k, "m": params.m}
            emit(figure="query_latency", seconds=round(total_s, 3), **common)
            emit(figure="query_fetch_sum", seconds=round(fetch_s, 3),
                 mb_per_s=round(blobs * (params.k * params.m * 4) / fetch_s / 1e6), **common)
            emit(figure="query_estimate_only", seconds=round(est_s, 3), **common)
    return 0


if __name__ == "__main__":
    sys.exit(main())
