"""Percentiles of a numeric histogram (ldptel.client.mechanisms.bucketed).

Coverage: a fixed lognormal population (median 120 ms, σ = 0.8, clipped to [0, 1000] ms; n = 20,000 devices,
32 log-spaced buckets), 2,000 repetitions of the privatization per configuration (oue at ε = 1; grr at ε = 4
with --grid, and at 200 repetitions in every run). The interval claims the devices' own percentile (the smallest x with F(x) ≥ level) lies in it; it
is conservative at bucket resolution, so the test asserts coverage ≥ 0.95 − 6·se (se of a 0.95 coverage
over 2,000 intervals = 0.0049), i.e. ≥ 0.92.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldptel.client import Estimate, estimate, fold, privatize_batch
from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms.bucketed import percentiles
from ldptel.client.mechanisms.histogram import HistogramBatch, HistogramParams, bucket_edges
from ldptel.client.mechanisms.mean import MeanParams
from ldptel.client.mechanisms.state import SketchState

LEVELS = (50.0, 90.0, 99.0)


def _population(n: int) -> np.ndarray:
    return np.clip(np.random.default_rng(2020).lognormal(math.log(120), 0.8, n), 0, 1000)


def test_percentiles_are_monotone_and_within_range_even_for_negative_raw_counts() -> None:
    p = HistogramParams(epsilon=1, edges=bucket_edges(0, 1000, 32, scale="log"))
    rng = np.random.default_rng(3)
    levels = np.linspace(1, 99, 40)
    for _ in range(50):
        counts = rng.normal(30, 60, p.d)  # many negative
        est = Estimate("num-histogram", p.labels, counts, np.full(p.d, 60.0), 1000)
        out = percentiles(p, est, levels.tolist())
        points = [x.estimate for x in out]
        assert points == sorted(points)
        assert all(0 <= x.ci_low <= x.ci_high <= 1000 and 0 <= x.estimate <= 1000 for x in out)
        assert [x.ci_low for x in out] == sorted(x.ci_low for x in out)


def test_exact_counts_give_the_interpolated_percentile() -> None:
    p = HistogramParams(epsilon=4, edges=(0.0, 10.0, 20.0, 30.0, 40.0))
    est = Estimate("num-histogram", p.labels, np.array([25.0, 25.0, 25.0, 25.0]), np.zeros(4), 100)
    (p50, p90) = percentiles(p, est, [50, 90])
    assert p50.estimate == pytest.approx(20.0) and p90.estimate == pytest.approx(36.0)
    assert (p90.ci_low, p90.ci_high) == (30.0, 40.0)  # zero noise: exactly the bucket


def test_bad_levels_and_non_histograms_are_refused() -> None:
    p = HistogramParams(epsilon=4, edges=(0.0, 1.0, 2.0))
    est = Estimate("num-histogram", p.labels, np.array([1.0, 1.0]), np.zeros(2), 2)
    for bad in ([0], [100], ["50"], []):
        with pytest.raises(InvalidParameterError):
            percentiles(p, est, bad)
    with pytest.raises(InvalidParameterError):
        percentiles(MeanParams(epsilon=1, lo=0, hi=1), est)


def _coverage(p: HistogramParams, values: np.ndarray, reps: int, seed: int) -> np.ndarray:
    truth = [float(np.sort(values)[math.ceil(q / 100 * values.size) - 1]) for q in LEVELS]
    n = values.size
    batch = privatize_batch(np.tile(values, reps), p, rng=np.random.default_rng(seed))
    covered = np.zeros((reps, len(LEVELS)), dtype=bool)
    for r in range(reps):
        part = HistogramBatch(n=n, cols=None if batch.cols is None else batch.cols[r * n : (r + 1) * n],
                              bits=None if batch.bits is None else batch.bits[r * n : (r + 1) * n])
        state: SketchState = fold(p, [part])
        for i, pc in enumerate(percentiles(p, estimate(p, state), LEVELS)):
            covered[r, i] = pc.ci_low <= truth[i] <= pc.ci_high
    return covered


@pytest.mark.slow
# oue at ε = 1 runs by default; grr at ε = 4 is the grid (--grid): test_percentile_intervals_cover_short checks it
# at 200 repetitions in every run.
@pytest.mark.parametrize("eps", [pytest.param(4.0, marks=pytest.mark.grid), 1.0])
def test_percentile_intervals_cover_at_least_their_nominal_level_on_a_lognormal_population(eps: float) -> None:
    p = HistogramParams(epsilon=eps, edges=bucket_edges(0, 1000, 32, scale="log"))
    reps = 2000
    covered = _coverage(p, _population(20_000), reps, seed=int(eps))
    floor = 0.95 - 6 * math.sqrt(0.95 * 0.05 / reps)
    for i, level in enumerate(LEVELS):
        frac = float(covered[:, i].mean())
        assert frac >= floor, f"p{level:g} ({p.encoding}, ε={eps}): coverage {frac:.4f} < {floor:.4f} over {reps} reps"


def test_percentile_intervals_cover_short() -> None:
    """The default run's version: grr at ε = 4, 200 repetitions, the same kind of floor (0.95 − 6·se)."""
    p = HistogramParams(epsilon=4, edges=bucket_edges(0, 1000, 32, scale="log"))
    covered = _coverage(p, _population(20_000), 200, seed=9)
    assert covered.mean(axis=0).min() >= 0.95 - 6 * math.sqrt(0.95 * 0.05 / 200)


def test_the_interval_fails_only_if_the_test_at_the_percentiles_own_edge_rejects() -> None:
    """Regression (issue 24 §3): 99% of the devices at 10 and 1% at the top, so F(e) = 0.99 exactly at every
    edge between: a test of F(e) ≥ 0.99 there rejects with probability α/2 each, and the earlier rule (lower
    end = the *largest* edge rejecting it) failed whenever any of them did. Now only the edge at the
    percentile itself matters: coverage ≥ 0.95 − 6·se over 300 repetitions (the old rule: 0.84)."""
    p = HistogramParams(epsilon=1, edges=bucket_edges(0, 1000, 32, scale="log"))
    values = np.concatenate([np.full(19_800, 10.0), np.full(200, 1000.0)])
    reps = 300
    rng = np.random.default_rng(99)
    covered = []
    for _ in range(reps):
        (pc,) = percentiles(p, estimate(p, fold(p, [privatize_batch(values, p, rng=rng)])), [99])
        covered.append(pc.ci_low <= 10.0 <= pc.ci_high)
    floor = 0.95 - 6 * math.sqrt(0.95 * 0.05 / reps)
    assert np.mean(covered) >= floor, (np.mean(covered), floor)


def _file_sizes(name: str, n: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    raw = rng.lognormal(math.log(20_000), 1.5, n) if name == "lognormal" else 2_000 * (rng.pareto(1.1, n) + 1)
    return np.clip(raw, 0, 1e6)


@pytest.mark.slow
def test_percentile_points_are_nearly_unbiased_and_unresolved_ones_are_withheld() -> None:
    """Issue 24 §3 goal: log-normal (median 20 kB, σ 1.5) and Pareto(1.1, x_m 2 kB) file sizes clipped to
    [0, 1 MB], n = 50,000, 32 log buckets, ε ∈ {1, 2, 4}, 100 privatizations each.

    * |median(estimate / truth) − 1| ≤ 0.25 for p50, p90, p99 wherever the percentile is resolved in most
      repetitions (the issue's band; the bench measures 0.97–1.02 there). Where it is not (Pareto's p99 at
      ε ≤ 2: the interval spans most of the range, and the point, 0.9–1.3× over seeds, is noise) the row
      carries no point (``estimate`` None) and says why — the issue's "say so instead of printing a number";
    * p50 is always resolved; Pareto's p99 at ε = 1 is not in most repetitions;
    * pooled interval coverage ≥ 0.95 − 6·se (1,800 intervals)."""
    covered = []
    for name in ("lognormal", "pareto"):
        values = _file_sizes(name, 50_000)
        truth = np.array([float(np.sort(values)[math.ceil(q / 100 * values.size) - 1]) for q in LEVELS])
        for eps in (1.0, 2.0, 4.0):
            p = HistogramParams(epsilon=eps, edges=bucket_edges(0, 1e6, 32, scale="log"))
            rng = np.random.default_rng([24, int(eps), len(name)])
            points, resolved = [], []
            for _ in range(100):
                got = percentiles(p, estimate(p, fold(p, [privatize_batch(values, p, rng=rng)])), LEVELS)
                points.append([pc.estimate for pc in got])
                resolved.append([pc.resolved for pc in got])
                covered += [pc.ci_low <= t <= pc.ci_high for pc, t in zip(got, truth, strict=True)]
                for pc in got:
                    assert (pc.row()["estimate"] is None) == (not pc.resolved)
                    assert pc.resolved or "unresolved" in pc.row()["note"]
            ratio = np.median(np.array(points) / truth, axis=0)
            share = np.mean(resolved, axis=0)
            assert np.all((np.abs(ratio - 1) <= 0.25) | (share < 0.5)), (name, eps, ratio, share)
            assert share[0] == 1.0, (name, eps, share)
            if name == "pareto" and eps == 1.0:
                assert share[2] < 0.5, share
    cov = np.array(covered)
    assert cov.mean() >= 0.95 - 6 * math.sqrt(0.95 * 0.05 / cov.size), (cov.mean(), cov.size)
