"""Histogram of a number over declared bucket edges: bucketize on the device, then grr or OUE over the buckets.

A value is clipped to [edges[0], edges[−1]] on the device and replaced by its bucket b ∈ [0, d) (bucket i is
[edges[i], edges[i+1]), the last one closed). The bucket is privatized as a categorical value: grr over the d
buckets when d < 3e^ε + 2, else optimized unary encoding (Wang, Blocki, Li, Jha, USENIX Security 2017), by
grr's own code path (:func:`ldptel.client.mechanisms.grr.privatize_codes`, :class:`GrrParams`) or the unary
rows of oue-cms with one row and the bucket as the hot bit (:func:`ldptel.client.mechanisms.cms.unary_bits`,
:class:`OueCmsParams` with k = 1 and m the next power of two ≥ d; the padding bits are noise, never hot).
Both are exact integer-threshold samplers, so ε_eff is the inner params' and is never above ε.

Counts: ĉ_i = (Y_i − n·q)/(p − q), Var ĉ_i = n·q(1−q)/(p−q)² + c_i(1−p−q)/(p−q) (ldp-math-2 §2.1). The state
is the exact integer count Y of each bucket (grr) or of each unary bit (oue).

Prefix sums for percentile intervals (:meth:`NumHistogram.prefix_sums`): S_J = Σ_{i<J} ĉ_i for J = 0..d with
* grr: Var S_J = [F_J·P₁(1−P₁) + (n−F_J)·P₀(1−P₀)]/(p−q)², P₁ = p + (J−1)q, P₀ = Jq (S_d = n exactly);
* oue: independent bits, so S_J is a random walk: Var = [J·n·q(1−q) + F_J(p−q)(1−p−q)]/(p−q)², or the
  same over the d − J buckets above J when that walk is shorter (S_J = n − Σ_{i≥J} ĉ_i).

Covariance of the bucket estimates (:meth:`NumHistogram.bucket_covariance`, for linear functionals such as the
mean): the diagonal is Var ĉ_i above; off it, grr's buckets compete for each report,
Cov(ĉ_i, ĉ_j) = −[n·q² + q(p−q)(c_i + c_j)]/(p−q)², and oue's bits are independent (0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from ldptel.client.errors import EmptyStateError, InvalidParameterError, InvalidValueError
from ldptel.client.mechanisms.base import Column, ReportBatch, Values
from ldptel.client.mechanisms.capabilities import Bucketed
from ldptel.client.mechanisms.cms import UnaryBatch, unary_bits
from ldptel.client.mechanisms.cms import fold as unary_fold
from ldptel.client.mechanisms.grr import GRR, GrrParams, privatize_codes, recommend_mechanism
from ldptel.client.mechanisms.mean import as_numbers, number_of
from ldptel.client.mechanisms.oue_cms import OueCmsParams
from ldptel.client.mechanisms.state import Estimate, SketchState
from ldptel.client.protocol.params import ParamsBase, check_epsilon
from ldptel.client.protocol.rng import check_rng
from ldptel.client.protocol.validate import check_choice, check_int, check_number

MAX_BUCKETS = 1024
MAX_ABS_EDGE = 1e15
ENCODINGS = ("auto", "grr", "oue")
SCALES = ("linear", "log")
LOG_FLOOR = 1e-3  # log edges from lo = 0: the first bucket is [0, hi·LOG_FLOOR)


def bucket_edges(lo: float, hi: float, buckets: int, *, scale: str = "linear") -> tuple[float, ...]:
    """d + 1 edges over [lo, hi]: equal widths (linear), or equal ratios (log: lo > 0, or lo = 0 with a first
    bucket [0, hi·10⁻³))."""
    lo = check_number("lo", lo, -MAX_ABS_EDGE, MAX_ABS_EDGE)
    hi = check_number("hi", hi, -MAX_ABS_EDGE, MAX_ABS_EDGE)
    check_int("buckets", buckets, 2, MAX_BUCKETS)
    check_choice("scale", scale, SCALES)
    if not hi > lo:
        raise InvalidParameterError("hi", f"a number above lo = {lo:g}", hi)
    if scale == "linear":
        return tuple(float(e) for e in np.linspace(lo, hi, buckets + 1))
    if lo < 0:
        raise InvalidParameterError("lo", "≥ 0 for log-spaced buckets", lo)
    if lo == 0:
        return (0.0, *(float(e) for e in np.geomspace(hi * LOG_FLOOR, hi, buckets)))
    return tuple(float(e) for e in np.geomspace(lo, hi, buckets + 1))


@lru_cache(maxsize=64)
def _labels(edges: tuple[float, ...]) -> tuple[str, ...]:
    """``[a, b)`` per bucket (the last closed), to 6 significant digits, or 17 where 6 would repeat a label."""
    for digits in (6, 17):
        out = tuple(f"[{a:.{digits}g}, {b:.{digits}g}{']' if i == len(edges) - 2 else ')'}"
                    for i, (a, b) in enumerate(zip(edges, edges[1:], strict=False)))
        if len(set(out)) == len(out):
            break
    return out


@lru_cache(maxsize=64)
def _inner(epsilon: float, edges: tuple[float, ...], encoding: str, prob_bits: int | None) -> GrrParams | OueCmsParams:
    d = len(edges) - 1
    if encoding == "grr":
        return GrrParams(epsilon=epsilon, domain=_labels(edges))
    m = max(8, 1 << (d - 1).bit_length())
    return OueCmsParams(epsilon=epsilon, k=1, m=m, prob_bits=prob_bits)


@lru_cache(maxsize=64)
def _inner_pq(epsilon: float, edges: tuple[float, ...], encoding: str, prob_bits: int | None) -> tuple[float, float]:
    inner = _inner(epsilon, edges, encoding, prob_bits)
    return inner.p, inner.q


def _pq(params: HistogramParams) -> tuple[float, float]:
    """The inner params' (p, q), computed once per params: estimates and their variances ask for them hundreds of
    thousands of times in a test run."""
    return _inner_pq(params.epsilon, params.edges, params.encoding, params.prob_bits)


@lru_cache(maxsize=64)
def _inner_edges(edges: tuple[float, ...]) -> np.ndarray:
    """The edges between buckets, for :meth:`HistogramParams.buckets_of`. (np.searchsorted over them: a hand-written
    branchless search used to be faster on unsorted values; with numpy 2.4 searchsorted is 1.5x faster at 8 to 32
    buckets and as fast at 256, 2,000,000 values, so it went.)"""
    return np.asarray(edges[1:-1], dtype=np.float64)


@dataclass(frozen=True, slots=True, kw_only=True)
class HistogramParams(ParamsBase):
    """Numeric histogram over ``edges`` (d + 1 increasing numbers; :func:`bucket_edges` builds linear or log
    ones). ``encoding``: ``"auto"`` (grr when d < 3e^ε + 2, else oue; resolved when built, then stored),
    ``"grr"`` or ``"oue"``. ``prob_bits``: oue's, chosen when None and stored (grr always uses 32)."""

    mechanism: ClassVar[str] = "num-histogram"
    edges: tuple[float, ...]
    encoding: str = "auto"
    prob_bits: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        edges: object = self.edges
        rule = f"a list of 3 to {MAX_BUCKETS + 1} increasing numbers"
        if not isinstance(edges, (tuple, list)) or not 3 <= len(edges) <= MAX_BUCKETS + 1:
            raise InvalidParameterError("edges", rule, edges if not isinstance(edges, (tuple, list)) else len(edges))
        clean = tuple(check_number("edges", e, -MAX_ABS_EDGE, MAX_ABS_EDGE) for e in edges)
        if any(b <= a for a, b in zip(clean, clean[1:], strict=False)):
            raise InvalidParameterError("edges", rule, "a list that does not increase")
        object.__setattr__(self, "edges", clean)
        encoding = check_choice("encoding", self.encoding, ENCODINGS)
        if encoding == "auto":
            encoding = "grr" if recommend_mechanism(self.epsilon, self.d) == "grr" else "oue"
        object.__setattr__(self, "encoding", encoding)
        if encoding == "grr":
            if self.prob_bits is not None:
                raise InvalidParameterError("prob_bits", "unset (None) for grr encoding", self.prob_bits)
        elif self.prob_bits is None:
            object.__setattr__(self, "prob_bits", _inner(self.epsilon, clean, "oue", None).prob_bits)
        self.inner  # noqa: B018 - validates ε against d through the inner params

    @property
    def d(self) -> int:
        return len(self.edges) - 1

    @property
    def inner(self) -> GrrParams | OueCmsParams:
        """The grr or oue-cms params whose sampler and probabilities this histogram uses."""
        return _inner(self.epsilon, self.edges, self.encoding, self.prob_bits)

    @property
    def labels(self) -> tuple[str, ...]:
        return _labels(self.edges)

    @property
    def p(self) -> float:
        return _pq(self)[0]

    @property
    def q(self) -> float:
        return _pq(self)[1]

    @property
    def effective_epsilon(self) -> float:
        return self.inner.effective_epsilon

    def buckets_of(self, values: np.ndarray) -> np.ndarray:
        """The bucket index of each value, as if clipped to [edges[0], edges[−1]] first: below the first inner edge
        (−inf included) bucket 0, at or above the last one (+inf included) bucket d − 1. Values are numbers, never
        NaN (as_numbers and number_of refuse it)."""
        out: np.ndarray = np.searchsorted(_inner_edges(self.edges), np.asarray(values, dtype=np.float64), side="right")
        return out


@dataclass(frozen=True, eq=False, kw_only=True)
class HistogramBatch(ReportBatch):
    """histogram reports: ``cols`` (grr: the reported bucket) or ``bits`` (oue: (n, m/8) unary rows)."""

    mechanism: str = "num-histogram"


class NumHistogram(Bucketed[HistogramParams, HistogramBatch]):
    """Numeric histogram: a bucket index (grr) or a unary row (oue) per report."""

    name = "num-histogram"
    code = 9
    params_type = HistogramParams
    batch_type = HistogramBatch

    def clips(self, value: object, params: HistogramParams) -> bool:
        return not params.edges[0] <= number_of(value) <= params.edges[-1]

    def estimate_note(self, params: HistogramParams) -> str:
        return f"values clipped to [{params.edges[0]:g}, {params.edges[-1]:g}] on the device; {params.encoding} over {params.d} buckets"

    def columns(self, params: HistogramParams) -> tuple[Column, ...]:
        inner = params.inner
        if isinstance(inner, GrrParams):
            return GRR.columns(inner)
        return (Column("bits", "bits", "bytes", inner.m // 8),)

    def _privatize_codes(self, codes: np.ndarray, params: HistogramParams, rng: np.random.Generator | None) -> HistogramBatch:
        inner = params.inner
        if isinstance(inner, GrrParams):
            return HistogramBatch(n=codes.size, cols=privatize_codes(codes, inner, rng=rng))
        if codes.size == 0:
            raise InvalidValueError("cannot privatize an empty batch")
        return HistogramBatch(n=codes.size, bits=unary_bits(codes, inner, rng=rng))

    def privatize_batch(self, values: Values, params: HistogramParams, *, rng: np.random.Generator | None = None) -> HistogramBatch:
        return self._privatize_codes(params.buckets_of(as_numbers(values)), params, check_rng(rng))

    def privatize(self, value: object, params: HistogramParams, *, rng: np.random.Generator | None = None) -> HistogramBatch:
        """One report: grr's single-report path (one CSPRNG call) or the unary row of one report."""
        code = int(params.buckets_of(np.array([number_of(value)]))[0])
        rng = check_rng(rng)
        inner = params.inner
        if isinstance(inner, GrrParams):
            return HistogramBatch(n=1, cols=GRR.privatize(inner.domain[code], inner, rng=rng).cols)
        return self._privatize_codes(np.array([code], dtype=np.int64), params, rng)

    def value_key(self, value: object, params: HistogramParams) -> bytes:
        return int(params.buckets_of(np.array([number_of(value)]))[0]).to_bytes(2, "little")

    def state_shape(self, params: HistogramParams) -> tuple[tuple[int, int], int]:
        """counts[0, i]: grr: reports of bucket i; oue: reports with bit i set (i < m, the padding included)."""
        inner = params.inner
        return (1, inner.d if isinstance(inner, GrrParams) else inner.m), 1

    def fold(self, params: HistogramParams, batches: Sequence[HistogramBatch], state: SketchState) -> SketchState:
        inner = params.inner
        if isinstance(inner, GrrParams):
            for batch in batches:
                assert batch.cols is not None
                state.counts[0] += np.bincount(batch.cols, minlength=inner.d)
                state.row_counts[0] += batch.n
            return state
        rows = [UnaryBatch(mechanism="oue-cms", n=b.n, rows=np.zeros(b.n, np.int64), bits=_bits(b)) for b in batches]
        return unary_fold(inner, rows, state)

    def estimate(
        self, params: HistogramParams, state: SketchState, *, candidates: Sequence[object] | None = None, confidence: float = 0.95
    ) -> Estimate:
        """Unbiased count of every bucket (labels ``[a, b)``) with its stderr."""
        state.check(params)
        n = state.n
        if n == 0:
            raise EmptyStateError("no histogram reports to estimate from")
        p, q = _pq(params)
        est = (state.counts[0, : params.d].astype(np.float64) - n * q) / (p - q)
        return Estimate(self.name, params.labels, est, np.sqrt(self.variance(params, est, n)), n, confidence)

    def variance(self, params: HistogramParams, counts: np.ndarray, n: int) -> np.ndarray:
        """n·q(1−q)/(p−q)² + c(1−p−q)/(p−q), c clipped to [0, n] (grr and oue alike)."""
        p, q = _pq(params)
        var = n * q * (1 - q) / (p - q) ** 2 + np.asarray(counts).clip(0, n) * (1 - p - q) / (p - q)
        out: np.ndarray = np.maximum(var, 0.0)
        return out

    def bucket_edges(self, params: HistogramParams) -> np.ndarray:
        return np.asarray(params.edges, dtype=np.float64)

    def prefix_sums(self, params: HistogramParams, counts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(S_J, Var S_J) for J = 0..d from the raw counts (module docstring)."""
        d, (p, q) = params.d, _pq(params)
        c = np.asarray(counts, dtype=np.float64)
        head = np.concatenate(([0.0], np.cumsum(c)))
        f = np.clip(head, 0.0, n)
        j = np.arange(d + 1, dtype=np.float64)
        if params.encoding == "grr":
            p1, p0 = p + (j - 1) * q, j * q
            var = (f * p1 * (1 - p1) + (n - f) * p0 * (1 - p0)) / (p - q) ** 2
            var[0] = var[-1] = 0.0
            head[-1] = float(n)
            return head, np.maximum(var, 0.0)
        tail = n - np.concatenate((np.cumsum(c[::-1])[::-1], [0.0]))
        g = np.clip(tail, 0.0, n)
        var_head = (j * n * q * (1 - q) + f * (p - q) * (1 - p - q)) / (p - q) ** 2
        var_tail = ((d - j) * n * q * (1 - q) + (n - g) * (p - q) * (1 - p - q)) / (p - q) ** 2
        use_head = j <= d / 2
        return np.where(use_head, head, tail), np.where(use_head, var_head, var_tail)

    def bucket_covariance(self, params: HistogramParams, counts: np.ndarray, n: int) -> np.ndarray:
        """Cov(ĉ_i, ĉ_j) with ``counts`` (clipped to [0, n]) as the true counts c (module docstring)."""
        p, q = _pq(params)
        c = np.asarray(counts, dtype=np.float64).clip(0.0, n)
        d = params.d
        cov = np.zeros((d, d))
        if params.encoding == "grr":
            cov -= (n * q * q + q * (p - q) * np.add.outer(c, c)) / (p - q) ** 2
        cov.ravel()[:: d + 1] = self.variance(params, c, n)  # the diagonal
        return cov

    def shape(self, params: HistogramParams) -> str:
        return f"d={params.d} {params.encoding}"

    def params_schema(self) -> tuple[dict[str, Any], list[str]]:
        return {
            "edges": {"type": "array", "items": {"type": "number", "minimum": -MAX_ABS_EDGE, "maximum": MAX_ABS_EDGE},
                      "minItems": 3, "maxItems": MAX_BUCKETS + 1,
                      "description": "increasing bucket edges; values are clipped to [first, last] on the device"},
            "encoding": {"type": "string", "enum": list(ENCODINGS)},
            "prob_bits": {"type": ["integer", "null"], "minimum": 2, "maximum": 32, "description": "oue; null: chosen"},
        }, ["edges"]


HISTOGRAM = NumHistogram()



def _bits(batch: HistogramBatch) -> np.ndarray:
    if batch.bits is None:
        raise InvalidParameterError("batch", "a histogram batch with unary rows (oue encoding)", batch.mechanism)
    return batch.bits
