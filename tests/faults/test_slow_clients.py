"""The shipped deployment (deploy/nginx.conf in front of deploy/gunicorn.conf.py) under slow and malformed clients.

Bare gunicorn with the same config starves under the same 64 slow connections (19 and 40 of 40 legitimate requests
timed out at 5 s in two runs): tests/bench/bench_faults.py measures both in the same run.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ldptel.storage.embedded import EmbeddedRedis
from tests.faults.slow import create_metric, legit_load, slow_clients
from tests.faults.stack import gunicorn, nginx, nginx_binary
from tests.server.srv_helpers import OCTET, cms_spec, make_batch
from tests.server.test_server_http import APP_TOKEN

pytestmark = pytest.mark.slow

SLOW_CONNECTIONS = 64
BOUND_SECONDS = 5.0  # each legitimate request: 50 reports; ~10 ms when the server is idle


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """(nginx port, nginx log) of redis + gunicorn + nginx, all with the shipped configuration."""
    nginx_binary()
    tmp = tmp_path_factory.mktemp("front")
    with EmbeddedRedis(data_dir=tmp / "redis") as redis_server, \
            gunicorn(redis_server.url, tmp / "gunicorn.log") as (gport, _), \
            nginx(gport, tmp / "nginx") as (port, log):
        yield port, log


def _raw(port: int, request: bytes) -> tuple[int, str, bytes]:
    """Send ``request`` as is; (status, content type, body) of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), headers.get("Content-Type", ""), body


def test_nginx_front_keeps_serving_with_64_slow_connections(front: tuple[int, Path]) -> None:
    port, log = front
    spec = cms_spec()
    create_metric(port, spec)
    with slow_clients(port, SLOW_CONNECTIONS):
        result = legit_load(port, spec, threads=4, requests=10, timeout=BOUND_SECONDS)
    assert result.statuses == {202: 40}, result.summary()
    assert max(result.latencies) < BOUND_SECONDS


def test_a_body_larger_than_nginx_memory_buffer_goes_through(front: tuple[int, Path]) -> None:
    port, _ = front
    spec = cms_spec("app.big")
    create_metric(port, spec)
    data, _ = make_batch(spec, 4000, np.random.default_rng(5))  # ~0.5 MiB: nginx spools it to a temp file
    assert len(data) > 256 * 1024
    got, content_type, body = _raw(port, b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                                   + APP_TOKEN.encode() + b"\r\nContent-Type: " + OCTET.encode()
                                   + b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(data) + data)
    assert (got, content_type) == (202, "application/json"), body


@pytest.mark.parametrize(("request_bytes", "status", "code"), [
    (b"GARBAGE\r\n\r\n", 400, "bad_request"),
    (b"GET /readyz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 10_000 + b"\r\nConnection: close\r\n\r\n", 400, "bad_request"),
    (b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 414, "bad_request"),
    (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\nConnection: close\r\n\r\n", 413, "too_large"),
])
def test_nginx_rejections_answer_json_and_log_no_address(
        front: tuple[int, Path], request_bytes: bytes, status: int, code: str) -> None:
    port, log = front
    got, content_type, body = _raw(port, request_bytes)
    assert (got, content_type) == (status, "application/json"), body
    assert json.loads(body)["error"] == code
    text = log.read_text()
    assert "client:" not in text and "127.0.0.1" not in text, text[-2000:]
