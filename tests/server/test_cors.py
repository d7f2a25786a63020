"""CORS for the web SDK, through real gunicorn over real HTTP: preflights and actual requests, allowed and not."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ldptel.server.config import ConfigError, ServerConfig
from ldptel.server.cors import parse_origins
from ldptel.storage.embedded import EmbeddedRedis
from tests.server.srv_helpers import cms_spec, make_batch
from tests.server.test_server_http import _free_port, _stop, _wait_http

ROOT = Path(__file__).resolve().parents[2]
APP = "cors-app-token-0123456789abcdef0123"
ADMIN = "cors-admin-token-0123456789abcdef012"
ALLOWED = "https://app.example.com"
pytestmark = pytest.mark.slow


def test_origins_are_validated_and_named() -> None:
    assert parse_origins("https://A.example.com/, http://localhost:8080") == ("https://a.example.com", "http://localhost:8080")
    assert parse_origins("*") == ("*",)
    for bad in ("example.com", "ftp://x.org", "https://x.org/path", "*,https://x.org"):
        with pytest.raises(ConfigError, match="LDPTEL_CORS_ORIGINS"):
            ServerConfig.from_env({"LDPTEL_APP_TOKENS": APP, "LDPTEL_ADMIN_TOKEN": ADMIN, "LDPTEL_CORS_ORIGINS": bad})
    cfg = ServerConfig.from_env({"LDPTEL_APP_TOKENS": APP, "LDPTEL_ADMIN_TOKEN": ADMIN})
    assert cfg.cors_origins == ()


def _serve(tmp_path: Path, redis_url: str, origins: str | None) -> tuple[int, subprocess.Popen[bytes], Path]:
    port = _free_port()
    log = tmp_path / f"gunicorn-{port}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPTEL_")}
    env.update(LDPTEL_APP_TOKENS=APP, LDPTEL_ADMIN_TOKEN=ADMIN, LDPTEL_REDIS_URL=redis_url, LDPTEL_RATE_LIMIT="off",
               LDPTEL_AUTH_FAILURE_LIMIT="off", LDPTEL_ACCESS_LOG="")
    if origins is not None:
        env["LDPTEL_CORS_ORIGINS"] = origins
    cmd = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py"), "-w", "1", "-b",
           f"127.0.0.1:{port}"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    _wait_http(port, proc, log)
    return port, proc, log


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[int, int]]:
    with EmbeddedRedis(data_dir=tmp_path / "redis") as redis_server:
        with_cors = _serve(tmp_path, redis_server.url, f"{ALLOWED},http://localhost:8080")
        without = _serve(tmp_path, redis_server.url, None)
        try:
            yield with_cors[0], without[0]
        finally:
            for _, proc, log in (with_cors, without):
                _stop(proc)
                assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


def _req(port: int, method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def _preflight(port: int, path: str, origin: str, method: str) -> tuple[int, dict[str, str], bytes]:
    return _req(port, "OPTIONS", path, {"Origin": origin, "Access-Control-Request-Method": method,
                                        "Access-Control-Request-Headers": "authorization,content-type,x-ldptel-batch-age-days"})


def test_preflight_and_requests(servers: tuple[int, int]) -> None:
    port, plain = servers
    spec = cms_spec("web.pages")
    body = json.dumps({k: v for k, v in spec.to_dict().items() if k != "version"}).encode()
    status, _, _ = _req(port, "POST", "/v1/metrics", {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}, body)
    assert status in (200, 201)

    # an allowed origin: 204 with exactly what the SDK's requests need
    for path, method in (("/v1/reports", "POST"), ("/v1/metrics/web.pages", "GET")):
        status, h, data = _preflight(port, path, ALLOWED, method)
        assert status == 204 and data == b""
        assert h["access-control-allow-origin"] == ALLOWED
        assert h["access-control-allow-methods"] == method
        assert "Authorization" in h["access-control-allow-headers"] and "X-Ldptel-Batch-Age-Days" in h["access-control-allow-headers"]
        assert h["access-control-max-age"] == "7200"
        assert "access-control-allow-credentials" not in h
        assert h["vary"] == "Origin"
    # refused: another origin, another method, a route a page never needs (the registry's writes)
    for path, origin, method in (("/v1/reports", "https://evil.example", "POST"), ("/v1/metrics/web.pages", ALLOWED, "PUT"),
                                 ("/v1/reports", "https://app.example.com.evil.example", "POST")):
        status, h, data = _preflight(port, path, origin, method)
        assert status == 403 and json.loads(data)["error"] == "cors_refused"
        assert "access-control-allow-origin" not in h
    status, h, _ = _preflight(port, "/v1/metrics", ALLOWED, "POST")
    assert status != 204 and "access-control-allow-origin" not in h

    # actual requests: the allowed origin can read every answer (202 and errors); another origin cannot
    rng = np.random.default_rng(1)
    data, _ = make_batch(spec, 5, rng)
    auth = {"Authorization": f"Bearer {APP}", "Content-Type": "application/octet-stream"}
    status, h, _ = _req(port, "POST", "/v1/reports", {**auth, "Origin": ALLOWED}, data)
    assert status == 202 and h["access-control-allow-origin"] == ALLOWED and h["access-control-expose-headers"] == "Retry-After"
    status, h, _ = _req(port, "POST", "/v1/reports", {**auth, "Origin": ALLOWED}, b"LDPTjunk")
    assert status == 400 and h["access-control-allow-origin"] == ALLOWED
    status, h, _ = _req(port, "POST", "/v1/reports", {**auth, "Origin": "https://evil.example"}, make_batch(spec, 5, rng)[0])
    assert status == 202 and "access-control-allow-origin" not in h
    status, h, _ = _req(port, "GET", "/v1/metrics/web.pages", {"Authorization": f"Bearer {APP}", "Origin": "http://localhost:8080"})
    assert status == 200 and h["access-control-allow-origin"] == "http://localhost:8080"

    # without LDPTEL_CORS_ORIGINS no page may call the service
    status, h, _ = _preflight(plain, "/v1/reports", ALLOWED, "POST")
    assert status != 204 and "access-control-allow-origin" not in h
    status, h, _ = _req(plain, "POST", "/v1/reports", {**auth, "Origin": ALLOWED}, make_batch(spec, 5, rng)[0])
    assert status == 202 and "access-control-allow-origin" not in h
