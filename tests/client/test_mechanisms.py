"""Every mechanism through privatize_batch → fold → estimate, against closed forms.

* Means: within z = 6 standard errors of the exact expectation. For sketches that is the expectation
  *given the fixed hash family* (the collision bias of a fixed family accounted for):
  E[f̂(d) | h] = m/(m−1)·(Σ_v f(v)·P_vd − n/m), P_vd = fraction of rows where h_j(v) = h_j(d).
  This catches a wrong debias constant (the hcms ε/2 bug is a 1.27–1.89× scale error).
* Variances: within ±10% of the exact closed form given the hash family, over 7,500 repetitions
  (the helper checks that ±10% is ≥ 6 standard errors of the variance ratio at that count):
  unary rows   Var = (m/(m−1))² Σ_v f(v)·( [P p(1−p) + (1−P) q(1−q)]/(p−q)² + P(1−P) )
  hcms         Var = (m/(m−1))² Σ_v f(v)·( c² − P² )
* 95% intervals from the estimator's own stderr cover the truth 93–97% of the time (hash family re-drawn
  per repetition, so the truth is the unbiased target).
"""

from __future__ import annotations

import math
import os
import zlib

import numpy as np
import pytest

from ldptel.client import CmsParams, GrrParams, HcmsParams, OueCmsParams, RrParams, estimate, fold, privatize_batch
from ldptel.client.protocol.hashing import HashFamily
from tests.stats import assert_close_normal, assert_coverage, assert_variance_ratio

REPS = 7500
# The sketch closed-form check (three mechanisms): 7,500 repetitions and a ±10% variance band with --grid; by default
# 3,300 and ±15% (a band of 6 standard errors of the variance ratio needs n ≥ 2·(6/band)² + 1: 7,201 and 3,201).
SKETCH_FULL = os.environ.get("LDPTEL_TEST_GRID") == "1"
SKETCH_REPS, SKETCH_BAND = (7500, 0.10) if SKETCH_FULL else (3300, 0.15)
COUNTS = [600, 300, 200, 150, 120, 100, 80, 70, 60, 50, 40, 40, 30, 30, 30, 20, 20, 20, 10, 10]
ITEMS = [f"item-{i}" for i in range(len(COUNTS))]
CANDIDATES = ["item-0", "item-5", "item-19", "never-seen"]
TRUE = np.array([600, 100, 10, 0], dtype=np.float64)

pytestmark = pytest.mark.slow


def _run(params, values, reps: int, seed: int, candidates=None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty((reps, len(candidates) if candidates else 2))
    for r in range(reps):
        batch = privatize_batch(values, params, rng=rng)
        out[r] = estimate(params, fold(params, [batch]), candidates=candidates).counts
    return out


def _sketch_moments(params) -> tuple[np.ndarray, np.ndarray]:
    """Exact mean and variance of f̂(candidate) given the fixed hash family."""
    fam = HashFamily(k=params.k, m=params.m, seed=params.hash_seed)
    hv, hc = fam.matrix(ITEMS), fam.matrix(CANDIDATES)
    coll = (hv[:, None, :] == hc[None, :, :]).mean(axis=2)  # P[v, d]
    f = np.array(COUNTS, dtype=np.float64)[:, None]
    n, m = f.sum(), params.m
    scale = m / (m - 1)
    mean = scale * ((f * coll).sum(axis=0) - n / m)
    if params.mechanism == "hcms":
        per = params.effective_c**2 - coll**2
    else:
        p, q = params.p, params.q
        per = (coll * p * (1 - p) + (1 - coll) * q * (1 - q)) / (p - q) ** 2 + coll * (1 - coll)
    return mean, scale**2 * (f * per).sum(axis=0)


@pytest.mark.parametrize(
    "params",
    [CmsParams(epsilon=2, k=64, m=64, hash_seed=1), OueCmsParams(epsilon=2, k=64, m=64, hash_seed=1), HcmsParams(epsilon=2, k=64, m=64, hash_seed=1)],
    ids=["cms", "oue-cms", "hcms"],
)
def test_sketch_mean_and_variance_match_the_closed_form(params) -> None:
    values = np.repeat(ITEMS, COUNTS).tolist()
    seed = zlib.crc32(params.mechanism.encode()) % 1000  # fixed: hash() of a str differs per process
    est = _run(params, values, SKETCH_REPS, seed=seed, candidates=CANDIDATES)
    mean, var = _sketch_moments(params)
    for i, cand in enumerate(CANDIDATES):
        assert_close_normal(est[:, i].mean(), mean[i], math.sqrt(var[i] / SKETCH_REPS), n=SKETCH_REPS,
                            what=f"{params.mechanism} mean {cand}")
        assert_variance_ratio(est[:, i], var[i], band=SKETCH_BAND, what=f"{params.mechanism} variance {cand}")


def test_rr_mean_and_variance() -> None:
    params = RrParams(epsilon=math.log(3))  # γ = ¼
    n, p_true = 2000, 0.3
    values = np.zeros(n, dtype=bool)
    values[: int(n * p_true)] = True
    est = _run(params, values, REPS, seed=7)[:, 1] / n  # p̂
    f = params.effective_flip
    # Fixed data (the same 600 trues every repetition): every report is a Bernoulli with variance f(1−f).
    var = f * (1 - f) / ((1 - 2 * f) ** 2 * n)
    assert_close_normal(est.mean(), p_true, math.sqrt(var / REPS), n=REPS, what="rr p̂")
    assert_variance_ratio(est, var, band=0.10, what="rr var")
    # With values drawn from a population with proportion p (the sampling variance of the population proportion added) the variance is
    # P(1−P)/(4γ²n), P = ½ − γ + 2γp: the extra P(1−P) − f(1−f) = (1−2f)²·p(1−p) is the sampling variance.
    big_p = f + (1 - 2 * f) * p_true
    gamma = params.effective_gamma
    assert big_p * (1 - big_p) / (4 * gamma**2) == pytest.approx(n * var + p_true * (1 - p_true), rel=1e-12)


def test_grr_mean_variance_and_exact_sum() -> None:
    params = GrrParams(epsilon=1, domain=("a", "b", "c", "d", "e"))
    truth = np.array([900, 500, 300, 200, 100])
    values = np.repeat(list(params.domain), truth).tolist()
    rng = np.random.default_rng(11)
    est = np.empty((REPS, 5))
    for r in range(REPS):
        e = estimate(params, fold(params, [privatize_batch(values, params, rng=rng)]))
        est[r] = e.counts
    n, p, q = truth.sum(), params.p, params.q
    var = (truth * p * (1 - p) + (n - truth) * q * (1 - q)) / (p - q) ** 2
    np.testing.assert_allclose(est.sum(axis=1), n, rtol=0, atol=1e-6)  # p + (d−1)q = 1 exactly
    for i in range(5):
        assert_close_normal(est[:, i].mean(), truth[i], math.sqrt(var[i] / REPS), n=REPS, what=f"grr {i}")
        assert_variance_ratio(est[:, i], var[i], band=0.10, what=f"grr var {i}")


@pytest.mark.parametrize("mech", ["cms", "oue-cms", "hcms"])
def test_sketch_intervals_cover_the_truth(mech: str) -> None:
    """5 equal items, n = 5000, ε = 1, k = m = 64, hash family re-drawn each repetition (1000 × 5 intervals)."""
    cls = {"cms": CmsParams, "oue-cms": OueCmsParams, "hcms": HcmsParams}[mech]
    items = [f"w{i}" for i in range(5)]
    values = np.repeat(items, 1000).tolist()
    rng = np.random.default_rng(17)
    covered = []
    for r in range(1000):
        params = cls(epsilon=1, k=64, m=64, hash_seed=r)
        e = estimate(params, fold(params, [privatize_batch(values, params, rng=rng)]), candidates=items)
        covered.append((e.ci_low <= 1000) & (1000 <= e.ci_high))
    assert_coverage(np.concatenate(covered), nominal=0.95, band=(0.93, 0.97), what=f"{mech} 95% CI")


@pytest.mark.parametrize("mech", ["rr", "grr"])
def test_rr_grr_intervals_cover_the_truth(mech: str) -> None:
    rng = np.random.default_rng(23)
    covered = []
    if mech == "rr":
        params = RrParams(epsilon=1)
        values = np.arange(3000) < 900
        for _ in range(5000):
            e = estimate(params, fold(params, [privatize_batch(values, params, rng=rng)]))
            covered.append(e.ci_low[1] <= 900 <= e.ci_high[1])
    else:
        params = GrrParams(epsilon=2, domain=tuple("abcd"))
        values = np.repeat(list("abcd"), [1000, 500, 300, 200]).tolist()
        for _ in range(1500):
            e = estimate(params, fold(params, [privatize_batch(values, params, rng=rng)]))
            covered.append((e.ci_low <= [1000, 500, 300, 200]) & ([1000, 500, 300, 200] <= e.ci_high))
    assert_coverage(np.ravel(covered), nominal=0.95, band=(0.93, 0.97), what=f"{mech} 95% CI")


def test_hcms_with_the_cms_constant_would_fail_the_mean_test() -> None:
    """The unbiasedness check has teeth: scaling by the cms constant moves item-0 by many SEs."""
    params = HcmsParams(epsilon=2, k=64, m=64, hash_seed=1)
    mean, var = _sketch_moments(params)
    buggy_scale = CmsParams(epsilon=2, k=64, m=64).c_epsilon / params.effective_c
    m = params.m
    buggy_mean = mean[0] * buggy_scale + (buggy_scale - 1) * sum(COUNTS) / (m - 1)
    assert abs(buggy_mean - mean[0]) > 6 * math.sqrt(var[0] / REPS) * 10
