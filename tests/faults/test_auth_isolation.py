"""One source with wrong tokens cannot lock out anyone else (issue 22 §2), through the shipped deployment: real nginx
(deploy/nginx.conf) in front of real gunicorn (deploy/gunicorn.conf.py, 2 workers), the way the attack was measured.

Before the fix, nginx passed no client address (every device was one source, the proxy) and the ingest answered 429
to every request from a source over its failed-authentication budget before it looked at the token: after 80
wrong-token requests, another app's valid requests got 429 20/20.

The clients here connect from distinct loopback addresses (127.0.0.66, 127.0.0.77, ...; Linux routes all of
127.0.0.0/8 to lo), so nginx sees each as its own client; nginx itself reaches gunicorn from 127.0.0.1, the one
proxy the ingest is told to trust (``LDPTEL_TRUSTED_PROXIES``).
"""

from __future__ import annotations

import http.client
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ldptel.storage.embedded import EmbeddedRedis
from tests.faults.slow import create_metric
from tests.faults.stack import gunicorn, nginx, nginx_binary
from tests.server.srv_helpers import OCTET, cms_spec, make_batch
from tests.server.test_server_http import ADMIN_TOKEN as ADMIN
from tests.server.test_server_http import APP_TOKEN

pytestmark = pytest.mark.slow

OTHER_APP = "other-app-token-Vb7Nq2Lx9Rt4Kw6Z"  # a second app of the same fleet
METRICS = "auth-metrics-token-Hd3Jx7Kv5Sb9Tg2W"
UNDECLARED = "ldptel_forwarded_from_undeclared_peer_total"
BURST = 20  # failed authentications a source may have per worker before its wrong tokens get 429
WORKERS = 2
ATTACKER, VICTIM, FRESH, SPOOFER = "127.0.0.66", "127.0.0.77", "127.0.0.88", "127.0.0.99"
ADDRESSES = (ATTACKER, VICTIM, FRESH, SPOOFER)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int, Path, Path, EmbeddedRedis]]:
    """(nginx port, gunicorn port, nginx log, gunicorn log, redis). The failure budget refills at 0.001/s: no
    refill during the test, so every count below is exact whatever the machine's load."""
    nginx_binary()
    tmp = tmp_path_factory.mktemp("auth")
    env = {"LDPTEL_APP_TOKENS": f"{APP_TOKEN},{OTHER_APP}", "LDPTEL_AUTH_FAILURE_LIMIT": f"0.001:{BURST}",
           "LDPTEL_TRUSTED_PROXIES": "127.0.0.1", "LDPTEL_ACCESS_LOG": "-", "LDPTEL_LOG_LEVEL": "debug",
           "LDPTEL_ADMIN_TOKEN": ADMIN, "LDPTEL_METRICS_TOKEN": METRICS}
    glog = tmp / "gunicorn.log"
    with EmbeddedRedis(data_dir=tmp / "redis") as redis_server, \
            gunicorn(redis_server.url, glog, workers=WORKERS, extra_env=env) as (gport, _), \
            nginx(gport, tmp / "nginx") as (port, nlog):
        create_metric(port, cms_spec())
        yield port, gport, nlog, glog, redis_server


def _post(port: int, source: str, token: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> int:
    """One ``POST /v1/reports`` on a fresh connection from ``source`` (so both workers share the requests)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20, source_address=(source, 0))
    try:
        conn.request("POST", "/v1/reports", body=body if body is not None else b"\x00" * 64,
                     headers={"Authorization": f"Bearer {token}", "Content-Type": OCTET, **(headers or {})})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def _get_metrics(port: int, source: str, token: str) -> tuple[int, str]:
    """``GET /metrics`` (the Prometheus exposition) from ``source`` with ``token``: (status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20, source_address=(source, 0))
    try:
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def _batch(seed: int) -> bytes:
    return make_batch(cms_spec(), 20, np.random.default_rng(seed))[0]


def _wrong(i: int) -> str:
    return f"wrong-{i:05d}-" + os.urandom(8).hex()


def _flood(port: int, source: str, *, headers_of: object = None) -> list[int]:
    """Wrong tokens from ``source`` until 2 × BURST answers in a row are 429 (the kernel need not share the
    connections evenly between the workers; a worker under its budget would answer 401 to about half)."""
    statuses: list[int] = []
    streak = 0
    while streak < 2 * BURST:
        headers = headers_of(len(statuses)) if callable(headers_of) else None
        status = _post(port, source, _wrong(len(statuses)), headers=headers)
        statuses.append(status)
        streak = streak + 1 if status == 429 else 0
        assert len(statuses) < 2000, "the source never reached its failure limit"
    return statuses


def test_a_flood_of_wrong_tokens_does_not_stop_another_app(stack: tuple[int, int, Path, Path, EmbeddedRedis]) -> None:
    """The measured attack: 80 wrong-token requests from one client, then another app's 20 valid batches from
    another client are all accepted (before the fix: 429 20/20)."""
    port = stack[0]
    assert [_post(port, VICTIM, OTHER_APP, _batch(i)) for i in range(5)] == [202] * 5
    attack = [_post(port, ATTACKER, _wrong(i)) for i in range(80)]
    assert set(attack) <= {401, 429} and attack.count(401) <= WORKERS * BURST, attack
    assert attack.count(429) >= 80 - WORKERS * BURST  # the attacker is limited ...
    assert [_post(port, VICTIM, OTHER_APP, _batch(100 + i)) for i in range(20)] == [202] * 20  # ... nobody else


def test_the_limit_keys_on_the_real_client_and_a_valid_token_always_passes(
        stack: tuple[int, int, Path, Path, EmbeddedRedis]) -> None:
    """Over its budget, the flooding client's wrong tokens get 429; a client at another address still gets
    401 for a wrong token (its own budget), and a valid app token is served even from the flooding address
    (many devices share an address behind carrier-grade NAT; app tokens ship in every app, so serving them
    reveals nothing a guess could win)."""
    port = stack[0]
    _flood(port, ATTACKER)
    assert _post(port, FRESH, _wrong(0)) == 401  # before the fix: 429 (everyone was the proxy)
    assert [_post(port, ATTACKER, APP_TOKEN, _batch(200 + i)) for i in range(6)] == [202] * 6


def test_a_guessing_client_behind_nginx_cannot_block_the_admin_or_metrics_token(
        stack: tuple[int, int, Path, Path, EmbeddedRedis]) -> None:
    """With LDPTEL_TRUSTED_PROXIES=127.0.0.1 (the documented host setup), a client over its failure budget gets
    429 on admin and metrics tokens too (guessing them stays bounded per source), while the operator at another
    address is served; nginx is declared, so nothing is counted as an undeclared proxy and nothing is warned."""
    port, glog = stack[0], stack[3]
    _flood(port, ATTACKER)
    assert _get_metrics(port, ATTACKER, ADMIN)[0] == 429  # a right guess looks like a wrong one from a guessing source
    for token in (ADMIN, METRICS):
        status, body = _get_metrics(port, VICTIM, token)
        assert status == 200, (token, status)
    assert f"{UNDECLARED} 0.0" in body
    assert "LDPTEL_TRUSTED_PROXIES" not in glog.read_text()


def test_behind_an_undeclared_nginx_the_forgotten_setting_is_warned_once_and_counted(tmp_path: Path) -> None:
    """The host install's mistake: nginx in front, LDPTEL_TRUSTED_PROXIES unset. Every request's source is nginx,
    so the ingest cannot tell clients apart; it says so: one warning per process (without any address or
    header value) and a Prometheus counter of such requests (before the fix: silence)."""
    env = {"LDPTEL_APP_TOKENS": APP_TOKEN, "LDPTEL_AUTH_FAILURE_LIMIT": f"0.001:{BURST}", "LDPTEL_ADMIN_TOKEN": ADMIN,
           "LDPTEL_ACCESS_LOG": "-", "LDPTEL_LOG_LEVEL": "debug"}
    glog = tmp_path / "gunicorn.log"
    with EmbeddedRedis(data_dir=tmp_path / "redis") as redis_server, \
            gunicorn(redis_server.url, glog, workers=1, extra_env=env) as (gport, _), \
            nginx(gport, tmp_path / "nginx") as (port, nlog):
        assert [_post(port, VICTIM, _wrong(i)) for i in range(3)] == [401] * 3
        assert _post(port, ATTACKER, _wrong(9), headers={"X-Forwarded-For": "198.51.100.23"}) == 401
        status, body = _get_metrics(port, FRESH, ADMIN)
        assert status == 200
        assert f"{UNDECLARED} 5.0" in body  # the four posts and this GET, all forwarded by nginx
        logs = glog.read_text()
    warnings = [line for line in logs.splitlines() if "LDPTEL_TRUSTED_PROXIES" in line]
    assert len(warnings) == 1, warnings  # one per process, whatever the number of requests
    assert "deploy/nginx.conf" in warnings[0] and "127.0.0." not in warnings[0]  # no address, not even nginx's
    for address in ADDRESSES + ("198.51.100.",):
        assert address not in logs + nlog.read_text(), address


def test_a_client_cannot_dodge_the_limit_with_its_own_forwarding_headers(
        stack: tuple[int, int, Path, Path, EmbeddedRedis]) -> None:
    """X-Forwarded-For / X-Real-IP sent by a client are replaced by nginx, and ignored by the ingest from any
    peer that is not a declared proxy: rotating them neither escapes the limit nor moves it onto another address."""
    port, gport = stack[0], stack[1]

    def spoof(i: int) -> dict[str, str]:
        return {"X-Forwarded-For": f"198.51.100.{i % 250}, {FRESH}", "X-Real-IP": f"203.0.113.{i % 250}"}

    _flood(port, SPOOFER, headers_of=spoof)
    # straight to gunicorn from an undeclared peer: the headers are not believed either (were they, each request
    # would come from another of 250 addresses, or all from FRESH)
    _flood(gport, SPOOFER, headers_of=spoof)
    assert _post(port, FRESH, _wrong(1)) == 401  # the address the spoofer named was not charged
    assert _post(port, VICTIM, OTHER_APP, _batch(300)) == 202


def test_no_client_address_reaches_a_log_or_redis(stack: tuple[int, int, Path, Path, EmbeddedRedis]) -> None:
    """Runs last: every address used above, in any log line (access logs on, gunicorn at debug) or any Redis
    key or value. The addresses live only in the limiters' memory, as keyed hashes."""
    _, _, nginx_log, gunicorn_log, redis_server = stack
    logs = nginx_log.read_text() + gunicorn_log.read_text()
    assert '"POST /v1/reports"' in logs  # the access logs were on
    for address in ADDRESSES + ("198.51.100.", "203.0.113."):
        assert address not in logs, address
    r = redis_server.client()
    try:
        for key in r.scan_iter(count=1000):
            blob = key + (r.dump(key) or b"")
            for address in ADDRESSES:
                assert address.encode() not in blob, (key, address)
    finally:
        r.close()
