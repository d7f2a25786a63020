"""Frequency queries: sum a metric's shard and day sketches, debias, and post-process.

:func:`estimate_metric` reads the sketch index of every shard, picks the (version, day) sketches in the
asked range, sums them with pipelined GETs and calls the mechanism's own estimator
(:func:`ldptel.client.estimate`): the aggregator never re-implements a debias formula.

* rr: the counts of ``false`` and ``true``; :attr:`QueryResult.proportion` is the share of ``true`` with its
  standard error and interval.
* grr: every label of the domain (or the ``candidates`` among them).
* cms, oue-cms, hcms: the ``candidates`` (required); ``top`` keeps the largest raw estimates.
* numeric metrics: the mechanism's summaries (mean, sum, count) or its buckets; ``percentiles`` (levels in
  (0, 100)) adds percentiles with intervals for a numeric histogram (:mod:`~ldptel.client.mechanisms.bucketed`);
  :attr:`QueryResult.note` says how the values were clipped; a numeric histogram's result also carries its
  mean (:mod:`~ldptel.client.mechanisms.bucketed`) and :meth:`HistogramResult.summary_rows` (count, mean, sum,
  percentiles: what ``ldptel estimate`` prints unless asked for ``--histogram``).

What a query asks is one :class:`QueryOptions` (its fields may also be given as keywords); what it returns is the
result type of the mechanism's kind (:mod:`~ldptel.aggregator.results`: frequencies, summary, histogram), each with
``kind``, ``rows()`` and ``to_dict()``. :func:`summed_state` is the one place that reads sketches for a query.

``estimator`` (sketches): ``"plain"`` (the default) is Apple's count-mean-sketch estimate, whose stderr
includes the hash-collision term; ``"corrected"`` is the collision-corrected least-squares estimate over the
candidates (:mod:`~ldptel.aggregator.corrected`: use it when the candidates cover most of the reported
mass); ``"both"`` returns the two side by side. Each :class:`~ldptel.client.Estimate` and each row says
which estimator made it. Every stderr is the randomization spread of the count among the devices that
reported (plus, for sketches, the collision term), not the sampling of those devices from a population.

Post-processing (:mod:`~ldptel.aggregator.postprocess`) runs over the whole domain (rr, grr) or over all the
candidates (sketches, with Σ ≤ n), before ``top``; the raw unbiased estimates and their intervals are
always kept beside the post-processed values.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import redis as redis_lib

from ldptel.aggregator import postprocess as pp
from ldptel.aggregator.amplification import CentralPrivacy, compose_days, release_central
from ldptel.aggregator.breakdowns import (
    breakdown_cells,
    cell_plans,
    check_where,
    merged_plan,
    released_cells,
    sum_summed,
)
from ldptel.aggregator.fleet import fleet_of
from ldptel.aggregator.results import (
    ESTIMATOR_CHOICES,
    EstimatorChoice,
    FrequencyResult,
    HistogramResult,
    Proportion,
    QueryResult,
    SummaryResult,
    result_type,
)
from ldptel.aggregator.selection import Selection, select
from ldptel.aggregator.selection import check_method as check_selection
from ldptel.aggregator.withholding import Withheld, release_plan, threshold_of
from ldptel.client import Estimate, SketchState, estimate
from ldptel.client.errors import InvalidParameterError, LdpError
from ldptel.client.mechanisms import mechanism_of
from ldptel.client.mechanisms.base import Kind, Mechanism
from ldptel.client.mechanisms.bucketed import check_percentiles
from ldptel.client.mechanisms.capabilities import candidate_role, on_device, proportion_label
from ldptel.client.mechanisms.state import z_value
from ldptel.client.protocol.params import ParamsBase
from ldptel.client.protocol.specs import MetricSpec
from ldptel.client.protocol.validate import check_int
from ldptel.storage import registry
from ldptel.storage import sketches as store
from ldptel.storage.registry import MetricRecord
from ldptel.storage.sealed import Summed, coarse_note
from ldptel.storage.sealed import periods as sealed_periods
from ldptel.storage.sealed import summed_state as sealed_summed_state
from ldptel.storage.sealed import summed_states as sealed_summed_states


class EmptyRangeError(LdpError, ValueError):
    """No sketch of the metric version falls in the asked day range (``metric``, ``version``, ``mechanism``)."""

    def __init__(self, message: str, *, metric: str, version: int, mechanism: str) -> None:
        super().__init__(message)
        self.metric, self.version, self.mechanism = metric, version, mechanism


class WithheldRangeError(EmptyRangeError):
    """Every day of the asked range has fewer reports than the metric's ``min_reports``: nothing is shown
    (:mod:`~ldptel.aggregator.withholding`); ``withheld`` lists the units."""

    def __init__(self, message: str, *, metric: str, version: int, mechanism: str, withheld: tuple[Withheld, ...]) -> None:
        super().__init__(message, metric=metric, version=version, mechanism=mechanism)
        self.withheld = withheld


@dataclass(frozen=True, kw_only=True)
class QueryOptions:
    """What a query asks, checked once: the version (None: the current one), the UTC days [day_from, day_to] (None:
    open-ended), ``candidates`` (sketches: required; a declared domain: the labels to show), ``top`` (keep the N
    largest estimates), the interval ``confidence``, ``postprocess`` (None: the kind's default, Norm-Sub for a
    numeric histogram), the sketch ``estimator`` and a numeric histogram's ``percentiles`` (levels in (0, 100))."""

    version: int | None = None
    day_from: str | None = None
    day_to: str | None = None
    candidates: Sequence[object] | None = None
    top: int | None = None
    confidence: float = 0.95
    postprocess: pp.PostProcess | None = None
    estimator: EstimatorChoice = "plain"
    percentiles: Sequence[object] | None = None
    selection: str = "bonferroni"  # rows of counts: marked distinguishable from zero over all of them, or "none"
    simultaneous: bool = False  # the rows' intervals hold together over all the candidates (Bonferroni)
    # breakdown metrics: only the cells with these (dimension, value) pairs (ldptel.aggregator.breakdowns); () = all
    where: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.version is not None:
            check_int("version", self.version, 1, sys.maxsize)
        for what, day in (("day_from", self.day_from), ("day_to", self.day_to)):
            if day is not None:
                store.check_day(day, what=what)
        if self.day_from is not None and self.day_to is not None and self.day_from > self.day_to:
            raise InvalidParameterError("day_from", f"a day on or before day_to {self.day_to}", self.day_from)
        _check_top(self.top)
        z_value(self.confidence)
        if self.postprocess is not None:
            pp.check_method(self.postprocess)
        if self.estimator not in ESTIMATOR_CHOICES:
            raise InvalidParameterError("estimator", f"one of {list(ESTIMATOR_CHOICES)}", self.estimator)
        if self.percentiles is not None:
            check_percentiles(self.percentiles)
        if self.selection != "none":
            check_selection(self.selection)
        object.__setattr__(self, "where", check_where(self.where))
        if self.simultaneous and self.selection == "none":
            raise InvalidParameterError("simultaneous", "used with a selection method (bonferroni or bh), not 'none'", True)

    def with_(self, **changes: Any) -> QueryOptions:
        """A copy with some fields changed (checked again)."""
        return replace(self, **changes)


OPTION_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(QueryOptions))


def query_options(options: QueryOptions | None = None, changes: dict[str, Any] | None = None) -> QueryOptions:
    """``options`` (default: all defaults) with ``changes``, the keyword form the query functions also take."""
    base = QueryOptions() if options is None else options
    return replace(base, **changes) if changes else base


def _check_top(top: int | None) -> int | None:
    return None if top is None else check_int("top", top, 1, sys.maxsize)


def _unique(values: Iterable[object]) -> list[object]:
    return list(dict.fromkeys(values))


def select_days(days: Sequence[str], *, day_from: str | None, day_to: str | None) -> list[str]:
    """The days in [day_from, day_to] (inclusive; None is open-ended)."""
    if day_from is not None:
        store.check_day(day_from, what="day_from")
    if day_to is not None:
        store.check_day(day_to, what="day_to")
    if day_from is not None and day_to is not None and day_from > day_to:
        raise InvalidParameterError("day_from", f"a day on or before day_to {day_to}", day_from)
    return [d for d in days if (day_from is None or d >= day_from) and (day_to is None or d <= day_to)]


@dataclass(frozen=True, kw_only=True, eq=False)
class Target:
    """A metric version resolved for a query: its record, version, params and mechanism."""

    name: str
    record: MetricRecord
    version: int
    spec: MetricSpec

    @property
    def params(self) -> ParamsBase:
        return self.spec.params

    @property
    def kind(self) -> Kind:
        return mechanism_of(self.params).kind

    @classmethod
    def resolve(cls, r: redis_lib.Redis, name: str, version: int | None = None) -> Target:
        """Raises ``UnknownMetricError`` / ``UnknownVersionError`` (registry)."""
        record = registry.get_metric(r, name)
        version = record.current_version if version is None else version
        return cls(name=name, record=record, version=version, spec=registry.spec_for(record, version))

    def cells(self, r: redis_lib.Redis, where: tuple[tuple[str, str], ...] = ()) -> list[str]:
        """The breakdown cells a query reads: ``[""]`` for a metric without breakdown, else the stored cells that
        match ``where`` (checked against the metric's dimensions and the profile schema)."""
        return breakdown_cells(r, self, where)

    def days(self, r: redis_lib.Redis, options: QueryOptions) -> list[str]:
        """The days in the asked range that have reports of the version; :class:`EmptyRangeError` when none has."""
        all_days = sorted({d for cell in self.cells(r, options.where)
                           for d in store.available_days(r, self.name, self.record.shards, version=self.version, cell=cell)})
        days = select_days(all_days, day_from=options.day_from, day_to=options.day_to)
        if not days:
            have = f"it has days {all_days[0]} to {all_days[-1]}" if all_days else "it has no folded reports yet"
            raise EmptyRangeError(
                f"no sketches of {self.name!r} version {self.version} between {options.day_from or 'the start'} and "
                f"{options.day_to or 'the end'} ({have})",
                metric=self.name, version=self.version, mechanism=self.params.mechanism,
            )
        return days


def summed_state(r: redis_lib.Redis, target: Target, days: Sequence[str], where: tuple[tuple[str, str], ...] = ()) -> Summed:
    """The state of ``target``'s version summed over its shards (and sealed days, :mod:`ldptel.storage.sealed`) from
    the first to the last of ``days``, and over its breakdown cells matching ``where``: the one place a query reads
    sketches. Its ``days`` may be wider than asked where retention left only roll-ups at an edge."""
    parts = [sealed_summed_state(r, target.name, params=target.params, version=target.version,
                                 shards=target.record.shards, day_from=days[0], day_to=days[-1], cell=cell)
             for cell in target.cells(r, where)]
    if not parts:
        return Summed(SketchState.empty(target.params), (), None, None)
    return sum_summed(parts) if len(parts) > 1 else parts[0]


def released_state(r: redis_lib.Redis, target: Target, days: Sequence[str], where: tuple[tuple[str, str], ...] = ()
                   ) -> tuple[Summed, tuple[Withheld, ...]]:
    """:func:`summed_state` of the released units only: a day (or roll-up) with fewer reports than the metric's
    ``min_reports`` is left out of the sum (so no two ranges differ by it) and listed as withheld
    (:mod:`~ldptel.aggregator.withholding`). :class:`WithheldRangeError` when every unit is withheld. With a breakdown
    the unit is a (combination, day) (:func:`~ldptel.aggregator.breakdowns.released_cells`)."""
    cells = target.cells(r, where)
    if cells != [""]:
        return released_cells(r, target, days, cells) if threshold_of(target.record) > 0 else (
            summed_state(r, target, days, where), ())
    plan = release_plan(r, target.record, target.version, days, cells=cells)
    if not plan.withheld:
        return summed_state(r, target, days, where), ()
    if not plan.runs:
        what = ", ".join(w.what for w in plan.withheld[:3]) + (" …" if len(plan.withheld) > 3 else "")
        raise WithheldRangeError(
            f"{target.name!r} version {target.version}: {what}: {plan.withheld[0].reason}",
            metric=target.name, version=target.version, mechanism=target.params.mechanism, withheld=plan.withheld)
    parts = [summed_state(r, target, [first, last], where) for first, last in plan.runs]
    state = parts[0].state
    for part in parts[1:]:
        state.add_inplace(part.state)
    covered = tuple(d for part in parts for d in part.days)
    return Summed(state, covered, parts[0].first, parts[-1].last, tuple(c for part in parts for c in part.coarse),
                  sum(part.states for part in parts)), plan.withheld


def estimator_choices(mechanism: Mechanism[Any, Any]) -> tuple[EstimatorChoice, ...]:
    """The estimators a query of this mechanism may ask for (corrected ones only where candidates are required)."""
    return ESTIMATOR_CHOICES if candidate_role(mechanism) == "required" else ("plain",)


def metric_kind(r: redis_lib.Redis, name: str, *, version: int | None = None) -> tuple[str, Kind]:
    """(mechanism name, kind of its estimates) of a metric's version (default: the current one)."""
    target = Target.resolve(r, name, version)
    return target.params.mechanism, target.kind


def estimate_metric(r: redis_lib.Redis, name: str, options: QueryOptions | None = None, /, **changes: Any) -> QueryResult:
    """Debiased estimates of ``name`` over the UTC days of one version (:class:`QueryOptions`; its fields may also be
    given as keywords): a :class:`~ldptel.aggregator.results.QueryResult` of the mechanism's kind.

    ``estimator``: ``"plain"``, ``"corrected"`` or ``"both"`` (module docstring; corrected needs a sketch metric).
    Raises ``UnknownMetricError`` / ``UnknownVersionError`` (registry), :class:`EmptyRangeError` when no sketch falls
    in the range, and ``InvalidParameterError`` for bad arguments (a sketch metric without candidates, a bad day, ...).
    """
    opts = query_options(options, changes)
    target = Target.resolve(r, name, opts.version)
    opts = as_reported(mechanism_of(target.params), target.params, opts)  # on-device: read the days reports arrive on
    candidates = _checked(target, opts)
    summed, held = released_state(r, target, target.days(r, opts), opts.where)  # withheld days are in no sum
    return _result(r, target, opts, candidates, summed, held, target.cells(r, opts.where))


def _checked(target: Target, opts: QueryOptions) -> list[object] | None:
    """Refuse options the metric cannot take (before anything is read); the unique candidates of a sketch."""
    name, params = target.name, target.params
    mechanism = mechanism_of(params)
    kind = result_type(mechanism.kind)
    method = kind.default_postprocess if opts.postprocess is None else opts.postprocess
    if not kind.counts and method != "none":
        raise InvalidParameterError("postprocess", f"'none' for {mechanism.name} metrics (their rows are not counts)", method)
    if opts.percentiles is not None and not kind.takes_percentiles:
        raise InvalidParameterError("percentiles", "asked only of a numeric histogram metric", name)
    candidates: list[object] | None = None
    role = candidate_role(mechanism)
    sketch = role == "required"
    if sketch:
        given = opts.candidates
        if given is None or isinstance(given, (str, bytes)) or len(given) == 0:
            raise InvalidParameterError(
                "candidates", f"a non-empty list of values to estimate ({mechanism.name} is a sketch metric)", given
            )
        candidates = _unique(given)
    elif opts.estimator != "plain":
        raise InvalidParameterError(
            "estimator", f"'plain' for {mechanism.name} metrics (only sketches have hash collisions to correct)", opts.estimator
        )
    return candidates


def _result(r: redis_lib.Redis, target: Target, opts: QueryOptions, candidates: list[object] | None, summed: Summed,
            held: tuple[Withheld, ...], cells: list[str]) -> QueryResult:
    """The result of a query whose options :func:`_checked` accepted, from the released state it read."""
    name, params = target.name, target.params
    mechanism = mechanism_of(params)
    kind = result_type(mechanism.kind)
    method = kind.default_postprocess if opts.postprocess is None else opts.postprocess
    role = candidate_role(mechanism)
    sketch = role == "required"
    state, days = summed.state, list(summed.days)  # wider than asked where retention left only roll-ups at an edge
    est = estimate(params, state, candidates=candidates, confidence=opts.confidence)
    adjusted = pp.apply(method, est.counts, total=est.n, full_domain=not sketch)
    corrected: Estimate | None = None
    corrected_adjusted: np.ndarray | None = None
    if opts.estimator != "plain" and candidates is not None:
        from ldptel.aggregator.corrected import corrected_estimate  # imports scipy

        corrected = corrected_estimate(params, state, candidates=candidates, confidence=opts.confidence, plain=est,
                                       screen=True)  # a list past the fit's limit: largest plain estimates fitted
        corrected_adjusted = pp.apply(method, corrected.counts, total=corrected.n, full_domain=False)
        if opts.estimator == "corrected":
            est, adjusted, corrected, corrected_adjusted = corrected, corrected_adjusted, None, None
    ranking = est if corrected is None else corrected  # top: by the corrected estimates when there are some

    keep: np.ndarray | None = None
    if role == "labels" and opts.candidates is not None:
        keep = _labels(est, opts.candidates, name)
    if opts.top is not None:
        base = np.arange(est.counts.size) if keep is None else keep
        keep = base[np.argsort(-ranking.counts[base], kind="stable")[: opts.top]]
    derived = kind.derive(params, est, percentiles=opts.percentiles, whole=keep is None)
    label = proportion_label(mechanism)
    tests: list[Selection | None] = [None, None]
    if kind.kind == "frequencies" and label is None and opts.selection != "none":  # over every candidate, before top
        alpha = 1.0 - opts.confidence
        tests = [None if e is None else select(e.counts, e.stderr, alpha=alpha, method=opts.selection,
                                              simultaneous=opts.simultaneous) for e in (est, corrected)]
    if keep is not None:
        est, adjusted = _select(est, keep), adjusted[keep]
        if corrected is not None and corrected_adjusted is not None:
            corrected, corrected_adjusted = _select(corrected, keep), corrected_adjusted[keep]
        tests = [None if t is None else t.take(keep) for t in tests]
    derived["selection"], derived["corrected_selection"] = tests
    if label is not None:
        derived["proportion_of"] = label
    return kind(
        metric=name, version=target.version, mechanism=mechanism.name, days=tuple(days), shards=target.record.shards,
        estimate=est, postprocess=method, adjusted=adjusted, estimator=opts.estimator, corrected=corrected,
        corrected_adjusted=corrected_adjusted,
        note=" ".join(x for x in (mechanism.estimate_note(params), _described_note(mechanism, params, days),
                                  coarse_note(summed)) if x),
        fleet=fleet_of(target.spec, est, counts_rows=kind.counts), withheld=held,
        local_epsilon=target.spec.effective_epsilon, central=release_central(r, target.record, target.version, days, cells=cells)[1],
        **derived,
    )


def _labels(est: Estimate, candidates: Sequence[object], name: str) -> np.ndarray:
    """The positions of ``candidates`` among a declared domain's labels (each must be one)."""
    position: dict[object, int] = {label: i for i, label in enumerate(est.labels)}
    unknown = [c for c in _unique(candidates) if c not in position]
    if unknown:
        raise InvalidParameterError("candidates", f"labels of the {name!r} domain", unknown[0])
    return np.array([position[c] for c in _unique(candidates)], dtype=np.int64)


def _select(est: Estimate, keep: np.ndarray) -> Estimate:
    labels = tuple(est.labels[i] for i in keep.tolist())
    return Estimate(est.mechanism, labels, est.counts[keep], est.stderr[keep], est.n, est.confidence, est.estimator)


# ------------------------------------------------------------------------------ on-device aggregation (issue 29)
_EPOCH = datetime.date(1970, 1, 1)


def _day_number(day: str) -> int:
    return (datetime.date.fromisoformat(day) - _EPOCH).days


def _day_text(number: int) -> str:
    return (_EPOCH + datetime.timedelta(days=number)).isoformat()


def as_reported(mechanism: Mechanism[Any, Any], params: ParamsBase, opts: QueryOptions) -> QueryOptions:
    """A metric aggregated on the device reports each period during the next one
    (:class:`~ldptel.client.mechanisms.capabilities.OnDevice`): its asked days are the days the reports describe, so
    read the days they arrive on. Any other metric: ``opts`` unchanged."""
    od = on_device(mechanism)
    if od is None:
        return opts
    first = None if opts.day_from is None else _day_text(od.reported_days(params, *(2 * [_day_number(opts.day_from)]))[0])
    last = None if opts.day_to is None else _day_text(od.reported_days(params, *(2 * [_day_number(opts.day_to)]))[1])
    return opts.with_(day_from=first, day_to=last)


def described(mechanism: Mechanism[Any, Any], params: ParamsBase, first: str, last: str) -> tuple[str, str]:
    """The days described by the reports of an on-device metric received on days [first, last] (unchanged for any
    other metric)."""
    od = on_device(mechanism)
    if od is None:
        return first, last
    a, b = od.described_days(params, _day_number(first), _day_number(last))
    return _day_text(a), _day_text(b)


def _described_note(mechanism: Mechanism[Any, Any], params: ParamsBase, days: Sequence[str]) -> str:
    if on_device(mechanism) is None or not days:
        return ""
    a, b = described(mechanism, params, days[0], days[-1])
    return f"reports received {days[0]}..{days[-1]} describe {a}..{b}."


# ------------------------------------------------------------------------------------------ per day
_SHARED_KEYS = ("metric", "version", "mechanism", "kind", "days", "shards", "confidence", "postprocess", "estimator", "rows",
                "uncertainty", "uncertainty_meaning")


@dataclass(frozen=True, kw_only=True, eq=False)
class DailyResult:
    """One :class:`QueryResult` per UTC day that has reports (``results``, in day order), and the values kept.

    ``values`` is None (every row of every day) or the ``top`` values, ranked by their estimate summed over
    the days; each day then lists those values in that order.
    """

    results: tuple[QueryResult, ...]
    values: tuple[object, ...] | None
    # (first, last) day of each result; a span wider than one day is a roll-up past the metric's retention
    periods: tuple[tuple[str, str], ...] = ()
    withheld: tuple[Withheld, ...] = ()  # days (or roll-ups) under the metric's min_reports: no result, a reason

    def _day(self, i: int) -> str:
        """The ``day`` of result i: the UTC day, or "first..last" for a period coarser than a day."""
        if i < len(self.periods) and self.periods[i][0] != self.periods[i][1]:
            return f"{self.periods[i][0]}..{self.periods[i][1]}"
        return self.results[i].days[0]

    def rows(self) -> list[dict[str, Any]]:
        """Each day's :meth:`QueryResult.rows`, with the ``day`` and that day's ``n`` in front."""
        out: list[dict[str, Any]] = []
        rank = None if self.values is None else {v: i for i, v in enumerate(self.values)}
        for i, res in enumerate(self.results):
            rows = res.rows()
            if rank is not None:
                rows = sorted((row for row in rows if row["value"] in rank), key=lambda row: rank[row["value"]])
            out += [{"day": self._day(i), "n": res.n, **row} for row in rows]
        return out

    def to_dict(self) -> dict[str, Any]:
        """The per-result keys once, ``n`` summed, ``daily`` (each day's other keys: n, proportion, ...), ``rows``."""
        first = self.results[0].to_dict()
        daily = [{"day": self._day(i), **{k: v for k, v in res.to_dict().items() if k not in _SHARED_KEYS}}
                 for i, res in enumerate(self.results)]
        return {
            **{k: first[k] for k in _SHARED_KEYS if k in first and k != "rows"},
            "days": [self._day(i) for i in range(len(self.results))],
            "n": sum(res.n for res in self.results),
            "by_day": True,
            "daily": daily,
            "rows": self.rows(),
            **({"withheld": [w.to_dict() for w in self.withheld]} if self.withheld else {}),
            **({} if (central := self.central()) is None else {"central": central.to_dict()}),
        }

    def central(self) -> CentralPrivacy | None:
        """The range's central (ε, δ): each day's composed (:func:`~ldptel.aggregator.amplification.compose_days`)."""
        per = {res.days[0] if len(res.days) == 1 else f"{res.days[0]}..{res.days[-1]}": res.central
               for res in self.results if res.central is not None}
        return None if len(per) < len(self.results) else compose_days(per)


def estimate_by_day(r: redis_lib.Redis, name: str, options: QueryOptions | None = None, /, **changes: Any) -> DailyResult:
    """:func:`estimate_metric` for each UTC day in the asked range that has reports of the version.

    Each day is estimated (and post-processed) on its own; ``top`` keeps the same N values every day, those with
    the largest estimate summed over the days; each day's ``percentiles`` are in :meth:`DailyResult.to_dict`'s
    ``daily`` entries. Raises what :func:`estimate_metric` raises
    (:class:`EmptyRangeError` when no day has reports).
    """
    opts = query_options(options, changes)
    target = Target.resolve(r, name, opts.version)
    pinned = opts.with_(version=target.version)
    mechanism = mechanism_of(target.params)
    days = target.days(r, as_reported(mechanism, target.params, pinned))
    each = pinned.with_(top=None)
    # one result per day, or per roll-up where retention left only roll-ups (that result's note says so)
    spans = sorted({span for cell in target.cells(r, opts.where) for span in sealed_periods(
        r, name, version=target.version, shards=target.record.shards, day_from=days[0], day_to=days[-1], cell=cell)})
    # withheld days: listed, never estimated
    cells = target.cells(r, opts.where)
    plan = (release_plan(r, target.record, target.version, days, cells=cells) if cells == [""]
            else merged_plan(cell_plans(r, target, days, cells)))  # breakdowns: per (combination, day)
    spans = [span for span in spans if span in set(plan.spans)] if plan.withheld else spans
    if not spans:
        raise WithheldRangeError(
            f"{name!r} version {target.version}: every day in the range: {plan.withheld[0].reason}",
            metric=name, version=target.version, mechanism=target.params.mechanism, withheld=plan.withheld)
    # on-device metrics: one result per period the reports describe (estimate_metric maps it back to their days)
    if on_device(mechanism) is None and not plan.withheld:  # each span is a plain sum of its days: read them at once
        results = _by_span(r, target, each, spans, target.cells(r, opts.where))
    else:
        spans = list(dict.fromkeys(described(mechanism, target.params, first, last) for first, last in spans))
        results = tuple(estimate_metric(r, name, each.with_(day_from=first, day_to=last)) for first, last in spans)
    values: tuple[object, ...] | None = None
    if opts.top is not None:
        ranked_by = "plain" if results[0].estimator == "plain" else "corrected"
        totals: dict[object, float] = {}
        for res in results:
            for row in res.rows():
                if row["estimator"] == ranked_by:
                    totals[row["value"]] = totals.get(row["value"], 0.0) + row["estimate"]
        values = tuple(sorted(totals, key=lambda v: -totals[v])[: opts.top])  # stable: ties keep the first day's order
    return DailyResult(results=results, values=values, periods=tuple(spans), withheld=plan.withheld)


def _by_span(r: redis_lib.Redis, target: Target, opts: QueryOptions, spans: Sequence[tuple[str, str]],
             cells: list[str]) -> tuple[QueryResult, ...]:
    """:func:`estimate_metric` of each span (released, not on-device), with every span's state read in one plan
    and one pipelined stream per breakdown cell (:func:`ldptel.storage.sealed.summed_states`), one state per cell in
    memory at a time: a 90-day series no longer pays a whole query per day."""
    candidates = _checked(target, opts)
    streams = [sealed_summed_states(r, target.name, params=target.params, version=target.version,
                                    shards=target.record.shards, spans=spans, cell=cell) for cell in cells]
    out = []
    for (first, last), *parts in zip(spans, *streams, strict=True):
        summed = sum_summed(parts) if len(parts) > 1 else parts[0]
        out.append(_result(r, target, opts.with_(day_from=first, day_to=last), candidates, summed, (), cells))
    return tuple(out)


__all__ = [
    "ESTIMATOR_CHOICES", "OPTION_FIELDS", "DailyResult", "EmptyRangeError", "EstimatorChoice", "FrequencyResult",
    "HistogramResult", "Proportion", "QueryOptions", "QueryResult", "SummaryResult", "Target", "as_reported",
    "described", "estimate_by_day", "WithheldRangeError", "candidate_role", "estimate_metric", "estimator_choices",
    "metric_kind", "query_options", "released_state", "select_days", "summed_state",
]
