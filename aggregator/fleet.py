"""Estimates for the whole fleet when devices take part with a secret ``sample_rate`` β < 1.

Each device of the fleet takes part in a metric on a day with probability β (decided on the device:
:mod:`ldptel.client.sdk.sampling`), so the S_v devices with value v that report are Binomial(C_v, β) of the fleet's
C_v. The fleet count is estimated by Ĉ_v = ĉ_v/β (ĉ_v the mechanism's unbiased count among the reporting
devices), unbiased for C_v, with

    Var Ĉ_v = Var_R(ĉ_v)/β² + C_v(1 − β)/β,   estimated with C_v = max(ĉ_v, 0)/β:  stderr² = V_R/β² + ĉ_v⁺(1 − β)/β²

(the randomization variance of the mechanism scaled, plus the sampling by β: a population uncertainty). The
fleet's device count (devices that would have reported with β = 1) is n/β with variance n(1 − β)/β². Shares
(ĉ/n) need no scaling. The amplified ε = ln(1 + β(e^ε − 1)) is shown beside these numbers only with the
sentence saying whom it holds against (:data:`~ldptel.client.protocol.specs.AMPLIFIED_EPSILON_NOTE`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldptel.client.mechanisms.state import Estimate
from ldptel.client.protocol.specs import AMPLIFIED_EPSILON_NOTE, MetricSpec

FLEET_MEANING = (
    "fleet: counts scaled by 1/sample_rate to the devices that would report with every device taking part; the "
    "stderr adds the sampling of devices by sample_rate to the privacy noise (a population uncertainty)"
)


@dataclass(frozen=True, eq=False)
class Fleet:
    """Fleet-scaled counts of an estimate (``counts``, ``stderr``: numpy arrays in the estimate's label order)."""

    sample_rate: float
    labels: tuple[str, ...]
    counts: np.ndarray
    stderr: np.ndarray
    devices: float  # n/β
    devices_stderr: float
    z: float
    epsilon: float
    amplified_epsilon: float

    def rows(self) -> list[dict[str, Any]]:
        lo, hi = self.counts - self.z * self.stderr, self.counts + self.z * self.stderr
        return [{"value": label, "estimate": float(c), "stderr": float(s), "ci_low": float(a), "ci_high": float(b)}
                for label, c, s, a, b in zip(self.labels, self.counts, self.stderr, lo, hi, strict=True)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "sample_rate": self.sample_rate, "meaning": FLEET_MEANING, "devices": self.devices,
            "devices_stderr": self.devices_stderr, "epsilon": self.epsilon,
            "amplified_epsilon": self.amplified_epsilon, "amplified_epsilon_note": AMPLIFIED_EPSILON_NOTE,
            "rows": self.rows(),
        }


def fleet_estimate(est: Estimate, sample_rate: float, *, epsilon: float = math.nan) -> Fleet:
    """The fleet-scaled counts of a count estimate ``est`` made from the reports of a β-sample (module docstring)."""
    beta = float(sample_rate)
    counts = np.asarray(est.counts, dtype=np.float64)
    var = np.asarray(est.stderr, dtype=np.float64) ** 2 / beta**2 + np.clip(counts, 0.0, None) * (1 - beta) / beta**2
    n = est.n
    amplified = math.log1p(beta * math.expm1(epsilon)) if math.isfinite(epsilon) else math.nan
    return Fleet(beta, est.labels, counts / beta, np.sqrt(var), n / beta, math.sqrt(n * (1 - beta)) / beta, est.z,
                 epsilon, amplified)


def fleet_of(spec: MetricSpec, est: Estimate, *, counts_rows: bool) -> Fleet | None:
    """The fleet block of a query over ``spec``'s reports: None when every device takes part (β = 1) or the rows
    are not counts (a mean needs no scaling)."""
    if spec.sample_rate >= 1.0 or not counts_rows:
        return None
    return fleet_estimate(est, spec.sample_rate, epsilon=spec.daily_epsilon)  # one draw covers a device's day
