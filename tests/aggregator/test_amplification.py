"""The central ε calculator (ldp-math-2 §5): the reference table to 3 decimals, monotonicity, ε ≤ ε₀, applicability."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldptel.aggregator import amplification
from ldptel.aggregator.amplification import (
    GRID,
    Central,
    NotApplicable,
    central_for_day,
    central_for_n,
    compose_days,
    default_delta,
    fmt_closed_form,
    shuffle_epsilon,
)
from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms.cms import CmsParams
from ldptel.client.mechanisms.rr import RrParams
from ldptel.client.protocol.specs import MetricSpec

# ldp-math-2 §5, "numerical (exact reduction)" column, δ = 10⁻⁶; n = 10⁴ at ε₀ = 8 is "8 (none)"
TABLE = [
    (10**4, 1, 0.053), (10**4, 2, 0.155), (10**4, 4, 0.601), (10**4, 8, 8.000),
    (10**5, 1, 0.015), (10**5, 2, 0.045), (10**5, 4, 0.170), (10**5, 8, 2.19),
    (10**6, 1, 0.004), (10**6, 2, 0.013), (10**6, 4, 0.049), (10**6, 8, 0.445),
]
CLOSED_FORM = [  # "FMT Thm 3.1" column: None is "invalid"
    (10**4, 1, 0.214), (10**4, 2, 0.501), (10**4, 4, None), (10**5, 4, 0.535), (10**5, 8, None), (10**6, 8, 1.003),
]


@pytest.mark.parametrize(("n", "eps0", "expected"), TABLE)
def test_reference_table_to_three_decimals(n: int, eps0: float, expected: float) -> None:
    got = shuffle_epsilon(eps0, n, 1e-6)
    decimals = 2 if expected == 2.19 else 3  # the table prints 2.19
    assert round(got, decimals) == pytest.approx(expected, abs=1e-12), got


def test_apples_figure() -> None:
    """Apple: 100,000 reports at ε₀ = 4, δ = 10⁻⁶ → ε ≈ 0.17; the reference's code gives 0.1698, inside Apple's
    bracket [0.1675, 0.1728]."""
    got = shuffle_epsilon(4, 100_000, 1e-6)
    assert 0.1675 <= got <= 0.1728
    assert round(got, 4) == 0.1698


@pytest.mark.parametrize(("n", "eps0", "expected"), CLOSED_FORM)
def test_closed_form_column(n: int, eps0: float, expected: float | None) -> None:
    got = fmt_closed_form(eps0, n, 1e-6)
    assert (got is None) if expected is None else round(got, 3) == expected  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(eps0=st.floats(0.05, 10.0), n1=st.integers(1, 400_000), n2=st.integers(1, 400_000),
       delta=st.sampled_from([1e-4, 1e-6, 1e-9]))
def test_monotone_in_n_and_never_above_eps0(eps0: float, n1: int, n2: int, delta: float) -> None:
    lo, hi = sorted((n1, n2))
    a, b = shuffle_epsilon(eps0, lo, delta), shuffle_epsilon(eps0, hi, delta)
    assert b <= a
    assert 0 <= b <= a <= eps0


@settings(max_examples=60, deadline=None, derandomize=True)
@given(e1=st.floats(0.05, 10.0), e2=st.floats(0.05, 10.0), n=st.integers(1, 400_000),
       delta=st.sampled_from([1e-4, 1e-6, 1e-9]))
def test_monotone_in_eps0(e1: float, e2: float, n: int, delta: float) -> None:
    lo, hi = sorted((e1, e2))
    a, b = shuffle_epsilon(lo, n, delta), shuffle_epsilon(hi, n, delta)
    assert a <= b <= hi and a <= lo


@pytest.mark.parametrize(("eps0", "n", "delta"), [(4, 100_000, 1e-6), (1, 10**6, 1e-7), (8, 10**4, 1e-6),
                                                 (0.05, 400_000, 1e-9), (10, 400_000, 1e-4), (2, 1000, 1e-6)])
def test_grid_resolution_and_upper_bound(eps0: float, n: int, delta: float) -> None:
    """The answer is a multiple of GRID whose divergence meets δ, and one GRID lower does not: the smallest such
    point, whatever the root finder did on the way (it only guides the search)."""
    got = shuffle_epsilon(eps0, n, delta)
    assert 0 < got < eps0
    i = round(got / GRID)
    assert got == i * GRID
    c, weight, budget = amplification._clones(float(eps0), n, delta)
    assert amplification._divergence(got, eps0, c, weight) <= budget < amplification._divergence((i - 1) * GRID, eps0, c, weight)


def test_an_epsilon0_where_rounding_leaves_no_amplification_is_answered_not_raised() -> None:
    """At ε₀ = 30 with 10⁷ reports the computed divergence stays above δ up to ε₀ (rounding in e^{ε₀}·(1 − p)):
    the bound is ε₀ itself, and ``plan`` says the bound does not apply. It raised ValueError from the root finder."""
    assert shuffle_epsilon(30, 10**7, 1e-6) == 30.0
    assert shuffle_epsilon(20.23712733080727, 161_285_999, 1e-9) == 20.23712733080727
    assert isinstance(central_for_n(_spec(eps=30.0), 10**7), NotApplicable)


def test_the_binomial_ufuncs_are_scipy_stats_own() -> None:
    """The central ε takes the binomial's ppf, isf and pmf from scipy.special (scipy.stats costs 0.7 s to import):
    the very numbers scipy.stats.binom gives, over the n and e^{−ε₀} the calculator uses."""
    from scipy.stats import binom

    ppf, isf, pmf = amplification._binomial()
    for n in (1, 2, 999, 10**5, 10**7, 10**9):
        for q in (math.exp(-0.05), math.exp(-1), math.exp(-4), math.exp(-12), math.exp(-30)):
            with warnings.catch_warnings():  # Boost warns of its inverse at e^{-30} (both ways alike)
                warnings.simplefilter("ignore", RuntimeWarning)
                lo, hi = binom.ppf(5e-14, n, q), binom.isf(5e-14, n, q)
                assert (ppf(5e-14, n, q), isf(5e-14, n, q)) == (lo, hi)
            c = np.arange(int(lo), int(hi) + 1, dtype=np.float64)[:3000]
            assert np.array_equal(pmf(c, n, q), binom.pmf(c, n, q))


@pytest.mark.parametrize("bad", [(0, 10, 1e-6), (-1, 10, 1e-6), (4, 0, 1e-6), (4, 10, 0.0), (4, 10, 1.0),
                                 (math.inf, 10, 1e-6), (4, 2.5, 1e-6), (True, 10, 1e-6)])
def test_bad_arguments_name_the_parameter(bad: tuple[float, float, float]) -> None:
    with pytest.raises(InvalidParameterError):
        shuffle_epsilon(*bad)  # type: ignore[arg-type]


def _spec(mech: str = "rr", eps: float = 4.0, per_day: int = 1) -> MetricSpec:
    params = RrParams(epsilon=eps) if mech == "rr" else CmsParams(epsilon=eps, k=16, m=64)
    return MetricSpec(name="m", params=params, reports_per_day=per_day)


def test_too_few_reports_is_not_applicable() -> None:
    spec = _spec("cms", 4.0)
    for n in (0, 1):
        out = central_for_n(spec, n)
        assert isinstance(out, NotApplicable) and out.condition == "too_few_reports"
    out = central_for_n(spec, 50)  # 50 reports at ε₀ = 4: e^{-4}·49 ≈ 0.9 clones, no gain
    assert isinstance(out, NotApplicable) and out.condition == "too_few_reports" and "no central bound" in out.reason
    assert isinstance(central_for_n(spec, 5_000, n_min=10_000), NotApplicable)
    ok = central_for_n(spec, 100_000)
    assert isinstance(ok, Central) and ok.delta == 1e-6
    assert ok.epsilon == shuffle_epsilon(spec.effective_epsilon, 100_000, 1e-6) and round(ok.epsilon, 2) == 0.17


def test_sketch_eps0_is_the_whole_report_and_r_reports_one_randomizer() -> None:
    """cms: ε₀ is the report's effective ε (≈ 4), not the per-bit ε/2; 3 reports a day count as one 3·ε₀ randomizer."""
    spec = _spec("cms", 4.0)
    one = central_for_n(spec, 100_000)
    assert isinstance(one, Central) and one.epsilon0 == spec.effective_epsilon and one.epsilon0 > 3.9
    spec3 = _spec("cms", 2.0, per_day=3)
    three = central_for_n(spec3, 300_000)
    assert isinstance(three, Central) and three.epsilon0 == pytest.approx(3 * spec3.effective_epsilon) and three.n == 100_000
    assert three.epsilon == shuffle_epsilon(three.epsilon0, 100_000, default_delta(100_000))


def test_delta_stays_well_below_one_over_n() -> None:
    assert default_delta(100_000) == 1e-6
    assert default_delta(10_000_000) == pytest.approx(1e-8)


class Stats:
    def __init__(self, reports: int, smallest: int, n_min: int, unshuffled: int = 0, mixed: bool = False) -> None:
        self.reports, self.smallest_block, self.n_min, self.unshuffled, self.mixed_versions = (
            reports, smallest, n_min, unshuffled, mixed)


def test_day_applicability_reasons() -> None:
    spec = _spec("rr", 2.0)
    day = "2026-01-02"
    cases = [
        (None, "not_shuffled"),
        (Stats(90_000, 50_000, 1000), "not_shuffled"),  # 10,000 folded reports never went through the shuffle
        (Stats(100_000, 50_000, 1000, unshuffled=3), "not_shuffled"),
        (Stats(100_000, 500, 1000), "not_shuffled"),  # a block released under n_min
        (Stats(100_000, 50_000, 1000, mixed=True), "mixed_versions"),
    ]
    for stats, condition in cases:
        out = central_for_day(spec, day, 100_000, stats)
        assert isinstance(out, NotApplicable) and out.condition == condition, (stats, out)
        assert "\n" not in out.reason and out.to_dict()["applicable"] is False
    ok = central_for_day(spec, day, 100_000, Stats(100_000, 40_000, 1000))
    assert isinstance(ok, Central) and ok.n == 40_000  # the smallest block, not the day's total
    big = central_for_day(spec, day, 10_000_000, Stats(10_000_000, 40_000, 1000))
    assert isinstance(big, Central) and big.delta == pytest.approx(1e-8)  # δ from the day's 10⁷ reports, not the block
    assert ok.epsilon0 == spec.report_charge > spec.effective_epsilon  # rr: a permanent RR, ε₀ = ε_irr
    assert ok.epsilon == shuffle_epsilon(spec.report_charge, 40_000, 1e-6)


def test_range_composition_sums_days_and_fails_with_any_day() -> None:
    spec = _spec("rr", 2.0)
    a = central_for_day(spec, "2026-01-01", 10_000, Stats(10_000, 10_000, 1000))
    b = central_for_day(spec, "2026-01-02", 20_000, Stats(20_000, 20_000, 1000))
    assert isinstance(a, Central) and isinstance(b, Central)
    both = compose_days({"2026-01-01": a, "2026-01-02": b})
    assert isinstance(both, Central) and both.days == 2
    assert both.epsilon == pytest.approx(a.epsilon + b.epsilon) and both.delta == pytest.approx(a.delta + b.delta)
    bad = compose_days({"2026-01-01": a, "2026-01-03": central_for_day(spec, "2026-01-03", 5, None)})
    assert isinstance(bad, NotApplicable) and bad.reason.startswith("day 2026-01-03:")
