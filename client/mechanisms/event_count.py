"""Events per device per day, counted on the device (Cobalt's event count): ``Reporter.count(metric)``.

The app calls ``Reporter.count(metric)`` any number of times a day. The device keeps the UTC day's count
locally (:mod:`ldptel.client.sdk.tally`: one row per metric, nothing finer than the day) and, during the next
UTC day, reports it once as a number clipped to [0, hi] through :mod:`~ldptel.client.mechanisms.mean`'s bounded
mean (the ``variant`` decides: one bit, or dhm's piecewise cells; same sampler, state and estimator, so the
estimate is mean's: events per reporting device per day, their sum over the reporting devices and the count of
reports, each with its interval).

Who reports: every device whose SDK runs on day D + 1 (a ``count()``, a ``flush()`` or a new Reporter) and that
has counted the metric before reports its count of day D, 0 when it had no event that day. A count of day D
that is not reported during day D + 1 (the app did not run) is dropped: every report describes exactly the day
before the day it arrives on. So an estimate for day D reads the reports received on day D + 1
(:meth:`~ldptel.client.mechanisms.capabilities.OnDevice.reported_days`).

Privacy: one fresh ε report per device and day (no permanent randomization: the count changes daily, and the
one report of a day needs no memo). A device's reports over D days are together D·ε-LDP (sequential composition;
365·ε a year), which is what the daily ledger charges: ε on the day the report is made. The tally itself never
leaves the device.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms.base import ReportBatch
from ldptel.client.mechanisms.capabilities import OnDevice, Summary
from ldptel.client.mechanisms.delegating import Delegating
from ldptel.client.mechanisms.mean import GRID, MEAN, MEAN_VARIANTS, SHARE_BITS, MeanBatch, MeanParams
from ldptel.client.protocol.params import SINGLE_DRAW_PROB_BITS, ParamsBase

MAX_HI = 1_000_000_000  # the largest clip bound: a count above it is a bug, not a day's events


@dataclass(frozen=True, slots=True, kw_only=True)
class EventCountParams(ParamsBase):
    """A day's count of ``Reporter.count()`` calls, clipped to [0, hi], reported once through mean's bounded
    mean (``variant``, ``window`` and ``pm_share`` as in :class:`~ldptel.client.mechanisms.mean.MeanParams`)."""

    mechanism: ClassVar[str] = "event-count"
    hi: float
    variant: str = "auto"
    window: int | None = None
    pm_share: int | None = None
    prob_bits: int = SINGLE_DRAW_PROB_BITS

    def __post_init__(self) -> None:
        if isinstance(self.hi, bool) or not isinstance(self.hi, (int, float)) or not 1 <= self.hi <= MAX_HI:
            raise InvalidParameterError("hi", f"a number in [1, {MAX_HI}] (the most events of one day that count)",
                                        self.hi)
        one = self.mean  # validates ε, the variant and resolves auto
        object.__setattr__(self, "epsilon", one.epsilon)
        object.__setattr__(self, "hi", one.hi)
        object.__setattr__(self, "variant", one.variant)
        object.__setattr__(self, "window", one.window)
        object.__setattr__(self, "pm_share", one.pm_share)

    @property
    def lo(self) -> float:
        return 0.0

    @property
    def mean(self) -> MeanParams:
        """The one-report channel: mean's params over [0, hi]."""
        return MeanParams(epsilon=self.epsilon, lo=0.0, hi=float(self.hi), variant=self.variant, window=self.window,
                          pm_share=self.pm_share, prob_bits=self.prob_bits)

    @property
    def effective_epsilon(self) -> float:
        return self.mean.effective_epsilon


@dataclass(frozen=True, eq=False, kw_only=True)
class EventCountBatch(ReportBatch):
    """event-count reports: mean's columns (``bits`` for onebit, ``cols`` for dhm)."""

    mechanism: str = "event-count"


def _count(value: object) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, float, np.floating)):
        from ldptel.client.errors import InvalidValueError

        raise InvalidValueError(f"event-count values must be counts (int), got {type(value).__name__}")
    x = float(value)
    if math.isnan(x) or x < 0:
        from ldptel.client.errors import InvalidValueError

        raise InvalidValueError("event-count values must be counts ≥ 0")
    return x


class EventCount(
    Delegating[EventCountParams, EventCountBatch, MeanParams, MeanBatch],
    OnDevice[EventCountParams, EventCountBatch], Summary[EventCountParams, EventCountBatch],
):
    """A day's event count, aggregated on the device, reported once through mean (module docstring)."""

    name = "event-count"
    code = 11
    params_type = EventCountParams
    batch_type = EventCountBatch
    inner = MEAN

    def inner_params(self, params: EventCountParams) -> MeanParams:
        return params.mean

    def inner_value(self, value: object) -> object:
        return _count(value)

    # ------------------------------------------------------------------------------------ on the device
    def period_days(self, params: EventCountParams) -> int:
        return 1

    def period_value(self, params: EventCountParams, counts: Sequence[int]) -> object:
        return int(sum(counts))

    # ---------------------------------------------------------------------------------- on the server
    def estimate_note(self, params: EventCountParams) -> str:
        return (f"events per device per day, counted on the device and clipped to [0, {params.hi:g}]; each device "
                f"reports day D's count once, on day D + 1 ({params.variant} reports); mean: per reporting device, "
                "sum: over the reporting devices")

    def plan_variants(self) -> tuple[dict[str, Any], ...]:
        return MEAN.plan_variants()

    def shape(self, params: EventCountParams) -> str:
        return f"[0, {params.hi:g}] {params.variant} daily"

    def params_schema(self) -> tuple[dict[str, Any], list[str]]:
        return {
            "hi": {"type": "number", "minimum": 1, "maximum": MAX_HI,
                   "description": "event-count: a day's count above it is reported as hi (clipped on the device)"},
            "variant": {"type": "string", "enum": list(MEAN_VARIANTS)},
            "window": {"type": ["integer", "null"], "minimum": 1, "maximum": GRID, "description": "dhm; null: chosen"},
            "pm_share": {"type": ["integer", "null"], "minimum": 0, "maximum": 1 << SHARE_BITS,
                         "description": "dhm: P(piecewise) × 2^16; null: chosen"},
            "prob_bits": {"type": "integer", "minimum": SINGLE_DRAW_PROB_BITS, "maximum": SINGLE_DRAW_PROB_BITS},
        }, ["hi"]


EVENT_COUNT = EventCount()
