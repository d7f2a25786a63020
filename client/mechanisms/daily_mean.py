"""Mean/sum of a number that devices report repeatedly (daily counters): α-point rounding with memoization.

Ding, Kulkarni, Yekhanin, "Collecting Telemetry Data Privately" (NeurIPS 2017), with the step s = hi − lo
(a two-point grid): each device holds a permanent offset α ∈ [0, 2^V) (HMAC of the device secret, metric
and privatization fingerprint; never sent) and rounds its clipped, quantized value u ∈ [0, 2^V] to the bit c = 1[u + α ≥ 2^V].
Over devices P(c = 1) = u/2^V, so the rounding is unbiased for the mean. The bit goes through rr's permanent
randomized response (:func:`ldptel.client.mechanisms.rr.privatize_rr`): a memoized PRR bit per (metric,
privatization, c), derived from the device secret, then fresh IRR noise; together exactly the spec's flip
probability T_f/2^B, so one report is 1BitMean at ε_eff = ln((2^B − T_f)/T_f) and the estimator is the
``onebit`` one of :mod:`ldptel.client.mechanisms.mean` (same state, same debias).

Longitudinal guarantee (ldp-math-2 §3.2–3.3, :mod:`~ldptel.client.mechanisms.longitudinal`): a device's
reports depend on its values only through c, and c's two memo entries are each ε∞ = ln((1 − f₁)/f₁) (f₁ the
PRR flip, rr's split). That protects the *level*, not the *change times*:

* a constant value costs ε∞ in total however often it is reported; two histories that change c at the same
  times are together within 2·ε∞ (≈ 3.3 at ε = 1), which :meth:`DailyMean.longitudinal_epsilon` reports and
  the SDK's lifetime ledger charges per privatization;
* *when* c changes is not covered by that: a device whose value crosses its own threshold switches memo
  entries, and the collector sees the switch better the more reports it has on each side. What holds for any
  two histories is ε_irr = ln((1 − f₂)/f₂) per report whose c differs (f₂ the IRR flip; 1.66 at ε = 1): 15
  days at lo then 15 at hi against 30 at lo is exactly 24.5-LDP at ε = 1, not 2·ε∞. So one report costs ε_irr
  given the others, and the daily budget charges ε_irr per report (:func:`~ldptel.client.mechanisms.longitudinal.report_charge`):
  a changing value is protected day by day like any fresh-noise metric.

A version that changes the privatization (the SDK's lifetime ledger charges it) or a new device secret starts
new memos (another 2·ε∞). The price of the memo: a one-bit report, so variance ≥ 1 − t² from the rounding;
for one-off reports :mod:`~ldptel.client.mechanisms.mean`'s dhm is more accurate.

Without a device secret (:meth:`DailyMean.privatize`, :meth:`DailyMean.privatize_batch`: simulations) α is
drawn fresh per report, which is exactly the onebit coin.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from ldptel.client.mechanisms.base import ReportBatch
from ldptel.client.mechanisms.capabilities import Permanent, Summary
from ldptel.client.mechanisms.delegating import Delegating
from ldptel.client.mechanisms.longitudinal import PermanentChannel
from ldptel.client.mechanisms.mean import MEAN, VALUE_BITS, MeanBatch, MeanParams, number_of
from ldptel.client.mechanisms.rr import RrParams, privatize_rr, rr_channel, rr_split
from ldptel.client.protocol.identity import IdentityCache, by_identity
from ldptel.client.protocol.keyed import prr_stream
from ldptel.client.protocol.params import SINGLE_DRAW_PROB_BITS, ParamsBase


@dataclass(frozen=True, slots=True, kw_only=True)
class DailyMeanParams(ParamsBase):
    """A repeatedly reported number clipped to [lo, hi] (module docstring): 1BitMean with α-point rounding
    and a permanent randomized response."""

    mechanism: ClassVar[str] = "daily-mean"
    lo: float
    hi: float
    prob_bits: int = SINGLE_DRAW_PROB_BITS

    def __post_init__(self) -> None:
        # validates ε, lo, hi and prob_bits (built here, never taken from _derived: the raw fields are not checked yet)
        one = MeanParams(epsilon=self.epsilon, lo=self.lo, hi=self.hi, variant="onebit", prob_bits=self.prob_bits)
        object.__setattr__(self, "epsilon", one.epsilon)
        object.__setattr__(self, "lo", one.lo)
        object.__setattr__(self, "hi", one.hi)

    @property
    def onebit(self) -> MeanParams:
        """The one-report channel: mean's onebit params (its sampler, state and estimator)."""
        return _derived(self).onebit

    @property
    def rr(self) -> RrParams:
        """The randomized response on the rounded bit (its flip threshold is the onebit one)."""
        return _derived(self).rr

    @property
    def effective_epsilon(self) -> float:
        return self.onebit.effective_epsilon


class _Derived:
    """What a validated :class:`DailyMeanParams` derives (its onebit and rr params, its permanent channel), built once
    per params object instead of on every access: report()'s path reads them several times per report, and building
    them validates them again."""

    __slots__ = ("onebit", "rr", "channel")

    def __init__(self, params: DailyMeanParams) -> None:
        self.onebit = MeanParams(
            epsilon=params.epsilon, lo=params.lo, hi=params.hi, variant="onebit", prob_bits=params.prob_bits)
        self.rr = RrParams(epsilon=params.epsilon, prob_bits=params.prob_bits)
        self.channel: PermanentChannel | None = None


_DERIVED: IdentityCache[_Derived] = {}  # by the params object itself: exact, and no field hashing per lookup


def _derived(params: DailyMeanParams) -> _Derived:
    return by_identity(_DERIVED, params, lambda: _Derived(params))


@lru_cache(maxsize=4096)
def _alpha(secret: bytes, metric: str, fingerprint: bytes) -> int:
    """The device's permanent α for (metric, privatization): derived once per process instead of per report."""
    return prr_stream(secret, metric, fingerprint, "daily-mean-alpha", b"").bits(VALUE_BITS)


@dataclass(frozen=True, eq=False, kw_only=True)
class DailyMeanBatch(ReportBatch):
    """daily-mean reports: ``bits``, one bit per report, packed MSB first (padding bits 0)."""

    mechanism: str = "daily-mean"


def rounded_bit(value: object, params: DailyMeanParams, *, secret: bytes, metric: str, fingerprint: bytes) -> bool:
    """c = 1[u + α ≥ 2^V] with the device's permanent α (HMAC of the secret, metric and privatization fingerprint)."""
    u = params.onebit.quantize_one(number_of(value))
    return u + _alpha(secret, metric, fingerprint) >= 1 << VALUE_BITS


class DailyMean(
    Delegating[DailyMeanParams, DailyMeanBatch, MeanParams, MeanBatch],
    Permanent[DailyMeanParams, DailyMeanBatch], Summary[DailyMeanParams, DailyMeanBatch],
):
    """1BitMean on the α-rounded bit with rr's permanent randomized response (module docstring)."""

    name = "daily-mean"
    code = 10
    params_type = DailyMeanParams
    batch_type = DailyMeanBatch
    inner = MEAN

    def inner_params(self, params: DailyMeanParams) -> MeanParams:
        return params.onebit

    def value_key(self, value: object, params: DailyMeanParams) -> bytes:
        return struct.pack("<d", number_of(value))

    def privatize_permanent(
        self, value: object, params: DailyMeanParams, *, secret: bytes, metric: str, fingerprint: bytes,
        rng: np.random.Generator | None = None,
    ) -> DailyMeanBatch:
        c = rounded_bit(value, params, secret=secret, metric=metric, fingerprint=fingerprint)
        out = privatize_rr(c, params.rr, secret=secret, metric=metric, fingerprint=fingerprint, rng=rng)
        return DailyMeanBatch(n=1, bits=out.bits)

    def longitudinal_epsilon(self, params: DailyMeanParams) -> float:
        """2·ε∞, the level: every report of the privatization a device ever sends, for histories that change
        its rounded bit at the same times (two memo entries). Change times cost ε_irr per report (module docs)."""
        return 2.0 * rr_split(params.rr).epsilon_inf

    def permanent_channel(self, params: DailyMeanParams) -> PermanentChannel:
        """rr's channel on c; the label is the quantized value u, rounded with the device's α (built once per params:
        the ledger's charge and ε∞ ask for it on every new spec)."""
        derived = _derived(params)
        if derived.channel is None:
            onebit = derived.onebit
            derived.channel = rr_channel(derived.rr, lambda value: onebit.quantize_one(number_of(value)), VALUE_BITS)
        return derived.channel

    def estimate_note(self, params: DailyMeanParams) -> str:
        return f"values clipped to [{params.lo:g}, {params.hi:g}] on the device; α-rounded one-bit reports"

    def shape(self, params: DailyMeanParams) -> str:
        return f"[{params.lo:g}, {params.hi:g}]"

    def params_schema(self) -> tuple[dict[str, Any], list[str]]:
        fields, _required = MEAN.params_schema()
        return {key: fields[key] for key in ("lo", "hi", "prob_bits")}, ["lo", "hi"]


DAILY_MEAN = DailyMean()
