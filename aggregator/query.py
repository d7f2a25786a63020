"""Frequency queries: sum a metric's shard and day sketches, debias, and post-process.

:func:`estimate_metric` reads the sketch index of every shard, picks the (version, day) sketches in the
asked range, sums them with pipelined GETs and calls the mechanism's own estimator
(:func:`ldptel.client.estimate`): the aggregator never re-implements a debias formula.

* rr: the counts of ``false`` and ``true``; :attr:`QueryResult.proportion` is the share of ``true`` with its
  standard error and interval.
* grr: every label of the domain (or the ``candidates`` among them).
* cms, oue-cms, hcms: the ``candidates`` (required); ``top`` keeps the largest raw estimates.
* numeric metrics: the mechanism's summaries (mean, sum, count) or its buckets; ``percentiles`` (levels in
  (0, 100)) adds percentiles with intervals for a numeric histogram (:mod:`~ldptel.aggregator.percentiles`);
  :attr:`QueryResult.note` says how the values were clipped; a numeric histogram's result also carries its
  mean (:mod:`~ldptel.aggregator.histogram_mean`) and :meth:`QueryResult.summary_rows` (count, mean, sum,
  percentiles: what ``ldptel estimate`` prints unless asked for ``--histogram``).

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

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import redis as redis_lib

from ldptel.aggregator import postprocess as pp
from ldptel.aggregator.fleet import Fleet, fleet_of
from ldptel.aggregator.histogram_mean import HistogramMean, histogram_mean
from ldptel.aggregator.percentiles import Percentile
from ldptel.aggregator.percentiles import percentiles as percentiles_of
from ldptel.client import Estimate, estimate
from ldptel.client.errors import InvalidParameterError, LdpError
from ldptel.client.mechanisms import get_mechanism, mechanism_of
from ldptel.client.mechanisms.histogram import SUMMARY_LABELS
from ldptel.client.protocol.validate import check_int
from ldptel.storage import registry
from ldptel.storage import sketches as store
from ldptel.storage.sealed import coarse_note, summed_state
from ldptel.storage.sealed import periods as sealed_periods

RANDOMIZATION_MEANING = (
    "randomization only: the spread over the privacy noise of the reports (and sketch collisions), given the devices "
    "that reported"
)
POPULATION_MEANING = (
    "population: the privacy noise plus the sampling of the reporting devices from the fleet, as a random sample of it"
)
EstimatorChoice = Literal["plain", "corrected", "both"]
ESTIMATOR_CHOICES: tuple[EstimatorChoice, ...] = ("plain", "corrected", "both")


class EmptyRangeError(LdpError, ValueError):
    """No sketch of the metric version falls in the asked day range (``metric``, ``version``, ``mechanism``)."""

    def __init__(self, message: str, *, metric: str, version: int, mechanism: str) -> None:
        super().__init__(message)
        self.metric, self.version, self.mechanism = metric, version, mechanism


@dataclass(frozen=True, kw_only=True)
class Proportion:
    """rr: the estimated share of ``true`` with its standard error and interval."""

    estimate: float
    stderr: float
    ci_low: float
    ci_high: float
    adjusted: float

    def to_dict(self) -> dict[str, float]:
        return {
            "estimate": self.estimate,
            "stderr": self.stderr,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "adjusted": self.adjusted,
        }


@dataclass(frozen=True, kw_only=True, eq=False)
class QueryResult:
    """Raw estimates (``estimate``: counts, stderr, intervals) and post-processed counts (``adjusted``).

    ``estimate`` is the plain estimate, or the corrected one when only that was asked for
    (``estimator="corrected"``); with ``estimator="both"``, ``corrected`` and ``corrected_adjusted`` hold
    the corrected estimate of the same values beside it.
    """

    metric: str
    version: int
    mechanism: str
    days: tuple[str, ...]
    shards: int
    estimate: Estimate
    postprocess: pp.PostProcess
    adjusted: np.ndarray
    estimator: EstimatorChoice = "plain"
    corrected: Estimate | None = None
    corrected_adjusted: np.ndarray | None = None
    percentiles: tuple[Percentile, ...] = ()
    note: str = ""
    edges: tuple[float, ...] = ()  # numeric histograms: the bucket edges of the rows
    counts_rows: bool = True  # rows are counts of the n reports (False: numeric summaries)
    mean: HistogramMean | None = None  # numeric histograms: the midpoint mean of the buckets
    fleet: Fleet | None = None  # sample_rate < 1: the counts scaled to the fleet (:mod:`~ldptel.aggregator.fleet`)
    uncertainty: Literal["randomization", "population"] = "randomization"  # what ``stderr`` and the intervals mean

    @property
    def estimates(self) -> tuple[tuple[Estimate, np.ndarray], ...]:
        """(estimate, post-processed counts) of each estimator in the result: one, or plain then corrected."""
        out = [(self.estimate, self.adjusted)]
        if self.corrected is not None and self.corrected_adjusted is not None:
            out.append((self.corrected, self.corrected_adjusted))
        return tuple(out)

    @property
    def n(self) -> int:
        return self.estimate.n

    @property
    def confidence(self) -> float:
        return self.estimate.confidence

    @property
    def labels(self) -> tuple[str, ...]:
        return self.estimate.labels

    @property
    def proportion(self) -> Proportion | None:
        """The share of the mechanism's :attr:`~ldptel.client.mechanisms.base.Mechanism.proportion_of` label
        (``true`` of a boolean metric), or None for mechanisms without one."""
        label = get_mechanism(self.mechanism).proportion_of
        if label is None:
            return None
        est, n = self.estimate, self.n
        i = est.labels.index(label)
        return Proportion(
            estimate=float(est.counts[i] / n),
            stderr=float(est.stderr[i] / n),
            ci_low=float(est.ci_low[i] / n),
            ci_high=float(est.ci_high[i] / n),
            adjusted=float(self.adjusted[i] / n),
        )

    def rows(self) -> list[dict[str, Any]]:
        """One dict per value and estimator (its ``estimator`` key says which; with both, each value's plain row
        then its corrected row): the raw estimate, stderr, interval and frequency, then the adjusted ones."""
        n = self.n
        parts = []
        for est, adjusted in self.estimates:
            rows = est.rows()
            for row, adj in zip(rows, adjusted.tolist(), strict=True):
                row["adjusted"] = float(adj)
                row["adjusted_frequency"] = float(adj / n) if n else float("nan")
            parts.append(rows)
        return [row for group in zip(*parts, strict=True) for row in group]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "metric": self.metric,
            "version": self.version,
            "mechanism": self.mechanism,
            "days": list(self.days),
            "shards": self.shards,
            "n": self.n,
            "confidence": self.confidence,
            "postprocess": self.postprocess,
            "estimator": self.estimator,
            "rows": self.rows(),
        }
        prop = self.proportion
        if prop is not None:
            out["proportion"] = prop.to_dict()
        if self.note:
            out["note"] = self.note
        if self.percentiles:
            out["percentiles"] = [pc.row() for pc in self.percentiles]
        if self.mean is not None:
            out[SUMMARY_LABELS[1]] = self.mean.row()
        out["uncertainty"] = self.uncertainty
        out["uncertainty_meaning"] = RANDOMIZATION_MEANING if self.uncertainty == "randomization" else POPULATION_MEANING
        if self.counts_rows and self.uncertainty == "randomization":
            out["population"] = self.population()
        if self.fleet is not None:
            out["fleet"] = self.fleet.to_dict()
        return out

    def as_population(self) -> QueryResult:
        """The same result with population uncertainty in every stderr and interval (counts: rr, grr, sketches)."""
        if not self.counts_rows or self.edges or self.mean is not None:
            raise InvalidParameterError(
                "uncertainty", "randomization for numeric metrics (a mean's population test: ldptel test --mean)",
                self.mechanism,
            )
        if self.uncertainty == "population":
            return self
        n = self.n

        def widen(est: Estimate) -> Estimate:
            f = np.clip(est.counts / n, 0.0, 1.0)
            se = np.sqrt(est.stderr**2 + n * f * (1 - f))
            return Estimate(est.mechanism, est.labels, est.counts, se, est.n, est.confidence, est.estimator)

        return replace(self, estimate=widen(self.estimate),
                       corrected=None if self.corrected is None else widen(self.corrected), uncertainty="population")

    def population(self) -> dict[str, Any]:
        """The rows' stderr and interval with population uncertainty: the randomization variance plus the sampling
        of the n reporting devices from the fleet (n·f(1 − f) for a count, f its share clipped to [0, 1])."""
        n, z = self.n, self.estimate.z
        rows = []
        for est, _adjusted in self.estimates:
            f = np.clip(est.counts / n, 0.0, 1.0)
            se = np.sqrt(est.stderr**2 + n * f * (1 - f))
            rows += [{"value": v, "estimator": est.estimator, "stderr": float(s), "ci_low": float(c - z * s),
                      "ci_high": float(c + z * s)} for v, c, s in zip(est.labels, est.counts, se, strict=True)]
        out: dict[str, Any] = {"meaning": POPULATION_MEANING, "rows": rows}
        prop = self.proportion
        if prop is not None:
            se_p = float(np.sqrt(prop.stderr**2 + min(max(prop.estimate, 0.0), 1.0) * (1 - min(max(prop.estimate, 0.0), 1.0)) / n))
            out["proportion"] = {"stderr": se_p, "ci_low": prop.estimate - z * se_p, "ci_high": prop.estimate + z * se_p}
        return out

    def summary_rows(self) -> list[dict[str, Any]]:
        """Numeric histograms: count, mean, sum (n × mean) and each percentile as rows of ``value``, ``estimate``,
        ``stderr`` (None for percentiles: their intervals come from test inversion), ``ci_low``, ``ci_high``."""
        if self.mean is None:
            raise InvalidParameterError("metric", "a numeric histogram for a summary", self.mechanism)
        m, n = self.mean, float(self.n)
        stats = ((n, 0.0, n, n), (m.estimate, m.stderr, m.ci_low, m.ci_high),
                 (n * m.estimate, n * m.stderr, n * m.ci_low, n * m.ci_high))  # count, mean, sum
        rows: list[dict[str, Any]] = [{"value": label, "estimate": est, "stderr": se, "ci_low": lo, "ci_high": hi}
                                      for label, (est, se, lo, hi) in zip(SUMMARY_LABELS, stats, strict=True)]
        rows += [{"value": f"p{pc.percentile:g}", "estimate": pc.shown, "stderr": None, "ci_low": pc.ci_low,
                  "ci_high": pc.ci_high} for pc in self.percentiles]
        return rows


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


def estimate_metric(
    r: redis_lib.Redis,
    name: str,
    *,
    version: int | None = None,
    day_from: str | None = None,
    day_to: str | None = None,
    candidates: Sequence[object] | None = None,
    top: int | None = None,
    confidence: float = 0.95,
    postprocess: pp.PostProcess | None = None,
    estimator: EstimatorChoice = "plain",
    percentiles: Sequence[object] | None = None,
) -> QueryResult:
    """Debiased estimates of ``name`` over the UTC days [day_from, day_to] of one version.

    ``version`` defaults to the metric's current version. ``estimator``: ``"plain"``, ``"corrected"`` or
    ``"both"`` (module docstring; corrected needs a sketch metric). Raises ``UnknownMetricError`` /
    ``UnknownVersionError`` (registry), :class:`EmptyRangeError` when no sketch falls in the range, and
    ``InvalidParameterError`` for bad arguments (a sketch metric without candidates, a bad day, ...).
    ``postprocess`` None is the metric's default: ``"norm-sub"`` for a numeric histogram (its percentiles
    read the consistent histogram), ``"none"`` otherwise.
    """
    method = None if postprocess is None else pp.check_method(postprocess)
    top = _check_top(top)
    if estimator not in ESTIMATOR_CHOICES:
        raise InvalidParameterError("estimator", f"one of {list(ESTIMATOR_CHOICES)}", estimator)
    record = registry.get_metric(r, name)
    version = record.current_version if version is None else version
    spec = registry.spec_for(record, version)
    params = spec.params
    mechanism = mechanism_of(params)
    if method is None:
        method = "norm-sub" if mechanism.bucket_edges(params) is not None else "none"
    if not mechanism.estimates_counts and method != "none":
        raise InvalidParameterError("postprocess", f"'none' for {mechanism.name} metrics (their rows are not counts)", method)
    if percentiles is not None and mechanism.bucket_edges(params) is None:
        raise InvalidParameterError("percentiles", "asked only of a numeric histogram metric", name)
    if mechanism.needs_candidates:
        if candidates is None or isinstance(candidates, (str, bytes)) or len(candidates) == 0:
            raise InvalidParameterError(
                "candidates", f"a non-empty list of values to estimate ({mechanism.name} is a sketch metric)", candidates
            )
        candidates = _unique(candidates)
    elif estimator != "plain":
        raise InvalidParameterError(
            "estimator", f"'plain' for {mechanism.name} metrics (only sketches have hash collisions to correct)", estimator
        )

    all_days = store.available_days(r, name, record.shards, version=version)
    days = select_days(all_days, day_from=day_from, day_to=day_to)
    if not days:
        have = f"it has days {all_days[0]} to {all_days[-1]}" if all_days else "it has no folded reports yet"
        raise EmptyRangeError(
            f"no sketches of {name!r} version {version} between {day_from or 'the start'} and "
            f"{day_to or 'the end'} ({have})",
            metric=name, version=version, mechanism=mechanism.name,
        )
    summed = summed_state(r, name, params=params, version=version, shards=record.shards, day_from=days[0], day_to=days[-1])
    state, days = summed.state, list(summed.days)  # wider than asked where retention left only roll-ups at an edge

    est = estimate(params, state, candidates=candidates if mechanism.needs_candidates else None, confidence=confidence)
    adjusted = pp.apply(method, est.counts, total=est.n, full_domain=not mechanism.needs_candidates)
    levels = () if percentiles is None else percentiles_of(params, est, percentiles)
    edges = mechanism.bucket_edges(params)
    mean = None if edges is None else histogram_mean(params, est)
    corrected: Estimate | None = None
    corrected_adjusted: np.ndarray | None = None
    if estimator != "plain" and candidates is not None:
        from ldptel.aggregator.corrected import corrected_estimate  # imports scipy

        corrected = corrected_estimate(params, state, candidates=candidates, confidence=confidence, plain=est,
                                       screen=True)  # a list past the fit's limit: largest plain estimates fitted
        corrected_adjusted = pp.apply(method, corrected.counts, total=corrected.n, full_domain=False)
        if estimator == "corrected":
            est, adjusted, corrected, corrected_adjusted = corrected, corrected_adjusted, None, None
    ranking = est if corrected is None else corrected  # top: by the corrected estimates when there are some

    keep: np.ndarray | None = None
    if mechanism.candidates_pick_labels and candidates is not None:
        position: dict[object, int] = {label: i for i, label in enumerate(est.labels)}
        unknown = [c for c in _unique(candidates) if c not in position]
        if unknown:
            raise InvalidParameterError("candidates", f"labels of the {name!r} domain", unknown[0])
        keep = np.array([position[c] for c in _unique(candidates)], dtype=np.int64)
    if top is not None:
        base = np.arange(est.counts.size) if keep is None else keep
        order = np.argsort(-ranking.counts[base], kind="stable")[:top]
        keep = base[order]
    if keep is not None:
        est, adjusted = _select(est, keep), adjusted[keep]
        if corrected is not None and corrected_adjusted is not None:
            corrected, corrected_adjusted = _select(corrected, keep), corrected_adjusted[keep]
    return QueryResult(
        metric=name,
        version=version,
        mechanism=mechanism.name,
        days=tuple(days),
        shards=record.shards,
        estimate=est,
        postprocess=method,
        adjusted=adjusted,
        estimator=estimator,
        corrected=corrected,
        corrected_adjusted=corrected_adjusted,
        percentiles=levels,
        note=" ".join(x for x in (mechanism.estimate_note(params), coarse_note(summed)) if x),
        edges=() if edges is None or keep is not None else tuple(edges.tolist()),
        counts_rows=mechanism.estimates_counts,
        mean=mean,
        fleet=fleet_of(spec, est, counts_rows=mechanism.estimates_counts),
    )


def metric_kind(r: redis_lib.Redis, name: str, *, version: int | None = None) -> tuple[str, bool]:
    """(mechanism name, whether it is a numeric histogram) of a metric's version (default: the current one)."""
    record = registry.get_metric(r, name)
    params = registry.spec_for(record, record.current_version if version is None else version).params
    mechanism = mechanism_of(params)
    return mechanism.name, mechanism.bucket_edges(params) is not None


def _select(est: Estimate, keep: np.ndarray) -> Estimate:
    labels = tuple(est.labels[i] for i in keep.tolist())
    return Estimate(est.mechanism, labels, est.counts[keep], est.stderr[keep], est.n, est.confidence, est.estimator)


# ------------------------------------------------------------------------------------------ per day
_SHARED_KEYS = ("metric", "version", "mechanism", "days", "shards", "confidence", "postprocess", "estimator", "rows",
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
        }


def estimate_by_day(
    r: redis_lib.Redis,
    name: str,
    *,
    version: int | None = None,
    day_from: str | None = None,
    day_to: str | None = None,
    candidates: Sequence[object] | None = None,
    top: int | None = None,
    confidence: float = 0.95,
    postprocess: pp.PostProcess | None = None,
    estimator: EstimatorChoice = "plain",
    percentiles: Sequence[object] | None = None,
) -> DailyResult:
    """:func:`estimate_metric` for each UTC day in [day_from, day_to] that has reports of the version.

    Each day is estimated (and post-processed) on its own; ``top`` keeps the same N values every day, those with
    the largest estimate summed over the days; each day's ``percentiles`` are in :meth:`DailyResult.to_dict`'s
    ``daily`` entries. Raises what :func:`estimate_metric` raises
    (:class:`EmptyRangeError` when no day has reports).
    """
    options: dict[str, Any] = {
        "confidence": confidence, "postprocess": postprocess, "estimator": estimator, "percentiles": percentiles,
    }
    top = _check_top(top)
    record = registry.get_metric(r, name)
    version = record.current_version if version is None else version
    days = select_days(store.available_days(r, name, record.shards, version=version), day_from=day_from, day_to=day_to)
    if not days:  # estimate_metric raises the error (an unknown version, or EmptyRangeError naming the days there are)
        estimate_metric(r, name, version=version, day_from=day_from, day_to=day_to, candidates=candidates, **options)
    # one result per day, or per roll-up where retention left only roll-ups (that result's note says so)
    spans = sealed_periods(r, name, version=version, shards=record.shards, day_from=days[0], day_to=days[-1])
    results = tuple(
        estimate_metric(r, name, version=version, day_from=first, day_to=last, candidates=candidates, **options)
        for first, last in spans
    )
    values: tuple[object, ...] | None = None
    if top is not None:
        ranked_by = "plain" if results[0].estimator == "plain" else "corrected"
        totals: dict[object, float] = {}
        for res in results:
            for row in res.rows():
                if row["estimator"] == ranked_by:
                    totals[row["value"]] = totals.get(row["value"], 0.0) + row["estimate"]
        values = tuple(sorted(totals, key=lambda v: -totals[v])[:top])  # stable: ties keep the first day's order
    return DailyResult(results=results, values=values, periods=tuple(spans))


__all__ = [
    "ESTIMATOR_CHOICES", "DailyResult", "EmptyRangeError", "EstimatorChoice", "Proportion", "QueryResult", "estimate_by_day",
    "estimate_metric", "metric_kind", "select_days",
]
