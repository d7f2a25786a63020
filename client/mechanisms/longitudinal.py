"""What the SDK's repeated reports of one device disclose, stated per pair of value histories (issue 22 §1).

The SDK protects repeated values in one of two ways (:mod:`ldptel.client.sdk.memo`), and each protects the
*level* (which value) but not, by itself, the *pattern* (which reports carry the same value, that is when a
value changes). The bounds below are what is true; :func:`sequence_epsilon` computes them for two concrete
histories and ``tests/client/test_longitudinal_adversarial.py`` audits them empirically.

Permanent randomized response (rr, grr, daily-mean: :class:`~ldptel.client.mechanisms.capabilities.Permanent`).
Every label ℓ (rr: the bit; grr: the label; daily-mean: the α-rounded bit c) has one permanent answer b(ℓ),
"keep ℓ with probability p₁, else a uniformly drawn other label", derived from the device secret, and every
report passes b(ℓ) through fresh instantaneous noise, "keep with p₂, else another label" (:class:`PermanentChannel`).
With ε∞ = ln(p₁(d − 1)/(1 − p₁)) and ε_irr = ln(p₂(d − 1)/(1 − p₂)), for two histories X, X' reported at
the same times:

* **level**: if X and X' have the same pattern (reports t, s carry equal labels in X exactly when they do in
  X'), all reports together are (Σ ε∞ over the label classes whose label differs)-LDP: ε∞ for a constant
  value, at most 2·ε∞ for rr and daily-mean whatever the change times, as long as the collector compares
  histories that change at the same times;
* **anything else** (change times included): (number of reports whose label differs)·ε_irr. Changing one
  report's label changes only the input of that report's fresh noise, whose two outputs differ by at most
  e^ε_irr, whatever the other reports; chain over the reports that differ. The bound is nearly tight: 15
  reports at one label after 15 at another, against 30 at the first, is exactly 24.5-LDP at ε = 1
  (15·ε_irr = 24.9), and what counts is how many reports differ, not how many changes there are.

So one report given all the device's other reports costs ε_irr, more than its own effective ε
(ε_irr = 1.66 for ε = 1 with rr's even split): the daily ledger charges ε_irr per report for these mechanisms
(:func:`report_charge`, :attr:`~ldptel.client.protocol.specs.MetricSpec.daily_epsilon`), and the lifetime
ledger charges the level bound (:meth:`~ldptel.client.mechanisms.base.Mechanism.longitudinal_epsilon`).
A device whose value changes is therefore protected like any fresh-noise metric, day by day (D days of
changes: at most D·daily ε), and its level for ever by the lifetime ε∞.

Daily memo (every other mechanism): the first report of a value on a budget day is privatized afresh and
later reports of that value on that day resend it. For two histories: Σ over days of, per day, 0 when the
day's values are equal, (number of the day's value classes whose value differs)·ε when the day's pattern is
the same, and ∞ otherwise: which of one day's reports repeat a value is disclosed exactly (a resent report
equals its first one), never hidden. Days are independent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ldptel.client.protocol.params import ParamsBase

__all__ = ["PermanentChannel", "longitudinal_note", "report_charge", "sequence_epsilon"]


def _keep_epsilon(keep: Fraction, d: int) -> float:
    if keep >= 1:  # no noise in this stage (a spec with an extreme ε): nothing hidden
        return math.inf
    return math.log(keep.numerator * (d - 1)) - math.log(keep.denominator - keep.numerator)


@dataclass(frozen=True)
class PermanentChannel:
    """A mechanism's permanent randomized response and its instantaneous noise, as two "keep the label with
    probability p, else a uniform other one of the d labels" stages (exact rationals), and how a value picks
    its label.

    ``label(value)`` is the value's label; with ``rounding_bits`` = V > 0 it is instead the value's quantized
    position u ∈ [0, 2^V], and the device's label is c = 1[u + α ≥ 2^V] for its permanent offset
    α ∈ [0, 2^V) (daily-mean's α-point rounding).
    """

    d: int
    prr_keep: Fraction
    irr_keep: Fraction
    label: Callable[[object], int]
    rounding_bits: int = 0

    @property
    def epsilon_inf(self) -> float:
        """ε of every report of one label, ever: ln(p₁(d − 1)/(1 − p₁))."""
        return _keep_epsilon(self.prr_keep, self.d)

    @property
    def epsilon_irr(self) -> float:
        """ε of one report given every other report of the device: ln(p₂(d − 1)/(1 − p₂))."""
        return _keep_epsilon(self.irr_keep, self.d)

    def labels(self, values: Sequence[object], alpha: int = 0) -> list[int]:
        """The labels of ``values`` for a device with rounding offset ``alpha``."""
        raw = [self.label(v) for v in values]
        if not self.rounding_bits:
            return raw
        return [int(u + alpha >= 1 << self.rounding_bits) for u in raw]

    def alphas(self, values: Sequence[object]) -> list[int]:
        """Offsets α that give every label pattern ``values`` can have (one per interval between thresholds)."""
        if not self.rounding_bits:
            return [0]
        top = 1 << self.rounding_bits
        return sorted({0} | {top - self.label(v) for v in values if 0 < top - self.label(v) < top})


def _mechanism(params: ParamsBase) -> Any:
    from ldptel.client.mechanisms.registry import mechanism_of  # the registry imports every mechanism

    return mechanism_of(params)


def report_charge(params: ParamsBase) -> float:
    """ε one report costs given every other report its device sends: ε_irr under a permanent randomized
    response, else the effective ε (a fresh privatization). What the daily ledger charges per report."""
    channel = _mechanism(params).permanent_channel(params)
    return float(params.effective_epsilon if channel is None else channel.epsilon_irr)


def _same_pattern(a: Sequence[object], b: Sequence[object]) -> bool:
    """True when a[t] == a[s] exactly where b[t] == b[s] (a bijection between the classes)."""
    forward: dict[object, object] = {}
    backward: dict[object, object] = {}
    for x, y in zip(a, b, strict=True):
        if forward.setdefault(x, y) != y or backward.setdefault(y, x) != x:
            return False
    return True


def _permanent(channel: PermanentChannel, first: Sequence[object], second: Sequence[object]) -> float:
    worst = 0.0
    for alpha in sorted(set(channel.alphas(first)) | set(channel.alphas(second))):
        a, b = channel.labels(first, alpha), channel.labels(second, alpha)
        hamming = sum(x != y for x, y in zip(a, b, strict=True)) * channel.epsilon_irr
        level = math.inf
        if _same_pattern(a, b):
            level = len({x for x, y in zip(a, b, strict=True) if x != y}) * channel.epsilon_inf
        worst = max(worst, min(hamming, level))
    return worst


def _memo(mech: Any, params: ParamsBase, days: Sequence[int], first: Sequence[object], second: Sequence[object]) -> float:
    total = 0.0
    for day in sorted(set(days)):
        idx = [i for i, d in enumerate(days) if d == day]
        a = [mech.value_key(first[i], params) for i in idx]
        b = [mech.value_key(second[i], params) for i in idx]
        if a == b:
            continue
        if not _same_pattern(a, b):
            return math.inf
        total += len({x for x, y in zip(a, b, strict=True) if x != y}) * float(params.effective_epsilon)
    return total


def sequence_epsilon(
    params: ParamsBase, first: Sequence[object], second: Sequence[object], *, days: Sequence[int] | None = None
) -> float:
    """The ε the SDK guarantees between two value histories of one device under one privatization: the
    reports sent at the same times (``days[t]``: the budget day of report t; one report a day when None)
    with values ``first`` or ``second`` (the module docstring). ∞ where nothing is promised."""
    if len(first) != len(second):
        raise ValueError("the two histories must have the same number of reports")
    days = list(range(len(first))) if days is None else list(days)
    if len(days) != len(first):
        raise ValueError("days must give one budget day per report")
    mech = _mechanism(params)
    channel = mech.permanent_channel(params)
    if channel is not None:
        return _permanent(channel, first, second)
    return _memo(mech, params, days, first, second)


def longitudinal_note(params: ParamsBase) -> str:
    """One line for people choosing or reading a metric: what repeated reports of one device disclose."""
    mech = _mechanism(params)
    channel = mech.permanent_channel(params)
    period = getattr(mech, "period_days", None)  # aggregated on the device: one report per period
    if period is not None:
        w = int(period(params))
        per = "day" if w == 1 else f"{w}-day period"
        releases = -(-365 // w) + 1
        yearly = params.effective_epsilon if channel is None else channel.epsilon_irr
        head = (f"aggregated on the device: one report per {per}, at most {releases} a year (a year of reports: "
                f"ε ≤ {releases * yearly:.3g} between any two histories); ")
    else:
        head = ""
    if channel is None:
        return head + (f"repeated reports: one value's reports on one day are together ε {params.effective_epsilon:.3g} "
                       "(memoized); days add up; which of a day's reports repeat a value is not hidden")
    return head + (f"repeated reports: the level (histories with the same change times) is protected for life by "
                   f"ε {mech.longitudinal_epsilon(params):.3g}; when the value changes is not: each report costs "
                   f"ε {channel.epsilon_irr:.3g} given the others, and the daily budget charges that")
