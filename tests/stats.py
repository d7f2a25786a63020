"""Statistical assertions shared by every randomized test.

Tolerances come from theory, never from tuning: a mean must lie within Z = 6 standard errors of its closed
form; a variance ratio within a stated band that is itself at least Z standard errors of the ratio wide
(so the band is honest for the number of repetitions used); a chi-square goodness of fit at α = 1e-6.
Seeds only make failures reproducible: each check would pass unseeded with probability ≥ 1 − 1e-6.
Every failure message prints n, the estimate, the target and the tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Z = 6.0
ALPHA = 1e-6


def assert_close_normal(estimate: float, target: float, se: float, *, n: int, z: float = Z, what: str = "mean") -> None:
    """|estimate − target| ≤ z·se."""
    assert se > 0 and math.isfinite(se), f"{what}: standard error must be positive, got {se}"
    tol = z * se
    assert abs(estimate - target) <= tol, (
        f"{what}: n={n} estimate={estimate:.6g} target={target:.6g} |diff|={abs(estimate - target):.6g} "
        f"> tolerance {tol:.6g} (z={z} × se={se:.6g})"
    )


def assert_mean(samples: np.ndarray, target: float, *, se_per_sample: float | None = None, what: str = "mean") -> None:
    """Sample mean within Z standard errors of ``target`` (se from theory when given, else empirical)."""
    samples = np.asarray(samples, dtype=np.float64)
    n = samples.size
    sd = se_per_sample if se_per_sample is not None else float(samples.std(ddof=1))
    assert_close_normal(float(samples.mean()), target, sd / math.sqrt(n), n=n, what=what)


def assert_variance_ratio(samples: np.ndarray, target_var: float, *, band: float = 0.10, z: float = Z, what: str = "variance") -> None:
    """Empirical variance / target within 1 ± band, with band ≥ z standard errors of the ratio.

    The ratio's standard error is taken as sqrt(2/(n−1)) (normal samples); a test that asks for a band
    narrower than z of those is a design error and fails loudly instead of flaking.
    """
    samples = np.asarray(samples, dtype=np.float64)
    n = samples.size
    se_ratio = math.sqrt(2.0 / (n - 1))
    assert band >= z * se_ratio, (
        f"{what}: a ±{band:.0%} band needs n ≥ {math.ceil(2 * (z / band) ** 2) + 1} repetitions for z={z}; got n={n}"
    )
    ratio = float(samples.var(ddof=1)) / target_var
    assert abs(ratio - 1.0) <= band, (
        f"{what}: n={n} empirical={float(samples.var(ddof=1)):.6g} target={target_var:.6g} ratio={ratio:.4f} "
        f"outside 1 ± {band} (se of ratio {se_ratio:.4f})"
    )


def chi_square_sf(x: float, df: int) -> float:
    """P(χ²(df) > x), from the series of the regularized lower incomplete gamma function."""
    if x <= 0:
        return 1.0
    s, z = df / 2.0, x / 2.0
    term = total = 1.0 / s
    n = 1
    while term > 1e-17 * total:
        term *= z / (s + n)
        total += term
        n += 1
    lower = math.exp(-z + s * math.log(z) - math.lgamma(s)) * total
    return max(0.0, 1.0 - lower)


def assert_chi_square(observed: Sequence[int] | np.ndarray, probabilities: Sequence[float] | np.ndarray, *, what: str = "distribution") -> None:
    """Goodness of fit of counts to exact cell probabilities, α = 1e-6. Every expected count must be ≥ 5."""
    obs = np.asarray(observed, dtype=np.float64)
    probs = np.asarray(probabilities, dtype=np.float64)
    assert obs.shape == probs.shape, f"{what}: {obs.shape} cells observed, {probs.shape} expected"
    assert abs(probs.sum() - 1.0) < 1e-9, f"{what}: probabilities sum to {probs.sum()}"
    n = obs.sum()
    expected = n * probs
    assert expected.min() >= 5, f"{what}: smallest expected count {expected.min():.2f} < 5; use more samples"
    stat = float(((obs - expected) ** 2 / expected).sum())
    df = obs.size - 1
    p_value = chi_square_sf(stat, df)
    assert p_value >= ALPHA, f"{what}: n={int(n)} chi2={stat:.2f} df={df} p={p_value:.3g} < alpha={ALPHA}"


def assert_coverage(covered: np.ndarray, *, nominal: float, band: tuple[float, float], z: float = Z, what: str = "coverage") -> None:
    """Fraction of intervals covering the truth lies in ``band``, and the band is ≥ z·se wide on each side."""
    covered = np.asarray(covered, dtype=bool)
    n = covered.size
    se = math.sqrt(nominal * (1 - nominal) / n)
    lo, hi = band
    assert nominal - lo >= z * se and hi - nominal >= z * se, (
        f"{what}: band {band} is narrower than z={z} × se={se:.4f} around {nominal}; use more intervals (n={n})"
    )
    frac = float(covered.mean())
    assert lo <= frac <= hi, f"{what}: n={n} coverage={frac:.4f} outside {band} (nominal {nominal}, se {se:.4f})"
