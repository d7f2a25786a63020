"""The hash-collision term of sketch stderrs, and rr's randomization-only stderr; heavy-tailed test data.

* F̂2 (``Cells.f2``): over the privacy noise and the row each report picks, with the hash family fixed, its
  mean is exactly [F2/k + Σ_{d≠d'} f(d)f(d')·C_dd'/k² − n²/(km)]·km/(m−1), C_dd' = rows where d and d'
  collide (the same as F2 once C_dd' is replaced by its mean k/m). Checked through the real privatize → fold
  path of cms, oue-cms and hcms (so the cell noise models α, β are checked too) and through the count-level
  simulator below, within z = 6 standard errors over the repetitions.
* The plain stderr is exactly √(Mechanism.variance + collision_variance(F̂2, f̂)).
* rr's stderr is the randomization sd n·f(1−f)/(1−2f)²: against the empirical sd of fixed data at ε = 4
  (the ±10% band is ≥ 6 standard errors of the variance ratio), and equal to grr's formula on {false, true}.

Helpers used by the coverage tests and the benchmark: :func:`zipf_counts` (Zipf(1.1) over V values with the
top value's share set, the issue's population shape) and :func:`simulate_state` (the folded state of n
reports, exact in distribution, without building the reports for cms / oue-cms).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from ldptel.client import (
    CmsParams,
    GrrParams,
    HcmsParams,
    OueCmsParams,
    RrParams,
    SketchState,
    estimate,
    fold,
    privatize_batch,
)
from ldptel.client.mechanisms import get_mechanism
from ldptel.client.mechanisms._sketch import SketchParams, collision_variance, family_of
from tests.stats import assert_mean, assert_variance_ratio

SKETCHES = {"cms": CmsParams, "oue-cms": OueCmsParams, "hcms": HcmsParams}


# ------------------------------------------------------------------------------------------ helpers
def zipf_counts(n: int, values: int, *, exponent: float = 1.1, top: float = 0.15) -> np.ndarray:
    """Counts summing to n: the top value gets ``top`` of the mass, rank r ≥ 2 gets mass ∝ r^−exponent
    (largest-remainder rounding). Descending."""
    weights = np.arange(2, values + 1, dtype=np.float64) ** -exponent
    share = np.concatenate([[top], weights / weights.sum() * (1.0 - top)])
    raw = share * n
    counts = np.floor(raw).astype(np.int64)
    counts[np.argsort(counts - raw, kind="stable")[: n - int(counts.sum())]] += 1
    return counts


def value_names(count: int) -> list[str]:
    return [f"value-{i}" for i in range(count)]


def simulate_state(params: SketchParams, values: Sequence[str], counts: np.ndarray, rng: np.random.Generator) -> SketchState:
    """The folded state of Σ counts reports (counts[i] of values[i]), exact in distribution.

    cms / oue-cms: each report picks its row j uniformly; given the rows, F_j(a) reports of row j hash to a,
    and O[j, a] ~ Binomial(F_j(a), p) + Binomial(n_j − F_j(a), q) independently over cells, which is the
    distribution of the fold of privatized reports (each bit is independent given the report's row and
    value). hcms: the real privatize_batch → fold (33-bit reports are cheap).
    """
    if params.mechanism == "hcms":
        reports = np.repeat(np.asarray(values, dtype=object), counts).tolist()
        return fold(params, [privatize_batch(reports, params, rng=rng)])
    fam = family_of(params)
    k, m = params.k, params.m
    of_report = np.repeat(np.arange(len(values)), counts)
    rows = rng.integers(0, k, size=of_report.size)
    hot = fam.hash_rows(fam.bases(values)[of_report], rows)
    hot_counts = np.bincount(rows * m + hot, minlength=k * m).reshape(k, m)
    row_counts = np.bincount(rows, minlength=k)
    p, q = getattr(params, "p"), getattr(params, "q")  # noqa: B009 - UnaryParams' probabilities
    state = SketchState.empty(params)
    state.counts[:] = rng.binomial(hot_counts, p) + rng.binomial(row_counts[:, None] - hot_counts, q)
    state.row_counts[:] = row_counts
    return state


def expected_f2(params: SketchParams, values: Sequence[str], counts: np.ndarray) -> float:
    """E[F̂2] given the hash family (module docstring)."""
    k, m = params.k, params.m
    f = counts.astype(np.float64)
    h = family_of(params).row_hashes_matrix(family_of(params).bases(values))  # C × k
    collide = (h[:, None, :] == h[None, :, :]).sum(axis=2).astype(np.float64)  # C_dd' (C_dd = k)
    cross = float(f @ collide @ f) - k * float(f @ f)
    n = float(f.sum())
    return (float(f @ f) / k + cross / k**2 - n * n / (k * m)) * k * m / (m - 1)


# -------------------------------------------------------------------------------------------- tests
POPULATION = zipf_counts(3000, 40)
NAMES = value_names(40)


@pytest.mark.slow
@pytest.mark.parametrize("mech", list(SKETCHES))
def test_f2_is_unbiased_given_the_hash_family(mech: str) -> None:
    """Real reports, 400 repetitions (new noise and rows, the same family): mean F̂2 = its exact expectation."""
    params = SKETCHES[mech](epsilon=4, k=32, m=32, hash_seed=7)
    mechanism = get_mechanism(mech)
    reports = np.repeat(NAMES, POPULATION).tolist()
    rng = np.random.default_rng(31)
    f2 = [mechanism.cells(params, fold(params, [privatize_batch(reports, params, rng=rng)])).f2() for _ in range(400)]
    target = expected_f2(params, NAMES, POPULATION)
    assert_mean(np.array(f2), target, what=f"{mech} F̂2 (target {target:.0f}, F2 {float(POPULATION @ POPULATION):.0f})")


@pytest.mark.parametrize("mech", ["cms", "oue-cms"])
def test_count_level_simulation_has_the_fold_moments(mech: str) -> None:
    """The simulator gives F̂2 the same exact mean (it depends on the cells' first two moments)."""
    params = SKETCHES[mech](epsilon=4, k=32, m=32, hash_seed=7)
    rng = np.random.default_rng(37)
    mechanism = get_mechanism(mech)
    f2 = [mechanism.cells(params, simulate_state(params, NAMES, POPULATION, rng)).f2() for _ in range(400)]
    assert_mean(np.array(f2), expected_f2(params, NAMES, POPULATION), what=f"{mech} simulated F̂2")


def test_f2_tracks_the_second_moment_on_heavy_tailed_data() -> None:
    """n = 10⁶, Zipf(1.1) over 60,000 values, top 15%: F̂2/F2 ≈ 1 where collisions matter (ε = 8).

    Tolerance: sd(F̂2) ≈ km/(m−1)·√(Σ_cells 2V² + 4F²V), V = α·n_j + β·F ≈ F + 0.7 here (oue-cms, ε = 8),
    dominated by the top value's k cells (F ≈ f₁/k = 73): 2049·√(2048·4·73²·74) = 1.2×10⁸, 0.4% of
    F2 = 3.2×10¹⁰; the hash family's own spread is √(2/(k·m))·F2 ≈ 0.1%. ±3% is ≥ 6 of their sum. (Clipping y
    at 0, the tempting mistake, gives ≈ 0.65.)
    """
    counts = zipf_counts(1_000_000, 60_000)
    names = value_names(60_000)
    params = OueCmsParams(epsilon=8, k=2048, m=1024, hash_seed=11)
    state = simulate_state(params, names, counts, np.random.default_rng(41))
    ratio = get_mechanism("oue-cms").cells(params, state).f2() / float(counts.astype(np.float64) @ counts)
    assert abs(ratio - 1) <= 0.03, ratio


@pytest.mark.parametrize("mech", list(SKETCHES))
def test_plain_stderr_is_the_randomization_variance_plus_the_collision_term(mech: str) -> None:
    params = SKETCHES[mech](epsilon=4, k=64, m=64, hash_seed=3)
    counts = zipf_counts(20_000, 500)
    names = value_names(500)
    state = simulate_state(params, names, counts, np.random.default_rng(43))
    est = estimate(params, state, candidates=names[:50] + ["never-seen"])
    mechanism = get_mechanism(mech)
    f2 = mechanism.cells(params, state).f2()
    textbook = mechanism.variance(params, est.counts, est.n)
    collision = collision_variance(params, f2=f2, counts=np.clip(est.counts, 0, est.n))
    np.testing.assert_allclose(est.stderr**2, textbook + collision, rtol=1e-12)
    assert est.estimator == "plain" and collision.min() > 0 and f2 > 0
    # (F2 − f²)⁺/(k(m−1)): at f = 0 the whole F2, never negative.
    assert collision_variance(params, f2=f2, counts=np.array([0.0, 1e9]))[1] == 0.0
    assert collision_variance(params, f2=f2, counts=np.array([0.0]))[0] == pytest.approx(f2 / (64 * 63))


def test_rr_stderr_is_the_randomization_sd() -> None:
    """ε = 4, the same 30,000 values every repetition (9,000 true): 7,500 repetitions."""
    params = RrParams(epsilon=4)
    n, true = 30_000, 9_000
    values = np.arange(n) < true
    rng = np.random.default_rng(47)
    est, reported = np.empty(7500), np.empty(7500)
    for r in range(7500):
        e = estimate(params, fold(params, [privatize_batch(values, params, rng=rng)]))
        est[r], reported[r] = e.counts[1], e.stderr[1]
    assert np.ptp(reported) == 0  # it does not depend on the data
    assert_variance_ratio(est, float(reported[0]) ** 2, band=0.10, what="rr stderr² vs empirical variance")
    f = params.effective_flip
    # Warner's P(1−P)/(1−2f)²·n counts the sampling of the 30,000 values too: 3.5× too wide here.
    big_p = f + (1 - 2 * f) * true / n
    warner = n * big_p * (1 - big_p) / (1 - 2 * f) ** 2
    assert warner / reported[0] ** 2 > 1.5
    # grr's formula on {false, true} with the same channel (p = 1 − f, q = f): n·q(1−q)/(p−q)² + c·(1−p−q)/(p−q).
    assert reported[0] ** 2 == pytest.approx(n * f * (1 - f) / (1 - 2 * f) ** 2, rel=1e-12)
    grr = GrrParams(epsilon=4, domain=("false", "true"))
    assert get_mechanism("grr").variance(grr, np.array([21_000.0, 9_000.0]), n)[0] == pytest.approx(
        n * grr.q * (1 - grr.q) / (grr.p - grr.q) ** 2, rel=1e-12
    )


def test_every_mechanism_states_the_same_stderr_meaning() -> None:
    """One meaning, written where each variance is defined."""
    from ldptel.client.mechanisms import cms, grr, hcms, rr, state

    for doc in (rr.__doc__, grr.Grr.variance.__doc__, cms.__doc__, hcms.__doc__, state.Estimate.__doc__):
        assert doc is not None and "randomization" in doc, doc
