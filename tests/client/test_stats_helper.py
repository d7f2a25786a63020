"""The statistical helper must be able to fail: each assertion is checked on a case it must reject."""

import numpy as np
import pytest

from tests.stats import (
    assert_chi_square,
    assert_close_normal,
    assert_coverage,
    assert_variance_ratio,
    chi_square_sf,
)


def test_close_normal_rejects_a_seven_se_miss() -> None:
    assert_close_normal(10.0 + 5.9, 10.0, 1.0, n=100)
    with pytest.raises(AssertionError, match="n=100"):
        assert_close_normal(10.0 + 7.0, 10.0, 1.0, n=100)


def test_variance_ratio_requires_enough_repetitions_and_rejects_a_wrong_variance() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(0, 2.0, 8000)
    assert_variance_ratio(x, 4.0)
    with pytest.raises(AssertionError, match="ratio"):
        assert_variance_ratio(x, 4.0 * 1.25)
    with pytest.raises(AssertionError, match="repetitions"):
        assert_variance_ratio(x[:1000], 4.0)


def test_chi_square_sf_matches_textbook_quantiles() -> None:
    # 95% quantiles from every chi-square table: df=1 -> 3.841, df=10 -> 18.307, df=100 -> 124.342
    assert chi_square_sf(3.841, 1) == pytest.approx(0.05, abs=2e-4)
    assert chi_square_sf(18.307, 10) == pytest.approx(0.05, abs=2e-4)
    assert chi_square_sf(124.342, 100) == pytest.approx(0.05, abs=2e-4)
    # and the exact closed form for df=2: P(X > x) = exp(-x/2)
    assert chi_square_sf(30.0, 2) == pytest.approx(np.exp(-15.0), rel=1e-9)


def test_chi_square_rejects_a_biased_die() -> None:
    rng = np.random.default_rng(1)
    fair = np.bincount(rng.integers(0, 6, 60000), minlength=6)
    assert_chi_square(fair, np.full(6, 1 / 6))
    biased = np.bincount(rng.choice(6, 60000, p=[0.2, 0.16, 0.16, 0.16, 0.16, 0.16]), minlength=6)
    with pytest.raises(AssertionError, match="chi2"):
        assert_chi_square(biased, np.full(6, 1 / 6))


def test_coverage_band_must_be_wide_enough() -> None:
    covered = np.ones(6000, dtype=bool)
    covered[:300] = False
    assert_coverage(covered, nominal=0.95, band=(0.93, 0.97))
    with pytest.raises(AssertionError, match="coverage"):
        assert_coverage(np.ones(6000, dtype=bool), nominal=0.95, band=(0.93, 0.97))
    with pytest.raises(AssertionError, match="narrower"):
        assert_coverage(covered[:500], nominal=0.95, band=(0.93, 0.97))
