"""Rate limits (issue 12): per token across gunicorn workers and replicas (Redis), and failed authentication
per source (process memory only).

Before: one in-memory token bucket per gunicorn worker (W workers allowed W × the limit) and wrong tokens were
never limited (unbounded online guessing).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib
from flask.testing import FlaskClient

from ldptel.server import ServerConfig, create_app
from ldptel.storage.embedded import EmbeddedRedis
from tests.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
APP_TOKEN = "rate-app-token-Xc8Vb2Nm4Lk6Jh0G"
ADMIN_TOKEN = "rate-admin-token-Qw3Er5Ty7Ui9Op1A"
BURST = 10


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(port: int, path: str, token: str) -> int:
    """One request on a fresh connection (so gunicorn's workers share the requests)."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1])


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[tuple[int, EmbeddedRedis, Path]]:
    with EmbeddedRedis(data_dir=tmp_path / "redis") as server:
        port = _free_port()
        log = tmp_path / "gunicorn.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LDPTEL_")}
        env.update(LDPTEL_APP_TOKENS=APP_TOKEN, LDPTEL_ADMIN_TOKEN=ADMIN_TOKEN, LDPTEL_REDIS_URL=server.url,
                   LDPTEL_RATE_LIMIT=f"0.001:{BURST}", LDPTEL_AUTH_FAILURE_LIMIT=f"0.001:{BURST}", LDPTEL_ACCESS_LOG="")
        cmd = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py"), "-w", "2",
               "--threads", "1", "-b", f"127.0.0.1:{port}"]
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            def booted() -> bool:
                assert proc.poll() is None, log.read_text()
                return log.read_text().count("Booting worker") >= 2

            def healthy() -> bool:
                try:
                    _status(port, "/healthz", "")
                    return True
                except OSError:
                    return False

            wait_until(booted, what=lambda: f"both gunicorn workers to boot: {log.read_text()[-2000:]}")
            wait_until(healthy, what="gunicorn to answer /healthz")
            yield port, server, log
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@pytest.mark.slow
def test_a_token_s_limit_holds_across_gunicorn_workers(two_workers: tuple[int, EmbeddedRedis, Path]) -> None:
    """Burst 10 at 0.001 requests/s: 40 requests over fresh connections to 2 workers get exactly 10 answers.
    Before the fix each worker had its own bucket: up to 20 were answered."""
    port, server, _ = two_workers
    statuses = [_status(port, "/v1/metrics", APP_TOKEN) for _ in range(40)]
    assert statuses.count(200) == BURST and statuses.count(429) == 40 - BURST, statuses
    r = server.client()
    try:
        for key in r.scan_iter(count=1000):
            assert int(r.execute_command("PEXPIRETIME", key)) < 0 or b"rate" in key
            assert APP_TOKEN.encode() not in key + (r.dump(key) or b"")
    finally:
        r.close()


@pytest.mark.slow
def test_failed_authentication_is_limited_per_source_in_every_worker(two_workers: tuple[int, EmbeddedRedis, Path]) -> None:
    """Each process lets a source fail BURST times, then answers 429 to its wrong tokens and to its admin token
    (a right guess of a secret looks like a wrong one), while its app token is still served (issue 22 §2: one
    client's failures must not stop the devices that share its address). Nothing about the source reaches Redis."""
    port, server, _ = two_workers
    statuses = [_status(port, "/v1/metrics", f"guess-{i:04d}-0123456789abcdefXYZ") for i in range(60)]
    assert statuses.count(401) <= 2 * BURST and statuses.count(429) >= 60 - 2 * BURST, statuses
    # The kernel need not share the connections evenly between the workers (on a quiet machine one worker may
    # take every one of them: a streak of 429s proved nothing about the other). Each worker answers exactly
    # BURST wrong tokens 401 before it blocks (refill 0.001/s), so 2·BURST 401s in all mean both are at their
    # limit; then the right admin token is refused by both, the app token by neither.
    unauthorized, tries = statuses.count(401), 0
    while unauthorized < 2 * BURST:
        unauthorized += _status(port, "/v1/metrics", f"more-{tries:04d}-0123456789abcdefXYZ") == 401
        tries += 1
        assert tries < 2000, f"a worker never reached its failure limit ({unauthorized} answers 401)"
    assert all(_status(port, "/v1/metrics", ADMIN_TOKEN) == 429 for _ in range(6))  # both workers block it
    assert [_status(port, "/v1/metrics", APP_TOKEN) for _ in range(6)] == [200] * 6
    r = server.client()
    try:
        assert [k for k in r.scan_iter(count=1000) if b"127.0.0.1" in k] == []
    finally:
        r.close()


def test_a_blocked_source_learns_nothing_and_other_sources_are_not_blocked(redis: redis_lib.Redis, redis_url: str) -> None:
    app = create_app(ServerConfig(app_tokens=frozenset({APP_TOKEN}), admin_token=ADMIN_TOKEN, redis_url=redis_url,
                                  rate_limit=None, auth_failure_limit=0.001, auth_failure_burst=3))
    client: FlaskClient = app.test_client()

    def get(token: str, source: str) -> int:
        return client.get("/v1/metrics", headers={"Authorization": f"Bearer {token}"},
                          environ_base={"REMOTE_ADDR": source}).status_code

    assert [get("wrong-token-0123456789abcdefXYZ", "10.0.0.1") for _ in range(5)] == [401, 401, 401, 429, 429]
    assert get(ADMIN_TOKEN, "10.0.0.1") == 429  # a right guess of a secret gets the same answer: no oracle
    assert get("", "10.0.0.1") == 429  # no token at all: the same
    assert get(APP_TOKEN, "10.0.0.1") == 200  # app tokens ship in every app: served (issue 22 §2)
    assert get(APP_TOKEN, "10.0.0.2") == 200 and get("wrong-token-0123456789abcdefXYZ", "10.0.0.2") == 401
    assert get(ADMIN_TOKEN, "10.0.0.2") == 200
    assert not any(b"10.0.0" in key for key in redis.scan_iter(count=1000))
    app.extensions["ldptel"].close()


def test_tokens_are_compared_in_constant_time_against_every_known_digest(redis_url: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every token check goes through hmac.compare_digest, once per known digest (no early exit)."""
    import hmac

    app = create_app(ServerConfig(app_tokens=frozenset({APP_TOKEN, APP_TOKEN[::-1]}), admin_token=ADMIN_TOKEN,
                                  redis_url=redis_url, rate_limit=None))
    calls: list[int] = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: calls.append(1) or real(a, b))
    client = app.test_client()
    assert client.get("/v1/metrics", headers={"Authorization": "Bearer nope-0123456789abcdefXYZ"}).status_code == 401
    assert len(calls) == 3  # admin, then both app tokens (no metrics token configured)
    app.extensions["ldptel"].close()
