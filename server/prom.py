"""In-process Prometheus counters and a latency histogram, rendered in the text exposition format 0.0.4.

Labels are bounded: ``metric`` is a registered metric name or ``""`` when the request never identified
one (an unknown name from a client never becomes a label), ``reason`` and ``endpoint`` come from fixed sets
in the app. Each server process keeps its own numbers (the ``process`` label is not added: scrape each
worker, or sum them; counters from several gunicorn workers add up).
"""

from __future__ import annotations

import threading
from collections import defaultdict

__all__ = ["Telemetry"]

LATENCY_BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Telemetry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._accepted_reports: dict[str, int] = defaultdict(int)
        self._accepted_batches: dict[str, int] = defaultdict(int)
        self._duplicate_batches: dict[str, int] = defaultdict(int)
        self._rejected_reports: dict[tuple[str, str], int] = defaultdict(int)
        self._rejected_requests: dict[tuple[str, str], int] = defaultdict(int)
        self._latency: dict[str, list[int]] = {}
        self._latency_sum: dict[str, float] = defaultdict(float)
        self._requests: dict[tuple[str, int], int] = defaultdict(int)

    def accepted(self, metric: str, n: int, *, duplicate: bool) -> None:
        with self._lock:
            if duplicate:
                self._duplicate_batches[metric] += 1
            else:
                self._accepted_batches[metric] += 1
                self._accepted_reports[metric] += n

    def rejected(self, metric: str, reason: str, n: int) -> None:
        """A rejected ingest request; ``n`` is the number of reports it claimed (0 when unknown)."""
        with self._lock:
            self._rejected_requests[(metric, reason)] += 1
            self._rejected_reports[(metric, reason)] += n

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        with self._lock:
            self._requests[(endpoint, status)] += 1
            counts = self._latency.get(endpoint)
            if counts is None:
                counts = self._latency[endpoint] = [0] * (len(LATENCY_BUCKETS) + 1)
            for i, bound in enumerate(LATENCY_BUCKETS):
                if seconds <= bound:
                    counts[i] += 1
                    break
            else:
                counts[-1] += 1
            self._latency_sum[endpoint] += seconds

    def render(self) -> str:
        out: list[str] = []
        with self._lock:

            def family(name: str, kind: str, help_text: str) -> None:
                out.append(f"# HELP {name} {help_text}")
                out.append(f"# TYPE {name} {kind}")

            family("ldptel_reports_accepted_total", "counter", "Reports appended to Redis (duplicates excluded).")
            for metric, v in sorted(self._accepted_reports.items()):
                out.append(f'ldptel_reports_accepted_total{{metric="{_escape(metric)}"}} {v}')
            family("ldptel_batches_accepted_total", "counter", "Batches appended to Redis.")
            for metric, v in sorted(self._accepted_batches.items()):
                out.append(f'ldptel_batches_accepted_total{{metric="{_escape(metric)}"}} {v}')
            family("ldptel_batches_duplicate_total", "counter", "Retried batches acknowledged without a second append.")
            for metric, v in sorted(self._duplicate_batches.items()):
                out.append(f'ldptel_batches_duplicate_total{{metric="{_escape(metric)}"}} {v}')
            family("ldptel_reports_rejected_total", "counter", "Reports in rejected ingest requests, by reason.")
            for (metric, reason), v in sorted(self._rejected_reports.items()):
                out.append(f'ldptel_reports_rejected_total{{metric="{_escape(metric)}",reason="{reason}"}} {v}')
            family("ldptel_requests_rejected_total", "counter", "Rejected ingest requests, by reason.")
            for (metric, reason), v in sorted(self._rejected_requests.items()):
                out.append(f'ldptel_requests_rejected_total{{metric="{_escape(metric)}",reason="{reason}"}} {v}')
            family("ldptel_http_requests_total", "counter", "HTTP requests by endpoint and status.")
            for (endpoint, status), v in sorted(self._requests.items()):
                out.append(f'ldptel_http_requests_total{{endpoint="{endpoint}",status="{status}"}} {v}')
            family("ldptel_http_request_duration_seconds", "histogram", "Request latency by endpoint.")
            for endpoint, counts in sorted(self._latency.items()):
                cumulative = 0
                for bound, count in zip(LATENCY_BUCKETS, counts, strict=False):  # counts[-1] is +Inf, written below
                    cumulative += count
                    out.append(f'ldptel_http_request_duration_seconds_bucket{{endpoint="{endpoint}",le="{bound}"}} {cumulative}')
                cumulative += counts[-1]
                out.append(f'ldptel_http_request_duration_seconds_bucket{{endpoint="{endpoint}",le="+Inf"}} {cumulative}')
                out.append(f'ldptel_http_request_duration_seconds_sum{{endpoint="{endpoint}"}} {self._latency_sum[endpoint]:.6f}')
                out.append(f'ldptel_http_request_duration_seconds_count{{endpoint="{endpoint}"}} {cumulative}')
        return "\n".join(out) + "\n"
