"""Percentile point estimators and intervals of a num-histogram (issue 24 §3): one JSON line per
(distribution, ε, percentile), the isotonic-CDF estimator beside the Norm-Sub baseline measured in the same run.

    .venv/bin/python tests/bench/bench_percentiles.py [--reps R] [--n N]

Populations (fixed, n = 50,000 by default): log-normal file sizes (median 20 kB, σ = 1.5) and Pareto(α = 1.1,
x_m = 2 kB), clipped to [0, 1 MB]; 32 log-spaced buckets (the first [0, 1 kB)); ε ∈ {1, 2, 4}; R = 400
privatizations each. Figures: the median over repetitions of estimate / true percentile (goal |ratio − 1| ≤
0.25 where resolved) for the shipped estimator (:mod:`ldptel.client.mechanisms.bucketed`) and for Norm-Sub +
linear interpolation (the estimator before issue 24); the share of repetitions in which the percentile is
resolved (its interval spans ≤ a quarter of the buckets); the coverage of the shipped interval and of the
earlier interval rule (the largest edge rejecting F ≥ level), goal ≥ 0.95.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ldptel.aggregator.postprocess import norm_sub
from ldptel.client import estimate, fold, privatize_batch
from ldptel.client.mechanisms import mechanism_of
from ldptel.client.mechanisms.bucketed import percentiles
from ldptel.client.mechanisms.histogram import HistogramParams, bucket_edges

LEVELS = (50.0, 90.0, 99.0)


def population(name: str, n: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    raw = rng.lognormal(math.log(20_000), 1.5, n) if name == "lognormal" else 2_000 * (rng.pareto(1.1, n) + 1)
    return np.clip(raw, 0, 1e6)


def old_rule(params: HistogramParams, est: object, qs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Norm-Sub point and the earlier interval rule (before issue 24)."""
    edges = np.asarray(params.edges)
    n = est.n  # type: ignore[attr-defined]
    counts = est.counts  # type: ignore[attr-defined]
    cdf = np.concatenate(([0.0], np.cumsum(norm_sub(counts, total=float(n))))) / n
    cdf = np.maximum.accumulate(np.minimum(cdf, 1.0))
    b = np.clip(np.searchsorted(cdf, qs, side="left") - 1, 0, edges.size - 2)
    mass = cdf[b + 1] - cdf[b]
    share = np.where(mass > 0, (qs - cdf[b]) / np.where(mass > 0, mass, 1.0), 0.0)
    point = edges[b] + np.clip(share, 0, 1) * (edges[b + 1] - edges[b])
    s, var = mechanism_of(params).prefix_sums(params, counts, n)
    up, low = (s + 1.96 * np.sqrt(var)) / n, (s - 1.96 * np.sqrt(var)) / n
    los, his = [], []
    for q in qs:
        below, above = np.flatnonzero(up < q), np.flatnonzero(low >= q)
        los.append(edges[below[-1]] if below.size else edges[0])
        his.append(max(edges[above[0]] if above.size else edges[-1], los[-1]))
    return point, np.array(los), np.array(his)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--n", type=int, default=50_000)
    args = ap.parse_args()
    qs = np.array(LEVELS) / 100
    for name in ("lognormal", "pareto"):
        values = population(name, args.n)
        truth = np.array([np.sort(values)[math.ceil(q * args.n) - 1] for q in qs])
        for eps in (1.0, 2.0, 4.0):
            params = HistogramParams(epsilon=eps, edges=bucket_edges(0, 1e6, 32, scale="log"))
            rng = np.random.default_rng([24, int(eps)])
            new_pt, old_pt, resolved, new_cov, old_cov = [], [], [], [], []
            for _ in range(args.reps):
                est = estimate(params, fold(params, [privatize_batch(values, params, rng=rng)]))
                got = percentiles(params, est, LEVELS)
                new_pt.append([p.estimate for p in got])
                resolved.append([p.resolved for p in got])
                new_cov.append([p.ci_low <= t <= p.ci_high for p, t in zip(got, truth, strict=True)])
                pt, lo, hi = old_rule(params, est, qs)
                old_pt.append(pt)
                old_cov.append((lo <= truth) & (truth <= hi))
            ratio_new = np.median(np.array(new_pt) / truth, axis=0)
            ratio_old = np.median(np.array(old_pt) / truth, axis=0)
            res, cov_new, cov_old = np.mean(resolved, axis=0), np.mean(new_cov, axis=0), np.mean(old_cov, axis=0)
            for i, level in enumerate(LEVELS):
                print(json.dumps({
                    "figure": f"p{level:g} median estimate/truth, {name}, eps={eps:g}, n={args.n}",
                    "value": round(float(ratio_new[i]), 3), "unit": "ratio",
                    "baseline": "Norm-Sub + linear interpolation (before issue 24)",
                    "baseline_value": round(float(ratio_old[i]), 3),
                    "goal": "|ratio - 1| <= 0.25 where resolved", "resolved_share": round(float(res[i]), 3),
                    "meets_goal": bool(abs(ratio_new[i] - 1) <= 0.25 or res[i] < 0.5),
                    "coverage": round(float(cov_new[i]), 4), "coverage_before": round(float(cov_old[i]), 4),
                    "truth": round(float(truth[i]), 1), "reps": args.reps}), flush=True)


if __name__ == "__main__":
    main()
