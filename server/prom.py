"""Prometheus counters and a latency histogram of the ingest service (``prometheus_client``).

Labels are bounded: ``metric`` is a registered metric name or ``""`` when the request never identified
one (an unknown name from a client never becomes a label), ``reason`` and ``endpoint`` come from fixed sets
in the app.

Under gunicorn every worker is its own process, and a scrape is answered by one of them. With
``PROMETHEUS_MULTIPROC_DIR`` set (``gunicorn_hooks.on_starting`` sets it before any worker starts) the
counters live in that directory, one file per worker process, and :meth:`Telemetry.render` sums the files
of every worker, live or exited: the scrape is the total over workers and never goes backwards when a worker
is replaced (prometheus_client's multiprocess mode). Without it (``ldptel serve``, tests) the numbers are
the process's own.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector

from ldptel.server.config import ConfigError

__all__ = ["LATENCY_BUCKETS", "MULTIPROC_ENV", "Telemetry"]

LATENCY_BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series: the multiprocess mode cannot merge them, keep one exposition


class _WorkerFiles(MultiProcessCollector):
    """prometheus_client's multiprocess collector without one race: a worker creates its file empty and sizes it
    only after (MmapedDict: open, then truncate), so a scrape that listed the file in between read 0 bytes and
    raised struct.error, and GET /metrics answered 500 (seen once in a full run of the suite; regression:
    tests/faults/test_metrics_across_workers.py::test_a_scrape_leaves_out_a_worker_file_that_is_not_sized_yet). A
    file without its size yet holds no value: it is left out. Once sized it stays sized, so a kept file reads whole."""

    def collect(self) -> Iterable[Any]:
        files = []
        for name in glob.glob(os.path.join(self._path, "*.db")):
            try:
                if os.path.getsize(name) >= 8:  # sized: its header (the bytes used, read as 4 of the first 8) is there
                    files.append(name)
            except FileNotFoundError:  # removed since the glob (mark_process_dead): nothing to add
                continue
        merged: Iterable[Any] = self.merge(files, accumulate=True)  # type: ignore[no-untyped-call]
        return merged


class Telemetry:
    def __init__(self) -> None:
        if os.environ.get(MULTIPROC_ENV) and values.ValueClass is values.MutexValue:
            # prometheus_client picks its storage when first imported: counters would silently stay per process
            raise ConfigError(f"{MULTIPROC_ENV} was set after prometheus_client was imported in this process; "
                               "set it before (gunicorn: ldptel.server.gunicorn_hooks.on_starting)")
        self._registry = CollectorRegistry(auto_describe=True)
        r = self._registry
        self._accepted_reports = Counter("ldptel_reports_accepted", "Reports appended to Redis (duplicates excluded).",
                                         ["metric"], registry=r)
        self._accepted_batches = Counter("ldptel_batches_accepted", "Batches appended to Redis.", ["metric"], registry=r)
        self._duplicate_batches = Counter("ldptel_batches_duplicate",
                                          "Retried batches acknowledged without a second append.", ["metric"], registry=r)
        self._rejected_reports = Counter("ldptel_reports_rejected", "Reports in rejected ingest requests, by reason.",
                                         ["metric", "reason"], registry=r)
        self._rejected_requests = Counter("ldptel_requests_rejected", "Rejected ingest requests, by reason.",
                                          ["metric", "reason"], registry=r)
        self._requests = Counter("ldptel_http_requests", "HTTP requests by endpoint and status.",
                                 ["endpoint", "status"], registry=r)
        self._undeclared_forwarding = Counter(
            "ldptel_forwarded_from_undeclared_peer",
            "Requests with X-Forwarded-For from a peer not in LDPTEL_TRUSTED_PROXIES (a proxy not declared?).",
            registry=r)
        self._latency = Histogram("ldptel_http_request_duration_seconds", "Request latency by endpoint.",
                                  ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)

    def forwarded_from_undeclared_peer(self) -> None:
        """A request with ``X-Forwarded-For`` from a peer not in ``LDPTEL_TRUSTED_PROXIES`` (proxies.py)."""
        self._undeclared_forwarding.inc()

    def accepted(self, metric: str, n: int, *, duplicate: bool) -> None:
        if duplicate:
            self._duplicate_batches.labels(metric).inc()
        else:
            self._accepted_batches.labels(metric).inc()
            self._accepted_reports.labels(metric).inc(n)

    def rejected(self, metric: str, reason: str, n: int) -> None:
        """A rejected ingest request; ``n`` is the number of reports it claimed (0 when unknown)."""
        self._rejected_requests.labels(metric, reason).inc()
        self._rejected_reports.labels(metric, reason).inc(n)

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        self._requests.labels(endpoint, str(status)).inc()
        self._latency.labels(endpoint).observe(seconds)

    def render(self) -> str:
        """The text exposition: the sum over every process of the multiprocess directory, if one is set."""
        directory = os.environ.get(MULTIPROC_ENV)
        if directory:
            registry = CollectorRegistry()
            _WorkerFiles(registry, path=directory)  # type: ignore[no-untyped-call]
            return generate_latest(registry).decode()
        return generate_latest(self._registry).decode()
