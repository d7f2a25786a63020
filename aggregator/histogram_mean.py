"""The mean of a numeric metric from its debiased histogram, with a standard error and an interval.

The estimate is m̂ = Σ_i mid_i·ĉ_i / n over the raw (unbiased) bucket estimates ĉ_i, with mid_i the midpoint
of bucket i. Its variance is aᵀΣa / n² with a = the midpoints and Σ the covariance of the bucket estimates
(:meth:`Mechanism.bucket_covariance`: grr's buckets are negatively correlated, oue's are independent),
evaluated at the Norm-Sub counts (non-negative, summing to n) in place of the unknown true counts.

**Within-bucket assumption.** m̂ is unbiased for the *midpoint mean*: the mean of the reporting devices'
values after each is clipped to [edges[0], edges[−1]] and moved to its bucket's midpoint. It differs from
the mean of the clipped values themselves by at most Σ_i c_i·w_i/2 / n (w_i the bucket widths), which
:attr:`HistogramMean.midpoint_bound` reports from the Norm-Sub counts; the interval covers the midpoint
mean, not that gap. A metric that needs the mean itself should use the ``mean`` mechanism, which is
unbiased for it (up to its 2^−33 quantization). Like the other stderrs, this one is the randomization of
the reports given the devices that reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ldptel.aggregator.percentiles import bucketed
from ldptel.aggregator.postprocess import norm_sub
from ldptel.client import Estimate
from ldptel.client.errors import InvalidParameterError
from ldptel.client.protocol.params import ParamsBase


@dataclass(frozen=True, kw_only=True)
class HistogramMean:
    """Midpoint mean m̂ with its stderr and interval, and the bound on the within-bucket error (module docstring)."""

    estimate: float
    stderr: float
    ci_low: float
    ci_high: float
    midpoint_bound: float

    def row(self) -> dict[str, float]:
        return {"estimate": self.estimate, "stderr": self.stderr, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "midpoint_bound": self.midpoint_bound}


def histogram_mean(params: ParamsBase, est: Estimate) -> HistogramMean:
    """The midpoint mean of a numeric histogram's raw estimate ``est`` (all its buckets, in order)."""
    mech = bucketed(params)
    edges = mech.bucket_edges(params)
    if est.counts.size != edges.size - 1:
        raise InvalidParameterError("estimate", f"the counts of all {edges.size - 1} buckets", est.counts.size)
    n = est.n
    mid = (edges[:-1] + edges[1:]) / 2.0
    mean = float(mid @ est.counts) / n
    consistent = norm_sub(est.counts, total=float(n))
    cov = mech.bucket_covariance(params, consistent, n)
    se = math.sqrt(max(float(mid @ cov @ mid), 0.0)) / n
    bound = float(consistent @ np.diff(edges)) / (2.0 * n)
    half = est.z * se
    return HistogramMean(estimate=mean, stderr=se, ci_low=mean - half, ci_high=mean + half, midpoint_bound=bound)
