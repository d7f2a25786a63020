"""Percentiles of a numeric histogram, with intervals (ldp-math-2 §2.3).

* Point estimate: Norm-Sub the raw bucket counts (non-negative, summing to n: :func:`postprocess.norm_sub`),
  cumulate them into a monotone CDF at the bucket edges, and invert it with linear interpolation inside the
  bucket. Monotone in the asked level and always within [edges[0], edges[−1]].
* Interval, by test inversion on the *raw* prefix sums S_J at the edges (never the Norm-Sub'd ones, which are
  biased), with their variances from the mechanism (:meth:`Mechanism.prefix_sums`): the lower end is the
  largest edge with (S_J + z·sd_J)/n < level, the upper end the smallest edge with (S_J − z·sd_J)/n ≥ level.
  The interval is at least one bucket wide and, at bucket resolution, conservative: its coverage of the
  reporting devices' own percentile is at least the nominal level (the randomization of their reports; it
  does not include sampling the devices from a larger population).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldptel.aggregator.postprocess import norm_sub
from ldptel.client import Estimate
from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms import Bucketed, mechanism_of
from ldptel.client.mechanisms.capabilities import require
from ldptel.client.protocol.params import ParamsBase
from ldptel.client.protocol.validate import check_number

DEFAULT_PERCENTILES = (50.0, 90.0, 99.0)


@dataclass(frozen=True, kw_only=True)
class Percentile:
    """The ``percentile``-th percentile (0–100): Norm-Sub point estimate and the test-inversion interval."""

    percentile: float
    estimate: float
    ci_low: float
    ci_high: float

    def row(self) -> dict[str, float]:
        return {"percentile": self.percentile, "estimate": self.estimate, "ci_low": self.ci_low, "ci_high": self.ci_high}


def bucketed(params: ParamsBase) -> Bucketed[Any, Any]:
    """The mechanism of a numeric histogram's params (InvalidParameterError for any other)."""
    return require(mechanism_of(params), Bucketed, "a numeric histogram")  # type: ignore[type-abstract]  # mypy#4717


def bucket_edges(params: ParamsBase) -> np.ndarray:
    """The d + 1 bucket edges of a numeric histogram's params."""
    return bucketed(params).bucket_edges(params)


def check_percentiles(levels: Sequence[object]) -> tuple[float, ...]:
    if isinstance(levels, (str, bytes)) or len(levels) == 0:
        raise InvalidParameterError("percentiles", "a non-empty list of numbers in (0, 100)", levels)
    return tuple(check_number("percentiles", v, 0.0, 100.0, open_interval=True) for v in levels)


def percentiles(params: ParamsBase, est: Estimate, levels: Sequence[object] = DEFAULT_PERCENTILES) -> tuple[Percentile, ...]:
    """The asked percentiles of a numeric histogram's raw estimate ``est`` (all its buckets, in order)."""
    mech = bucketed(params)
    edges = mech.bucket_edges(params)
    qs = np.array(check_percentiles(levels)) / 100.0
    n = est.n
    if est.counts.size != edges.size - 1:
        raise InvalidParameterError("estimate", f"the counts of all {edges.size - 1} buckets", est.counts.size)
    # point: invert the Norm-Sub CDF
    cdf = np.concatenate(([0.0], np.cumsum(norm_sub(est.counts, total=float(n))))) / n
    cdf = np.maximum.accumulate(np.minimum(cdf, 1.0))
    b = np.clip(np.searchsorted(cdf, qs, side="left") - 1, 0, edges.size - 2)  # cdf[b] < q ≤ cdf[b+1]
    mass = cdf[b + 1] - cdf[b]
    share = np.where(mass > 0, (qs - cdf[b]) / np.where(mass > 0, mass, 1.0), 0.0)
    point = np.clip(edges[b] + np.clip(share, 0.0, 1.0) * (edges[b + 1] - edges[b]), edges[0], edges[-1])
    # interval: invert the test on the raw prefix sums
    s, var = mech.prefix_sums(params, est.counts, n)
    sd = np.sqrt(var)
    upper_f, lower_f = (s + est.z * sd) / n, (s - est.z * sd) / n
    out = []
    for q, x in zip(qs.tolist(), point.tolist(), strict=True):
        below = np.flatnonzero(upper_f < q)
        above = np.flatnonzero(lower_f >= q)
        lo = float(edges[below[-1]]) if below.size else float(edges[0])
        hi = float(edges[above[0]]) if above.size else float(edges[-1])
        out.append(Percentile(percentile=100.0 * q, estimate=float(x), ci_low=lo, ci_high=max(hi, lo)))
    return tuple(out)
