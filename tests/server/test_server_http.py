"""Through real HTTP server processes on loopback: gunicorn (deploy/gunicorn.conf.py) and ``serve``."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis as redis_lib

from ldptel.client.protocol.wire import decode_header
from ldptel.storage.embedded import EmbeddedRedis
from tests.server.schema_check import check_response
from tests.server.srv_helpers import OCTET, cms_spec, make_batch, stream_entries
from tests.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
APP_TOKEN = "http-app-token-0123456789abcdef"
ADMIN_TOKEN = "http-admin-token-0123456789abcdef"
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Http:
    """A keep-alive HTTP/1.1 client; checks every response against the OpenAPI document."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def request(self, method: str, path: str, body: bytes | None = None, *, token: str | None = None,
                content_type: str | None = None) -> tuple[int, dict[str, str], bytes]:
        headers = {}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=body, headers=headers)
                response = self.conn.getresponse()
                data = response.read()
                break
            except (ConnectionError, http.client.RemoteDisconnected):
                self.conn.close()  # the server closed an idle keep-alive connection: reconnect once
                if attempt:
                    raise
        check_response(method, path, response.status, response.getheader("Content-Type"), data)
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data

    def close(self) -> None:
        self.conn.close()


def _wait_http(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    def listening() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            return False

    wait_until(listening, timeout=timeout, what=lambda: f"the server to listen: {log.read_text()[-2000:]}")


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 60) -> None:
    """Signal ``proc`` and wait for it (``timeout`` catches a hang, not slowness: on a loaded shared disk the
    embedded Redis's final AOF fsync alone has taken several seconds); then SIGKILL."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _env(redis_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPTEL_")}
    env.update(LDPTEL_APP_TOKENS=APP_TOKEN, LDPTEL_ADMIN_TOKEN=ADMIN_TOKEN, LDPTEL_RATE_LIMIT="off",
               LDPTEL_AUTH_FAILURE_LIMIT="off", LDPTEL_ACCESS_LOG="")
    if redis_url:
        env["LDPTEL_REDIS_URL"] = redis_url
    return env


def _gunicorn(port: int, redis_url: str | None, log: Path, workers: int = 2) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py"),
           "-w", str(workers), "-b", f"127.0.0.1:{port}"]
    with log.open("wb") as out:
        return subprocess.Popen(cmd, env=_env(redis_url), stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(data_dir=tmp_path / "redis") as server:
        yield server


@pytest.fixture
def gunicorn_server(private_redis: EmbeddedRedis, tmp_path: Path) -> Iterator[tuple[int, EmbeddedRedis]]:
    port = _free_port()
    log = tmp_path / "gunicorn.log"
    proc = _gunicorn(port, private_redis.url, log)
    try:
        _wait_http(port, proc, log)
        yield port, private_redis
    finally:
        _stop(proc)
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


def _create(http: Http, spec) -> None:  # type: ignore[no-untyped-def]
    body = json.dumps({k: v for k, v in spec.to_dict().items() if k != "version"}).encode()
    status, _, _ = http.request("POST", "/v1/metrics", body, token=ADMIN_TOKEN, content_type="application/json")
    assert status in (200, 201)


def test_gunicorn_exactly_once_over_http(gunicorn_server) -> None:  # type: ignore[no-untyped-def]
    port, server = gunicorn_server
    http = Http(port)
    spec = cms_spec()
    _create(http, spec)
    rng = np.random.default_rng(3)
    batches = [make_batch(spec, 100, rng) for _ in range(30)]
    for data, _ in batches + batches[:10]:  # 10 retries
        status, _, body = http.request("POST", "/v1/reports", data, token=APP_TOKEN, content_type=OCTET)
        assert status == 202, body
    status, _, body = http.request("GET", f"/v1/metrics/{spec.name}", token=APP_TOKEN)
    assert status == 200 and json.loads(body)["current"] == spec.to_dict()
    assert http.request("GET", "/v1/openapi.json")[0] == 200
    assert http.request("GET", "/readyz")[0] == 200
    assert http.request("POST", "/v1/reports", b"junk", token=APP_TOKEN, content_type=OCTET)[0] == 400
    http.close()
    r = server.client()
    entries = stream_entries(r, spec.name, 4)
    assert sorted(decode_header(f[b"b"]).batch_id for _, _, f in entries) == sorted(b for _, b in batches)
    r.close()


def test_redis_killed_and_restarted_mid_run(gunicorn_server) -> None:  # type: ignore[no-untyped-def]
    port, server = gunicorn_server
    spec = cms_spec()
    setup = Http(port)
    _create(setup, spec)
    setup.close()
    acked: list[bytes] = []
    statuses: dict[int, int] = {}
    retry_after: set[str] = set()
    stop = threading.Event()
    errors: list[BaseException] = []

    def client_loop(seed: int) -> None:
        http = Http(port)
        rng = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                data, bid = make_batch(spec, 100, rng)
                while not stop.is_set():  # like the SDK: keep the batch until acknowledged
                    status, headers, _ = http.request("POST", "/v1/reports", data, token=APP_TOKEN, content_type=OCTET)
                    statuses[status] = statuses.get(status, 0) + 1
                    if status == 202:
                        acked.append(bid)
                        break
                    assert status == 503, status
                    retry_after.add(headers.get("retry-after", ""))
                    time.sleep(0.02)
        except BaseException as exc:
            errors.append(exc)
        finally:
            http.close()

    threads = [threading.Thread(target=client_loop, args=(seed,)) for seed in (1, 2)]
    for t in threads:
        t.start()
    try:
        _wait_for(lambda: len(acked) >= 20, "acks before the crash")
        server.kill()
        _wait_for(lambda: statuses.get(503, 0) >= 5, "503 while Redis is down")
        acked_at_crash = len(acked)
        time.sleep(0.3)
        assert len(acked) <= acked_at_crash + 2  # nothing is acknowledged while Redis is down (in-flight at most)
        server.start()
        _wait_for(lambda: len(acked) >= acked_at_crash + 20, "acks after the restart")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=20)
    assert not errors, errors
    assert retry_after == {"1"}
    assert set(statuses) == {202, 503}
    r = server.client()
    stored = [decode_header(f[b"b"]).batch_id for _, _, f in stream_entries(r, spec.name, 4)]
    r.close()
    assert len(stored) == len(set(stored))  # exactly once
    assert set(acked) <= set(stored)  # no acknowledged batch missing
    assert len(stored) - len(set(acked)) <= 2  # at most the batches in flight when we stopped


def _wait_for(condition, what: str, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    wait_until(condition, timeout=timeout, what=what)


def _redis_url_in(log: Path) -> str:
    match = re.search(r"redis://127\.0\.0\.1:\d+/0", log.read_text())
    assert match, log.read_text()
    return match.group(0)


def test_gunicorn_without_redis_url_shares_one_embedded_server(tmp_path: Path) -> None:
    port = _free_port()
    log = tmp_path / "gunicorn.log"
    proc = _gunicorn(port, None, log, workers=2)
    try:
        _wait_http(port, proc, log)
        url = _redis_url_in(log)
        http = Http(port)
        spec = cms_spec()
        _create(http, spec)
        rng = np.random.default_rng(5)
        for _ in range(10):
            data, _ = make_batch(spec, 10, rng)
            assert http.request("POST", "/v1/reports", data, token=APP_TOKEN, content_type=OCTET)[0] == 202
        http.close()
        r = redis_lib.Redis.from_url(url)
        assert len(stream_entries(r, spec.name, 4)) == 10
        r.close()
    finally:
        _stop(proc)
    with pytest.raises(redis_lib.ConnectionError):  # the embedded server stopped with gunicorn
        redis_lib.Redis.from_url(url, socket_connect_timeout=0.5).ping()


def _as_a_background_job() -> None:  # runs in the child before exec
    # What `ldptel serve &` in a non-interactive shell (a script, a CI loop) gets: SIGINT ignored. Python then
    # never raises KeyboardInterrupt unless the program handles SIGINT itself: the old serve hung on SIGINT.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_serve_starts_and_stops_its_embedded_redis(tmp_path: Path, sig: signal.Signals) -> None:
    log = tmp_path / "serve.log"
    port = _free_port()
    code = f"from ldptel.server import ServerConfig, serve; serve(ServerConfig.from_env(), port={port})"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", code], env=_env(None), stdout=out,
                                stderr=subprocess.STDOUT, cwd=ROOT, preexec_fn=_as_a_background_job)
    try:
        _wait_http(port, proc, log)
        url = _redis_url_in(log)
        http = Http(port)
        assert http.request("GET", "/readyz")[0] == 200
        spec = cms_spec()
        _create(http, spec)
        data, _ = make_batch(spec, 10, np.random.default_rng(6))
        assert http.request("POST", "/v1/reports", data, token=APP_TOKEN, content_type=OCTET)[0] == 202
        http.close()
    finally:
        _stop(proc, sig, timeout=30)  # a graceful stop takes well under a second; 30 s is a hang
    assert proc.returncode == 0, log.read_text()  # not -9 (a hang, killed) nor -15 (died without cleanup)
    with pytest.raises(redis_lib.ConnectionError):
        redis_lib.Redis.from_url(url, socket_connect_timeout=0.5).ping()
    assert "127.0.0.1 -" not in log.read_text()  # the request log carries no client address


# ----------------------------------------------------------------------------------- no client address in logs
MALFORMED = [
    b"GARBAGE\r\n\r\n",  # no method/target/version
    b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",  # unsupported HTTP version
    b"G@T / HTTP/1.1\r\nHost: x\r\n\r\n",  # invalid method
    b"GET / HTTP/1.1\r\nBad Header: x\r\nHost: x\r\n\r\n",  # invalid header name
    b"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n  folded\r\n\r\n",  # obsolete line folding
    b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",  # request line over limit_request_line
    b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(60)) + b"\r\n",  # over limit_request_fields
    b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n",  # invalid chunk size
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",  # invalid Content-Length
    b"\x00\x01\x02\x03\r\n\r\n",
]


def _raw_exchange(server: tuple[str, int], data: bytes) -> tuple[int, bytes]:
    """Send ``data`` from 127.0.0.1 (the server listens on 127.0.0.2); (the client port, the answer)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(10)
        sock.connect(server)
        port = int(sock.getsockname()[1])
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return port, answer


def test_gunicorn_logs_carry_no_client_address(private_redis: EmbeddedRedis, tmp_path: Path) -> None:
    """The shipped config, every log at debug level, malformed requests from 127.0.0.1: no address, no port."""
    host, port = "127.0.0.2", _free_port()
    out, access, errors = tmp_path / "stdout.log", tmp_path / "access.log", tmp_path / "error.log"
    env = {**_env(private_redis.url), "LDPTEL_LOG_LEVEL": "debug", "LDPTEL_ACCESS_LOG": str(access)}
    cmd = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py"), "-w", "1",
           "-b", f"{host}:{port}", "--error-logfile", str(errors),
           "--access-logformat", '%(h)s %({remote_addr}e)s %({remote_port}e)s "%(r)s" %(s)s %({x-forwarded-for}i)s '
           '%({http_x_real_ip}e)s %({authorization}i)s %({user-agent}i)s']  # the worst format
    with out.open("wb") as sink:
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT)
    clients = []
    try:
        def booted() -> bool:
            assert proc.poll() is None, out.read_text() + errors.read_text()
            return errors.exists() and "Booting worker" in errors.read_text()

        wait_until(booted, what=lambda: "a gunicorn worker to boot: " + out.read_text() + errors.read_text())
        for data in MALFORMED:
            client_port, answer = _raw_exchange((host, port), data)
            clients.append(client_port)
            assert answer.startswith(b"HTTP/1.1 4") or answer.startswith(b"HTTP/1.1 5"), (data[:40], answer[:80])
        client_port, answer = _raw_exchange((host, port), b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        clients.append(client_port)
        assert answer.startswith(b"HTTP/1.1 200")
        client_port, answer = _raw_exchange((host, port), (
            f"GET /v1/metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {APP_TOKEN}\r\nUser-Agent: agent-canary/1\r\n"
            "X-Forwarded-For: forwarded-canary\r\nX-Real-IP: real-ip-canary\r\nConnection: close\r\n\r\n").encode())
        clients.append(client_port)
        assert answer.startswith(b"HTTP/1.1 200")
    finally:
        _stop(proc)
    logs = {path.name: path.read_text(errors="replace") for path in (out, access, errors)}
    text = "\n".join(logs.values())
    assert "Invalid request from ip=<addr>" in logs["error.log"]  # the warnings are kept, without the address
    assert logs["error.log"].count("Invalid request") >= 5
    assert "/healthz" in logs["access.log"] and f"{host}:{port}" in logs["error.log"]  # useful lines kept
    assert "127.0.0.1" not in text
    for canary in (APP_TOKEN, "agent-canary", "forwarded-canary", "real-ip-canary"):  # headers no atom may print
        assert canary not in text, canary
    for client_port in clients:
        assert not re.search(rf"(?<!\d){client_port}(?!\d)", text), (client_port, text[-3000:])


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("Invalid request from ip=10.1.2.3: Invalid HTTP Version", "Invalid request from ip=<addr>: Invalid HTTP Version"),
        ("Invalid request from ip=::1: x", "Invalid request from ip=<addr>: x"),
        ("peer [2001:db8::7]:51234 and fe80::1%eth0 and ::ffff:192.0.2.1", "peer <addr> and <addr> and <addr>"),
        ("203.0.113.9:40000 and 203.0.113.9", "<addr> and <addr>"),
        ("[2026-11-23 12:41:34 +0000] [1234] gunicorn 27.0.1 Listening at: http://10.0.0.5:8000 (1234)",
         "[2026-11-23 12:41:34 +0000] [1234] gunicorn 27.0.1 Listening at: http://10.0.0.5:8000 (1234)"),
    ],
)
def test_addresses_are_scrubbed_but_not_times_versions_or_the_listen_address(line: str, expected: str) -> None:
    from ldptel.server.gunicorn_logger import scrub_addresses

    assert scrub_addresses(line, frozenset({"10.0.0.5"})) == expected
