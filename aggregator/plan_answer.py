"""The planner's answer in the asker's terms: one recommendation, the assumptions it rests on, and warnings.

:mod:`ldptel.aggregator.plan` ranks every (mechanism, ε, k, m) for a frequency target; this module turns a
question a product engineer asks into one of those plans (or the mean, percentile and discovery planners
below) and answers it with a :class:`Answer`: the mechanism and params to create, ε with what it means (a
report changes the odds of any conclusion about its sender by at most e^ε), the ± reached in the question's
unit (percentage points for shares, value units for a mean, percentile points for a percentile), the days of
data it takes, and warnings when the target cannot answer the question (a top-k whose k-th value is not
resolved by the ±, for one).

Question types (:data:`QUESTIONS`):

* ``share``: the share of devices for which something is true (a yes/no metric; d = 2).
* ``category``: the share of each of d values.
* ``top-k``: the k most frequent of many values (emoji, screens). The shares are modelled Zipf-shaped (f(i) ∝
  i^−s; s = 1 unless the top value's share is given) over d values (1,000 unless given: see
  :data:`DEFAULT_TOP_K_DOMAIN`); the k-th value's share and its gap to the (k+1)-th decide whether the ±
  ranks it.
* ``mean``: the mean of a number clipped to [lo, hi].
* ``percentile``: a percentile of a number over [lo, hi] from a bucketed histogram: the ± is in percentile
  points of rank (the estimate lies between the true p−± and p+±), plus the bucket width.
* ``discovery``: frequent values without a candidate list (free text): the smallest share found.

Nothing here names a mechanism: mechanisms are chosen by their ``kind`` and their params schema.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any

import numpy as np

from ldptel.aggregator.plan import (
    DEFAULT_EPSILONS,
    DEFAULT_K,
    DEFAULT_M,
    MAX_REPORTS,
    MeanPlanRow,
    Plan,
    PlanRow,
    evaluate,
    half_widths,
    plan,
    plan_mean,
    zipf_power_sum,
)
from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms import mechanisms
from ldptel.client.mechanisms.state import DEFAULT_ALPHA, DEFAULT_KEEP, z_value
from ldptel.client.protocol.params import ParamsBase, check_epsilon
from ldptel.client.protocol.specs import params_from_dict
from ldptel.client.protocol.validate import check_int, check_number

SCHEMA_VERSION = 1  # of the JSON ``ldptel plan --format json`` prints (docs/json-output.md)
QUESTIONS = ("share", "category", "top-k", "mean", "percentile", "discovery")
DEFAULT_TOP_K_DOMAIN = 1000
DEFAULT_TOP_K_DOMAIN_REASON = (
    "assumed 1,000 distinct values (pass --domain-size D when you know it): with a sketch the ± does not depend "
    "on d except through hash collisions, and the Zipf model's k-th share moves slowly with d (the harmonic sum "
    "grows like ln d: 10× more values lowers every share by about a quarter)"
)
DEFAULT_BUCKETS = 32
DEFAULT_MAX_BYTES = 16
DISCOVERY_POWER = 0.9  # a value at the smallest share reported is found with this probability
DEFAULT_WINDOW_DAYS = 7  # the alternative line: the lowest ε that reaches the target within a week


def odds_text(epsilon: float) -> str:
    """e^ε for people: '2.72×', '54.6×', '2,981×'."""
    value = odds_bound(epsilon)
    return f"{value:.3g}×" if value < 100 else f"{value:,.0f}×"


def odds_bound(epsilon: float) -> float:
    """e^ε: the most one report can change the odds of any conclusion about the device that sent it."""
    return math.exp(epsilon)


@dataclass(frozen=True, kw_only=True)
class CentralLine:
    """The central (ε, δ) a day's reports would have if shuffled as one block (or why there is none)."""

    epsilon: float | None
    delta: float | None
    text: str


def central_privacy(params: ParamsBase | None, reports: int) -> CentralLine:
    """h28a's bound (:func:`ldptel.aggregator.amplification.central_for_n`) for ``reports`` of ``params`` in one
    shuffled block: what the planned daily volume buys once the shuffle stage runs (one report per device a day;
    the released blocks can be smaller than a day, which only raises it: the estimate page shows the real one)."""
    from ldptel.aggregator.amplification import central_for_n
    from ldptel.client.protocol.specs import MetricSpec

    if params is None:
        return CentralLine(epsilon=None, delta=None, text="")
    central = central_for_n(MetricSpec(name="plan", params=params), reports)
    if not central.applicable:
        return CentralLine(epsilon=None, delta=None, text=f"; {central.line()}")
    return CentralLine(epsilon=central.epsilon, delta=central.delta,
                       text=f"; shuffled, a day's {reports:,} reports give central ε ≈ {central.epsilon:.3g} at δ = {central.delta:.0e}")


def central_epsilon(params: ParamsBase | None, reports: int) -> float | None:
    """The central ε of :func:`central_privacy` (None when the bound does not apply)."""
    return central_privacy(params, reports).epsilon


def pp(share: float) -> str:
    """A share as percentage points: 0.01 → '1 pp', 0.00056 → '0.056 pp'."""
    return f"{share * 100:.2g} pp" if share * 100 < 1 else f"{share * 100:.3g} pp"


def _days(needed: int | None, per_day: int | None) -> int | None:
    if needed is None or per_day is None:
        return None
    return max(1, math.ceil(needed / per_day))


def _when(days: int | None, needed: int | None, per_day: int | None, total: int | None) -> str:
    """'with one day of data' / 'after 3 days of data' / 'with the 10,000 reports' / 'never'."""
    if needed is None:
        return "never (below the sketch's collision floor: more data does not help)"
    if per_day is None:
        return f"with {needed:,} reports" + ("" if total is None or needed <= total else f" (you have {total:,})")
    return "with one day of data" if days == 1 else f"after {days} days of data (a {days}-day window: --days {days})"


@dataclass(frozen=True, kw_only=True)
class Answer:
    """The answer to a planning question (the one-line recommendation is :attr:`line`)."""

    question: str
    reachable: bool  # some plan meets the target (possibly after several days)
    mechanism: str | None
    params: dict[str, Any]  # the params to create it with (TOML keys = ``metrics create`` flags)
    epsilon: float | None
    effective_epsilon: float | None
    odds_bound: float | None  # e^ε (effective)
    central_epsilon: float | None  # a day's reports shuffled as one block (None: the bound does not apply)
    target: float  # in ``unit``
    error: float | None  # the ± reached with the days below, in ``unit``
    error_one_day: float | None  # the ± of one day's reports (or of the total), in ``unit``
    unit: str  # "pp" (percentage points), "value" (the number's units), "percentile points", "share"
    reports_needed: int | None
    days: int | None  # None for a one-off total, or when unreachable
    reports_per_day: int | None
    reports: int | None
    confidence: float
    line: str
    central_delta: float | None = None
    alternative: str | None = None
    assumptions: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question, "reachable": self.reachable, "recommendation": self.line,
            "alternative": self.alternative, "mechanism": self.mechanism, "params": self.params,
            "epsilon": self.epsilon, "effective_epsilon": self.effective_epsilon, "odds_bound": self.odds_bound,
            "central_epsilon": self.central_epsilon, "central_delta": self.central_delta, "target": self.target, "error": self.error,
            "error_one_day": self.error_one_day, "unit": self.unit, "reports_needed": self.reports_needed,
            "days": self.days, "reports_per_day": self.reports_per_day, "reports": self.reports,
            "confidence": self.confidence, "assumptions": list(self.assumptions), "warnings": list(self.warnings),
            **self.extra,
        }  # fmt: skip


ANSWER_KEYS = (
    "question", "reachable", "recommendation", "alternative", "mechanism", "params", "epsilon", "effective_epsilon",
    "odds_bound", "central_epsilon", "central_delta", "target", "error", "error_one_day", "unit", "reports_needed", "days",
    "reports_per_day", "reports", "confidence", "assumptions", "warnings",
)  # fmt: skip


def _eps_phrase(eps: float, effective: float, central: CentralLine) -> str:
    return (f"ε = {eps:g} (one report changes the odds of anything learned about its sender by at most "
            f"e^{effective:.3g} ≈ {odds_text(effective)}{central.text})")


# ------------------------------------------------------------------------------- frequency questions
def _row_params(row: PlanRow, d: int) -> dict[str, Any]:
    out: dict[str, Any] = {"mechanism": row.mechanism, "epsilon": row.epsilon}
    if row.k is not None:
        out.update(k=row.k, m=row.m)
    else:
        mech = next(m for m in mechanisms() if m.name == row.mechanism)
        if "domain" in mech.params_schema()[0]:
            out["domain"] = f"<your {d:,} values>"
    return out


def _params_dict(row: PlanRow) -> dict[str, Any]:
    return {"mechanism": row.mechanism, "epsilon": row.epsilon, **({} if row.k is None else {"k": row.k, "m": row.m})}


def _share_of_rank(i: int, exponent: float, d: int) -> float:
    return math.pow(i, -exponent) / zipf_power_sum(a=exponent, d=d)


def answer_frequencies(result: Plan, *, question: str, top_k: int | None = None,
                       assumptions: Sequence[str] = ()) -> Answer:
    """Answer a share / category / top-k question from a ranked frequency :class:`Plan`."""
    req = result.request
    per_day, total = req.reports_per_day, req.reports
    best = result.rows[0]
    target = req.target
    reachable = best.reports_needed is not None
    days = best.days_needed
    error_one = max(best.heavy_error, best.rare_error)
    mech = next(m for m in mechanisms() if m.name == best.mechanism)
    params = params_from_dict({**_params_dict(best), **_labels_params(mech, req.domain_size)})
    error = error_one
    if reachable and per_day is not None and days is not None and days > 1:  # the ± of the days' reports together
        error = max(half_widths(mechanism=mech, params=params, model=result.model, n=per_day * days, z=result.z))
    what = {"share": "the share", "category": "every value's share", "top-k": f"each of the top {top_k}'s shares"}[question]
    central = central_privacy(params, req.n)
    if reachable:
        line = (f"Recommendation: {best.mechanism}" + ("" if best.k is None else f" (k = {best.k}, m = {best.m})")
                + f" at {_eps_phrase(best.epsilon, best.effective_epsilon, central)}: {what} within ±{pp(min(error, target))} "
                f"at {req.confidence:.0%} confidence {_when(days, best.reports_needed, per_day, total)}.")
    else:
        line = (f"No plan reaches ±{pp(target)}: the best, {best.mechanism} at ε = {best.epsilon:g}, gives ±{pp(error_one)} "
                "and a sketch's collisions put a floor under it; raise ε, use a larger k × m, or widen the target.")
    alternative = None
    if reachable and per_day is not None:
        within = [r for r in result.rows if r.days_needed is not None and r.days_needed <= DEFAULT_WINDOW_DAYS]
        cheaper = min(within, key=lambda r: (r.epsilon, r.days_needed or 0), default=None)
        if cheaper is not None and cheaper.epsilon < best.epsilon:
            alternative = (f"More privacy for more days: {cheaper.mechanism} at ε = {cheaper.epsilon:g} "
                           f"(odds ≤ {odds_text(cheaper.effective_epsilon)}) reaches ±{pp(target)} after "
                           f"{cheaper.days_needed} days of data.")
    warnings: list[str] = []
    extra: dict[str, Any] = {}
    if top_k is not None:
        model = result.model
        k = min(top_k, model.d)
        p_k = _share_of_rank(k, model.exponent, model.d)
        p_next = _share_of_rank(k + 1, model.exponent, model.d) if k < model.d else 0.0
        gap = p_k - p_next
        extra = {"top_k": top_k, "kth_share": p_k, "next_share": p_next}
        reached = min(error, target) if reachable else error_one
        if reached >= gap / 2:
            need_target = gap / 2
            ranked = max((i for i in range(1, k) if (_share_of_rank(i, model.exponent, model.d)
                                                     - _share_of_rank(i + 1, model.exponent, model.d)) / 2 > reached),
                         default=0)  # fmt: skip
            fix = " No plan in the grid reaches that ±: ask for fewer values (--top-k), or a wider target."
            tail_best: PlanRow | None = None
            if need_target > 0:
                tail_best = evaluate(request=replace(req, error=need_target, error_count=None)).rows[0]
            if tail_best is not None and tail_best.reports_needed is not None:
                fix = (f" Ranking it needs ±{pp(need_target)}: {tail_best.mechanism}"
                       + ("" if tail_best.k is None else f" ({tail_best.k}×{tail_best.m})")
                       + f" at ε = {tail_best.epsilon:g} with {tail_best.reports_needed:,} reports"
                       + ("" if per_day is None else f" ({tail_best.days_needed:,} days at {per_day:,}/day)") + ".")
            scope = "the share itself" if reached >= p_k else f"half the gap to the {_ordinal(k + 1)} ({pp(gap)})"
            warnings.append(
                f"±{pp(reached)} cannot rank the tail: in the model the {_ordinal(k)} value holds about {pp(p_k)} of "
                f"reports and the {_ordinal(k + 1)} {pp(p_next)}; ±{pp(reached)} is more than {scope}, so values near "
                f"rank {k} can swap places or fall out of the top {k} (it orders the top {ranked} reliably).{fix}")
            extra["tail_target"] = need_target * 100
            extra["tail_reports_needed"] = None if tail_best is None else tail_best.reports_needed
            extra["ranked_reliably"] = ranked
    unit_scale = 100.0  # shares are reported in percentage points
    return Answer(
        question=question, reachable=reachable, mechanism=best.mechanism, params=_row_params(best, req.domain_size),
        epsilon=best.epsilon, effective_epsilon=best.effective_epsilon, odds_bound=odds_bound(best.effective_epsilon),
        central_epsilon=central.epsilon, central_delta=central.delta, target=target * unit_scale,
        error=(min(error, target) if reachable else error_one) * unit_scale, error_one_day=error_one * unit_scale,
        unit="pp", reports_needed=best.reports_needed, days=days, reports_per_day=per_day, reports=total,
        confidence=req.confidence, line=line, alternative=alternative, assumptions=tuple(assumptions),
        warnings=tuple(warnings), extra=extra,
    )  # fmt: skip


def _labels_params(mech: Any, d: int) -> dict[str, Any]:
    return {"domain": tuple(f"v{i}" for i in range(d))} if "domain" in mech.params_schema()[0] else {}


def _ordinal(i: int) -> str:
    suffix = "th" if 10 <= i % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(i % 10, "th")
    return f"{i}{suffix}"


def frequency_question(
    *, question: str, reports_per_day: int | None, reports: int | None, error: float | None,
    error_count: float | None = None, confidence: float = 0.95,
    domain_size: int | None = None, top_k: int | None = None, top_share: float | None = None,
    epsilon: Sequence[float] = DEFAULT_EPSILONS, k: Sequence[int] = DEFAULT_K, m: Sequence[int] = DEFAULT_M,
    shards: int = 1,
) -> tuple[Plan, Answer]:
    """Plan and answer a share / category / top-k question (see the module docstring for the defaults)."""
    assumptions: list[str] = []
    if question == "share":
        d = 2
        if domain_size not in (None, 2):
            raise InvalidParameterError("domain_size", "2 for a yes/no share (or ask a category question)", domain_size)
        if top_share is None:
            assumptions.append("the share is taken at 50%, where its ± is largest")
    elif question == "top-k":
        if top_k is None:
            raise InvalidParameterError("top_k", "the number of values to rank", top_k)
        check_int("top_k", top_k, 1, 1 << 20)
        if domain_size is None:
            d = max(DEFAULT_TOP_K_DOMAIN, 2 * top_k)
            assumptions.append(DEFAULT_TOP_K_DOMAIN_REASON if d == DEFAULT_TOP_K_DOMAIN else
                               f"assumed {d:,} distinct values (twice the top {top_k}; pass --domain-size D)")
        else:
            d = domain_size
        if top_share is None:
            top_share = 1.0 / zipf_power_sum(a=1.0, d=d)
            assumptions.append(f"shares Zipf-shaped with exponent 1 (how emoji, words and screens are usually used): "
                               f"the top value holds {top_share:.1%} (pass --top-share to change it)")
    else:
        if domain_size is None:
            raise InvalidParameterError("domain_size", "the number of values of a category (--domain-size D), "
                                        "or ask for --top-k K to use a default", domain_size)
        d = domain_size
    result = plan(domain_size=d, reports_per_day=reports_per_day, reports=reports, top_share=top_share, error=error,
                  error_count=error_count, confidence=confidence, epsilon=epsilon, k=k, m=m, shards=shards)
    return result, answer_frequencies(result, question=question, top_k=top_k, assumptions=assumptions)


# ----------------------------------------------------------------------------------------------- mean
def answer_mean(rows: Sequence[MeanPlanRow], *, lo: float, hi: float, error: float, reports_per_day: int | None,
                reports: int | None, confidence: float, assumptions: Sequence[str] = ()) -> Answer:
    """The lowest ε whose chosen variant meets ``error`` (value units) with one day (or the total), else the
    fewest days; ties by fewer bits."""
    n = reports_per_day if reports_per_day is not None else reports
    assert n is not None
    chosen = [r for r in rows if r.chosen] or list(rows)

    def needed(r: MeanPlanRow) -> int | None:
        return r.typical_reports_needed if r.typical_reports_needed is not None else r.reports_needed

    def key(r: MeanPlanRow) -> tuple[Any, ...]:
        need = needed(r) or MAX_REPORTS
        return (need > n, _days(need, reports_per_day) or need, r.epsilon, r.bits_per_report)

    best = min(chosen, key=key)
    need = needed(best)
    days = _days(need, reports_per_day)
    one = best.typical_mean_error if best.typical_mean_error is not None else best.mean_error
    err = one / math.sqrt(days) if days else one
    variant = best.shape.rsplit(" ", 1)[-1] if " " in best.shape else None
    params: dict[str, Any] = {"mechanism": best.mechanism, "epsilon": best.epsilon, "lo": lo, "hi": hi}
    if variant and not variant.startswith("["):
        params["variant"] = variant
    central = central_privacy(params_from_dict(params), n)
    line = (f"Recommendation: {best.mechanism}" + ("" if "variant" not in params else f" ({params['variant']})")
            + f" at {_eps_phrase(best.epsilon, best.effective_epsilon, central)}: the mean within ±{min(err, error):.4g} "
            f"({min(err, error) / (hi - lo):.2%} of the range [{lo:g}, {hi:g}]) at {confidence:.0%} confidence "
            f"{_when(days, need, reports_per_day, reports)}.")
    warnings = []
    if reports is not None and need is not None and need > reports:
        warnings.append(f"{reports:,} reports give ±{one:.4g}, wider than the target ±{error:.4g}: {need:,} are needed.")
    return Answer(
        question="mean", reachable=need is not None, mechanism=best.mechanism, params=params, epsilon=best.epsilon,
        effective_epsilon=best.effective_epsilon, odds_bound=odds_bound(best.effective_epsilon),
        central_epsilon=central.epsilon, central_delta=central.delta, target=error, error=min(err, error),
        error_one_day=one, unit="value", reports_needed=need, days=days, reports_per_day=reports_per_day,
        reports=reports, confidence=confidence, line=line, assumptions=tuple(assumptions), warnings=tuple(warnings),
    )  # fmt: skip


def mean_question(*, lo: float, hi: float, error: float, reports_per_day: int | None, reports: int | None,
                  confidence: float = 0.95, epsilon: Sequence[float] = DEFAULT_EPSILONS,
                  typical: Sequence[float] | np.ndarray | None = None) -> tuple[tuple[MeanPlanRow, ...], Answer]:
    n = reports_per_day if reports_per_day is not None else reports
    if n is None:
        raise InvalidParameterError("reports_per_day", "given, or else reports (a total)", None)
    rows = plan_mean(lo=lo, hi=hi, n=n, epsilons=epsilon, error=error, confidence=confidence, typical=typical)
    assumptions = [] if typical is not None else ["worst case over where the mean lies (give --mean-guess or --pilot for yours)"]
    return rows, answer_mean(rows, lo=lo, hi=hi, error=error, reports_per_day=reports_per_day, reports=reports,
                             confidence=confidence, assumptions=assumptions)


# ----------------------------------------------------------------------------------------- percentile
@dataclass(frozen=True, kw_only=True)
class PercentileRow:
    """One ε of a bucketed histogram: the ± of the percentile's rank at n reports (percentile points)."""

    mechanism: str
    epsilon: float
    effective_epsilon: float
    buckets: int
    encoding: str
    rank_error: float  # percentile points at n reports
    reports_needed: int  # for the target rank error
    bucket_width: float

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def _histogram_mechanism() -> Any:
    found = [m for m in mechanisms() if m.kind == "histogram" and "edges" in m.params_schema()[0]]
    if not found:
        raise InvalidParameterError("percentile", "a registered histogram mechanism", None)
    return found[0]


def percentile_rows(*, lo: float, hi: float, percentile: float, buckets: int, n: int, error: float,
                    confidence: float, epsilon: Sequence[float]) -> tuple[PercentileRow, ...]:
    """The rank ± of ``percentile`` (0..100) at n reports for a histogram of ``buckets`` equal buckets over
    [lo, hi], values spread evenly (each bucket n/buckets): z·√Var(S_J)/n for J the buckets below it, Var
    from the mechanism's own ``prefix_sums``; it scales as 1/√n, so the target needs n·(±/target)² reports."""
    mech = _histogram_mechanism()
    z = z_value(confidence)
    edges = tuple(float(e) for e in np.linspace(lo, hi, buckets + 1))
    counts = np.full(buckets, n / buckets)
    j = min(buckets - 1, max(1, round(percentile / 100 * buckets)))
    rows = []
    for eps in epsilon:
        params = params_from_dict({"mechanism": mech.name, "epsilon": check_epsilon(eps), "edges": edges})
        _, var = mech.prefix_sums(params, counts, n)
        rank = z * math.sqrt(float(var[j])) / n
        needed = max(1, math.ceil(n * (rank / error) ** 2))
        rows.append(PercentileRow(mechanism=mech.name, epsilon=eps, effective_epsilon=params.effective_epsilon,
                                  buckets=buckets, encoding=str(getattr(params, "encoding", "")),
                                  rank_error=rank, reports_needed=needed, bucket_width=(hi - lo) / buckets))
    return tuple(rows)


def percentile_question(*, lo: float, hi: float, percentile: float, error: float, reports_per_day: int | None,
                        reports: int | None, confidence: float = 0.95, buckets: int = DEFAULT_BUCKETS,
                        epsilon: Sequence[float] = DEFAULT_EPSILONS) -> tuple[tuple[PercentileRow, ...], Answer]:
    """Plan a percentile: ``error`` is a rank half-width as a share (0.01: the estimate lies between the true
    p−1 and p+1 percentiles)."""
    check_number("percentile", percentile, 0.0, 100.0, open_interval=True)
    check_int("buckets", buckets, 2, 4096)
    n = reports_per_day if reports_per_day is not None else reports
    if n is None:
        raise InvalidParameterError("reports_per_day", "given, or else reports (a total)", None)
    rows = percentile_rows(lo=lo, hi=hi, percentile=percentile, buckets=buckets, n=n, error=error,
                           confidence=confidence, epsilon=epsilon)
    best = min(rows, key=lambda r: (r.reports_needed > n, _days(r.reports_needed, reports_per_day) or r.reports_needed, r.epsilon))
    days = _days(best.reports_needed, reports_per_day)
    err = best.rank_error / math.sqrt(days) if days else best.rank_error
    width = best.bucket_width
    edges = tuple(float(e) for e in np.linspace(lo, hi, buckets + 1))
    central = central_privacy(params_from_dict({"mechanism": best.mechanism, "epsilon": best.epsilon, "edges": edges}), n)
    line = (f"Recommendation: {best.mechanism} over {buckets} buckets of [{lo:g}, {hi:g}] at "
            f"{_eps_phrase(best.epsilon, best.effective_epsilon, central)}: p{percentile:g} within ±{min(err, error) * 100:.2g} "
            f"percentile points of rank at {confidence:.0%} confidence {_when(days, best.reports_needed, reports_per_day, reports)}.")
    assumptions = [f"values spread evenly over [{lo:g}, {hi:g}] ({buckets} buckets of {width:g}; pass --buckets)"]
    warnings = [f"the value of p{percentile:g} is interpolated inside a bucket {width:g} wide: where the data is "
                "dense in one bucket, more buckets (or log-scaled ones: --scale log) resolve it better."]
    params = {"mechanism": best.mechanism, "epsilon": best.epsilon, "lo": lo, "hi": hi, "buckets": buckets}
    return rows, Answer(
        question="percentile", reachable=True, mechanism=best.mechanism, params=params, epsilon=best.epsilon,
        effective_epsilon=best.effective_epsilon, odds_bound=odds_bound(best.effective_epsilon),
        central_epsilon=central.epsilon, central_delta=central.delta, target=error * 100, error=min(err, error) * 100,
        error_one_day=best.rank_error * 100, unit="percentile points", reports_needed=best.reports_needed, days=days,
        reports_per_day=reports_per_day, reports=reports, confidence=confidence, line=line,
        assumptions=tuple(assumptions), warnings=tuple(warnings), extra={"percentile": percentile, "bucket_width": width},
    )  # fmt: skip


# ------------------------------------------------------------------------------------------ discovery
@dataclass(frozen=True, kw_only=True)
class DiscoveryRow:
    """One (ε, k, m) of the discovery mechanism: the smallest share it finds at n reports."""

    mechanism: str
    epsilon: float
    effective_epsilon: float
    k: int
    m: int
    max_bytes: int
    min_share: float  # found with probability DISCOVERY_POWER at n reports
    reports_needed: int | None  # for the target share

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def _discovery_mechanism() -> Any:
    found = [m for m in mechanisms() if m.kind == "discovery" and "max_bytes" in m.params_schema()[0]]
    if not found:
        raise InvalidParameterError("discover", "a registered discovery mechanism", None)
    return found[0]


def values_tested(max_bytes: int, keep: int = DEFAULT_KEEP) -> int:
    """C: how many values a discovery run can test (the Bonferroni count of its threshold)."""
    s = [1]
    for _ in range(1, max_bytes):
        s.append(min(keep, 255 * s[-1]))
    return sum(s[1:]) + 255 * s[-1]


def smallest_found(mech: Any, params: ParamsBase, n: int, *, alpha: float = DEFAULT_ALPHA,
                   keep: int = DEFAULT_KEEP) -> float:
    """The share s whose count s·n clears the discovery threshold z_C·sd (z_C = Φ⁻¹(1 − α/C)) with probability
    :data:`DISCOVERY_POWER`: s·n = (z_C + z_power)·√Var(s·n), Var the mechanism's (a value of max_bytes bytes:
    the worst case), solved by fixed point (Var grows slowly with s). Collisions are left to the estimator's
    heavy-key handling and not counted."""
    max_bytes = int(params.max_bytes)  # type: ignore[attr-defined]
    zc = NormalDist().inv_cdf(1 - alpha / values_tested(max_bytes, keep)) + NormalDist().inv_cdf(DISCOVERY_POWER)
    s = 0.0
    for _ in range(50):
        var = float(np.asarray(mech.variance(params, np.array([s * n]), n))[0])
        new = min(1.0, zc * math.sqrt(var) / n)
        if abs(new - s) < 1e-12:
            break
        s = new
    return s


def discovery_question(*, min_share: float, reports_per_day: int | None, reports: int | None,
                       max_bytes: int = DEFAULT_MAX_BYTES, epsilon: Sequence[float] = DEFAULT_EPSILONS,
                       k: Sequence[int] = (256, 1024), m: Sequence[int] = (256, 1024),
                       ) -> tuple[tuple[DiscoveryRow, ...], Answer]:
    """Plan a discovery (free text): the smallest share found at each (ε, k, m), the reports to find values of
    ``min_share``, and the recommendation (one day first, then fewest days, lower ε, smaller sketch)."""
    check_number("min_share", min_share, 0.0, 1.0, open_interval=True)
    n = reports_per_day if reports_per_day is not None else reports
    if n is None:
        raise InvalidParameterError("reports_per_day", "given, or else reports (a total)", None)
    mech = _discovery_mechanism()
    rows = []
    for eps in epsilon:
        for kk in k:
            for mm in m:
                try:
                    params = params_from_dict({"mechanism": mech.name, "epsilon": check_epsilon(eps), "k": kk, "m": mm,
                                               "max_bytes": max_bytes})
                except InvalidParameterError:
                    continue
                share = smallest_found(mech, params, n)
                needed: int | None = None
                lo_n, hi_n = 1, 1
                while smallest_found(mech, params, hi_n) > min_share and hi_n < MAX_REPORTS:
                    lo_n, hi_n = hi_n, hi_n * 2
                if hi_n < MAX_REPORTS:
                    while hi_n - lo_n > max(1, hi_n // 1000):
                        mid = (lo_n + hi_n) // 2
                        lo_n, hi_n = (lo_n, mid) if smallest_found(mech, params, mid) <= min_share else (mid, hi_n)
                    needed = hi_n
                rows.append(DiscoveryRow(mechanism=mech.name, epsilon=eps, effective_epsilon=params.effective_epsilon,
                                         k=kk, m=mm, max_bytes=max_bytes, min_share=share, reports_needed=needed))
    if not rows:
        raise InvalidParameterError("k*max_bytes", "a sketch size the discovery mechanism accepts", max_bytes)

    def key(r: DiscoveryRow) -> tuple[Any, ...]:
        need = r.reports_needed or MAX_REPORTS
        return (need > n, _days(need, reports_per_day) or need, r.epsilon, r.k * r.m)

    best = min(rows, key=key)
    days = _days(best.reports_needed, reports_per_day)
    created: dict[str, Any] = {"mechanism": best.mechanism, "epsilon": best.epsilon, "k": best.k, "m": best.m, "max_bytes": max_bytes}
    central = central_privacy(params_from_dict(created), n)
    line = (f"Recommendation: {best.mechanism} (k = {best.k}, m = {best.m}, max_bytes = {max_bytes}) at "
            f"{_eps_phrase(best.epsilon, best.effective_epsilon, central)}: finds every value held by ≥ {pp(min_share)} of "
            f"reports (with {DISCOVERY_POWER:.0%} probability each) {_when(days, best.reports_needed, reports_per_day, reports)}.")
    assumptions = [f"values of up to {max_bytes} UTF-8 bytes (pass --max-bytes); family-wise {DEFAULT_ALPHA:.0%} chance "
                   "of reporting a value nobody holds"]
    warnings = []
    if best.min_share > 0.05:
        warnings.append(f"at these volumes only values held by {pp(best.min_share)} or more are found in one day's data: "
                        "discovery needs many reports; if you can list the values, a top-k over candidates is far cheaper.")
    return tuple(rows), Answer(
        question="discovery", reachable=best.reports_needed is not None, mechanism=best.mechanism, params=created,
        epsilon=best.epsilon, effective_epsilon=best.effective_epsilon, odds_bound=odds_bound(best.effective_epsilon),
        central_epsilon=central.epsilon, central_delta=central.delta, target=min_share * 100,
        error=best.min_share * 100 if days is None else smallest_found(mech, params_from_dict(created), n * days) * 100,
        error_one_day=best.min_share * 100, unit="pp", reports_needed=best.reports_needed, days=days,
        reports_per_day=reports_per_day, reports=reports, confidence=1 - DEFAULT_ALPHA, line=line,
        assumptions=tuple(assumptions), warnings=tuple(warnings),
    )  # fmt: skip


__all__ = [
    "ANSWER_KEYS",
    "QUESTIONS",
    "SCHEMA_VERSION",
    "Answer",
    "DiscoveryRow",
    "PercentileRow",
    "central_epsilon",
    "central_privacy",
    "discovery_question",
    "frequency_question",
    "mean_question",
    "odds_bound",
    "percentile_question",
    "smallest_found",
]
