"""A real ingest (gunicorn, the shipped config, 2 workers) and a real fold (``ldptel aggregate --once``) with the
AOF on, then a scan of everything they left: every Redis key, value, TTL (PTTL and PEXPIRETIME), the AOF files,
and every log (gunicorn's error and access logs, the worker's JSON log at debug level). None may hold a client
address, a user agent, a bearer token (or its digest), a raw value, or a time finer than the UTC day.

A time finer than the day is any number that reads as a Unix time near now, in seconds or milliseconds (as
text, or as a little-endian 64-bit integer in binary values), that is not a UTC day boundary; and any
``HH:MM:SS`` clock time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis as redis_lib

from ldptel.client import CmsParams, MetricSpec, encode_batch, privatize_batch
from ldptel.storage.embedded import EmbeddedRedis
from tests.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
APP_TOKEN = "scan-app-token-Q7wZ0c4Lr1xVt9Yb"
ADMIN_TOKEN = "scan-admin-token-Hk3Pm8Ns2Dj6Fq0G"
WRONG_TOKEN = "scan-wrong-token-Zr5Tb1Wc7Xe3Ua9M"
USER_AGENT = "canary-agent/7.31 (privacy-scan)"
RAW_VALUE = "raw-canary-value-5150"
HOST = "127.0.0.2"  # the server's address; clients connect from 127.0.0.1
CLIENT = "127.0.0.1"
DAY_MS = 86_400_000
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _request(port: int, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> int:
    """One HTTP/1.1 request from 127.0.0.1 with the canary user agent; the response status."""
    head = {"Host": "ingest", "User-Agent": USER_AGENT, "Content-Length": str(len(body)), "Connection": "close",
            **(headers or {})}
    data = f"{method} {path} HTTP/1.1\r\n".encode() + b"".join(f"{k}: {v}\r\n".encode() for k, v in head.items())
    with socket.socket() as sock:
        sock.bind((CLIENT, 0))
        sock.settimeout(20)
        sock.connect((HOST, port))
        sock.sendall(data + b"\r\n" + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, EmbeddedRedis, Path]]:
    with EmbeddedRedis(appendonly=True, data_dir=tmp_path / "redis") as server:
        port = _free_port()
        logs = tmp_path / "logs"
        logs.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LDPTEL_")}
        env.update(LDPTEL_APP_TOKENS=APP_TOKEN, LDPTEL_ADMIN_TOKEN=ADMIN_TOKEN, LDPTEL_REDIS_URL=server.url,
                   LDPTEL_LOG_LEVEL="debug", LDPTEL_ACCESS_LOG=str(logs / "access.log"))
        cmd = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py"), "-w", "2",
               "-b", f"{HOST}:{port}", "--error-logfile", str(logs / "error.log")]
        with (logs / "stdout.log").open("wb") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            def healthy() -> bool:
                assert proc.poll() is None, (logs / "stdout.log").read_text()
                try:
                    return _request(port, "GET", "/healthz") == 200
                except OSError:
                    return False

            wait_until(healthy, what=lambda: "gunicorn to answer /healthz: " + (logs / "stdout.log").read_text())
            yield port, server, logs
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _ingest_and_fold(port: int, server: EmbeddedRedis, logs: Path) -> None:
    rng = np.random.default_rng(2026)
    spec = MetricSpec(name="scan.page", params=CmsParams(epsilon=2.0, k=4, m=64))
    created = json.dumps({k: v for k, v in spec.to_dict().items() if k != "version"}).encode()
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    assert _request(port, "POST", "/v1/metrics", created, admin) in (200, 201)
    app = {"Authorization": f"Bearer {APP_TOKEN}", "Content-Type": "application/octet-stream"}
    first = b""
    for i in range(12):
        batch = privatize_batch([RAW_VALUE] * 20, spec.params, rng=rng)
        data = encode_batch(metric=spec.name, version=1, batch_id=os.urandom(16), batch=batch, params=spec.params)
        first = first or data
        assert _request(port, "POST", "/v1/reports", data, app) == 202
        if i % 4 == 0:
            time.sleep(0.3)  # spread the arrivals over several hundred ms
    assert _request(port, "POST", "/v1/reports", first, app) == 202  # a retry: deduplicated
    wrong = {**app, "Authorization": f"Bearer {WRONG_TOKEN}"}
    assert _request(port, "POST", "/v1/reports", first, wrong) == 401
    assert _request(port, "POST", "/v1/reports", b"\x00garbage", app) == 400
    assert _request(port, "GET", "/readyz") == 200
    assert _request(port, "GET", "/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) == 200
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LDPTEL_")}, "LDPTEL_REDIS_URL": server.url}
    with (logs / "worker.log").open("w") as err:
        proc = subprocess.run(
            [sys.executable, "-m", "ldptel.aggregator.cli", "aggregate", "--once", "--log-level", "debug",
             "--no-progress"], env=env, stdout=subprocess.DEVNULL, stderr=err, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, (logs / "worker.log").read_text()
    r = server.client()
    assert r.get("ldp:v1:{scan.page:0}:checkpoint") or any(
        r.get(f"ldp:v1:{{scan.page:{s}}}:checkpoint") for s in range(4))
    r.close()


def _forbidden_text() -> dict[str, bytes]:
    needles = {"client address": CLIENT.encode(), "user agent": USER_AGENT.encode(), "agent name": b"canary-agent",
               "raw value": RAW_VALUE.encode()}
    for name, token in (("app token", APP_TOKEN), ("admin token", ADMIN_TOKEN), ("wrong token", WRONG_TOKEN)):
        needles[name] = token.encode()
        needles[f"{name} sha256"] = hashlib.sha256(token.encode()).hexdigest().encode()
        needles[f"{name} sha256 bytes"] = hashlib.sha256(token.encode()).digest()
    return needles


def _sub_day_times(blob: bytes, now_s: float) -> list[str]:
    """Unix times within 3 days of now that are not a UTC day boundary, and clock times HH:MM:SS."""
    lo_s, hi_s = now_s - 3 * 86_400, now_s + 3 * 86_400
    found = []
    for m in re.finditer(rb"(?<!\d)(\d{10}|\d{13})(?:\.\d+)?(?!\d)", blob):
        value = int(m.group(1))
        seconds = value / 1000 if len(m.group(1)) == 13 else value
        if lo_s <= seconds <= hi_s and (m.group(0) != m.group(1) or (value % (DAY_MS if len(m.group(1)) == 13 else 86_400))):
            found.append(m.group(0).decode())
    found += [m.group(0).decode() for m in re.finditer(rb"(?<!\d)[0-2]\d:[0-5]\d:[0-5]\d(?!\d)", blob)]
    for shift in range(8):  # little-endian int64 milliseconds at every byte offset
        part = blob[shift:]
        words = np.frombuffer(part[: len(part) // 8 * 8], dtype="<i8")
        near = words[(words >= lo_s * 1000) & (words <= hi_s * 1000) & (words % DAY_MS != 0)]
        found += [f"int64 {int(w)} at offset {shift}" for w in near]
    return found


def _redis_dump(r: redis_lib.Redis) -> dict[str, bytes]:
    """Every key: its name, type-specific content and expiry, as bytes to scan."""
    out: dict[str, bytes] = {}
    for key in r.scan_iter(count=1000):
        kind = r.type(key).decode()
        if kind == "string":
            content = [r.get(key) or b""]
        elif kind == "hash":
            content = [b for kv in r.hgetall(key).items() for b in kv]
        elif kind == "set":
            content = sorted(r.smembers(key))
        elif kind == "zset":
            content = [b for m, s in r.zrange(key, 0, -1, withscores=True) for b in (m, repr(s).encode())]
        elif kind == "stream":
            content = [b for eid, fields in r.xrange(key) for b in (eid, *[x for kv in fields.items() for x in kv])]
            info = r.xinfo_stream(key)
            content.append(str(info.get("last-generated-id", b"")).encode())
            content += [json.dumps(g, default=str).encode() for g in r.xinfo_groups(key)]
        else:
            content = [kind.encode()]
        pexpiretime = int(r.execute_command("PEXPIRETIME", key))  # PTTL is this minus now: PEXPIRETIME tells all
        expiry = [b"expires at %d" % pexpiretime] if pexpiretime >= 0 else []
        out[key.decode(errors="replace")] = b"\n".join([key, *content, *expiry])
    return out


@pytest.mark.timeout(240)
def test_nothing_at_rest_or_in_logs_identifies_a_sender_or_a_time_finer_than_the_day(
    served: tuple[int, EmbeddedRedis, Path]
) -> None:
    port, server, logs = served
    _ingest_and_fold(port, server, logs)
    now_s = time.time()
    r = server.client()
    try:
        blobs = {f"redis key {k}": v for k, v in _redis_dump(r).items()}
        rate_state = [r.get(key) or b"" for key in r.scan_iter(match="ldp:v1:rate:*")]
        r.execute_command("CONFIG", "SET", "appendfsync", "always")
        r.set("scan:flush", "1")  # one more write so the AOF buffer is flushed
    finally:
        r.close()
    time.sleep(1.2)  # appendfsync everysec before the switch
    aof_files = [p for p in server.data_dir.rglob("*") if p.is_file() and "aof" in p.name.lower()]
    assert aof_files, list(server.data_dir.rglob("*"))
    blobs.update({f"AOF {p.name}": p.read_bytes() for p in aof_files})
    for name in [k for k in blobs if k.startswith("AOF") and k.endswith(".rdb")]:
        # A rewritten base (the shuffle stage asks for a rewrite after its releases, docs/shuffle.md; Redis's own
        # auto-rewrite does it too) is a snapshot of memory: it holds the app tokens' rate state, exempt above as
        # in-memory state (README: what remains visible). Judged without those exact values, like memory.
        for value in rate_state:
            blobs[name] = blobs[name].replace(value, b"") if value else blobs[name]
    blobs.update({f"log {p.name}": p.read_bytes() for p in logs.iterdir()})
    aof = b"".join(v for k, v in blobs.items() if k.startswith("AOF"))
    # the scan sees the real traffic: the appends, or (after the AOF rewrite the shuffle stage asks for once it
    # released them: docs/shuffle.md) the released blocks in the rewritten base
    assert b"POST /v1/reports" in blobs["log access.log"] and (b"XADD" in aof or b"{scan.page:" in aof)
    # Periodic coordination writes would order-stamp the appends around them: none reaches the AOF's command log
    # (a rewritten base is a snapshot of memory, with no order: what it holds is judged below like memory).
    log_part = b"".join(v for k, v in blobs.items() if k.startswith("AOF") and not k.endswith(".rdb"))
    for key in (b":lease", b"ldp:v1:aggregators", b"ldp:v1:ready-probe", b"ldp:v1:rate:", b"XCLAIM", b"XGROUP"):
        assert key not in log_part, key
    problems = []
    for where, blob in blobs.items():
        for what, needle in _forbidden_text().items():
            if needle in blob:
                problems.append(f"{where}: holds the {what}")
        if where.startswith("redis key ldp:v1:rate:"):
            continue  # an app token's rate state, in memory only (README: what remains visible): no batch's time
        problems += [f"{where}: time finer than the day: {t}" for t in _sub_day_times(blob, now_s)[:3]]
    assert problems == [], "\n".join(problems)
