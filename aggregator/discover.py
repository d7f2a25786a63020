"""Discovery queries: the frequent values of a metric that nobody listed, with estimates and intervals.

:func:`discover_metric` sums a metric's shard and day sketches over a day range (as
:func:`~ldptel.aggregator.query.estimate_metric` does) and asks the metric's mechanism to discover its values
(:meth:`~ldptel.client.mechanisms.capabilities.Discovering.discover`; only :class:`~ldptel.client.mechanisms.capabilities.Discovering` mechanisms can).
False discoveries are controlled by the mechanism: a value is reported when its full-value estimate is at
least ``threshold`` standard errors (default: the Bonferroni z for a family-wise ``alpha`` over every value
the walk could test), and at most ``keep`` candidates survive each round. The result says how many candidates
each round examined, kept and tested.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import redis as redis_lib

from ldptel.aggregator.amplification import release_central
from ldptel.aggregator.query import FrequencyResult, QueryOptions, QueryResult, Target, released_state
from ldptel.client.mechanisms import Discovering, mechanism_of
from ldptel.client.mechanisms.base import Kind
from ldptel.client.mechanisms.capabilities import require
from ldptel.client.mechanisms.state import DEFAULT_ALPHA, DEFAULT_KEEP, Discovery, Estimate

Progress = Callable[[int, int], None]


@dataclass(frozen=True, kw_only=True)
class DiscoverOptions(QueryOptions):
    """:class:`~ldptel.aggregator.query.QueryOptions` (version, days, ``top``, confidence) and the walk's own:
    ``keep`` candidates per round, reported above ``threshold`` standard errors (None: from ``alpha``, the
    family-wise chance of reporting any value nobody holds)."""

    keep: int = DEFAULT_KEEP
    threshold: float | None = None
    alpha: float = DEFAULT_ALPHA


@dataclass(frozen=True, kw_only=True, eq=False)
class DiscoverResult:
    """The discovered values (``result``: a query result over them, ranked by estimate, at most ``top``) and
    the walk that found them (``discovery``: threshold, α, the candidates of each round). Its ``kind`` is
    ``"discovery"``; :meth:`to_dict` is the result's document with ``kind`` and a ``discovery`` object."""

    kind: ClassVar[Kind] = "discovery"

    result: QueryResult
    discovery: Discovery

    def rows(self) -> list[dict[str, Any]]:
        return self.result.rows()

    @property
    def n(self) -> int:
        return self.result.n

    def to_dict(self) -> dict[str, Any]:
        d = self.discovery
        out = self.result.to_dict()
        out["kind"] = self.kind
        out["discovery"] = {
            "threshold_stderr": d.threshold,
            "alpha": d.alpha,
            "keep": d.keep,
            "found": len(d.estimate.labels),
            "tested": d.tested,
            "test_bound": d.bound,
            "stages": [
                {"round": s.round, "prefix_bytes": s.prefix_bytes, "examined": s.examined, "kept": s.kept, "tested": s.tested}
                for s in d.stages
            ],
        }
        return out


def discover_metric(
    r: redis_lib.Redis, name: str, options: DiscoverOptions | None = None, /, *, progress: Progress | None = None,
    **changes: Any,
) -> DiscoverResult:
    """The values of ``name`` found over the UTC days of one version (:class:`DiscoverOptions`; its fields may also
    be given as keywords; module docstring).

    Raises ``UnknownMetricError`` / ``UnknownVersionError`` (registry), :class:`EmptyRangeError` when no
    sketch falls in the range, and ``InvalidParameterError`` for a metric whose mechanism cannot discover or
    for bad arguments.
    """
    opts = DiscoverOptions() if options is None else options
    if changes:
        opts = replace(opts, **changes)
    target = Target.resolve(r, name, opts.version)
    params = target.params
    mechanism = mechanism_of(params)
    found_by = require(mechanism, Discovering, f"a metric whose mechanism discovers values, not {name}")  # type: ignore[type-abstract]
    summed, held = released_state(r, target, target.days(r, opts), opts.where)  # withheld days are in no sum
    state, days = summed.state, list(summed.days)  # wider than asked where retention left only roll-ups at an edge
    found = found_by.discover(params, state, keep=opts.keep, threshold=opts.threshold, alpha=opts.alpha,
                               confidence=opts.confidence, progress=progress)
    est = found.estimate
    if opts.top is not None:
        keep_idx = np.arange(min(opts.top, len(est.labels)))
        est = Estimate(est.mechanism, est.labels[: len(keep_idx)], est.counts[keep_idx], est.stderr[keep_idx], est.n,
                       est.confidence)
    result = FrequencyResult(metric=name, version=target.version, mechanism=mechanism.name, days=tuple(days),
                             shards=target.record.shards, estimate=est, postprocess="none", adjusted=est.counts.copy(),
                             withheld=held, local_epsilon=target.spec.effective_epsilon,
                             central=release_central(r, target.record, target.version, days,
                                                     cells=target.cells(r, opts.where))[1])
    return DiscoverResult(result=result, discovery=found)


__all__ = ["DiscoverOptions", "DiscoverResult", "discover_metric"]
