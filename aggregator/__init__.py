"""ldptel aggregator: exactly-once fold workers, the sketch store, queries with post-processing, the CLI.

Library entry points::

    from ldptel.aggregator import Worker, WorkerConfig, estimate_metric

    Worker(redis_client, WorkerConfig(once=True)).run()          # fold every shard's stream, then stop
    result = estimate_metric(redis_client, "pages", candidates=["/", "/about"], postprocess="norm-sub")
    result.rows()                                                # raw estimate, stderr, interval, adjusted

The command line (``ldptel``) is :mod:`ldptel.aggregator.cli`.
"""

from __future__ import annotations

from .postprocess import POSTPROCESS_METHODS as POSTPROCESS_METHODS, PostProcess as PostProcess
from .query import (
    EmptyRangeError as EmptyRangeError,
    QueryResult as QueryResult,
    estimate_metric as estimate_metric,
)
from .worker import Worker as Worker, WorkerConfig as WorkerConfig, WorkerStats as WorkerStats

__all__ = [
    "POSTPROCESS_METHODS",
    "EmptyRangeError",
    "PostProcess",
    "QueryResult",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
    "estimate_metric",
]
