"""gunicorn's own HTTP-level rejections (before the app sees the request) answer JSON under the shipped config,
bare and behind nginx; they used to be HTML pages (``Content-Type: text/html``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ldptel.storage.embedded import EmbeddedRedis
from tests.faults.stack import gunicorn, nginx, nginx_binary
from tests.faults.test_slow_clients import _raw

pytestmark = pytest.mark.slow

TOO_MANY_HEADERS = b"".join(b"X-H%d: 1\r\n" % i for i in range(60))  # gunicorn allows 50; nginx has no count limit
CASES = [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET /readyz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", 400),
    (b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    (b"GET /readyz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431),
    (b"GET /readyz HTTP/1.1\r\nHost: x\r\n" + TOO_MANY_HEADERS + b"\r\n", 431),
]


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    tmp = tmp_path_factory.mktemp("bare")
    with EmbeddedRedis(data_dir=tmp / "redis") as redis_server, \
            gunicorn(redis_server.url, tmp / "gunicorn.log", workers=1) as (port, _):
        yield port


@pytest.mark.parametrize(("request_bytes", "status"), CASES)
def test_bare_gunicorn_rejections_are_json(bare: int, request_bytes: bytes, status: int) -> None:
    got, content_type, body = _raw(bare, request_bytes)
    assert (got, content_type) == (status, "application/json"), body
    assert set(json.loads(body)) == {"error", "message"}


def test_a_rejection_by_gunicorn_behind_nginx_is_json(bare: int, tmp_path: Path) -> None:
    nginx_binary()
    with nginx(bare, tmp_path / "nginx") as (port, _):
        got, content_type, body = _raw(port, b"GET /readyz HTTP/1.1\r\nHost: x\r\n" + TOO_MANY_HEADERS
                                       + b"Connection: close\r\n\r\n")
    assert (got, content_type) == (431, "application/json"), body
    assert json.loads(body)["error"] == "bad_request"
