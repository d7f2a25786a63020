"""Fixtures for the Reporter tests: the real ingest app on a loopback port, a scripting proxy, a fake clock.

``live`` runs :func:`ldptel.server.create_app` (real Redis from the root conftest) under werkzeug's threaded
server in a thread; it can be stopped and restarted on the same port (server-down tests). ``proxy`` sits in
front of it and can inject scripted answers (429/503 with Retry-After) or forward a request and then hold
the answer back (a client killed mid-upload). ``FakeClock`` stands in for time: its ``sleep`` only advances it.
"""

from __future__ import annotations

import http.client
import http.server
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import redis as redis_lib
from werkzeug.serving import BaseWSGIServer, make_server

from ldptel.client import MetricSpec
from ldptel.client.sdk.policy import PrivacyPolicy
from ldptel.server import ServerConfig, create_app
from ldptel.storage.registry import create_metric

START_TIME = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
# Delivery tests report far more than a real policy allows per day; the policy itself is tests/client/test_policy.py.
OPEN_POLICY = PrivacyPolicy(max_report_epsilon=math.inf, max_daily_epsilon=math.inf, max_longitudinal_epsilon=math.inf)


class FakeClock:
    """Wall-clock stand-in; ``sleep`` records the delay and advances the clock (no real waiting)."""

    def __init__(self, t: float = START_TIME) -> None:
        self.t = t
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.t += seconds


class LiveServer:
    """The ingest app on 127.0.0.1:<port>, restartable on the same port."""

    def __init__(self, config: ServerConfig, redis: redis_lib.Redis) -> None:
        if getattr(config, "registry_ttl", 0):  # see registry changes (new versions) at once
            config = replace(config, registry_ttl=0)
        self.config = config
        self.redis = redis
        self.app = create_app(config)
        self.port = 0
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._server = make_server("127.0.0.1", self.port, self.app, threaded=True)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            assert self._thread is not None
            self._thread.join(5)
            self._server = None

    def create(self, spec: MetricSpec, *, shards: int | None = None) -> MetricSpec:
        return create_metric(self.redis, spec, shards=shards).current

    def delivered(self, metric: str) -> dict[str, Any]:
        """Everything the server appended for ``metric``: total reports, per version, entries, batch ids."""
        total, per_version, entries, batch_ids = 0, {}, 0, []
        for key in self.redis.scan_iter(match=f"ldp:v1:{{{metric}:*}}:held"):
            for _id, fields in self.redis.xrange(key):
                n, v = int(fields[b"n"]), int(fields[b"v"])
                total += n
                per_version[v] = per_version.get(v, 0) + n
                entries += 1
                batch_ids.append(bytes(fields[b"b"][16:32]))
        return {"total": total, "per_version": per_version, "entries": entries, "batch_ids": batch_ids}


@pytest.fixture
def live(server_config: ServerConfig, redis: redis_lib.Redis) -> Iterator[LiveServer]:
    server = LiveServer(server_config, redis)
    try:
        yield server
    finally:
        server.stop()
        server.app.extensions["ldptel"].close()


# ------------------------------------------------------------------------------------------------ proxy
@dataclass
class Seen:
    method: str
    path: str
    status: int
    batch_id: bytes | None
    at: float | None
    body: bytes = b""


@dataclass
class ProxyControl:
    upstream_port: int
    inject: list[tuple[int, dict[str, str], bytes]] = field(default_factory=list)
    hold_next_post: bool = False
    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    seen: list[Seen] = field(default_factory=list)
    clock: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def posts(self) -> list[Seen]:
        return [s for s in self.seen if s.method == "POST"]


def _handler(ctl: ProxyControl) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            batch_id = body[16:32] if self.command == "POST" and len(body) >= 32 else None
            at = ctl.clock() if ctl.clock is not None else None
            with ctl.lock:
                scripted = ctl.inject.pop(0) if (ctl.inject and self.command == "POST") else None
                hold = self.command == "POST" and ctl.hold_next_post
                if hold:
                    ctl.hold_next_post = False
            if scripted is not None:
                status, headers, payload = scripted
                ctl.seen.append(Seen(self.command, self.path, status, batch_id, at))
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            up = http.client.HTTPConnection("127.0.0.1", ctl.upstream_port, timeout=30)
            fwd = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type", "accept")}
            up.request(self.command, self.path, body=body or None, headers=fwd)
            resp = up.getresponse()
            data = resp.read()
            up.close()
            ctl.seen.append(Seen(self.command, self.path, resp.status, batch_id, at, data))
            if hold:  # the server has counted the batch; the client never hears about it
                ctl.held.set()
                ctl.release.wait(30)
                self.close_connection = True
                return
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() in ("content-type", "retry-after"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = _relay
        do_POST = _relay

    return Handler


@pytest.fixture
def proxy(live: LiveServer) -> Iterator[tuple[str, ProxyControl]]:
    ctl = ProxyControl(upstream_port=live.port)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(ctl))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", ctl
    finally:
        ctl.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
