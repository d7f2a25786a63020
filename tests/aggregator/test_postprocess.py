"""Post-processing: Norm-Sub equals its iterative definition, results are non-negative and sum as documented."""

from __future__ import annotations

import numpy as np
import pytest

from ldptel.aggregator import postprocess as pp
from ldptel.client.errors import InvalidParameterError


def norm_sub_iterative(x: np.ndarray, total: float) -> np.ndarray:
    """Norm-Sub as Wang et al. define it: zero the negatives, spread the surplus over the positives, repeat."""
    x = x.astype(np.float64).copy()
    while True:
        x[x < 0] = 0.0
        positive = x > 0
        x[positive] += (total - x.sum()) / positive.sum()
        if (x >= -1e-12).all():
            return np.maximum(x, 0.0)


def test_norm_sub_is_the_iterative_definition(rng: np.random.Generator) -> None:
    """Full-domain raw estimates (rr, grr) sum to n exactly; on such input the two definitions agree."""
    for _ in range(300):
        d = int(rng.integers(2, 60))
        total = float(rng.uniform(1, 1000))
        x = rng.normal(total / d, total / 3, size=d)
        x += (total - x.sum()) / d
        got = pp.norm_sub(x, total=total)
        want = norm_sub_iterative(x, total)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * total)
        assert (got >= 0).all()
        assert got.sum() == pytest.approx(total, rel=1e-12)


def test_projection_is_the_closest_point_of_the_simplex(rng: np.random.Generator) -> None:
    x = rng.normal(0, 5, size=20)
    proj = pp.project_simplex(x, total=10.0)
    # Any other point of the simplex is at least as far from x (sampled check of the optimality).
    others = rng.dirichlet(np.ones(20), size=2000) * 10.0
    assert (np.linalg.norm(others - x, axis=1) >= np.linalg.norm(proj - x) - 1e-9).all()


def test_subset_norm_sub_only_caps_the_sum() -> None:
    x = np.array([50.0, -10.0, 20.0])
    np.testing.assert_array_equal(pp.norm_sub(x, total=100.0, full_domain=False), [50.0, 0.0, 20.0])
    capped = pp.norm_sub(np.array([90.0, 40.0, -5.0]), total=100.0, full_domain=False)
    assert capped.sum() == pytest.approx(100.0) and (capped >= 0).all()
    np.testing.assert_allclose(capped, [75.0, 25.0, 0.0])


def test_clip_and_none() -> None:
    x = np.array([-3.0, 5.0, 120.0])
    np.testing.assert_array_equal(pp.clip(x, total=100), [0.0, 5.0, 100.0])
    out = pp.apply("none", x, total=100, full_domain=True)
    np.testing.assert_array_equal(out, x)
    assert out is not x


def test_bad_method_is_named() -> None:
    with pytest.raises(InvalidParameterError, match="postprocess"):
        pp.apply("norm", np.zeros(3), total=1, full_domain=True)  # type: ignore[arg-type]
