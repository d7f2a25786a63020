"""Slow clients (headers or body trickled a few bytes at a time) and legitimate ingest load, over raw sockets.

Shared by tests/faults/test_slow_clients.py and tests/bench/bench_faults.py.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ldptel.client import MetricSpec
from tests.server.srv_helpers import OCTET, make_batch
from tests.server.test_server_http import ADMIN_TOKEN, APP_TOKEN

__all__ = ["LegitResult", "create_metric", "legit_load", "slow_clients"]

TRICKLE_SECONDS = 0.5


def create_metric(port: int, spec: MetricSpec) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    # The harness's devices are load generators with a test policy (thousands of reports a day): their metrics are
    # above the default device policy on purpose, which the registry refuses unless told so.
    fields = {k: v for k, v in spec.to_dict().items() if k != "version"}
    body = json.dumps({**fields, "allow_above_default_policy": True})
    try:  # closed even when the assertion fails (a leaked socket fails a later test with a ResourceWarning)
        conn.request("POST", "/v1/metrics", body=body,
                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status in (200, 201), response.read()
    finally:
        conn.close()


def _open_slow(port: int, kind: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if kind == "headers":  # a request line and then one header line every TRICKLE_SECONDS, never finished
        sock.sendall(b"POST /v1/reports HTTP/1.1\r\nHost: ingest\r\n")
    else:  # complete headers, then the body a few bytes every TRICKLE_SECONDS
        sock.sendall(b"POST /v1/reports HTTP/1.1\r\nHost: ingest\r\nAuthorization: Bearer " + APP_TOKEN.encode()
                     + b"\r\nContent-Type: " + OCTET.encode() + b"\r\nContent-Length: 1000000\r\n\r\n")
    return sock


@contextmanager
def slow_clients(port: int, n: int) -> Iterator[dict[str, int]]:
    """``n`` connections open for the duration, half trickling headers, half a body; a connection the server
    closes is reopened, so ``n`` stay open. Yields counters (``reopened``)."""
    kinds = ["headers" if i % 2 == 0 else "body" for i in range(n)]
    socks: list[socket.socket | None] = [None] * n
    stats = {"reopened": 0}
    stop = threading.Event()

    def run() -> None:
        tick = 0
        while not stop.is_set():
            for i, kind in enumerate(kinds):
                try:
                    if socks[i] is None:
                        socks[i] = _open_slow(port, kind)
                        stats["reopened"] += 1
                    sock = socks[i]
                    assert sock is not None
                    sock.sendall(b"X-Slow-%d: 1\r\n" % tick if kind == "headers" else b"abcd")
                except OSError:
                    if socks[i] is not None:
                        socks[i].close()  # type: ignore[union-attr]
                    socks[i] = None
            tick += 1
            stop.wait(TRICKLE_SECONDS)

    for i, kind in enumerate(kinds):
        socks[i] = _open_slow(port, kind)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        time.sleep(2 * TRICKLE_SECONDS)  # every slow connection has sent something and holds its place
        yield stats
    finally:
        stop.set()
        thread.join(timeout=10)
        for sock in socks:
            if sock is not None:
                sock.close()


@dataclass
class LegitResult:
    statuses: dict[int, int] = field(default_factory=dict)  # 0 = timed out or connection failed
    latencies: list[float] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    def summary(self) -> dict[str, object]:
        lat = np.array(self.latencies or [0.0])
        return {"requests": self.total, "ok": self.statuses.get(202, 0), "failed": self.total - self.statuses.get(202, 0),
                "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
                "p50_s": round(float(np.median(lat)), 4), "max_s": round(float(lat.max()), 4)}


def legit_load(port: int, spec: MetricSpec, *, threads: int, requests: int, timeout: float) -> LegitResult:
    """``threads`` clients, each posting ``requests`` real batches (a new connection per request, as a fleet of
    devices would); a request that takes longer than ``timeout`` counts as failed (status 0)."""
    result = LegitResult()
    lock = threading.Lock()

    def client(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(requests):
            data, _ = make_batch(spec, 50, rng)
            t0 = time.monotonic()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
            try:
                conn.request("POST", "/v1/reports", body=data,
                             headers={"Authorization": f"Bearer {APP_TOKEN}", "Content-Type": OCTET})
                response = conn.getresponse()
                response.read()
                status = response.status
            except OSError:
                status = 0
            finally:
                conn.close()
            with lock:
                result.statuses[status] = result.statuses.get(status, 0) + 1
                result.latencies.append(time.monotonic() - t0)

    workers = [threading.Thread(target=client, args=(seed,)) for seed in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return result
