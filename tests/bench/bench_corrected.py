#!/usr/bin/env python3
"""Collision-corrected estimation time: 71,000 and 100,000 candidates over k = 2048, m = 1024 (oue-cms, ε = 8).

The issue's population shape: n = 1.45 M reports, Zipf(1.1) over as many values as candidates, top value 15%
(tests/client/test_collision.py; the folded state is drawn at the count level, exact in distribution). For each
size it prints one JSON line per run with:

* ``corrected_s``: :func:`ldptel.aggregator.corrected.corrected_estimate` given the plain estimate (as
  ``estimate_metric(..., estimator="both")`` calls it): hashing, the warm start, LSQR and the variances;
* ``corrected_alone_s``: the same when it computes the plain estimate itself (``estimator="corrected"``);
* ``plain_s``: the plain estimator (``ldptel.client.estimate``) on the same state and candidates, the baseline;
* ``iterations`` and ``max_error_over_stderr``: LSQR iterations and the largest distance from a solve to 10⁻⁹,
  in units of each value's stderr;
* ``cpu_s``: process CPU time of ``corrected_alone`` (numpy's BLAS threads spin during LSQR's vector steps).

Goals: ≤ 2 s at 71,000 and ≤ 3 s at 100,000 candidates (``corrected_alone_s``, the slower path).

Usage::

    .venv/bin/python tests/bench/bench_corrected.py [--repeat 3] [--epsilon 8]

Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for tests.client helpers

from ldptel.aggregator import corrected as corr
from ldptel.client import OueCmsParams, estimate
from tests.client.test_collision import simulate_state, value_names, zipf_counts

N = 1_450_000
GOALS = {71_000: 2.0, 100_000: 3.0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--epsilon", type=float, default=8.0)
    args = ap.parse_args()
    fits: list[corr.Fit] = []
    solve = corr.solve

    def counting(*a: object, **kw: object) -> corr.Fit:
        fit = solve(*a, **kw)  # type: ignore[arg-type]
        fits.append(fit)
        return fit

    corr.solve = counting  # type: ignore[assignment]
    for size, goal in GOALS.items():
        names = value_names(size)
        counts = zipf_counts(N, size)
        params = OueCmsParams(epsilon=args.epsilon, k=2048, m=1024, hash_seed=3)
        state = simulate_state(params, names, counts, np.random.default_rng(1))
        exact = corr.corrected_estimate(params, state, candidates=names, tol=1e-9)
        runs = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            plain = estimate(params, state, candidates=names)
            t1 = time.perf_counter()
            given = corr.corrected_estimate(params, state, candidates=names, plain=plain)
            t2 = time.perf_counter()
            c0 = time.process_time()
            alone = corr.corrected_estimate(params, state, candidates=names)
            t3 = time.perf_counter()
            cpu = time.process_time() - c0
            error = float(np.max(np.abs(alone.counts - exact.counts) / exact.stderr))
            assert np.array_equal(given.counts, alone.counts)
            runs.append(t3 - t2)
            print(json.dumps({
                "figure": "corrected_estimate", "candidates": size, "k": 2048, "m": 1024, "n": N, "epsilon": args.epsilon,
                "corrected_s": round(t2 - t1, 3), "corrected_alone_s": round(t3 - t2, 3), "plain_s": round(t1 - t0, 3),
                "cpu_s": round(cpu, 3), "iterations": fits[-1].iterations, "max_error_over_stderr": round(error, 4),
                "goal_s": goal,
            }), flush=True)
        median = statistics.median(runs)
        print(json.dumps({"figure": "corrected_estimate_median", "candidates": size, "corrected_alone_s": round(median, 3),
                          "goal_s": goal, "meets_goal": median <= goal}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
