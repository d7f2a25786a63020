#!/usr/bin/env python3
"""The dashboard's reads: its metric list and its per-day series, each beside a same-run baseline.

Prints one JSON line per figure and run:

* ``dashboard_metric_list``: :func:`ldptel.aggregator.dashboard.overview.metric_list` for one cms metric
  (k = 1024, m = 1024) with ``--days`` × ``--shards`` sketches: registry, sketch index, stream lag and the
  reports of each day read with GETRANGE (header and row counts only); baseline: the same reports per day from
  reading and summing every blob (``sum_sketches`` per day), what the list would cost without ranged reads;
* ``dashboard_by_day``: :func:`ldptel.aggregator.query.estimate_by_day` over the days with ``--candidates``
  candidates (one estimate per day: what the per-day chart asks for); baseline: one
  :func:`~ldptel.aggregator.query.estimate_metric` over the whole range (the estimates chart).

Usage::

    .venv/bin/python tests/bench/bench_dashboard.py [--days 14] [--shards 2] [--candidates 1000] [--repeat 3]

Uses ``LDPTEL_REDIS_URL`` when set (the db is flushed!), else a private embedded server. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import sys
import time

from seed_sketches import bench_redis, emit, seed_cms_days  # the script directory is on sys.path

from ldptel.aggregator.dashboard.overview import metric_list
from ldptel.aggregator.query import estimate_by_day, estimate_metric
from ldptel.client import CmsParams
from ldptel.storage import sketches as store

METRIC = "bench.dashboard"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=14)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--candidates", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    with bench_redis() as r:
        params = CmsParams(epsilon=4.0, k=1024, m=1024)
        # A plausible day of 200,000 reports per shard, bits set with probability ~0.12.
        days = seed_cms_days(r, METRIC, params, shards=args.shards, days=args.days, reports_per_shard_day=200_000, seed=5)
        candidates = [f"/page/{i}" for i in range(args.candidates)]
        common = {"days": args.days, "shards": args.shards, "k": params.k, "m": params.m}
        for run in range(args.repeat):
            start = time.perf_counter()
            listed = metric_list(r)
            list_s = time.perf_counter() - start
            start = time.perf_counter()
            full = {}
            for day in days:
                state, _ = store.sum_sketches(r, METRIC, params=params, pairs=[(s, 1, day) for s in range(args.shards)])
                full[day] = state.n
            base_s = time.perf_counter() - start
            assert {d["day"]: d["n"] for d in listed[0]["reports_by_day"]} == full
            emit(figure="dashboard_metric_list", run=run, seconds=round(list_s, 4), baseline_full_read_s=round(base_s, 3),
                 ratio=round(list_s / base_s, 4), **common)

            start = time.perf_counter()
            daily = estimate_by_day(r, METRIC, candidates=candidates)
            by_day_s = time.perf_counter() - start
            start = time.perf_counter()
            estimate_metric(r, METRIC, candidates=candidates)
            range_s = time.perf_counter() - start
            assert len(daily.results) == args.days
            emit(figure="dashboard_by_day", run=run, candidates=args.candidates, seconds=round(by_day_s, 3),
                 baseline_one_range_s=round(range_s, 3), ratio=round(by_day_s / range_s, 2), **common)
    return 0


if __name__ == "__main__":
    sys.exit(main())
