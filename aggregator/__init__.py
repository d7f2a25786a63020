"""ldptel aggregator: exactly-once fold workers, the sketch store, queries with post-processing, the CLI.

Library entry points::

    from ldptel.aggregator import Worker, WorkerConfig, estimate_metric

    Worker(redis_client, WorkerConfig(once=True)).run()          # fold every shard's stream, then stop
    result = estimate_metric(redis_client, "pages", candidates=["/", "/about"], postprocess="norm-sub")
    result.rows()                                                # raw estimate, stderr, interval, adjusted

The command line (``ldptel``) is :mod:`ldptel.aggregator.cli`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ldptel.client._lazy import lazy_exports

_EXPORTS = {
    "POSTPROCESS_METHODS": "ldptel.aggregator.postprocess",
    "PostProcess": "ldptel.aggregator.postprocess",
    "EmptyRangeError": "ldptel.aggregator.query",
    "QueryResult": "ldptel.aggregator.query",
    "estimate_metric": "ldptel.aggregator.query",
    "Worker": "ldptel.aggregator.worker",
    "WorkerConfig": "ldptel.aggregator.worker",
    "WorkerStats": "ldptel.aggregator.worker",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from ldptel.aggregator.postprocess import POSTPROCESS_METHODS as POSTPROCESS_METHODS
    from ldptel.aggregator.postprocess import PostProcess as PostProcess
    from ldptel.aggregator.query import (
        EmptyRangeError as EmptyRangeError,
    )
    from ldptel.aggregator.query import (
        QueryResult as QueryResult,
    )
    from ldptel.aggregator.query import (
        estimate_metric as estimate_metric,
    )
    from ldptel.aggregator.worker import Worker as Worker
    from ldptel.aggregator.worker import WorkerConfig as WorkerConfig
    from ldptel.aggregator.worker import WorkerStats as WorkerStats
