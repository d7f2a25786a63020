"""Typed query results: one type per kind of estimate, each with its ``kind``, its ``rows()`` and a stable ``to_dict()``.

=====================  =============  ==========================================================================
type                   ``kind``       what it adds to :class:`QueryResult`
=====================  =============  ==========================================================================
:class:`FrequencyResult` frequencies  counts of values (rr, grr, the sketches); rr's :attr:`~FrequencyResult.proportion`
:class:`SummaryResult`   summary      rows are a mean, a sum and a count (no shares, no post-processing)
:class:`HistogramResult` histogram    buckets in order: their ``edges``, the midpoint ``mean``, ``percentiles``
:class:`~ldptel.aggregator.discover.DiscoverResult` discovery  values found without candidates, and the walk
=====================  =============  ==========================================================================

The ``kind`` is the mechanism's (:attr:`~ldptel.client.mechanisms.base.Mechanism.kind`); :func:`result_type` maps it to
the type, and the renderers of the CLI (:mod:`ldptel.aggregator.render`) and the dashboard pick theirs by it.

Invariant: every ``to_dict()`` has the keys metric, version, mechanism, kind, days, shards, n, confidence, postprocess,
estimator and rows, in that order; a kind only adds keys after them (never renames or drops one), so a reader keyed on
``kind`` can rely on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from ldptel.aggregator import postprocess as pp
from ldptel.aggregator.fleet import Fleet
from ldptel.aggregator.selection import Selection
from ldptel.client import Estimate
from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms.base import Kind
from ldptel.client.mechanisms.bucketed import HistogramMean, Percentile, bucket_edges, histogram_mean
from ldptel.client.mechanisms.bucketed import percentiles as percentiles_of
from ldptel.client.protocol.params import ParamsBase

if TYPE_CHECKING:
    from ldptel.aggregator.amplification import CentralPrivacy
    from ldptel.aggregator.withholding import Withheld

EstimatorChoice = Literal["plain", "corrected", "both"]
ESTIMATOR_CHOICES: tuple[EstimatorChoice, ...] = ("plain", "corrected", "both")
RANDOMIZATION_MEANING = (
    "randomization only: the spread over the privacy noise of the reports (and sketch collisions), given the devices "
    "that reported"
)
POPULATION_MEANING = (
    "population: the privacy noise plus the sampling of the reporting devices from the fleet, as a random sample of it"
)
Uncertainty = Literal["randomization", "population"]
SUMMARY_LABELS = ("count", "mean", "sum")  # the statistics a numeric histogram's summary prints before its percentiles


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
    """Raw estimates (``estimate``: counts, stderr, intervals) and post-processed counts (``adjusted``): what every
    kind of result has.

    ``estimate`` is the plain estimate, or the corrected one when only that was asked for
    (``estimator="corrected"``); with ``estimator="both"``, ``corrected`` and ``corrected_adjusted`` hold
    the corrected estimate of the same values beside it.
    """

    kind: ClassVar[Kind] = "frequencies"
    counts: ClassVar[bool] = True  # rows are counts of the n reports (shares and post-processing apply)
    default_postprocess: ClassVar[pp.PostProcess] = "none"
    takes_percentiles: ClassVar[bool] = False

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
    note: str = ""
    fleet: Fleet | None = None  # sample_rate < 1: the counts scaled to the fleet (:mod:`~ldptel.aggregator.fleet`)
    uncertainty: Uncertainty = "randomization"  # what ``stderr`` and the intervals mean
    # Candidates tested for f > 0 over all of them (:mod:`~ldptel.aggregator.selection`), one per estimator
    selection: Selection | None = None
    corrected_selection: Selection | None = None
    # days (or roll-ups) of the range under the metric's min_reports: left out of every sum, listed with the reason
    withheld: tuple[Withheld, ...] = ()
    # the local ε of one report, and the central (ε, δ) of the shuffled reports or why it does not apply
    # (:mod:`~ldptel.aggregator.amplification`); None: not computed (a result built outside a query)
    local_epsilon: float | None = None
    central: CentralPrivacy | None = None

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

    def rows(self) -> list[dict[str, Any]]:
        """One dict per value and estimator (its ``estimator`` key says which; with both, each value's plain row
        then its corrected row): the raw estimate, stderr, interval and frequency, then the adjusted ones."""
        n = self.n
        parts = []
        for (est, adjusted), sel in zip(self.estimates, (self.selection, self.corrected_selection), strict=False):
            rows = est.rows()
            for i, (row, adj) in enumerate(zip(rows, adjusted.tolist(), strict=True)):
                row["adjusted"] = float(adj)
                row["adjusted_frequency"] = float(adj / n) if n else float("nan")
                if sel is not None:
                    row["significant"] = bool(sel.significant[i])
                    if sel.low is not None and sel.high is not None:  # simultaneous intervals asked
                        row["ci_low"], row["ci_high"] = float(sel.low[i]), float(sel.high[i])
            parts.append(rows)
        return [row for group in zip(*parts, strict=True) for row in group]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "metric": self.metric,
            "version": self.version,
            "mechanism": self.mechanism,
            "kind": self.kind,
            "days": list(self.days),
            "shards": self.shards,
            "n": self.n,
            "confidence": self.confidence,
            "postprocess": self.postprocess,
            "estimator": self.estimator,
            "rows": self.rows(),
        }
        out.update(self.extra())
        if self.selection is not None:
            out["selection"] = self.selection.to_dict()
        if self.corrected_selection is not None:
            out["corrected_selection"] = self.corrected_selection.to_dict()
        if self.note:
            out["note"] = self.note
        if self.withheld:
            out["withheld"] = [w.to_dict() for w in self.withheld]
        if self.local_epsilon is not None:
            out["local_epsilon"] = self.local_epsilon
        if self.central is not None:
            out["central"] = self.central.to_dict()
        out["uncertainty"] = self.uncertainty
        out["uncertainty_meaning"] = RANDOMIZATION_MEANING if self.uncertainty == "randomization" else POPULATION_MEANING
        if self.counts and self.uncertainty == "randomization":
            out["population"] = self.population()
        if self.fleet is not None:
            out["fleet"] = self.fleet.to_dict()
        return out

    def as_population(self) -> QueryResult:
        """The same result with population uncertainty in every stderr and interval (counts of values only)."""
        raise InvalidParameterError(
            "uncertainty", "randomization for numeric metrics (a mean's population test: ldptel test --mean)", self.mechanism,
        )

    def population(self) -> dict[str, Any]:
        """The rows' stderr and interval with population uncertainty: the randomization variance plus the sampling
        of the n reporting devices from the fleet (n·f(1 − f) for a count, f its share clipped to [0, 1])."""
        n, z = self.n, self.estimate.z
        rows = []
        for est, _adjusted in self.estimates:
            se = _population_stderr(est, n)
            rows += [{"value": v, "estimator": est.estimator, "stderr": float(s), "ci_low": float(c - z * s),
                      "ci_high": float(c + z * s)} for v, c, s in zip(est.labels, est.counts, se, strict=True)]
        return {"meaning": POPULATION_MEANING, "rows": rows, **self.population_extra()}

    def population_extra(self) -> dict[str, Any]:
        """What this kind adds to :meth:`population`."""
        return {}

    def extra(self) -> dict[str, Any]:
        """What this kind adds to :meth:`to_dict` after the shared keys."""
        return {}

    @classmethod
    def derive(cls, params: ParamsBase, est: Estimate, *, percentiles: Sequence[object] | None, whole: bool) -> dict[str, Any]:
        """The fields this kind computes from the raw estimate ``est`` of every row (``whole``: the result keeps
        every row, in order), as keyword arguments of the result."""
        return {}


@dataclass(frozen=True, kw_only=True, eq=False)
class FrequencyResult(QueryResult):
    """Counts of values; ``proportion_of``: the label whose share is the answer (rr's ``true``), if any."""

    kind: ClassVar[Kind] = "frequencies"

    proportion_of: str | None = None

    @property
    def proportion(self) -> Proportion | None:
        """The share of the :attr:`proportion_of` label with its standard error and interval, or None."""
        label = self.proportion_of
        if label is None or label not in self.estimate.labels:
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

    def extra(self) -> dict[str, Any]:
        prop = self.proportion
        return {} if prop is None else {"proportion": prop.to_dict()}

    def as_population(self) -> QueryResult:
        if self.uncertainty == "population":
            return self

        def widen(est: Estimate) -> Estimate:
            se = _population_stderr(est, self.n)
            return Estimate(est.mechanism, est.labels, est.counts, se, est.n, est.confidence, est.estimator)

        def rewiden(sel: Selection | None, est: Estimate) -> Selection | None:
            """Simultaneous intervals at the population stderr (the marks stay the test among these devices)."""
            if sel is None or sel.low is None:
                return sel
            z = sel.z_simultaneous
            return replace(sel, low=est.counts - z * est.stderr, high=est.counts + z * est.stderr)

        plain = widen(self.estimate)
        corrected = None if self.corrected is None else widen(self.corrected)
        return replace(self, estimate=plain, corrected=corrected, uncertainty="population",
                       selection=rewiden(self.selection, plain),
                       corrected_selection=None if corrected is None else rewiden(self.corrected_selection, corrected))

    def population_extra(self) -> dict[str, Any]:
        prop = self.proportion
        if prop is None:
            return {}
        n, z = self.n, self.estimate.z
        share = min(max(prop.estimate, 0.0), 1.0)
        se_p = float(np.sqrt(prop.stderr**2 + share * (1 - share) / n))
        return {"proportion": {"stderr": se_p, "ci_low": prop.estimate - z * se_p, "ci_high": prop.estimate + z * se_p}}


@dataclass(frozen=True, kw_only=True, eq=False)
class SummaryResult(QueryResult):
    """Numeric summaries (a mean, a sum, a count): the rows are not counts of the reports, so have no shares."""

    kind: ClassVar[Kind] = "summary"
    counts: ClassVar[bool] = False


@dataclass(frozen=True, kw_only=True, eq=False)
class HistogramResult(QueryResult):
    """A numeric histogram: its buckets in order (``edges``, empty when ``top`` picked some), the midpoint ``mean``
    and the asked ``percentiles``."""

    kind: ClassVar[Kind] = "histogram"
    default_postprocess: ClassVar[pp.PostProcess] = "norm-sub"  # its percentiles read the consistent histogram
    takes_percentiles: ClassVar[bool] = True

    edges: tuple[float, ...] = ()
    mean: HistogramMean | None = None
    percentiles: tuple[Percentile, ...] = ()

    def extra(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.percentiles:
            out["percentiles"] = [pc.row() for pc in self.percentiles]
        if self.mean is not None:
            out["mean"] = self.mean.row()
        if self.edges:
            out["edges"] = list(self.edges)
        return out

    @classmethod
    def derive(cls, params: ParamsBase, est: Estimate, *, percentiles: Sequence[object] | None, whole: bool) -> dict[str, Any]:
        """The bucket edges (of a result that keeps every bucket), the midpoint mean and the asked percentiles."""
        edges = bucket_edges(params)
        return {
            "edges": tuple(edges.tolist()) if whole else (),
            "mean": histogram_mean(params, est),
            "percentiles": () if percentiles is None else percentiles_of(params, est, percentiles),
        }

    def summary_rows(self) -> list[dict[str, Any]]:
        """Count, mean, sum (n × mean) and each percentile as rows of ``value``, ``estimate``, ``stderr`` (None for
        percentiles: their intervals come from test inversion), ``ci_low``, ``ci_high``."""
        if self.mean is None:
            raise InvalidParameterError("result", "a histogram of all its buckets for a summary", "one with top")
        m, n = self.mean, float(self.n)
        stats = ((n, 0.0, n, n), (m.estimate, m.stderr, m.ci_low, m.ci_high),
                 (n * m.estimate, n * m.stderr, n * m.ci_low, n * m.ci_high))  # count, mean, sum
        rows: list[dict[str, Any]] = [{"value": label, "estimate": est, "stderr": se, "ci_low": lo, "ci_high": hi}
                                      for label, (est, se, lo, hi) in zip(SUMMARY_LABELS, stats, strict=True)]
        rows += [{"value": f"p{pc.percentile:g}", "estimate": pc.shown, "stderr": None, "ci_low": pc.ci_low,
                  "ci_high": pc.ci_high} for pc in self.percentiles]
        return rows


def _population_stderr(est: Estimate, n: int) -> np.ndarray:
    f = np.clip(est.counts / n, 0.0, 1.0)
    out: np.ndarray = np.sqrt(est.stderr**2 + n * f * (1 - f))
    return out


_RESULT_TYPES: dict[str, type[QueryResult]] = {
    FrequencyResult.kind: FrequencyResult, SummaryResult.kind: SummaryResult, HistogramResult.kind: HistogramResult,
}


def result_type(kind: str) -> type[QueryResult]:
    """The result type of an estimate of a mechanism of this kind (a discovering mechanism's estimates of listed
    values are frequencies)."""
    return _RESULT_TYPES.get(kind, FrequencyResult)


__all__ = [
    "ESTIMATOR_CHOICES", "EstimatorChoice", "FrequencyResult", "HistogramResult", "Proportion", "QueryResult",
    "SummaryResult", "result_type",
]
