"""Discovery queries: the frequent values of a metric that nobody listed, with estimates and intervals.

:func:`discover_metric` sums a metric's shard and day sketches over a day range (as
:func:`~ldptel.aggregator.query.estimate_metric` does) and asks the metric's mechanism to discover its values
(:meth:`~ldptel.client.mechanisms.base.Mechanism.discover`; only mechanisms that declare ``discovers`` can).
False discoveries are controlled by the mechanism: a value is reported when its full-value estimate is at
least ``threshold`` standard errors (default: the Bonferroni z for a family-wise ``alpha`` over every value
the walk could test), and at most ``keep`` candidates survive each round. The result says how many candidates
each round examined, kept and tested.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis as redis_lib

from ldptel.aggregator.query import EmptyRangeError, QueryResult, select_days
from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms import mechanism_names, mechanism_of
from ldptel.client.mechanisms.state import DEFAULT_ALPHA, DEFAULT_KEEP, Discovery, Estimate
from ldptel.client.protocol.validate import check_int
from ldptel.storage import registry
from ldptel.storage import sketches as store
from ldptel.storage.sealed import summed_state

Progress = Callable[[int, int], None]


@dataclass(frozen=True, kw_only=True, eq=False)
class DiscoverResult:
    """The discovered values (``result``: a query result over them, ranked by estimate, at most ``top``) and
    the walk that found them (``discovery``: threshold, α, the candidates of each round)."""

    result: QueryResult
    discovery: Discovery

    def to_dict(self) -> dict[str, Any]:
        d = self.discovery
        out = self.result.to_dict()
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
    r: redis_lib.Redis,
    name: str,
    *,
    version: int | None = None,
    day_from: str | None = None,
    day_to: str | None = None,
    top: int | None = None,
    keep: int = DEFAULT_KEEP,
    threshold: float | None = None,
    alpha: float = DEFAULT_ALPHA,
    confidence: float = 0.95,
    progress: Progress | None = None,
) -> DiscoverResult:
    """The values of ``name`` found over the UTC days [day_from, day_to] of one version (module docstring).

    Raises ``UnknownMetricError`` / ``UnknownVersionError`` (registry), :class:`EmptyRangeError` when no
    sketch falls in the range, and ``InvalidParameterError`` for a metric whose mechanism cannot discover or
    for bad arguments.
    """
    if top is not None:
        check_int("top", top, 1, 1 << 30)
    record = registry.get_metric(r, name)
    version = record.current_version if version is None else version
    params = registry.spec_for(record, version).params
    mechanism = mechanism_of(params)
    if not mechanism.discovers:
        allowed = ", ".join(mechanism_names(discovers=True))
        raise InvalidParameterError("metric", f"a metric whose mechanism discovers values ({allowed})", f"{name} ({mechanism.name})")
    all_days = store.available_days(r, name, record.shards, version=version)
    days = select_days(all_days, day_from=day_from, day_to=day_to)
    if not days:
        have = f"it has days {all_days[0]} to {all_days[-1]}" if all_days else "it has no folded reports yet"
        raise EmptyRangeError(
            f"no sketches of {name!r} version {version} between {day_from or 'the start'} and {day_to or 'the end'} ({have})",
            metric=name, version=version, mechanism=mechanism.name,
        )
    summed = summed_state(r, name, params=params, version=version, shards=record.shards, day_from=days[0], day_to=days[-1])
    state, days = summed.state, list(summed.days)  # wider than asked where retention left only roll-ups at an edge
    found = mechanism.discover(params, state, keep=keep, threshold=threshold, alpha=alpha, confidence=confidence,
                               progress=progress)
    est = found.estimate
    if top is not None:
        keep_idx = np.arange(min(top, len(est.labels)))
        est = Estimate(est.mechanism, est.labels[: len(keep_idx)], est.counts[keep_idx], est.stderr[keep_idx], est.n,
                       est.confidence)
    result = QueryResult(metric=name, version=version, mechanism=mechanism.name, days=tuple(days), shards=record.shards,
                         estimate=est, postprocess="none", adjusted=est.counts.copy())
    return DiscoverResult(result=result, discovery=found)


__all__ = ["DiscoverResult", "discover_metric"]
