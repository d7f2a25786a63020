"""The device's own privacy policy: the most a served spec may make this device spend.

A spec fetched from the server (or adopted from a 409 answer, or cached from an earlier fetch) is only as
trustworthy as the server and the network path: anyone who can answer ``GET /v1/metrics/<name>`` could serve
ε = 30 with 10,000 reports a day. The app therefore sets a :class:`PrivacyPolicy` on the Reporter, and a
served spec beyond it is refused: ``report()`` returns status ``"policy_refused"`` with nothing privatized,
queued or spent, and ``on_error`` receives a :class:`PolicyRefusal` (once per metric version and reason).
Pinned specs are the app's own choice (compiled into it, like the policy) and are not checked; their spends
still count in the lifetime ledger.

The three bounds and their defaults:

``max_report_epsilon`` = 4
    ε of one report seen on its own (the spec's effective ε). 4 is the largest per-report ε of Apple's published
    deployments (emoji, Safari; "Learning with Privacy at Scale", 2017) and of this project's recommended sketch
    configurations: one report, to an observer who sees no other report of the device, shifts anyone's odds by
    at most e⁴ ≈ 55×. Under a permanent randomized response (rr, grr, daily-mean) a report *beside the device's
    other reports* costs ε_irr, more than ε (4.69 at ε = 4): that cost is what the daily bound below counts, and
    what the level bound's ε∞ covers; this bound is deliberately the one-shot ε, so it does not describe it.
``max_daily_epsilon`` = 8
    ε one metric may spend per UTC day (``reports_per_day`` × the per-report charge, what the ledger
    enforces: the effective ε, or ε_irr under a permanent randomized response; the spec's ``daily_epsilon``). 8 is
    Apple's largest published daily budget for one use case (QuickType: two donations of ε = 4).
``max_longitudinal_epsilon`` = 8
    The lifetime bound ε∞ for the level of one value of a metric with a permanent randomized response (rr,
    grr, daily-mean; change times are charged daily instead, :mod:`ldptel.client.mechanisms.longitudinal`): the sum
    of ε∞ over every distinct privatization (:func:`~ldptel.client.protocol.keyed.privatization_fingerprint`)
    the device ever used for the metric (:mod:`ldptel.client.sdk.ledger`). Equal to one day's budget: all
    reports ever of one value disclose no more than one day of reports may; that allows a first
    privatization at ε = 4 (ε∞ = 4.69) or four at ε = 1 (1.66 each). Versions that only change metadata share
    one privatization and cost nothing more.

``math.inf`` disables a bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ldptel.client.protocol.validate import check_number
from ldptel.client.sdk.notify import UploadError

if TYPE_CHECKING:  # pragma: no cover
    from ldptel.client.protocol.specs import MetricSpec

__all__ = [
    "DEFAULT_MAX_DAILY_EPSILON",
    "DEFAULT_MAX_LONGITUDINAL_EPSILON",
    "DEFAULT_MAX_REPORT_EPSILON",
    "PolicyRefusal",
    "PrivacyPolicy",
]

DEFAULT_MAX_REPORT_EPSILON = 4.0
DEFAULT_MAX_DAILY_EPSILON = 8.0
DEFAULT_MAX_LONGITUDINAL_EPSILON = 8.0
_SLACK = 1e-9  # relative: a spec exactly at a bound is within it despite float rounding


@dataclass(frozen=True, slots=True, kw_only=True)
class PrivacyPolicy:
    """The most a served spec may make this device spend (see the module docs for the defaults' reasons)."""

    max_report_epsilon: float = DEFAULT_MAX_REPORT_EPSILON
    max_daily_epsilon: float = DEFAULT_MAX_DAILY_EPSILON
    max_longitudinal_epsilon: float = DEFAULT_MAX_LONGITUDINAL_EPSILON

    def __post_init__(self) -> None:
        for name in ("max_report_epsilon", "max_daily_epsilon", "max_longitudinal_epsilon"):
            check_number(name, getattr(self, name), 0.0, math.inf, open_interval=True, allow_inf=True)

    def spec_refusal(self, spec: MetricSpec) -> str | None:
        """Why this policy refuses ``spec`` (None when it is within): its ε per report, per day (what the
        ledger charges) and its lifetime ε∞. What the Reporter checks a served spec with, and what
        ``ldptel metrics create|apply|plan`` and ``POST /v1/metrics`` check against the default policy."""
        from ldptel.client.mechanisms.registry import mechanism_of  # the registry imports every mechanism

        return self.refusal(report=spec.effective_epsilon, daily=spec.daily_epsilon,
                            longitudinal=float(mechanism_of(spec.params).longitudinal_epsilon(spec.params)))

    def refusal(self, *, report: float, daily: float, longitudinal: float) -> str | None:
        """Why a spec with these ε's is beyond the policy (None when it is within)."""
        for what, value, cap in (
            ("report_epsilon", report, self.max_report_epsilon),
            ("daily_epsilon", daily, self.max_daily_epsilon),
            ("longitudinal_epsilon", longitudinal, self.max_longitudinal_epsilon),
        ):
            if not within(value, cap):
                return f"{what} {value:.4g} is above the device policy's maximum {cap:.4g}"
        return None


def within(value: float, cap: float) -> bool:
    """``value ≤ cap`` up to float rounding."""
    return value <= cap * (1 + _SLACK)


class PolicyRefusal(UploadError):
    """A spec (or a new privatization of a metric) is beyond the device's :class:`PrivacyPolicy`: nothing was
    privatized. ``reason`` says which bound and by how much; passed to ``on_error``, never raised."""

    def __init__(self, message: str, *, metric: str, version: int, reason: str) -> None:
        super().__init__(message, outcome="policy", metric=metric, version=version)
        self.reason = reason
