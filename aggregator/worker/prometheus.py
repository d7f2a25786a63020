"""The fold worker's own metrics for Prometheus: ``ldptel aggregate --metrics-port``.

Read from the :class:`~ldptel.aggregator.worker.Worker` at each scrape (no second set of counters to keep in
step): reports, entries, commits and dead-lettered entries folded since the worker started, the
errors its follow loop survived, the shards it holds, and the lag of each (entries appended but not yet
folded: :func:`~ldptel.aggregator.worker.lag.shard_lag`; one round trip per held shard). Counters restart at 0 with the process, which
Prometheus's ``rate()`` expects. Sum over workers in queries: each exports only its own shards and work.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import redis as redis_lib
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ldptel.aggregator.worker.lag import shard_lag

if TYPE_CHECKING:
    from ldptel.aggregator.worker.loop import Worker

__all__ = ["WorkerCollector", "serve_worker_metrics"]

ERROR_KINDS = ("redis_connection", "redis_refuses_writes", "seal")


class WorkerCollector(Collector):
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Metric]:
        stats = self.worker.stats()
        for name, value, text in (
            ("ldptel_aggregator_reports_folded", stats.reports, "Reports folded into sketches since start."),
            ("ldptel_aggregator_entries_folded", stats.entries, "Stream entries (batches) folded since start."),
            ("ldptel_aggregator_commits", stats.commits, "Shard commits (sketches + checkpoint, one MULTI/EXEC)."),
            ("ldptel_aggregator_entries_dead", stats.dead, "Entries moved to the dead-letter stream (undecodable)."),
            ("ldptel_aggregator_days_sealed", self.worker.sealed_days(), "Days sealed (their shards summed once) since start."),
        ):
            yield CounterMetricFamily(name, text, value=value)
        errors = CounterMetricFamily("ldptel_aggregator_errors", "Errors the follow loop survived, by kind.",
                                     labels=["kind"])
        counts = self.worker.errors()
        for kind in ERROR_KINDS:
            errors.add_metric([kind], counts.get(kind, 0))
        yield errors
        held = self.worker.owned_shards()
        yield GaugeMetricFamily("ldptel_aggregator_shards_held", "Shards this worker holds a lease on.", value=len(held))
        lag = GaugeMetricFamily("ldptel_aggregator_lag_entries",
                                "Entries of a held shard appended but not yet folded.",
                                labels=["metric", "shard"])
        up = 1
        for metric, shard in held:
            try:
                entries = shard_lag(self.worker.r, metric, shard)
            except redis_lib.RedisError:  # Redis down: the scrape still answers, with redis_up 0
                up = 0
                break
            if entries is not None:
                lag.add_metric([metric, str(shard)], entries)
        yield lag
        yield GaugeMetricFamily("ldptel_aggregator_redis_up", "1 when the last lag query reached Redis.", value=up)


def serve_worker_metrics(worker: Worker, *, host: str, port: int) -> int:
    """Serve ``/metrics`` for ``worker`` on ``host:port`` from a daemon thread; returns the port bound."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerCollector(worker))
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return int(server.server_port)
