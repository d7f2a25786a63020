"""Unique devices over 1-, 7-, 28- or 30-day windows, decided on the device (Cobalt's unique-device count).

The app calls ``Reporter.count(metric)`` whenever the event happens. The device records on which UTC days it
saw the event (:mod:`ldptel.client.sdk.tally`: a bitmap of the last 30 days, one row per metric) and, once per
window period, reports one bit, "I saw the event in that window", through :mod:`~ldptel.client.mechanisms.rr`'s
randomized response. Periods are aligned on 1970-01-01: period p of a W-day window is days [p·W, p·W + W − 1]
(W = 7: Thursday to Wednesday). Period p's bit is reported during period p + 1 (the first ``count()``,
``flush()`` or new Reporter then), by every device that has counted the metric before, 0 when it saw nothing;
a device whose SDK does not run during period p + 1 does not report period p.

The aggregator's estimate for a window reads the reports received during the next period
(:meth:`~ldptel.client.mechanisms.capabilities.OnDevice.reported_days`): rr's debiased count of ``active`` is the
estimated number of **unique devices that saw the event in the window, among the devices that sent a report for
it** (n, the reporting devices), with rr's interval. Devices that report 0 only add noise: the count of ``true``
is unbiased whether or not inactive devices report.

Privacy, one device, one privatization (the SDK's ledgers charge exactly this, :mod:`~ldptel.client.sdk.tally`):

* **Releases**: one per window period, at most ⌈365/W⌉ + 1 in a (leap) year (W = 1: 366, 7: 54, 28: 15, 30: 14),
  never more (the tally records the last period reported, in the same transaction as the report).
* **The bit changes over time**, so memoization alone does not cap the loss (the lesson of ``daily-mean``). The bit
  goes through rr's permanent randomized response: a PRR answer per bit value derived from the device secret,
  then fresh IRR noise (together exactly the spec's flip probability, so the estimator is rr's).
  - level: two histories whose bit changes at the same periods are together ≤ 2·ε∞-LDP for life (two PRR
    answers; ε∞ for a device whose bit never changes: always active, or never);
  - anything else (which periods the device was active in): ε_irr per release whose bit differs, composed
    sequentially: k differing releases cost k·ε_irr (≈ 1.66·k at ε = 1), at most (⌈365/W⌉ + 1)·ε_irr a
    year. :func:`~ldptel.client.mechanisms.longitudinal.sequence_epsilon` computes the exact claim for two
    histories; ``tests/client/test_on_device.py`` audits it with toggling histories.
* The ledgers: the daily ledger charges ε_irr on the day of each release (``reports_per_day`` is 1, and a release
  happens at most once per period); the lifetime ledger charges 2·ε∞ once per privatization; the device policy
  (and ``ldptel metrics create``'s default-policy check) refuses a spec whose ε_irr or 2·ε∞ is past its caps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms.base import ReportBatch
from ldptel.client.mechanisms.capabilities import Binary, Categorical, OnDevice, Permanent
from ldptel.client.mechanisms.delegating import Delegating
from ldptel.client.mechanisms.longitudinal import PermanentChannel
from ldptel.client.mechanisms.rr import RR, RrBatch, RrParams, privatize_rr, rr_channel, rr_split, rr_value_bytes
from ldptel.client.mechanisms.state import Estimate, SketchState
from ldptel.client.protocol.params import SINGLE_DRAW_PROB_BITS, ParamsBase

WINDOWS = (1, 7, 28, 30)  # window lengths in days (Cobalt's); the device keeps a bitmap of 30 days
LABELS = ("inactive", "active")  # rows of an estimate: devices that did not / did see the event in the window


def releases_per_year(window_days: int) -> int:
    """The most releases of one device in a year of 366 days: one per W-day period the year touches, at most
    ⌈365/W⌉ + 1 (W = 1: 366, 7: 54, 28: 15, 30: 14)."""
    return -(-365 // window_days) + 1


@dataclass(frozen=True, slots=True, kw_only=True)
class UniqueDevicesParams(ParamsBase):
    """Whether the device saw the event in each ``window_days``-day window, through rr (module docstring)."""

    mechanism: ClassVar[str] = "unique-devices"
    window_days: int
    prob_bits: int = SINGLE_DRAW_PROB_BITS

    def __post_init__(self) -> None:
        if isinstance(self.window_days, bool) or self.window_days not in WINDOWS:
            raise InvalidParameterError("window_days", f"one of {list(WINDOWS)}", self.window_days)
        rr = self.rr  # validates ε and prob_bits
        object.__setattr__(self, "epsilon", rr.epsilon)

    @property
    def rr(self) -> RrParams:
        return RrParams(epsilon=self.epsilon, prob_bits=self.prob_bits)

    @property
    def effective_epsilon(self) -> float:
        return self.rr.effective_epsilon


@dataclass(frozen=True, eq=False, kw_only=True)
class UniqueDevicesBatch(ReportBatch):
    """unique-devices reports: ``bits``, one bit per report (saw the event in the window), packed MSB first."""

    mechanism: str = "unique-devices"
    bits: np.ndarray


class UniqueDevices(
    Delegating[UniqueDevicesParams, UniqueDevicesBatch, RrParams, RrBatch],
    OnDevice[UniqueDevicesParams, UniqueDevicesBatch], Permanent[UniqueDevicesParams, UniqueDevicesBatch],
    Binary[UniqueDevicesParams, UniqueDevicesBatch], Categorical[UniqueDevicesParams, UniqueDevicesBatch],
):
    """One bit per device and window period, through rr's permanent randomized response (module docstring)."""

    name = "unique-devices"
    code = 12
    params_type = UniqueDevicesParams
    batch_type = UniqueDevicesBatch
    proportion_of = LABELS[1]
    inner = RR

    def inner_params(self, params: UniqueDevicesParams) -> RrParams:
        return params.rr

    # ------------------------------------------------------------------------------------ on the device
    def period_days(self, params: UniqueDevicesParams) -> int:
        return params.window_days

    def period_value(self, params: UniqueDevicesParams, counts: Sequence[int]) -> object:
        return any(c > 0 for c in counts)

    def privatize_permanent(
        self, value: object, params: UniqueDevicesParams, *, secret: bytes, metric: str, fingerprint: bytes,
        rng: np.random.Generator | None = None,
    ) -> UniqueDevicesBatch:
        return self.own_batch(privatize_rr(value, params.rr, secret=secret, metric=metric, fingerprint=fingerprint, rng=rng))

    def longitudinal_epsilon(self, params: UniqueDevicesParams) -> float:
        """2·ε∞, the level: the bit changes over time, so both of its PRR answers are used (module docstring)."""
        return 2.0 * rr_split(params.rr).epsilon_inf

    def permanent_channel(self, params: UniqueDevicesParams) -> PermanentChannel:
        return rr_channel(params.rr, lambda value: int(rr_value_bytes(value) == b"\x01"))

    # ---------------------------------------------------------------------------------- on the server
    def estimate(
        self, params: UniqueDevicesParams, state: SketchState, *, candidates: Sequence[object] | None = None,
        confidence: float = 0.95,
    ) -> Estimate:
        """rr's estimate with this mechanism's labels (:data:`LABELS`: rr's false/true are inactive/active)."""
        est = super().estimate(params, state, candidates=candidates, confidence=confidence)
        return Estimate(self.name, LABELS, est.counts, est.stderr, est.n, confidence)

    def bucket_covariance(self, params: UniqueDevicesParams, counts: np.ndarray, n: int) -> np.ndarray:
        return RR.bucket_covariance(params.rr, counts, n)

    def estimate_note(self, params: UniqueDevicesParams) -> str:
        w = params.window_days
        return (f"unique devices per {w}-day window: 'active' is the estimated number of devices that saw the event in "
                f"the window, among the n devices that sent a report for it (each reports once per window, during the "
                f"next {w} day{'s' if w > 1 else ''})")

    def shape(self, params: UniqueDevicesParams) -> str:
        return f"{params.window_days}-day window"

    def params_schema(self) -> tuple[dict[str, Any], list[str]]:
        return {
            "window_days": {"type": "integer", "enum": list(WINDOWS),
                            "description": "unique-devices: the window in days (one report per device per window)"},
            "prob_bits": {"type": "integer", "minimum": 2, "maximum": 32},
        }, ["window_days"]


UNIQUE_DEVICES = UniqueDevices()
