"""The math of the :class:`~ldptel.client.mechanisms.capabilities.Bucketed` capability (numeric histograms):
percentiles with intervals, and the midpoint mean with its standard error. Both read only what ``Bucketed`` gives
(:meth:`bucket_edges`, :meth:`prefix_sums`, :meth:`bucket_covariance`), so a new bucketed mechanism has them with
no edit here. (Moved from ``ldptel.aggregator.percentiles`` and ``ldptel.aggregator.histogram_mean``, which
re-export these names.)

Percentiles
-----------

* Point estimate: the raw prefix sums S_J at the bucket edges (each from the shorter walk, with its variance:
  :meth:`Mechanism.prefix_sums`), fitted by weighted isotonic regression (pool adjacent violators, weights
  1/Var S_J, S_0 = 0 and S_d = n pinned) into a monotone CDF, clipped to [0, 1], and inverted inside the
  bucket: geometrically on log-spaced edges (a log bucket's values are spread evenly in log x, not in x),
  linearly otherwise. Monotone in the asked level and always within [edges[0], edges[−1]].
  Why not Norm-Sub the counts first (ldp-math-2's default, and ours until issue 24): Norm-Sub zeroes the
  negative buckets and shifts the positive ones down evenly, so noise in the many nearly empty tail buckets
  keeps positive mass above the true p99 and drags it up — 2.9× the truth at ε = 1 and 1.8× at ε = 2 on
  Pareto(1.1) file sizes, n = 50,000 (the isotonic fit: 1.40× and 1.10×, and ≤ 1.05× wherever the interval
  below says the data can resolve the percentile). ``tests/bench/bench_percentiles.py`` prints both.
* Interval, by test inversion on the raw prefix sums (never a post-processed CDF, which is biased): at each
  edge e_J the one-sided tests of F(e_J) ≥ level (rejected when (S_J + z·sd_J)/n < level) and of
  F(e_J) < level (rejected when (S_J − z·sd_J)/n ≥ level). The lower end is the edge below the *first* edge
  whose F ≥ level is not rejected; the upper end the edge above the *last* edge whose F < level is not
  rejected. Each end then fails only if the one test at the true percentile's own bucket edge rejects (≤ α/2
  each), so the coverage of the reporting devices' own percentile is at least nominal (the randomization of
  their reports; not sampling the devices from a larger population). The earlier rule (the *largest* edge
  rejecting F ≥ level) failed whenever any edge above the percentile rejected, which a flat tail makes likely:
  93.5–94% coverage for p99 at ε = 1. The interval is at least one bucket wide.
* Resolution: when the interval spans more than ``max_span`` (default a quarter) of the buckets, n and ε
  cannot locate the percentile: :attr:`Percentile.resolved` is False and the outputs show the interval with
  no point (``estimate`` None in rows), saying so. (One bucket is always allowed.)

Midpoint mean
-------------
The mean of a numeric metric from its debiased histogram, with a standard error and an interval.

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
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms.capabilities import Bucketed, require
from ldptel.client.mechanisms.registry import mechanism_of
from ldptel.client.mechanisms.state import Estimate
from ldptel.client.protocol.params import ParamsBase
from ldptel.client.protocol.validate import check_number

DEFAULT_PERCENTILES = (50.0, 90.0, 99.0)
MAX_SPAN = 0.25  # an interval over more than this share of the buckets leaves a percentile unresolved
UNRESOLVED_NOTE = "unresolved: its interval spans more than {share:.0%} of the buckets, so n and ε cannot locate it"


@dataclass(frozen=True, kw_only=True)
class Percentile:
    """The ``percentile``-th percentile (0–100): the isotonic-CDF point estimate, the test-inversion interval,
    and whether the interval is narrow enough (``resolved``) for the point to be shown (module docstring)."""

    percentile: float
    estimate: float
    ci_low: float
    ci_high: float
    resolved: bool = True
    buckets: int = 1  # buckets the interval spans

    @property
    def shown(self) -> float | None:
        """The point estimate to show: None when the percentile is unresolved."""
        return self.estimate if self.resolved else None

    def row(self) -> dict[str, Any]:
        out: dict[str, Any] = {"percentile": self.percentile, "estimate": self.shown, "ci_low": self.ci_low,
                               "ci_high": self.ci_high, "resolved": self.resolved}
        if not self.resolved:
            out["note"] = f"p{self.percentile:g} {UNRESOLVED_NOTE.format(share=MAX_SPAN)}"
        return out


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


def isotonic(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to ``y`` in weighted least squares (pool adjacent violators)."""
    values: list[float] = []
    weights: list[float] = []
    sizes: list[int] = []
    for yi, wi in zip(np.asarray(y, dtype=np.float64).tolist(), np.asarray(w, dtype=np.float64).tolist(), strict=True):
        values.append(yi)
        weights.append(wi)
        sizes.append(1)
        while len(values) > 1 and values[-2] > values[-1]:
            wsum = weights[-2] + weights[-1]
            merged = (values[-2] * weights[-2] + values[-1] * weights[-1]) / wsum
            size = sizes[-2] + sizes[-1]
            del values[-1], weights[-1], sizes[-1]
            values[-1], weights[-1], sizes[-1] = merged, wsum, size
    return np.repeat(np.array(values), sizes)


def log_spaced(edges: np.ndarray) -> bool:
    """True when the edges after the first are positive with one common ratio (``bucket_edges(scale="log")``,
    whose first edge may be 0)."""
    arr = np.asarray(edges)
    if arr.dtype == np.float64 and arr.ndim == 1:  # a metric's edges, asked for every percentile query: kept
        return _log_spaced_float64(arr.tobytes())
    return _log_spaced(arr)


@lru_cache(maxsize=64)
def _log_spaced_float64(edges: bytes) -> bool:
    return _log_spaced(np.frombuffer(edges, dtype=np.float64))


def _log_spaced(edges: np.ndarray) -> bool:
    tail = edges[1:]
    if tail.size < 3 or tail[0] <= 0:
        return False
    ratios = tail[1:] / tail[:-1]
    return bool(np.allclose(ratios, ratios[0], rtol=1e-9)) and ratios[0] > 1.0 + 1e-12


def invert_cdf(cdf: np.ndarray, edges: np.ndarray, qs: np.ndarray, *, geometric: bool) -> np.ndarray:
    """x with CDF(x) = q for a monotone CDF given at the edges, interpolated inside the bucket (geometrically
    when asked and the bucket's lower edge is positive)."""
    b = np.clip(np.searchsorted(cdf, qs, side="left") - 1, 0, edges.size - 2)  # cdf[b] < q ≤ cdf[b+1]
    mass = cdf[b + 1] - cdf[b]
    share = np.clip(np.where(mass > 0, (qs - cdf[b]) / np.where(mass > 0, mass, 1.0), 0.0), 0.0, 1.0)
    lo, hi = edges[b], edges[b + 1]
    linear = lo + share * (hi - lo)
    if geometric:
        pos = lo > 0
        linear = np.where(pos, np.where(pos, lo, 1.0) * (hi / np.where(pos, lo, 1.0)) ** share, linear)
    out: np.ndarray = np.clip(linear, edges[0], edges[-1])
    return out


def percentiles(
    params: ParamsBase, est: Estimate, levels: Sequence[object] = DEFAULT_PERCENTILES, *, max_span: float = MAX_SPAN
) -> tuple[Percentile, ...]:
    """The asked percentiles of a numeric histogram's raw estimate ``est`` (all its buckets, in order)."""
    mech = bucketed(params)
    edges = mech.bucket_edges(params)
    check_number("max_span", max_span, 0.0, 1.0)
    qs = np.array(check_percentiles(levels)) / 100.0
    n = est.n
    d = edges.size - 1
    if est.counts.size != d:
        raise InvalidParameterError("estimate", f"the counts of all {d} buckets", est.counts.size)
    s, var = mech.prefix_sums(params, est.counts, n)
    # point: invert the isotonic fit of the raw CDF (S_0 = 0 and S_d = n are exact: pinned by a huge weight)
    weights = 1.0 / np.maximum(var, 1e-12 * max(n, 1) ** 2)
    weights[0] = weights[-1] = 1e30
    raw = s / max(n, 1)
    raw[0], raw[-1] = 0.0, 1.0
    cdf = np.maximum.accumulate(np.clip(isotonic(raw, weights), 0.0, 1.0))
    point = invert_cdf(cdf, edges, qs, geometric=log_spaced(edges))
    # interval: invert the one-sided tests on the raw prefix sums
    sd = np.sqrt(var)
    upper_f, lower_f = (s + est.z * sd) / n, (s - est.z * sd) / n
    out = []
    for q, x in zip(qs.tolist(), point.tolist(), strict=True):
        kept_ge = np.flatnonzero(upper_f >= q)  # edges where F ≥ q is not rejected
        kept_lt = np.flatnonzero(lower_f < q)  # edges where F < q is not rejected
        j_lo = int(kept_ge[0]) - 1 if kept_ge.size else d - 1
        j_hi = int(kept_lt[-1]) + 1 if kept_lt.size else 1
        j_lo, j_hi = max(j_lo, 0), min(j_hi, d)
        j_hi = max(j_hi, j_lo + 1)
        span = j_hi - j_lo
        lo, hi = float(edges[j_lo]), float(edges[j_hi])
        out.append(Percentile(percentile=100.0 * q, estimate=min(max(float(x), lo), hi), ci_low=lo, ci_high=hi,
                              resolved=span <= max(1.0, max_span * d), buckets=span))
    return tuple(out)


# ---------------------------------------------------------------------------------------- the midpoint mean
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
    return midpoint_mean_parts(params, est)[0]


def midpoint_mean_parts(params: ParamsBase, est: Estimate) -> tuple[HistogramMean, np.ndarray, np.ndarray]:
    """:func:`histogram_mean`, with the bucket midpoints and the Norm-Sub counts it computed (the hypothesis tests
    of :mod:`ldptel.aggregator.inference` need both too)."""
    mech = bucketed(params)
    edges = mech.bucket_edges(params)
    if est.counts.size != edges.size - 1:
        raise InvalidParameterError("estimate", f"the counts of all {edges.size - 1} buckets", est.counts.size)
    n = est.n
    mid = (edges[:-1] + edges[1:]) / 2.0
    mean = float(mid @ est.counts) / n
    consistent = project_simplex(est.counts, total=float(n))  # Norm-Sub over the full domain
    cov = mech.bucket_covariance(params, consistent, n)
    se = math.sqrt(max(float(mid @ cov @ mid), 0.0)) / n
    bound = float(consistent @ np.diff(edges)) / (2.0 * n)
    half = est.z * se
    hm = HistogramMean(estimate=mean, stderr=se, ci_low=mean - half, ci_high=mean + half, midpoint_bound=bound)
    return hm, mid, consistent


def project_simplex(counts: np.ndarray, *, total: float) -> np.ndarray:
    """Euclidean projection of ``counts`` onto {x ≥ 0, Σx = total} (sort-based, vectorized).

    >>> project_simplex(np.array([3.0, -1.0, 0.5]), total=2.0).tolist()
    [2.0, 0.0, 0.0]
    >>> project_simplex(np.array([1.0, 1.0]), total=4.0).tolist()
    [2.0, 2.0]
    """
    x = np.asarray(counts, dtype=np.float64)
    z = float(total)
    if x.size == 0:
        return x.copy()
    u = np.sort(x)[::-1]
    css = u.cumsum() - z
    ind = np.arange(1, x.size + 1, dtype=np.float64)
    positive = (u - css / ind > 0).nonzero()[0]
    rho = int(positive[-1]) if positive.size else 0
    theta = css[rho] / (rho + 1)
    projected: np.ndarray = np.maximum(x - theta, 0.0)
    return projected
