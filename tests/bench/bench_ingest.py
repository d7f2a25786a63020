#!/usr/bin/env python3
"""Ingest throughput and latency under gunicorn on loopback, against bare Flask endpoints in the same run.

    .venv/bin/python tests/bench/bench_ingest.py [--rounds 6] [--duration 3] [--procs 2] [--conns 4] [--threads N]

Starts a private Redis (AOF on, ``appendfsync always`` as deploy/redis.conf; ``--appendfsync everysec`` for the
old default), then for each batch size (100 and 1,000 cms reports, m = 1024)
four gunicorn servers, each ``-w 2`` with ``deploy/gunicorn.conf.py``: (a) a bare Flask app whose POST
endpoint only reads the body and answers 202 (the HTTP ceiling of this machine), (b) the same endpoint plus
one Redis PING (context), (c) the same endpoint appending the body with one redis-py XADD (no validation, no
dedupe: the least work an ingest must do, the baseline of the goal: ldptel ≥ 0.9 × its requests/s) and
(d) the real ingest app. The load generator is ``--procs`` processes, each keeping ``--conns`` keep-alive
HTTP/1.1 connections busy with pre-built requests (a selectors loop, one request in flight per connection;
every request carries a fresh batch id so no request is a dedupe hit).

The three servers are loaded in turn, ``--duration`` seconds each, for ``--rounds`` rounds (the order
rotates every round), so slow drifts of this shared host hit all three alike; before each slice the bench
waits until Redis has no AOF rewrite running, so no target pays for another's. Figures pool all slices of a
target: requests/s, p50/p99 latency, and the ratio of ingest to bare requests (equal measured time each),
with the per-round ratios beside it. Everything binds to 127.0.0.1 and is bounded in time; servers are
stopped by pid. Prints one JSON line per figure.

On Linux it also attributes the machine's CPU during the measured slices (from ``/proc``): microseconds of
CPU per request spent in the gunicorn workers, in Redis (its main process, and separately its AOF-rewrite
children, running or reaped) and in everything else on this machine (the load generator, kernel threads,
other processes; time the hypervisor steals is not counted as busy), plus how many of the cores were busy. That says where a gap to the bare endpoint goes: Python per request, Redis per append, or
idle time while requests wait on each other.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
APP_TOKEN = "bench-app-token-0123456789abcdef"
ADMIN_TOKEN = "bench-admin-token-0123456789abcdef"
# (name, WSGI app, path): the bare endpoint, the bare endpoint + one Redis PING, and the ingest service
TARGETS = (
    ("bare", "bare_app:app", "/v1/reports"),
    ("bare_redis_ping", "bare_app:app", "/ping/v1/reports"),
    ("bare_xadd", "bare_app:app", "/xadd/v1/reports"),
    ("ldptel", "ldptel.server:create_app()", "/v1/reports"),
)
# --breakdown: the same ingest app, sent batches of a metric broken down by os and app_version (each batch carries
# its profile; ingest validates it and stores the cell with the entry): its ratio to "ldptel" is the cost of breakdowns
BREAKDOWN_TARGET = ("ldptel_breakdown", "ldptel.server:create_app()", "/v1/reports")
BREAKDOWN_PROFILE = b"os=android,app_version=2.1"
BATCH_ID_OFFSET = 16  # magic 4 + format 1 + mechanism 1 + flags 2 + version 4 + n 4
BARE_APP = '''
import os

import redis
from flask import Flask, request
app = Flask(__name__)
r = redis.Redis.from_url(os.environ["LDPTEL_REDIS_URL"])

@app.post("/v1/reports")
def null():
    request.get_data(cache=False)  # the body has to be received anyway
    return "", 202

@app.post("/ping/v1/reports")
def ping():
    request.get_data(cache=False)
    r.ping()  # the least an endpoint that answers only after Redis acknowledged can do
    return "", 202

@app.post("/xadd/v1/reports")
def xadd():
    r.xadd("bench:bare-xadd", {"b": request.get_data(cache=False)})  # the least work of an ingest: one XADD
    return "", 202
'''
BARE_STREAM = "bench:bare-xadd"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------------------------ load generator
def _load_worker(
    port: int, path: str, body: bytes, conns: int, warmup: float, duration: float, seed: int, out: mp.Queue
) -> None:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {APP_TOKEN}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    template = bytearray(head + body)
    id_at = len(head) + BATCH_ID_OFFSET
    counter = seed << 40
    sel = selectors.DefaultSelector()
    state: dict[socket.socket, list] = {}

    def send(sock: socket.socket) -> None:
        nonlocal counter
        counter += 1
        template[id_at : id_at + 8] = counter.to_bytes(8, "little")
        sock.sendall(template)
        state[sock] = [time.perf_counter(), b""]

    for _ in range(conns):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(True)
        sel.register(sock, selectors.EVENT_READ)
        send(sock)
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + duration
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    while True:
        now = time.perf_counter()
        if now >= stop_at:
            break
        for key, _ in sel.select(timeout=0.5):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            t0, buf = state[sock]
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("server closed a keep-alive connection")
            buf += chunk
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                state[sock][1] = buf
                continue
            length = 0
            for line in buf[:end].split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if len(buf) < end + 4 + length:
                state[sock][1] = buf
                continue
            t1 = time.perf_counter()
            if t0 >= measure_from and t1 <= stop_at:
                status = int(buf[9:12])
                statuses[status] = statuses.get(status, 0) + 1
                latencies.append(t1 - t0)
            send(sock)
    for sock in state:
        sock.close()
    out.put((latencies, statuses))


def run_load(port: int, body: bytes, *, path: str = "/v1/reports", procs: int, conns: int, warmup: float, duration: float) -> dict:
    ctx = mp.get_context("fork")
    queue: mp.Queue = ctx.Queue()
    workers = [
        ctx.Process(target=_load_worker, args=(port, path, body, conns, warmup, duration, i + 1 + int(time.time()) % 1000 * 64, queue))
        for i in range(procs)
    ]
    for w in workers:
        w.start()
    results = [queue.get(timeout=warmup + duration + 60) for _ in workers]
    for w in workers:
        w.join(timeout=10)
    latencies = sorted(x for lat, _ in results for x in lat)
    statuses: dict[int, int] = {}
    for _, st in results:
        for k, v in st.items():
            statuses[k] = statuses.get(k, 0) + v
    n = len(latencies)
    return {
        "requests": n,
        "rps": n / duration,
        "p50_ms": 1000 * latencies[n // 2] if n else float("nan"),
        "p99_ms": 1000 * latencies[min(n - 1, int(n * 0.99))] if n else float("nan"),
        "statuses": statuses,
        "latencies": latencies,
    }


# ------------------------------------------------------------------------------------- CPU attribution
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_cpu(pid: int) -> tuple[float, float]:
    """(own, reaped children) CPU seconds of a process, from /proc/<pid>/stat; zeros if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime) / _TICK, (cutime + cstime) / _TICK


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return kids


def _busy_cores_s() -> float:
    """CPU seconds the whole machine spent busy (user+nice+system+irq+softirq), from /proc/stat."""
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in Path("/proc/stat").read_text().split()[1:8])
    return (user + nice + system + irq + softirq) / _TICK


class CpuWindow:
    """Samples CPU of gunicorn's workers and Redis (+ its rewrite children) over the measured window."""

    def __init__(self, gunicorn_pid: int, redis_pid: int | None, warmup: float, duration: float) -> None:
        self.pids = {"gunicorn": [gunicorn_pid, *_children(gunicorn_pid)], "redis": [redis_pid] if redis_pid else []}
        self.result: dict[str, float] = {}
        self._thread = threading.Thread(target=self._run, args=(warmup, duration), daemon=True)
        self._thread.start()

    def _sample(self) -> dict[str, float]:
        gunicorn = sum(_proc_cpu(p)[0] for p in self.pids["gunicorn"])
        redis_own, redis_children = (sum(x) for x in zip((0.0, 0.0), *(_proc_cpu(p) for p in self.pids["redis"]), strict=True))
        # a rewrite child still running (or not reaped yet) counts too, so its CPU lands in the window it used
        redis_children += sum(_proc_cpu(child)[0] for p in self.pids["redis"] for child in _children(p))
        return {"gunicorn": gunicorn, "redis": redis_own, "redis_rewrite": redis_children,
                "busy": _busy_cores_s(), "t": time.perf_counter()}

    def _run(self, warmup: float, duration: float) -> None:
        time.sleep(warmup)
        a = self._sample()
        time.sleep(duration)
        b = self._sample()
        self.result = {k: b[k] - a[k] for k in a}

    def totals(self) -> dict[str, float]:
        """CPU seconds by component over the window (and its length ``t``); empty if /proc was unreadable."""
        self._thread.join(timeout=5)
        return dict(self.result)


def cpu_per_request(windows: list[dict[str, float]], requests: int) -> dict[str, float]:
    """CPU µs per request by component over some windows, and the busy cores; empty without data."""
    windows = [w for w in windows if w]
    if not windows or requests <= 0:
        return {}
    total = {k: sum(w[k] for w in windows) for k in windows[0]}
    out = {k: 1e6 * total[k] / requests for k in ("gunicorn", "redis", "redis_rewrite")}
    out["rest"] = 1e6 * (total["busy"] - total["gunicorn"] - total["redis"] - total["redis_rewrite"]) / requests
    out["busy_cores"] = total["busy"] / total["t"]
    return out


def _quiesce(r: Any, timeout: float = 60.0) -> None:
    """Wait until Redis runs no AOF rewrite (its child would take CPU from whichever target runs next)."""
    deadline = time.monotonic() + timeout
    while True:
        info = r.info("persistence")
        if not info.get("aof_rewrite_in_progress") and not info.get("aof_rewrite_scheduled"):
            break
        if time.monotonic() > deadline:
            print(f"warning: an AOF rewrite still runs after {timeout:.0f} s; measuring anyway", file=sys.stderr)
            break
        time.sleep(0.05)
    time.sleep(0.2)


def _trim_loop(url: str, metric: str, stop: threading.Event) -> None:
    import redis

    r = redis.Redis.from_url(url)
    while not stop.wait(0.5):
        for shard in range(4):  # 4 x 250 entries: as much data kept as the bare endpoint's one stream
            r.xtrim(f"ldp:v1:{{{metric}:{shard}}}:held", maxlen=250, approximate=True)
        r.xtrim(BARE_STREAM, maxlen=1000, approximate=True)
    r.close()


# --------------------------------------------------------------------------------------------- servers
def start_gunicorn(app: str, port: int, env: dict[str, str], workdir: Path, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py"),
           "-w", "2", "-b", f"127.0.0.1:{port}", "--chdir", str(workdir), app]
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.05)
    time.sleep(0.5)  # let both workers finish booting
    return proc


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def emit(**fields: object) -> None:
    print(json.dumps({"bench": "ingest", **fields}), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=3.0, help="measured seconds per slice")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds at the start of each slice")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of one slice per target (order rotates)")
    parser.add_argument("--procs", type=int, default=2, help="load generator processes")
    parser.add_argument("--conns", type=int, default=4, help="keep-alive connections per process")
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--threads", type=int, help="gunicorn threads per worker (default: deploy/gunicorn.conf.py's)")
    parser.add_argument("--no-trim", action="store_true", help="do not trim the streams while loading")
    parser.add_argument("--no-aof", action="store_true", help="run Redis without AOF (to see what persistence costs)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also load the ingest with batches of a breakdown metric (os, app_version): the cost of "
                             "breakdowns on ingest, and its ratio to the bare XADD")
    parser.add_argument("--appendfsync", choices=("always", "everysec"), default="always",
                        help="Redis's AOF fsync policy, for every target alike (default: always, as deploy/redis.conf; "
                             "the bare XADD then has the same durability as the ingest)")
    args = parser.parse_args(argv)
    if not (0 < args.duration <= 60 and 1 <= args.rounds <= 20 and 1 <= args.procs <= 8 and 1 <= args.conns <= 64):
        parser.error("bounded: duration ≤ 60 s, rounds ≤ 20, procs ≤ 8, conns ≤ 64")

    from ldptel.client import CmsParams, MetricSpec, privatize_batch
    from ldptel.client.protocol.breakdown import ProfileSchema
    from ldptel.client.protocol.wire import encode_batch
    from ldptel.storage.embedded import EmbeddedRedis
    from ldptel.storage.registry import create_metric, set_profile

    spec = MetricSpec(name="bench.cms", params=CmsParams(epsilon=4.0, k=256, m=1024))
    broken = MetricSpec(name="bench.cms.by", params=spec.params, breakdown=("os", "app_version"))
    targets = TARGETS + ((BREAKDOWN_TARGET,) if args.breakdown else ())
    rng = np.random.default_rng(1)
    bodies = {}
    broken_bodies = {}
    for size in (int(s) for s in args.sizes.split(",")):
        batch = privatize_batch([f"v{i % 97}" for i in range(size)], spec.params, rng=rng)
        bodies[size] = encode_batch(metric=spec.name, version=1, batch_id=bytes(16), batch=batch, params=spec.params)
        broken_bodies[size] = encode_batch(metric=broken.name, version=1, batch_id=bytes(16), batch=batch,
                                           params=spec.params, profile=BREAKDOWN_PROFILE)

    with tempfile.TemporaryDirectory(prefix="ldptel-bench-") as tmp, EmbeddedRedis(
        data_dir=Path(tmp) / "redis", appendonly=not args.no_aof, appendfsync=args.appendfsync
    ) as redis_server:
        workdir = Path(tmp)
        (workdir / "bare_app.py").write_text(BARE_APP)
        r = redis_server.client()
        create_metric(r, spec, shards=4)
        if args.breakdown:
            set_profile(r, ProfileSchema({"os": ("android", "ios", "web"), "app_version": ("2.0", "2.1", "2.2")}))
            create_metric(r, broken, shards=4)
        env = {k: v for k, v in os.environ.items() if not k.startswith("LDPTEL_")}
        env.update(
            LDPTEL_APP_TOKENS=APP_TOKEN,
            LDPTEL_ADMIN_TOKEN=ADMIN_TOKEN,
            LDPTEL_REDIS_URL=redis_server.url,
            LDPTEL_RATE_LIMIT="off",
            LDPTEL_ACCESS_LOG="",
            LDPTEL_LOG_LEVEL="warning",
            LDPTEL_MAX_BODY_BYTES=str(8 << 20),
        )
        if args.threads:
            env["LDPTEL_THREADS"] = str(args.threads)
        # Stand-in for the aggregator, which trims what it has folded: without it the streams would grow by
        # ~1 GB per run and the benchmark would measure Redis memory growth and AOF rewrites instead of ingest.
        stop_trim = threading.Event()
        trimmer = threading.Thread(target=_trim_loop, args=(redis_server.url, spec.name, stop_trim), daemon=True)
        trimmer2 = threading.Thread(target=_trim_loop, args=(redis_server.url, broken.name, stop_trim), daemon=True)
        if not args.no_trim:
            trimmer.start()
            if args.breakdown:
                trimmer2.start()
        log = workdir / "gunicorn.log"
        with_cpu = Path("/proc/stat").exists()
        results: dict[tuple[str, int], list[dict]] = {}
        acked_batches = 0
        for size, body in bodies.items():
            servers: dict[str, tuple[subprocess.Popen, int]] = {}
            try:
                for target, app, _ in targets:
                    port = _free_port()
                    servers[target] = (start_gunicorn(app, port, env, workdir, log), port)
                for rnd in range(args.rounds):
                    shift = rnd % len(targets)
                    for target, _, path in targets[shift:] + targets[:shift]:
                        _quiesce(r)
                        proc, port = servers[target]
                        cpu = CpuWindow(proc.pid, redis_server.pid, args.warmup, args.duration) if with_cpu else None
                        res = run_load(port, broken_bodies[size] if target == BREAKDOWN_TARGET[0] else body, path=path, procs=args.procs, conns=args.conns, warmup=args.warmup, duration=args.duration)
                        res["cpu"] = cpu.totals() if cpu else {}
                        res["round"] = rnd
                        if target == "ldptel":
                            acked_batches += res["statuses"].get(202, 0)
                        bad = {k: v for k, v in res["statuses"].items() if k != 202}
                        if bad:
                            print(f"warning: {target} batch {size}: non-202 statuses {bad}", file=sys.stderr)
                        results.setdefault((target, size), []).append(res)
            finally:
                for proc, _ in servers.values():
                    stop(proc)

        stop_trim.set()
        for thread in (trimmer, trimmer2):
            if thread.is_alive():
                thread.join(timeout=10)
        # XINFO's entries-added counts every entry ever appended, trimmed or not
        stored_batches = sum(
            int(r.xinfo_stream(f"ldp:v1:{{{spec.name}:{shard}}}:held")["entries-added"]) for shard in range(4)
        )
        r.close()

        common = {"workers": 2, "worker_class": "gthread", "threads": args.threads or "conf", "conns": args.procs * args.conns,
                  "slice_s": args.duration, "rounds": args.rounds, "appendfsync": args.appendfsync}
        rps_of: dict[tuple[str, int], float] = {}
        for size in bodies:
            for target, _, _ in targets:
                runs = results[(target, size)]
                requests = sum(x["requests"] for x in runs)
                rps = rps_of[(target, size)] = requests / (args.duration * len(runs))
                lat = sorted(v for x in runs for v in x["latencies"])
                emit(figure="requests_per_s", target=target, batch=size, value=round(rps, 1),
                     rounds_rps=[round(x["rps"]) for x in runs], **common)
                emit(figure="reports_per_s", target=target, batch=size, value=round(rps * size), **common)
                if lat:
                    emit(figure="latency_p50_ms", target=target, batch=size, value=round(1000 * lat[len(lat) // 2], 2), **common)
                    emit(figure="latency_p99_ms", target=target, batch=size, value=round(1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2), **common)
                cpu = cpu_per_request([x["cpu"] for x in runs], requests)
                if cpu:
                    emit(figure="cpu_us_per_request", target=target, batch=size,
                         value={k: round(cpu[k]) for k in ("gunicorn", "redis", "redis_rewrite", "rest")},
                         busy_cores=round(cpu["busy_cores"], 2), **common)
            # Pooled over all rounds (equal measured time per target); the per-round ratios show the spread.
            for figure, target, base, goal in (
                ("ratio_vs_bare_xadd_requests_per_s", "ldptel", "bare_xadd", 0.90),
                ("ratio_vs_bare_requests_per_s", "ldptel", "bare", None),
                ("ratio_bare_redis_ping_vs_bare_requests_per_s", "bare_redis_ping", "bare", None),
                *((("ratio_breakdown_vs_bare_xadd_requests_per_s", "ldptel_breakdown", "bare_xadd", 0.90),
                   ("ratio_breakdown_vs_plain_ingest_requests_per_s", "ldptel_breakdown", "ldptel", None))
                  if args.breakdown else ()),
            ):
                if not rps_of[(base, size)]:
                    print(f"warning: {base} answered nothing at batch {size}: no ratio", file=sys.stderr)
                    continue
                ratio = rps_of[(target, size)] / rps_of[(base, size)]
                per_round = [x["rps"] / b["rps"] for b, x in zip(results[(base, size)], results[(target, size)], strict=True) if b["rps"]]
                extra = {"goal": goal, "met": ratio >= goal} if goal else {}
                emit(figure=figure, batch=size, value=round(ratio, 3), rounds=[round(x, 3) for x in per_round],
                     rounds_median=round(float(statistics.median(per_round)), 3) if per_round else None, **extra)
        if 1000 in bodies:
            rep = rps_of[("ldptel", 1000)] * 1000
            emit(figure="reports_per_s_goal", batch=1000, value=round(rep), goal=100_000, met=rep >= 100_000)
        emit(figure="integrity_batches_acked_vs_appended", value=acked_batches, appended=stored_batches,
             met=stored_batches >= acked_batches)
    return 0


if __name__ == "__main__":
    sys.exit(main())
