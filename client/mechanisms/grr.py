"""k-ary (generalized) randomized response over a declared domain, and the grr-or-not recommendation.

Keep the true label with probability p (T/2^B exactly), else report one of the d − 1 others uniformly
(probability q each). ĉ(v) = (c(v) − n·q)/(p − q), Var = n·q(1−q)/(p−q)² + c(v)·(1−p−q)/(p−q)
(Wang, Blocki, Li, Jha, USENIX Security 2017); the estimates sum to n exactly because p + (d − 1)q = 1.

Repeated values (the SDK): a permanent randomized response (PRR, keyed by the device secret) then a fresh
instantaneous one (IRR), as for rr (:mod:`ldptel.client.mechanisms.rr`). A GRR with keep probability p has
contrast λ = (d·p − 1)/(d − 1), and two GRRs compose to a GRR with λ = λ₁λ₂. The PRR keeps with
p₁ = K₁/2^B, K₁ = ⌊2^B·(1 + (d − 1)√λ)/d⌋ (at least K), and the IRR keeps with
p₂ = (K₁ + (d − 1)K − 2^B)/(d·K₁ − 2^B); together P(report = true label) = K/2^B exactly and every other
label has (1 − K/2^B)/(d − 1). One report is ε₁ = ln(p(d − 1)/(1 − p))-LDP; all reports of one value, ever,
ε∞ = ln(p₁(d − 1)/(1 − p₁)).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from ldptel.client.errors import (
    EmptyStateError,
    InvalidParameterError,
    InvalidTextError,
    InvalidValueError,
    UnknownValueError,
)
from ldptel.client.mechanisms.base import Column, PlanCandidate, ReportBatch, Values
from ldptel.client.mechanisms.capabilities import Categorical, Labelled, Permanent
from ldptel.client.mechanisms.longitudinal import PermanentChannel
from ldptel.client.mechanisms.state import Estimate, SketchState
from ldptel.client.protocol.keyed import prr_stream
from ldptel.client.protocol.params import (
    MAX_DOMAIN,
    MAX_LABEL_CHARS,
    SINGLE_DRAW_PROB_BITS,
    ParamsBase,
    check_epsilon,
    check_prob_bits,
)
from ldptel.client.protocol.rng import (
    below_threshold,
    bernoulli,
    check_rng,
    draw_below,
    draw_bytes,
    int_below,
    uniform_below,
)
from ldptel.client.protocol.validate import check_int, check_number, lone_surrogate_at


def recommend_mechanism(epsilon: float, d: int) -> str:
    """'grr' when d < 3e^ε + 2 (its variance is then the lower one: Wang et al., USENIX Security 2017), else 'oue-cms'."""
    check_int("d", d, 2, 1 << 62)
    check_number("epsilon", epsilon, 0.0, math.inf, open_interval=True)
    return "grr" if d < 3 * math.exp(epsilon) + 2 else "oue-cms"


# ---------------------------------------------------------------------------------------------- params
def _grr_epsilon(t: int, d: int, bits: int) -> float:
    return math.log(t) + math.log(d - 1) - math.log((1 << bits) - t)


@lru_cache(maxsize=1024)
def _grr_keep_threshold(epsilon: float, d: int, bits: int) -> int:
    """Largest T with T/2^bits <= e^ε/(e^ε + d − 1) whose ε (computed from T) does not exceed ε."""
    t = math.floor(math.exp(epsilon) / (math.exp(epsilon) + d - 1) * (1 << bits))
    while t > 1 and _grr_epsilon(t, d, bits) > epsilon:
        t -= 1
    return t


@dataclass(frozen=True, slots=True, kw_only=True)
class GrrParams(ParamsBase):
    """k-ary (generalized) randomized response over a declared finite domain of d labels.

    Keep the true label with probability p = e^ε/(e^ε + d − 1), else report one of the other d − 1 labels
    uniformly, each with probability q = (1 − p)/(d − 1). p is rounded *down* to T/2^prob_bits, so
    ε_eff = ln(p(d − 1)/(1 − p)) ≤ ε, and p + (d − 1)q = 1 exactly.
    """

    mechanism: ClassVar[str] = "grr"
    domain: tuple[str, ...]
    prob_bits: int = SINGLE_DRAW_PROB_BITS

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "prob_bits", check_prob_bits(self.prob_bits, 8))
        domain: object = self.domain
        if isinstance(domain, (str, bytes)) or not isinstance(domain, (tuple, list)):
            raise InvalidParameterError("domain", f"a list of 2 to {MAX_DOMAIN} distinct labels", domain)
        domain = tuple(domain)
        if not 2 <= len(domain) <= MAX_DOMAIN:
            raise InvalidParameterError("domain", f"a list of 2 to {MAX_DOMAIN} distinct labels", f"{len(domain)} labels")
        for label in domain:
            if not isinstance(label, str) or not 1 <= len(label) <= MAX_LABEL_CHARS:
                raise InvalidParameterError("domain", f"labels that are strings of 1 to {MAX_LABEL_CHARS} characters", label)
            if lone_surrogate_at(label) is not None:  # no UTF-8 encoding: refused, not repaired
                raise InvalidParameterError("domain", "labels that are valid Unicode text (no lone surrogates)",
                                            "a label with a lone surrogate")
        if len(set(domain)) != len(domain):
            raise InvalidParameterError("domain", "distinct labels", "a list with duplicates")
        object.__setattr__(self, "domain", domain)
        if self.keep_threshold * len(domain) <= 1 << self.prob_bits:
            raise InvalidParameterError("epsilon", "large enough that p stays above 1/d after rounding", self.epsilon)

    @property
    def d(self) -> int:
        return len(self.domain)

    @property
    def keep_probability(self) -> float:
        """Nominal p = e^ε/(e^ε + d − 1)."""
        return math.exp(self.epsilon) / (math.exp(self.epsilon) + self.d - 1)

    @property
    def keep_threshold(self) -> int:
        return _grr_keep_threshold(self.epsilon, self.d, self.prob_bits)

    @property
    def p(self) -> float:
        """Effective P(report = true label)."""
        return _pq(self)[0]

    @property
    def q(self) -> float:
        """Effective P(report = a given other label)."""
        return _pq(self)[1]

    @property
    def effective_epsilon(self) -> float:
        return _grr_epsilon(self.keep_threshold, self.d, self.prob_bits)


@lru_cache(maxsize=1024)
def _grr_pq(epsilon: float, d: int, bits: int) -> tuple[float, float]:
    p = _grr_keep_threshold(epsilon, d, bits) / (1 << bits)
    return p, (1.0 - p) / (d - 1)


def _pq(params: GrrParams) -> tuple[float, float]:
    """(p, q) = (T/2^prob_bits, (1 − p)/(d − 1)), computed once per (ε, d, prob_bits): estimates and their
    variances ask for them hundreds of thousands of times in a test run."""
    return _grr_pq(params.epsilon, len(params.domain), params.prob_bits)


@dataclass(frozen=True, eq=False, kw_only=True)
class GrrBatch(ReportBatch):
    """grr reports: ``cols``, the reported label index of each report (< d), int64."""

    mechanism: str = "grr"
    cols: np.ndarray


# ------------------------------------------------------------------------ permanent randomized response
@dataclass(frozen=True, slots=True)
class GrrSplit:
    """grr: PRR keep K₁/2^B, then IRR keep N/D; together exactly K/2^B (see the module docstring)."""

    bits: int
    d: int
    threshold: int  # K: the spec's keep threshold
    prr_threshold: int  # K₁

    @property
    def irr_num(self) -> int:
        return self.prr_threshold + (self.d - 1) * self.threshold - (1 << self.bits)

    @property
    def irr_den(self) -> int:
        return self.d * self.prr_threshold - (1 << self.bits)

    def composed(self) -> tuple[Fraction, Fraction]:
        """(P(report = value), P(report = one given other label)) of PRR then IRR, exactly."""
        d = self.d
        p1 = Fraction(self.prr_threshold, 1 << self.bits)
        p2 = Fraction(self.irr_num, self.irr_den)
        q1, q2 = (1 - p1) / (d - 1), (1 - p2) / (d - 1)
        keep = p1 * p2 + (1 - p1) * q2  # PRR kept then IRR kept, or PRR moved and IRR moved back
        # to a given other label z: PRR kept and IRR moved to z; PRR moved to z and IRR kept it;
        # PRR moved elsewhere (d − 2 labels) and IRR moved to z.
        other = p1 * q2 + q1 * p2 + (d - 2) * q1 * q2
        return keep, other

    @property
    def epsilon_one(self) -> float:
        return math.log(self.threshold) + math.log(self.d - 1) - math.log((1 << self.bits) - self.threshold)

    @property
    def epsilon_inf(self) -> float:
        return math.log(self.prr_threshold) + math.log(self.d - 1) - math.log((1 << self.bits) - self.prr_threshold)


def grr_split(params: GrrParams) -> GrrSplit:
    bits, k, d = params.prob_bits, params.keep_threshold, params.d
    full = 1 << bits
    contrast = (d * k - full) / ((d - 1) * full)
    p1 = (1.0 + (d - 1) * math.sqrt(contrast)) / d
    k1 = max(k, min(full - 1, math.floor(p1 * full)))  # round towards more permanent noise; p₁ ≥ p
    return GrrSplit(bits=bits, d=d, threshold=k, prr_threshold=k1)


@lru_cache(maxsize=32)
def _index(domain: tuple[str, ...]) -> dict[str, int]:
    return {label: i for i, label in enumerate(domain)}


def grr_code(value: object, params: GrrParams) -> int:
    if not isinstance(value, str):
        raise InvalidValueError(f"grr values are labels (str), got {type(value).__name__}")
    code = _index(params.domain).get(value)
    if code is None:
        at = lone_surrogate_at(value)
        if at is not None:  # the protocol's text rule, the same error as for a sketch value
            raise InvalidTextError(f"a str value must be valid Unicode text; this one has a lone surrogate code point "
                                   f"(U+D800-U+DFFF) at index {at}: refused, not repaired")
        # The offending value is not echoed: error messages can end up in logs.
        raise UnknownValueError(f"a value is not in the metric's domain of {params.d} labels")
    return code


def privatize_grr(
    value: object, params: GrrParams, *, secret: bytes, metric: str, fingerprint: bytes, rng: np.random.Generator | None = None
) -> GrrBatch:
    """One grr report: the value's PRR label (keyed by the device secret), then a fresh IRR on top."""
    code = grr_code(value, params)
    split = grr_split(params)
    stream = prr_stream(secret, metric, fingerprint, "grr", struct.pack("<I", code))
    prr = code
    if stream.bits(split.bits) >= split.prr_threshold:
        other = stream.below(split.d - 1)
        prr = other + (other >= code)
    out = prr
    if not draw_below(rng, split.irr_num, split.irr_den):
        other = int(uniform_below(rng, split.d - 1, 1)[0])
        out = other + (other >= prr)
    return GrrBatch(n=1, cols=np.array([out], dtype=np.int64))


# ------------------------------------------------------------------------------------------- mechanism
def _codes(values: Values, params: GrrParams) -> np.ndarray:
    seq = values.tolist() if isinstance(values, np.ndarray) else values
    index = _index(params.domain)
    try:
        return np.fromiter(map(index.__getitem__, seq), dtype=np.int64, count=len(seq))
    except (KeyError, TypeError):
        # The offending value is not echoed: error messages can end up in logs.
        raise UnknownValueError(f"a value is not in the metric's domain of {params.d} labels") from None


def privatize_codes(codes: np.ndarray, params: GrrParams, *, rng: np.random.Generator | None) -> np.ndarray:
    """The reported label index of each true label index ``codes`` (int64, each < d): grr's batch path."""
    n = codes.size
    if n == 0:
        raise InvalidValueError("cannot privatize an empty batch")
    keep = bernoulli(rng, params.keep_threshold, params.prob_bits, n)
    other = uniform_below(rng, params.d - 1, n)
    other += other >= codes  # uniform over the d − 1 labels that are not the true one
    out: np.ndarray = np.where(keep, codes, other)
    return out


class Grr(Permanent[GrrParams, GrrBatch], Labelled[GrrParams, GrrBatch], Categorical[GrrParams, GrrBatch]):
    """k-ary randomized response: one label index per report; permanent randomized response for repeats."""

    name = "grr"
    code = 2
    params_type = GrrParams
    batch_type = GrrBatch

    def plan_candidates(self, epsilon: float, d: int, *, ks: Sequence[int], ms: Sequence[int]) -> tuple[PlanCandidate, ...]:
        """One domain of d labels (none when d or ε is out of grr's range)."""
        try:
            return (PlanCandidate(GrrParams(epsilon=epsilon, domain=tuple(f"v{i}" for i in range(d)))),)
        except InvalidParameterError:
            return ()

    def columns(self, params: GrrParams) -> tuple[Column, ...]:
        return (Column("cols", "col", "index", 1 if params.d <= 256 else 2, params.d, "grr label index"),)

    def privatize_batch(self, values: Values, params: GrrParams, *, rng: np.random.Generator | None = None) -> GrrBatch:
        codes = _codes(values, params)
        return GrrBatch(n=codes.size, cols=privatize_codes(codes, params, rng=check_rng(rng)))

    def privatize(self, value: object, params: GrrParams, *, rng: np.random.Generator | None = None) -> GrrBatch:
        """One report from one CSPRNG call; same distribution as :meth:`privatize_batch`."""
        code = grr_code(value, params)
        rng = check_rng(rng)
        raw = draw_bytes(rng, 16)
        if below_threshold(params.keep_threshold, params.prob_bits, int.from_bytes(raw[:8], "little")):
            out = code
        else:
            out = int_below(rng, params.d - 1, int.from_bytes(raw[8:], "little"))
            out += out >= code
        return GrrBatch(n=1, cols=np.array([out], dtype=np.int64))

    def value_key(self, value: object, params: GrrParams) -> bytes:
        return struct.pack("<I", grr_code(value, params))

    def privatize_permanent(
        self, value: object, params: GrrParams, *, secret: bytes, metric: str, fingerprint: bytes, rng: np.random.Generator | None = None
    ) -> GrrBatch:
        return privatize_grr(value, params, secret=secret, metric=metric, fingerprint=fingerprint, rng=rng)

    def longitudinal_epsilon(self, params: GrrParams) -> float:
        return grr_split(params).epsilon_inf

    def permanent_channel(self, params: GrrParams) -> PermanentChannel:
        split = grr_split(params)
        return PermanentChannel(
            d=split.d, prr_keep=Fraction(split.prr_threshold, 1 << split.bits),
            irr_keep=Fraction(split.irr_num, split.irr_den), label=lambda value: grr_code(value, params),
        )

    def state_shape(self, params: GrrParams) -> tuple[tuple[int, int], int]:
        """counts[0, v]: reports of label v; row_counts[0]: the number of reports."""
        return (1, params.d), 1

    def fold(self, params: GrrParams, batches: Sequence[GrrBatch], state: SketchState) -> SketchState:
        for batch in batches:
            state.counts[0] += np.bincount(batch.cols, minlength=params.d)
            state.row_counts[0] += batch.n
        return state

    def estimate(
        self, params: GrrParams, state: SketchState, *, candidates: Sequence[object] | None = None, confidence: float = 0.95
    ) -> Estimate:
        state.check(params)
        n = state.n
        if n == 0:
            raise EmptyStateError("no grr reports to estimate from")
        p, q = _pq(params)
        est = (state.counts[0].astype(np.float64) - n * q) / (p - q)
        return Estimate("grr", params.domain, est, np.sqrt(self.variance(params, est, n)), n, confidence)

    def variance(self, params: GrrParams, counts: np.ndarray, n: int) -> np.ndarray:
        """n·q(1−q)/(p−q)² + c·(1−p−q)/(p−q), with c the estimate clipped to [0, n]: the randomization
        variance of the count among the devices that reported, given their values (c reports keep their label
        with probability p, the other n − c report it with probability q), the meaning every mechanism's
        stderr has; not the sampling of those devices from a larger population."""
        p, q = _pq(params)
        var = n * q * (1 - q) / (p - q) ** 2 + np.asarray(counts).clip(0, n) * (1 - p - q) / (p - q)
        out: np.ndarray = np.maximum(var, 0.0)
        return out

    def bucket_covariance(self, params: GrrParams, counts: np.ndarray, n: int) -> np.ndarray:
        """Cov(ĉ_i, ĉ_j) with ``counts`` (clipped to [0, n]) as the true counts: the labels compete for each
        report, so off the diagonal −[n·q² + q(p−q)(c_i + c_j)]/(p−q)²; the diagonal is :meth:`variance`
        (the same formula as a numeric histogram's grr encoding; hypothesis tests use it)."""
        p, q = _pq(params)
        c = np.asarray(counts, dtype=np.float64).clip(0.0, n)
        cov: np.ndarray = -(n * q * q + q * (p - q) * np.add.outer(c, c)) / (p - q) ** 2
        cov.ravel()[:: c.size + 1] = self.variance(params, c, n)  # the diagonal
        return cov

    def shape(self, params: GrrParams) -> str:
        return f"d={params.d}"

    def params_schema(self) -> tuple[dict[str, Any], list[str]]:
        domain = {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": MAX_LABEL_CHARS},
            "minItems": 2,
            "maxItems": MAX_DOMAIN,
            "uniqueItems": True,
        }
        return {"domain": domain, "prob_bits": {"type": "integer", "minimum": 8, "maximum": 32}}, ["domain"]


GRR = Grr()
