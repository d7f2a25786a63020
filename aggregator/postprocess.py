"""Post-processing of unbiased count estimates: a separate, named step (Wang et al., "Locally
Differentially Private Frequency Estimation with Consistency", NDSS 2020).

The raw estimates of every mechanism are unbiased but may be negative or sum to more than the number of
reports n. Post-processing trades that unbiasedness for consistency; the raw estimates and their intervals
are always kept beside its output (:class:`~ldptel.aggregator.query.QueryResult`).

Methods (``PostProcess``):

* ``none``: the raw estimates.
* ``clip``: Base-Pos, each estimate clamped to [0, n].
* ``norm-sub``: Norm-Sub (Wang et al., NDSS 2020). Over a *full* domain (rr, grr) it is the Euclidean
  projection onto the scaled simplex {x ≥ 0, Σx = n}: non-negative estimates summing to n. (The paper's
  iteration — zero the negatives, spread the surplus over the positives, repeat — gives the same point
  whenever the raw estimates sum to n, which rr and grr estimates always do; on other input it can stop at
  a non-optimal point of the simplex, the projection cannot.) Over a *subset* of the domain (candidates
  of a sketch metric) the values outside the subset may hold reports too, so the constraint is Σx ≤ n: the
  projection onto {x ≥ 0, Σx ≤ n}, which is the clipped vector when that already sums to at most n and the
  projection onto Σx = n otherwise.

The projection is the sort-based algorithm (Held, Wolfe & Crowder 1974; Duchi et al. 2008): with u the
estimates sorted in descending order and ρ the largest index with u_ρ − (Σ_{i≤ρ} u_i − n)/ρ > 0, the
result is max(x − θ, 0) with θ = (Σ_{i≤ρ} u_i − n)/ρ. O(d log d), no loop over values.
"""

from __future__ import annotations

from typing import Literal, cast, get_args

import numpy as np

from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms import bucketed
from ldptel.client.protocol.validate import check_choice

PostProcess = Literal["none", "clip", "norm-sub"]
POSTPROCESS_METHODS: tuple[str, ...] = get_args(PostProcess)


def check_method(method: object) -> PostProcess:
    """Validate a post-processing name (``none``, ``clip`` or ``norm-sub``)."""
    return cast(PostProcess, check_choice("postprocess", method, POSTPROCESS_METHODS))


def _as_float(counts: np.ndarray) -> np.ndarray:
    arr = np.asarray(counts, dtype=np.float64)
    if arr.ndim != 1:
        raise InvalidParameterError("counts", "a 1-D array of estimates", f"shape {arr.shape}")
    return arr


def _check_total(total: float) -> float:
    if isinstance(total, bool) or not isinstance(total, (int, float, np.integer, np.floating)) or not total >= 0:
        raise InvalidParameterError("total", "a number >= 0", total)
    return float(total)


def clip(counts: np.ndarray, *, total: float) -> np.ndarray:
    """Base-Pos: every estimate clamped to [0, total]."""
    clipped: np.ndarray = np.clip(_as_float(counts), 0.0, _check_total(total))
    return clipped


def project_simplex(counts: np.ndarray, *, total: float) -> np.ndarray:
    """Euclidean projection of ``counts`` onto {x ≥ 0, Σx = total} (sort-based, vectorized).

    >>> project_simplex(np.array([3.0, -1.0, 0.5]), total=2.0).tolist()
    [2.0, 0.0, 0.0]
    >>> project_simplex(np.array([1.0, 1.0]), total=4.0).tolist()
    [2.0, 2.0]
    """
    return bucketed.project_simplex(_as_float(counts), total=_check_total(total))


def norm_sub(counts: np.ndarray, *, total: float, full_domain: bool = True) -> np.ndarray:
    """Norm-Sub: non-negative estimates that sum to ``total`` (full domain) or at most ``total`` (a subset).

    Computed in closed form as the Euclidean projection onto the scaled simplex (see the module docstring).
    """
    x = _as_float(counts)
    z = _check_total(total)
    if not full_domain:
        clipped: np.ndarray = np.maximum(x, 0.0)
        if clipped.sum() <= z:
            return clipped
    return project_simplex(x, total=z)


def apply(method: PostProcess, counts: np.ndarray, *, total: float, full_domain: bool) -> np.ndarray:
    """Run the named post-processing step; ``none`` returns a float copy of the raw estimates."""
    method = check_method(method)
    if method == "none":
        return _as_float(counts).copy()
    if method == "clip":
        return clip(counts, total=total)
    return norm_sub(counts, total=total, full_domain=full_domain)


__all__ = ["POSTPROCESS_METHODS", "PostProcess", "apply", "check_method", "clip", "norm_sub", "project_simplex"]
