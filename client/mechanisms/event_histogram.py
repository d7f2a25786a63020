"""A histogram of events per device per day, counted on the device: ``Reporter.count(metric)``.

The sibling of :mod:`~ldptel.client.mechanisms.event_count` whose report goes through
:mod:`~ldptel.client.mechanisms.histogram` instead of the bounded mean: the device keeps the UTC day's count
locally (:mod:`ldptel.client.sdk.tally`) and, during the next UTC day, reports it once as a bucket of ``edges``
(counts outside [edges[0], edges[-1]] clipped), so the operator gets the distribution of a day's events per device
(buckets, percentiles with intervals, the midpoint mean and sum) where event-count gives the mean and the total.
Who reports, which days an estimate reads and the privacy (one fresh ε report per device and day, D·ε over D days)
are event-count's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ldptel.client.errors import InvalidParameterError, InvalidValueError
from ldptel.client.mechanisms.base import ReportBatch
from ldptel.client.mechanisms.capabilities import Bucketed, OnDevice
from ldptel.client.mechanisms.delegating import Delegating
from ldptel.client.mechanisms.histogram import HISTOGRAM, HistogramBatch, HistogramParams
from ldptel.client.protocol.params import ParamsBase


@dataclass(frozen=True, slots=True, kw_only=True)
class EventHistogramParams(ParamsBase):
    """A day's count of ``Reporter.count()`` calls, reported once as a bucket of ``edges`` (first edge ≥ 0);
    ``encoding`` and ``prob_bits`` as in :class:`~ldptel.client.mechanisms.histogram.HistogramParams`."""

    mechanism: ClassVar[str] = "event-histogram"
    edges: tuple[float, ...]
    encoding: str = "auto"
    prob_bits: int | None = None

    def __post_init__(self) -> None:
        inner = self.histogram  # validates ε and the edges, resolves the encoding
        if inner.edges[0] < 0:
            raise InvalidParameterError("edges", "edges from 0 or more (a day's count is never negative)", inner.edges[0])
        object.__setattr__(self, "epsilon", inner.epsilon)
        object.__setattr__(self, "edges", inner.edges)
        object.__setattr__(self, "encoding", inner.encoding)
        object.__setattr__(self, "prob_bits", inner.prob_bits)

    @property
    def histogram(self) -> HistogramParams:
        return HistogramParams(epsilon=self.epsilon, edges=tuple(self.edges), encoding=self.encoding,
                               prob_bits=self.prob_bits)

    @property
    def effective_epsilon(self) -> float:
        return self.histogram.effective_epsilon


@dataclass(frozen=True, eq=False, kw_only=True)
class EventHistogramBatch(ReportBatch):
    """event-histogram reports: num-histogram's columns."""

    mechanism: str = "event-histogram"


def _count(value: object) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, float, np.floating)) or not value >= 0:
        raise InvalidValueError(f"event-histogram values must be counts (int ≥ 0), got {type(value).__name__}")
    return float(value)


class EventHistogram(
    Delegating[EventHistogramParams, EventHistogramBatch, HistogramParams, HistogramBatch],
    OnDevice[EventHistogramParams, EventHistogramBatch], Bucketed[EventHistogramParams, EventHistogramBatch],
):
    """A day's event count, aggregated on the device, reported once as a histogram bucket (module docstring)."""

    name = "event-histogram"
    code = 13
    params_type = EventHistogramParams
    batch_type = EventHistogramBatch
    inner = HISTOGRAM

    def inner_params(self, params: EventHistogramParams) -> HistogramParams:
        return params.histogram

    def inner_value(self, value: object) -> object:
        return _count(value)

    def period_days(self, params: EventHistogramParams) -> int:
        return 1

    def period_value(self, params: EventHistogramParams, counts: Sequence[int]) -> object:
        return int(sum(counts))

    def bucket_edges(self, params: EventHistogramParams) -> np.ndarray:
        return HISTOGRAM.bucket_edges(params.histogram)

    def prefix_sums(self, params: EventHistogramParams, counts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        return HISTOGRAM.prefix_sums(params.histogram, counts, n)

    def bucket_covariance(self, params: EventHistogramParams, counts: np.ndarray, n: int) -> np.ndarray:
        return HISTOGRAM.bucket_covariance(params.histogram, counts, n)

    def estimate_note(self, params: EventHistogramParams) -> str:
        return (f"events per device per day, counted on the device and clipped to [{params.edges[0]:g}, "
                f"{params.edges[-1]:g}]; each device reports day D's count once, on day D + 1 ({params.encoding} over "
                f"{len(params.edges) - 1} buckets)")

    def shape(self, params: EventHistogramParams) -> str:
        return f"d={len(params.edges) - 1} {params.encoding} daily"

    def params_schema(self) -> tuple[dict[str, Any], list[str]]:
        fields, required = HISTOGRAM.params_schema()
        return {**fields, "edges": {**fields["edges"], "description": "event-histogram: increasing bucket edges from "
                                    "0 or more; a day's count is clipped to [first, last] on the device"}}, required


EVENT_HISTOGRAM = EventHistogram()
