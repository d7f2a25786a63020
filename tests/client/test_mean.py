"""The bounded mean/sum mechanism (ldptel.client.mechanisms.mean) against its closed forms.

* ε: recomputed exactly from the integer thresholds (Fractions), never above the request; a budget one ulp
  below it is refused; the worst-case likelihood ratio found by enumerating every output symbol's exact
  probability over every grid input equals it.
* Single-report and batch paths: each against the exact output distribution (chi-square, α = 1e-6).
* Means within z = 6 of the target; the variance of the estimated mean over 7,201 repetitions (fixed data)
  within ±10% of the exact Σ Var(y | x_k)/n², which the helper checks is ≥ 6 standard errors of the ratio.
* 95% intervals: a fresh population per repetition (Exp(150) clipped to [0, 600], mean 150(1 − e^−4)),
  7,201 intervals, coverage in [0.93, 0.97] (≥ 6 standard errors of a coverage on each side).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from ldptel.client import estimate, fold, privatize, privatize_batch
from ldptel.client.errors import InvalidParameterError, InvalidValueError
from ldptel.client.mechanisms.mean import GRID, SHARE_BITS, VALUE_BITS, MeanBatch, MeanParams, clipped, symbol_moments
from ldptel.client.protocol.specs import params_from_dict
from tests.stats import assert_chi_square, assert_close_normal, assert_coverage, assert_variance_ratio

EPSILONS = [0.5, 1.0, 2.0, 4.0, 8.0]
REPS = 7201
CONFIGS = [("onebit", 1.0), ("dhm", 1.0), ("dhm", 4.0), ("dhm", 8.0)]


def _exact_ratio(p: MeanParams) -> Fraction:
    two_b = 1 << p.prob_bits
    ratios = []
    if p.alpha < 1:
        t = p.flip_threshold
        ratios.append(Fraction(two_b - t, t))
    if p.alpha > 0:
        assert p.window is not None
        t = p.window_threshold
        ratios.append(Fraction(t * GRID, p.window * (two_b - t)))
    return max(ratios)


@pytest.mark.parametrize("variant", ["onebit", "dhm", "auto"])
@pytest.mark.parametrize("eps", EPSILONS)
def test_effective_epsilon_is_exact_never_above_the_request_and_a_smaller_budget_is_refused(variant: str, eps: float) -> None:
    p = MeanParams(epsilon=eps, lo=0, hi=600, variant=variant)
    ratio = _exact_ratio(p)
    exact = math.log(ratio.numerator) - math.log(ratio.denominator)
    assert p.effective_epsilon == pytest.approx(exact, rel=1e-12, abs=1e-12)
    assert p.effective_epsilon <= eps
    assert ratio <= Fraction(math.exp(eps)) * (1 + Fraction(1, 10**12))
    assert p.satisfies(p.effective_epsilon)
    assert not p.satisfies(math.nextafter(p.effective_epsilon, 0.0))
    # rounding goes towards more noise: the flip up, the window's probability down
    assert p.flip_threshold / (1 << p.prob_bits) >= 1 / (math.exp(eps) + 1)
    if p.window is not None:
        assert p.window_threshold / (1 << p.prob_bits) <= p.window * math.exp(eps) / (p.window * math.exp(eps) + GRID)


def test_auto_picks_the_smaller_worst_case_and_matches_the_reference_table() -> None:
    """ldp-math-2 §1.3 worst-case Var_t: 1BitMean 16.671 at ε = 0.5 (dhm has α = 0 there); dHM 4.268, 0.982,
    0.1558, 0.0084 at ε = 1, 2, 4, 8 (our α grid is 1/64 and our window search exhaustive: within 1%)."""
    assert MeanParams(epsilon=0.5, lo=0, hi=1).variant == "onebit"
    assert MeanParams(epsilon=0.5, lo=0, hi=1).worst_case_variance() == pytest.approx(16.671, rel=1e-3)
    for eps, ref in [(1, 4.268), (2, 0.982), (4, 0.1558), (8, 0.0084)]:
        p = MeanParams(epsilon=eps, lo=0, hi=1)
        assert p.variant == "dhm"
        assert p.worst_case_variance() == pytest.approx(ref, rel=0.01)
        assert p.worst_case_variance() < MeanParams(epsilon=eps, lo=0, hi=1, variant="onebit").worst_case_variance()


def _exact_distribution(p: MeanParams, u: int) -> np.ndarray:
    """P(symbol | quantized value u) as floats, from the thresholds (u ∈ [0, 2^V])."""
    two_b = float(1 << p.prob_bits)
    f = p.flip_threshold / two_b
    c = u / float(1 << VALUE_BITS)
    one = c * (1 - f) + (1 - c) * f
    out = np.zeros(p.symbols)
    out[0], out[1] = (1 - p.alpha) * (1 - one), (1 - p.alpha) * one
    if p.window is not None:
        w = p.window
        s = u * GRID
        i0, frac = s >> VALUE_BITS, (s & ((1 << VALUE_BITS) - 1)) / float(1 << VALUE_BITS)
        p_h, p_l = p.window_threshold / (two_b * w), (two_b - p.window_threshold) / (two_b * GRID)
        for i, pi in ((i0, 1 - frac), (min(i0 + 1, GRID), frac)):
            cells = np.full(GRID + w, p_l)
            cells[i : i + w] = p_h
            out[2:] += p.alpha * pi * cells
    return out


def _symbols(batch: MeanBatch) -> np.ndarray:
    if batch.bits is not None:
        return batch.bit_values().astype(np.int64)
    assert batch.cols is not None
    return batch.cols


def _pooled(observed: np.ndarray, probs: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Cells with expected count < 5 pooled into one (chi-square needs ≥ 5 in every cell)."""
    small = probs * n < 5
    if not small.any():
        return observed, probs
    return np.append(observed[~small], observed[small].sum()), np.append(probs[~small], probs[small].sum())


@pytest.mark.parametrize("variant,eps", [("onebit", 1.0), ("dhm", 1.0), ("dhm", 4.0)])
def test_single_and_batch_paths_both_follow_the_exact_distribution(variant: str, eps: float) -> None:
    p = MeanParams(epsilon=eps, lo=0, hi=600, variant=variant)
    x = 231.5  # not a grid point: the stochastic rounding matters
    u = int(p.quantize(np.array([x]))[0])
    probs = _exact_distribution(p, u)
    assert probs.sum() == pytest.approx(1.0, abs=1e-12)
    n = 40_000
    rng = np.random.default_rng(15)
    batch = _symbols(privatize_batch(np.full(n, x), p, rng=rng))
    single = np.concatenate([_symbols(privatize(x, p, rng=rng)) for _ in range(n)])
    for sample, what in ((batch, "batch"), (single, "single")):
        obs, pr = _pooled(np.bincount(sample, minlength=p.symbols).astype(np.float64), probs, n)
        assert_chi_square(obs, pr / pr.sum(), what=f"{variant} ε={eps} {what}")


def test_onebit_batch_is_one_with_the_exact_fused_probability_at_the_bounds_and_beyond() -> None:
    """The fused draw (one 64-bit threshold per report) gives P(1) = f + (1 − 2f)·u/2^V, clipping included."""
    p = MeanParams(epsilon=1.0, lo=0, hi=600, variant="onebit")
    f = p.flip_threshold / (1 << p.prob_bits)
    n = 40_000
    rng = np.random.default_rng(16)
    for x in (-50.0, 0.0, 0.001, 231.5, 600.0, 1e6):
        u = int(p.quantize(np.array([x]))[0])
        one = f + (1 - 2 * f) * u / (1 << 32)
        batch = privatize_batch(np.full(n, x), p, rng=rng)
        assert batch.bits is not None and batch.bits.size == n // 8
        ones = int(np.unpackbits(batch.bits).sum())
        assert_chi_square(np.array([n - ones, ones], dtype=np.float64), np.array([1 - one, one]), what=f"onebit x={x}")
    odd = privatize_batch(np.full(13, 600.0), p, rng=rng)
    assert odd.bits is not None and odd.bits[-1] & 0x07 == 0  # the padding bits of the last byte stay 0


def test_onebit_batch_decides_a_tie_of_the_high_words_by_the_low_words() -> None:
    """The fused draw's rare branch (R_h = H, probability 2^−32), forced: with lo = 0 and hi = 2^32 a value is
    its own u, so each report's u is chosen to make H equal the high word the seeded generator will draw (the
    smallest such u for the first report, the largest for the second), and the seed so that the low words
    decide one report each way."""
    p = MeanParams(epsilon=1.0, lo=0, hi=float(1 << 32), variant="onebit")
    t_f = p.flip_threshold
    slope = (1 << p.prob_bits) - 2 * t_f

    def forced(seed: int) -> tuple[list[int], list[bool]] | None:
        words = np.random.default_rng(seed).bit_generator.random_raw(3)  # the chunk's 2 high words, then 2 low words
        r_high = [int(r) for r in words[:1].view(np.uint32)]
        if not all(t_f <= r < (1 << 32) - t_f for r in r_high):
            return None  # no u ∈ [0, 2^32] gives H = r
        u = [-(-(r_high[0] - t_f) * (1 << 32) // slope), ((r_high[1] + 1 - t_f) * (1 << 32) - 1) // slope]
        thresholds = [(t_f << 32) + slope * k for k in u]
        assert [th >> 32 for th in thresholds] == r_high
        return u, [(int(w) & 0xFFFFFFFF) < (th & 0xFFFFFFFF) for w, th in zip(words[1:], thresholds, strict=True)]

    seed, (u, want) = next((k, f) for k in range(1000) if (f := forced(k)) is not None and f[1] == [False, True])
    batch = privatize_batch(np.array(u, dtype=np.float64), p, rng=np.random.default_rng(seed))
    assert batch.bits is not None and np.unpackbits(batch.bits)[:2].astype(bool).tolist() == want


@pytest.mark.parametrize("eps", [1.0, 4.0, 8.0])
def test_enumerated_likelihood_ratio_over_every_grid_input_equals_the_effective_epsilon(eps: float) -> None:
    """Every output symbol's exact probability for every grid input x_i = lo + i(hi − lo)/G (where the coin
    and the rounding are exact rationals): the largest ratio between two inputs is exactly e^ε_eff."""
    p = MeanParams(epsilon=eps, lo=0, hi=GRID, variant="dhm")
    two_b = 1 << p.prob_bits
    w = p.window
    assert w is not None
    alpha = Fraction(p.pm_share or 0, 1 << SHARE_BITS)
    f = Fraction(p.flip_threshold, two_b)
    p_h, p_l = Fraction(p.window_threshold, two_b * w), Fraction(two_b - p.window_threshold, two_b * GRID)
    worst = Fraction(0)
    for s in range(p.symbols):
        probs = set()
        for i in range(GRID + 1):
            c = Fraction(i, GRID)  # u = i·2^V/G exactly: P(coin) = i/G, no rounding between grid points
            if s < 2:
                one = c * (1 - f) + (1 - c) * f
                probs.add((1 - alpha) * (one if s == 1 else 1 - one))
            else:
                probs.add(alpha * (p_h if i <= s - 2 < i + w else p_l))
        positive = [q for q in probs if q > 0]
        if positive:
            worst = max(worst, max(positive) / min(positive))
    assert worst == _exact_ratio(p)
    assert math.log(worst.numerator) - math.log(worst.denominator) == pytest.approx(p.effective_epsilon, rel=1e-12)


def _per_rep_estimates(p: MeanParams, values: np.ndarray, reps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(estimated mean, its stderr) of each repetition: one privatize_batch for all reps, then fold + estimate
    per rep (n a multiple of 8 so the packed bits split by byte)."""
    n = values.size // reps
    batch = privatize_batch(values, p, rng=np.random.default_rng(seed))
    means, ses = np.empty(reps), np.empty(reps)
    for r in range(reps):
        if batch.bits is not None:
            part = MeanBatch(n=n, bits=batch.bits[r * n // 8 : (r + 1) * n // 8])
        else:
            assert batch.cols is not None
            part = MeanBatch(n=n, cols=batch.cols[r * n : (r + 1) * n])
        est = estimate(p, fold(p, [part]))
        means[r], ses[r] = est.counts[0], est.stderr[0]
    return means, ses


@pytest.mark.slow
@pytest.mark.parametrize("variant,eps", CONFIGS)
def test_mean_is_unbiased_and_its_variance_matches_the_closed_form(variant: str, eps: float) -> None:
    p = MeanParams(epsilon=eps, lo=0, hi=300, variant=variant)
    n = 96
    data = np.random.default_rng(7).lognormal(4.5, 0.8, n)  # some values above 300: clipped
    assert clipped(data, p) > 0
    t = p.t_of(data)
    half = (p.hi - p.lo) / 2
    target = p.lo + half * (float(t.mean()) + 1)
    var = half * half * float(p.report_variance(t).sum()) / n**2
    means, _ = _per_rep_estimates(p, np.tile(data, REPS), REPS, seed=int(eps * 10) + len(variant))
    assert_close_normal(float(means.mean()), target, math.sqrt(var / REPS), n=REPS, what=f"{variant} ε={eps} mean")
    assert_variance_ratio(means, var, band=0.10, what=f"{variant} ε={eps} variance")


def test_mean_is_unbiased_short() -> None:
    """The default run's version of the test above: one config, fewer repetitions, the same z = 6 mean check."""
    p = MeanParams(epsilon=4.0, lo=0, hi=600)
    n, reps = 96, 1000
    data = np.random.default_rng(7).lognormal(4.5, 0.8, n)
    t = p.t_of(data)
    target = p.lo + 300 * (float(t.mean()) + 1)
    var = 300**2 * float(p.report_variance(t).sum()) / n**2
    means, _ = _per_rep_estimates(p, np.tile(data, reps), reps, seed=3)
    assert_close_normal(float(means.mean()), target, math.sqrt(var / reps), n=reps, what="dhm ε=4 mean")


@pytest.mark.slow
@pytest.mark.parametrize("variant,eps", [("onebit", 1.0), ("dhm", 4.0)])
def test_95_percent_intervals_cover_the_population_mean(variant: str, eps: float) -> None:
    p = MeanParams(epsilon=eps, lo=0, hi=600, variant=variant)
    n = 200
    values = np.random.default_rng(11).exponential(150.0, n * REPS)  # a fresh sample of devices per rep
    truth = 150.0 * (1 - math.exp(-4))  # E[min(X, 600)], X ~ Exp(mean 150)
    means, ses = _per_rep_estimates(p, values, REPS, seed=12)
    covered = np.abs(means - truth) <= 1.959963984540054 * ses
    assert_coverage(covered, nominal=0.95, band=(0.93, 0.97), what=f"{variant} ε={eps} 95% interval")


@pytest.mark.parametrize("variant,eps", [("dhm", 8.0), ("onebit", 2.0)])
def test_estimate_has_mean_sum_count_and_clips_on_the_device(variant: str, eps: float) -> None:
    p = MeanParams(epsilon=eps, lo=0, hi=600, variant=variant)
    rng = np.random.default_rng(5)
    values = np.full(20_000, 1000.0)  # every value above hi: reported as 600
    assert clipped(values, p) == 20_000
    est = estimate(p, fold(p, [privatize_batch(values, p, rng=rng)]))
    assert est.labels == ("mean", "sum", "count")
    mean, total, count = est.counts.tolist()
    assert count == 20_000 and est.stderr[2] == 0
    assert total == pytest.approx(mean * 20_000)
    assert est.stderr[1] == pytest.approx(est.stderr[0] * 20_000)
    assert_close_normal(mean, 600.0, float(est.stderr[0]), n=20_000, what="clipped mean")
    below = estimate(p, fold(p, [privatize_batch(np.full(20_000, -5), p, rng=rng)]))
    assert_close_normal(float(below.counts[0]), 0.0, float(below.stderr[0]), n=20_000, what="clipped at lo")


def test_symbol_moments_match_a_direct_computation() -> None:
    p = MeanParams(epsilon=2, lo=-1, hi=1)
    counts = np.random.default_rng(2).integers(0, 50, p.symbols)
    y = np.repeat(p.debias_values(), counts)
    m, v = symbol_moments(p, counts)
    assert m == pytest.approx(float(y.mean()))
    assert v == pytest.approx(float(y.var(ddof=1)))


@pytest.mark.parametrize("bad", ["12", None, True, float("nan"), b"1"])
def test_values_that_are_not_numbers_raise_the_typed_error(bad: object) -> None:
    p = MeanParams(epsilon=1, lo=0, hi=10)
    with pytest.raises(InvalidValueError):
        privatize(bad, p)
    with pytest.raises(InvalidValueError):
        privatize_batch([1.0, bad], p)


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"lo": 5, "hi": 5}, "hi"),
        ({"lo": 0, "hi": float("inf")}, "hi"),
        ({"lo": "0", "hi": 1}, "lo"),
        ({"lo": 0, "hi": 1, "variant": "laplace"}, "variant"),
        ({"lo": 0, "hi": 1, "variant": "onebit", "window": 3}, "window"),
        ({"lo": 0, "hi": 1, "variant": "dhm", "window": 0, "pm_share": 1}, "window"),
        ({"lo": 0, "hi": 1, "prob_bits": 16}, "prob_bits"),
    ],
)
def test_bad_params_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        MeanParams(epsilon=1, **kwargs)  # type: ignore[arg-type]
    assert info.value.parameter == field


def test_params_round_trip_with_the_chosen_window_and_share_stored() -> None:
    p = MeanParams(epsilon=4, lo=0, hi=10_000)
    d = p.to_dict()
    assert d["variant"] == "dhm" and isinstance(d["window"], int) and isinstance(d["pm_share"], int)
    assert params_from_dict(d) == p
    assert params_from_dict({"mechanism": "mean", "epsilon": 4, "lo": 0, "hi": 10_000}) == p
