"""Reporter benchmark: report() latency with the queue on disk, and upload throughput to the local ingest server.

Run:  .venv/bin/python tests/bench/bench_reporter.py [--n 20000] [--upload 50000]

Prints one JSON line per figure. The ingest server runs in a subprocess (werkzeug's threaded dev server from
``ldptel.server.serve``, embedded Redis with AOF), so the Reporter and the server do not share a GIL.
Goal from issue 5: report() p50 ≤ 200 µs for cms m = 1024.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import secrets
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

from ldptel.client import CmsParams, GrrParams, HcmsParams, MetricSpec, OueCmsParams, RrParams
from ldptel.client.sdk.reporter import Reporter
from ldptel.storage.embedded import EmbeddedRedis
from ldptel.storage.registry import create_metric

DAY = 86_400.0
SERVER = textwrap.dedent(
    """
    import sys
    from ldptel.server import ServerConfig
    from ldptel.server.serve import serve
    url, port, token, admin = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    serve(ServerConfig(app_tokens=frozenset({token}), admin_token=admin, redis_url=url, rate_limit=None), port=port)
    """
)


class DayClock:
    """Real time plus an offset that skips whole days (each metric allows at most 10,000 reports a day)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def next_day(self) -> None:
        self.offset += DAY


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    return {"p50_us": round(pick(0.50) * 1e6, 1), "p99_us": round(pick(0.99) * 1e6, 1), "mean_us": round(sum(s) / len(s) * 1e6, 1)}


def bench_latency(spec: MetricSpec, values: list[object], storage: Path, *, thread: bool) -> None:
    clock = DayClock()
    rep = Reporter("http://127.0.0.1:9", "bench-token", storage, specs=[spec], start=False, clock=clock,
                   max_queue=len(values) + 1)
    per_day = spec.reports_per_day
    samples = []
    for i, v in enumerate(values):
        if i and i % per_day == 0:
            clock.next_day()
        t0 = time.perf_counter()
        res = rep.report(spec.name, v)
        samples.append(time.perf_counter() - t0)
        assert res.queued, res.status
    rep.close(timeout=0)
    p = spec.params
    emit(figure="report_latency", mechanism=spec.mechanism, m=getattr(p, "m", None), k=getattr(p, "k", None),
         n=len(values), distinct_values=len(set(values)), queue="sqlite WAL on disk", thread=thread, **percentiles(samples))


def bench_bare_sqlite(n: int, storage: Path) -> None:
    """Baseline in the same run: one INSERT + COMMIT of a 130-byte blob per call, sqlite WAL on the same disk,
    synchronous=NORMAL (what ``report()`` uses): the floor for any durable on-device queue."""
    storage.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(storage / "bare.sqlite3", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE q (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
    blob = os.urandom(130)
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        db.execute("BEGIN")
        db.execute("INSERT INTO q (body) VALUES (?)", (blob,))
        db.execute("COMMIT")
        samples.append(time.perf_counter() - t0)
    db.close()
    emit(figure="baseline_bare_sqlite_insert", n=n, queue="sqlite WAL on disk", **percentiles(samples))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(storage: Path, redis: EmbeddedRedis) -> tuple[str, str, subprocess.Popen[bytes]]:
    """(url, app token, process) of the ingest server in a subprocess, once it answers /healthz."""
    token, admin = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    port = free_port()
    script = storage / "server.py"
    script.write_text(SERVER)
    server = subprocess.Popen([sys.executable, str(script), redis.url, str(port), token, admin],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/healthz", timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    return url, token, server


def bench_combined_uploads(storage: Path, redis: EmbeddedRedis, *, metrics: int = 16, batches: int = 16) -> None:
    """Delivering ``batches`` small batches of each of ``metrics`` metrics: combined uploads (the default,
    16 parts per request) against one batch per request (the same-run baseline)."""
    specs = [MetricSpec(name=f"bench.m{i}", params=CmsParams(epsilon=4.0, k=16, m=64), reports_per_day=10_000)
             for i in range(metrics)]
    for spec in specs:
        create_metric(redis.client(), spec)
    url, token, server = start_server(storage, redis)
    try:
        seconds = {}
        for parts in (1, 16):
            rep = Reporter(url, token, storage / f"combined-{parts}", specs=specs, start=False, batch_size=8,
                           upload_parts=parts, max_queue=metrics * batches * 8 + 1)
            for spec in specs:
                for i in range(batches * 8):
                    rep.report(spec.name, f"value-{i}")
            t0 = time.perf_counter()
            ok = rep.flush(timeout=600)
            seconds[parts] = time.perf_counter() - t0
            st = rep.stats()
            rep.close(timeout=0)
            assert ok and st.delivered == metrics * batches * 8, st
        emit(figure="combined_uploads", metrics=metrics, batches=metrics * batches, reports_per_batch=8,
             requests={"upload_parts=16": metrics * batches // 16, "upload_parts=1": metrics * batches},
             seconds={"upload_parts=16": round(seconds[16], 3), "upload_parts=1": round(seconds[1], 3)},
             ratio=round(seconds[1] / seconds[16], 2), server="werkzeug threaded dev server, subprocess")
    finally:
        server.terminate()
        server.wait(10)


def bench_upload(n: int, batch_size: int, storage: Path, redis: EmbeddedRedis) -> None:
    spec = MetricSpec(name="bench.upload", params=CmsParams(epsilon=4.0, k=64, m=1024), reports_per_day=10_000)
    create_metric(redis.client(), spec)
    url, token, server = start_server(storage, redis)
    try:
        clock = DayClock()
        rep = Reporter(url, token, storage / f"dev-{batch_size}", specs=[spec], start=False, clock=clock,
                       batch_size=batch_size, max_queue=n + 1)
        for i in range(n):
            if i and i % spec.reports_per_day == 0:
                clock.next_day()
            rep.report(spec.name, f"value-{i}")
        t0 = time.perf_counter()
        ok = rep.flush(timeout=600)
        dt = time.perf_counter() - t0
        st = rep.stats()
        rep.close(timeout=0)
        assert ok and st.delivered == n, st
        body_bytes = n * (2 + 1024 // 8)
        emit(figure="upload_throughput", mechanism="cms", m=1024, n=n, batch_size=batch_size, seconds=round(dt, 3),
             reports_per_s=round(n / dt), batches_per_s=round(n / batch_size / dt, 1),
             mb_per_s=round(body_bytes / dt / 1e6, 2), server="werkzeug threaded dev server, subprocess")
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000, help="report() calls per latency figure")
    ap.add_argument("--upload", type=int, default=50_000, help="reports for the upload throughput figure")
    args = ap.parse_args()
    logging.getLogger("ldptel").setLevel(logging.ERROR)  # the latency runs point at a closed port on purpose
    emit(figure="environment", python=platform.python_version(), machine=platform.machine(), cpus=os.cpu_count())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        n = args.n
        cases = [
            (MetricSpec(name="b.cms", params=CmsParams(epsilon=4.0, k=64, m=1024), reports_per_day=10_000),
             [f"value-{i}" for i in range(n)]),
            (MetricSpec(name="b.cms-memo", params=CmsParams(epsilon=4.0, k=64, m=1024), reports_per_day=10_000),
             [f"value-{i % 10}" for i in range(n)]),
            (MetricSpec(name="b.oue", params=OueCmsParams(epsilon=4.0, k=64, m=1024), reports_per_day=10_000),
             [f"value-{i}" for i in range(n)]),
            (MetricSpec(name="b.hcms", params=HcmsParams(epsilon=4.0, k=64, m=1024), reports_per_day=10_000),
             [f"value-{i}" for i in range(n)]),
            (MetricSpec(name="b.rr", params=RrParams(epsilon=1.0), reports_per_day=10_000), [i % 2 == 0 for i in range(n)]),
            (MetricSpec(name="b.grr", params=GrrParams(epsilon=2.0, domain=tuple(f"l{i}" for i in range(16))),
                        reports_per_day=10_000), [f"l{i % 16}" for i in range(n)]),
        ]
        bench_bare_sqlite(n, root / "bare")
        for spec, values in cases:
            bench_latency(spec, values, root / spec.name, thread=False)
        with EmbeddedRedis(appendonly=True, data_dir=root / "redis") as redis:
            for bs in (256, 1024):
                bench_upload(args.upload, bs, root, redis)
                redis.client().flushdb()
            bench_combined_uploads(root, redis)


if __name__ == "__main__":
    main()
