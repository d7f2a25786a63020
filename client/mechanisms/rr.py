"""Binary randomized response (Warner): params, privatize, the permanent randomized response, fold, estimate.

Report Y = X with probability ½ + γ and 1 − X with probability ½ − γ (the flip probability f = ½ − γ is
T/2^B exactly). E[Y] = f + (1 − 2f)·p, so p̂ = (Ȳ − f)/(1 − 2f) is unbiased (Warner, JASA 1965).

Standard error: the randomization variance of the count among the devices that reported, given their values
(the meaning every mechanism's stderr has). Each report is a Bernoulli with mean 1 − f or f, variance f(1 − f)
either way, so Var[n·p̂] = n·f(1 − f)/(1 − 2f)²: a constant, the same for both counts, and the variance of
grr with the domain {false, true}. Warner's P(1 − P)/((1 − 2f)²·n), P = E[Y], is larger by p(1 − p)/n: it
also counts the sampling of the n devices from a population with proportion p, which no other mechanism's
stderr includes.

Repeated values (the SDK): as in RAPPOR (Erlingsson, Pihur, Korolova, CCS 2014), a value first goes through a *permanent*
randomized response (PRR) derived from the device secret, so every report of it starts from the same noisy
bit; fresh *instantaneous* noise (IRR, OS CSPRNG) is drawn on top for every report. Two flips compose as
(1 − 2f) = (1 − 2f₁)(1 − 2f₂). The PRR flips with f₁ = T₁/2^B, T₁ = ⌈2^B·(1 − √(1 − 2f))/2⌉ (half of the
"contrast" 1 − 2f on each stage, rounded towards more PRR noise), and the IRR flips with the rational
probability f₂ = (T − T₁)/(2^B − 2T₁), drawn exactly. Then f₁ + f₂ − 2f₁f₂ = T/2^B exactly: one report has
precisely the spec's channel, so the estimator needs no change. One report is ε₁ = ln((1 − f)/f)-LDP; any
number of reports of one value, ever, are together ε∞ = ln((1 − f₁)/f₁)-LDP (the IRR is post-processing of
the PRR), ≈ 1.66·ε₁ at ε₁ = 1. ``tests/client/test_memo.py`` proves the identity with exact rationals.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from ldptel.client.errors import EmptyStateError, InvalidParameterError, InvalidValueError
from ldptel.client.mechanisms.base import Column, PlanCandidate, ReportBatch, Values
from ldptel.client.mechanisms.capabilities import Binary, Categorical, Permanent
from ldptel.client.mechanisms.longitudinal import PermanentChannel
from ldptel.client.mechanisms.state import Estimate, SketchState
from ldptel.client.protocol.keyed import prr_stream
from ldptel.client.protocol.params import (
    SINGLE_DRAW_PROB_BITS,
    ParamsBase,
    check_epsilon,
    check_prob_bits,
    flip_epsilon,
    safe_flip_threshold,
)
from ldptel.client.protocol.rng import below_threshold, bernoulli_bytes, check_rng, draw_below, draw_bytes
from ldptel.client.protocol.validate import check_number

BOOLEAN_LABELS = ("false", "true")  # the labels of a boolean metric's estimate


@dataclass(frozen=True, slots=True, kw_only=True)
class RrParams(ParamsBase):
    """Binary randomized response (Warner 1965).

    Report the true bit with probability ½ + γ and its negation with probability ½ − γ, where
    γ = ½·tanh(ε/2), so ε = ln((½+γ)/(½−γ)). The flip probability ½ − γ = 1/(e^ε + 1) is rounded *up* to
    T/2^prob_bits. Build from γ with :meth:`from_gamma`.
    """

    mechanism: ClassVar[str] = "rr"
    prob_bits: int = SINGLE_DRAW_PROB_BITS

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "prob_bits", check_prob_bits(self.prob_bits))
        if self.flip_threshold >= 1 << (self.prob_bits - 1):
            raise InvalidParameterError("prob_bits", "large enough for epsilon to survive rounding", self.prob_bits)

    @classmethod
    def from_gamma(cls, gamma: float, *, prob_bits: int = SINGLE_DRAW_PROB_BITS) -> RrParams:
        """Params for a given γ ∈ (0, ½): ε = ln((½+γ)/(½−γ)) = 2·artanh(2γ)."""
        gamma = check_number("gamma", gamma, 0, 0.5, open_interval=True)
        return cls(epsilon=math.log((0.5 + gamma) / (0.5 - gamma)), prob_bits=prob_bits)

    @property
    def gamma(self) -> float:
        """Nominal γ = ½·tanh(ε/2)."""
        return 0.5 * math.tanh(self.epsilon / 2)

    @property
    def flip_probability(self) -> float:
        """Nominal P(flip) = ½ − γ = 1/(e^ε + 1)."""
        return _nominal_flip(self.epsilon)

    @property
    def flip_threshold(self) -> int:
        return _flip(self.epsilon, self.prob_bits)[0]

    @property
    def effective_flip(self) -> float:
        return _flip(self.epsilon, self.prob_bits)[1]

    @property
    def effective_gamma(self) -> float:
        return 0.5 - self.effective_flip

    @property
    def effective_epsilon(self) -> float:
        return flip_epsilon(self.flip_threshold, self.prob_bits)


def _nominal_flip(epsilon: float) -> float:
    return 1.0 / (math.exp(epsilon) + 1.0)


@lru_cache(maxsize=1024)
def _flip(epsilon: float, prob_bits: int) -> tuple[int, float]:
    """(T, T/2^prob_bits): :attr:`RrParams.flip_threshold` and :attr:`RrParams.effective_flip`, computed once per
    (ε, prob_bits) (estimates and their variances ask for them hundreds of thousands of times in a test run)."""
    threshold = safe_flip_threshold(_nominal_flip(epsilon), prob_bits, epsilon, 1.0)
    return threshold, threshold / (1 << prob_bits)


def _count_variance(params: RrParams, n: int) -> float:
    """n·f(1 − f)/(1 − 2f)²: the variance of either count (:meth:`Rr.variance`)."""
    f = params.effective_flip
    return n * f * (1 - f) / (1 - 2 * f) ** 2


@dataclass(frozen=True, eq=False, kw_only=True)
class RrBatch(ReportBatch):
    """rr reports: ``bits``, the n reported bits packed MSB first (padding bits 0)."""

    mechanism: str = "rr"
    bits: np.ndarray


# ------------------------------------------------------------------------ permanent randomized response
@dataclass(frozen=True, slots=True)
class RrSplit:
    """rr: PRR flip T₁/2^B, then IRR flip (T − T₁)/(2^B − 2T₁); together exactly T/2^B."""

    bits: int
    threshold: int  # T: the spec's flip threshold
    prr_threshold: int  # T₁

    @property
    def irr_num(self) -> int:
        return self.threshold - self.prr_threshold

    @property
    def irr_den(self) -> int:
        return (1 << self.bits) - 2 * self.prr_threshold

    def composed_flip(self) -> Fraction:
        """P(report ≠ value) of PRR then IRR, as an exact rational."""
        f1 = Fraction(self.prr_threshold, 1 << self.bits)
        f2 = Fraction(self.irr_num, self.irr_den)
        return f1 + f2 - 2 * f1 * f2

    @property
    def epsilon_one(self) -> float:
        """ε of one report: ln((1 − f)/f), the spec's effective ε."""
        return math.log((1 << self.bits) - self.threshold) - math.log(self.threshold)

    @property
    def epsilon_inf(self) -> float:
        """ε of any number of reports of one value: ln((1 − f₁)/f₁)."""
        return math.log((1 << self.bits) - self.prr_threshold) - math.log(self.prr_threshold)


def rr_split(params: RrParams) -> RrSplit:
    bits, t = params.prob_bits, params.flip_threshold
    contrast = 1.0 - 2.0 * t / (1 << bits)
    f1 = (1.0 - math.sqrt(contrast)) / 2.0
    t1 = min(t, max(1, math.ceil(f1 * (1 << bits))))  # round towards more permanent noise; f₁ ≤ f
    return RrSplit(bits=bits, threshold=t, prr_threshold=t1)


def rr_channel(params: RrParams, label: Callable[[object], int], rounding_bits: int = 0) -> PermanentChannel:
    """rr's PRR and IRR as keep probabilities over the two labels (:mod:`~ldptel.client.mechanisms.longitudinal`)."""
    split = rr_split(params)
    return PermanentChannel(
        d=2, prr_keep=1 - Fraction(split.prr_threshold, 1 << split.bits),
        irr_keep=1 - Fraction(split.irr_num, split.irr_den), label=label, rounding_bits=rounding_bits,
    )


def rr_value_bytes(value: object) -> bytes:
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidValueError(f"rr values must be bool, got {type(value).__name__}")
    return b"\x01" if value else b"\x00"


def privatize_rr(
    value: object, params: RrParams, *, secret: bytes, metric: str, fingerprint: bytes, rng: np.random.Generator | None = None
) -> RrBatch:
    """One rr report: the value's PRR bit (keyed by the device secret), then a fresh IRR flip."""
    raw = rr_value_bytes(value)
    split = rr_split(params)
    stream = prr_stream(secret, metric, fingerprint, "rr", raw)
    bit = raw == b"\x01"
    if stream.bits(split.bits) < split.prr_threshold:
        bit = not bit
    if draw_below(rng, split.irr_num, split.irr_den):
        bit = not bit
    return RrBatch(n=1, bits=np.array([0x80 if bit else 0], dtype=np.uint8))


# ------------------------------------------------------------------------------------------- mechanism
def _as_bool_array(values: Values) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.dtype != np.bool_:
        raise InvalidValueError("rr values must be booleans (a list of bool or a bool array)")
    return arr


class Rr(Permanent[RrParams, RrBatch], Binary[RrParams, RrBatch], Categorical[RrParams, RrBatch]):
    """Binary randomized response: one bit per report; a permanent randomized response for repeated values."""

    name = "rr"
    code = 1
    params_type = RrParams
    batch_type = RrBatch
    proportion_of = BOOLEAN_LABELS[1]

    def plan_candidates(self, epsilon: float, d: int, *, ks: Sequence[int], ms: Sequence[int]) -> tuple[PlanCandidate, ...]:
        """Two values only."""
        try:
            return (PlanCandidate(RrParams(epsilon=epsilon)),) if d == 2 else ()
        except InvalidParameterError:
            return ()

    def columns(self, params: RrParams) -> tuple[Column, ...]:
        return (Column("bits", "bit", "bit"),)

    def privatize_batch(self, values: Values, params: RrParams, *, rng: np.random.Generator | None = None) -> RrBatch:
        rng = check_rng(rng)
        x = _as_bool_array(values)
        n = x.size
        if n == 0:
            raise InvalidValueError("cannot privatize an empty batch")
        packed = np.packbits(x)
        flips = bernoulli_bytes(rng, params.flip_threshold, params.prob_bits, packed.size)
        out = packed ^ flips
        spare = (-n) % 8
        if spare:
            out[-1] &= np.uint8((0xFF << spare) & 0xFF)  # padding bits stay 0
        return RrBatch(n=n, bits=out)

    def privatize(self, value: object, params: RrParams, *, rng: np.random.Generator | None = None) -> RrBatch:
        """One report from one CSPRNG call; same distribution as :meth:`privatize_batch`."""
        if not isinstance(value, (bool, np.bool_)):
            raise InvalidValueError(f"rr values must be bool, got {type(value).__name__}")
        rng = check_rng(rng)
        flip = below_threshold(params.flip_threshold, params.prob_bits, int.from_bytes(draw_bytes(rng, 8), "little"))
        return RrBatch(n=1, bits=np.array([0x80 if bool(value) != flip else 0], dtype=np.uint8))

    def value_key(self, value: object, params: RrParams) -> bytes:
        return rr_value_bytes(value)

    def privatize_permanent(
        self, value: object, params: RrParams, *, secret: bytes, metric: str, fingerprint: bytes, rng: np.random.Generator | None = None
    ) -> RrBatch:
        return privatize_rr(value, params, secret=secret, metric=metric, fingerprint=fingerprint, rng=rng)

    def longitudinal_epsilon(self, params: RrParams) -> float:
        return rr_split(params).epsilon_inf

    def permanent_channel(self, params: RrParams) -> PermanentChannel:
        return rr_channel(params, lambda value: int(rr_value_bytes(value) == b"\x01"))

    def state_shape(self, params: RrParams) -> tuple[tuple[int, int], int]:
        """counts[0, 0]: the number of reported 1s; row_counts[0]: the number of reports."""
        return (1, 1), 1

    def fold(self, params: RrParams, batches: Sequence[RrBatch], state: SketchState) -> SketchState:
        for batch in batches:
            state.counts[0, 0] += int(np.bitwise_count(batch.bits).sum(dtype=np.int64))
            state.row_counts[0] += batch.n
        return state

    def estimate(
        self, params: RrParams, state: SketchState, *, candidates: Sequence[object] | None = None, confidence: float = 0.95
    ) -> Estimate:
        state.check(params)
        n = state.n
        if n == 0:
            raise EmptyStateError("no rr reports to estimate from")
        f = params.effective_flip
        y_bar = state.counts[0, 0] / n
        p_hat = (y_bar - f) / (1 - 2 * f)
        counts = np.array([n * (1 - p_hat), n * p_hat])
        return Estimate("rr", BOOLEAN_LABELS, counts, np.sqrt(self.variance(params, counts, n)), n, confidence)

    def variance(self, params: RrParams, counts: np.ndarray, n: int) -> np.ndarray:
        """The randomization variance n·f(1 − f)/(1 − 2f)² of each count (module docstring; it does not
        depend on the counts)."""
        out = np.empty(np.shape(counts))
        out.fill(_count_variance(params, n))
        return out

    def bucket_covariance(self, params: RrParams, counts: np.ndarray, n: int) -> np.ndarray:
        """Cov of the (false, true) count estimates: they sum to n exactly, so Cov = −Var off the diagonal."""
        var = float(_count_variance(params, n))
        return np.array([[var, -var], [-var, var]])

    def params_schema(self) -> tuple[dict[str, Any], list[str]]:
        return {"prob_bits": {"type": "integer", "minimum": 2, "maximum": 32}}, []


RR = Rr()
