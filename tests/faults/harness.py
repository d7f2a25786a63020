"""The fault-injection harness: the real stack under real load, faults injected, then drained and audited.

Stack: a Redis with AOF (embedded valkey, a data dir that survives kill -9 and restart on the same port),
gunicorn with deploy/gunicorn.conf.py (2 workers), two ``ldptel aggregate`` follow workers (short leases) and
load from raw HTTP clients (each keeps its batch until it is acknowledged, like the SDK) and from real
:class:`~ldptel.client.Reporter`\\ s. Two metrics: ``fault.raw`` (raw clients; the test knows every batch it
sent, so the expected sketch is the fold of exactly the acknowledged batches) and ``fault.sdk`` (Reporters; the
expected sketch is the fold of the batches in the streams, each once, and its report count is what the
Reporters were told was delivered).

:meth:`FaultRun.scenario` runs load, injects one fault, measures recovery, then drains (load paused,
Reporters flushed, aggregators caught up) and audits everything acknowledged so far: one JSON line each.

``cluster_replicas`` runs the same stack on a real local Redis Cluster (:class:`tests.cluster.local.LocalCluster`,
3 primaries with that many replicas each) instead of the one Redis: :data:`CLUSTER_SCENARIOS` on a cluster with
replicas (ingest with ``?wait_replicas=1``: a batch is acknowledged once a replica holds it), including
``primary_failover``; :data:`CLUSTER_RESTART_SCENARIOS` on one without (``primary_restart``: AOF alone, which
keeps every acknowledged batch only with ``appendfsync always``: with ``everysec`` a write postponed behind a
slow fsync is acknowledged before it reaches the file, and kill -9 loses it).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import redis as redis_lib

from ldptel.aggregator.worker import shard_lag
from ldptel.client import CmsParams, MetricSpec, ReportBatch, Reporter, SketchState, fold, privatize_batch
from ldptel.client.protocol.wire import decode_batch, encode_batch
from ldptel.storage import keys, registry
from ldptel.storage import sketches as store
from ldptel.storage.client import connect
from ldptel.storage.embedded import EmbeddedRedis
from tests.client.conftest import OPEN_POLICY
from tests.cluster.local import LocalCluster
from tests.disk_pressure import DiskPressure, fsync_backlog
from tests.faults.slow import create_metric
from tests.faults.stack import DEPLOY, ROOT, free_port, worker_pids
from tests.server.srv_helpers import OCTET, fill_to_maxmemory, lift_maxmemory
from tests.server.test_server_http import APP_TOKEN, _env, _stop, _wait_http
from tests.wait import wait_until

__all__ = ["CLUSTER_RESTART_SCENARIOS", "CLUSTER_SCENARIOS", "NODE_DOWN_SCENARIOS", "SCENARIOS", "FaultRun"]

RAW = MetricSpec(name="fault.raw", params=CmsParams(epsilon=4.0, k=16, m=256), reports_per_day=10_000)
SDK = MetricSpec(name="fault.sdk", params=CmsParams(epsilon=4.0, k=16, m=256), reports_per_day=10_000)
SHARDS = 4
LEASE_TTL = 2.0
REDIS_SCENARIOS = ("redis_kill9", "redis_maxmemory")
SCENARIOS = ("redis_kill9", "aggregator_kill9", "gunicorn_worker_kill9", "gunicorn_master_kill9",
             "lease_holder_sigstop", "redis_maxmemory")
# On a cluster with a replica per primary (the primary's replica takes over, then the old primary rejoins as a
# replica from its own data dir), and on one without replicas (the primary comes back from its AOF).
CLUSTER_SCENARIOS = ("aggregator_kill9", "gunicorn_worker_kill9", "gunicorn_master_kill9", "lease_holder_sigstop",
                     "primary_failover")
CLUSTER_RESTART_SCENARIOS = ("primary_restart",)
NODE_DOWN_SCENARIOS = (*REDIS_SCENARIOS, "primary_failover", "primary_restart")  # 503 allowed while a node is down


@dataclass
class _Acks:
    lock: threading.Lock = field(default_factory=threading.Lock)
    batches: dict[bytes, ReportBatch] = field(default_factory=dict)
    times: list[tuple[float, float]] = field(default_factory=list)  # (sent, acknowledged) of every batch, monotonic
    statuses: dict[int, int] = field(default_factory=dict)  # of this scenario (0: no HTTP answer)
    acked: threading.Event = field(default_factory=threading.Event)  # set at every 202 of a raw client
    in_flight: int = 0  # raw clients' requests sent and not yet answered

    def first_after(self, t: float) -> float | None:
        """When the first request sent at ``t`` or later was acknowledged (None: none yet)."""
        with self.lock:
            later = [acked for sent, acked in self.times if sent >= t]
        return min(later) if later else None


class FaultRun:
    def __init__(self, tmp: Path, *, raw_clients: int = 2, reporters: int = 2, batch: int = 20, seed: int = 1,
                 report_interval: float = 0.002, raw_pause: float = 0.005, cluster_replicas: int | None = None,
                 appendfsync: str = "always", redis_config: Path | None = DEPLOY / "redis.conf") -> None:
        """``report_interval``: seconds between two ``report()`` calls of one Reporter (each device may send
        ``reports_per_day`` = 10,000 a day: keep interval × run time under that). ``raw_pause``: seconds a raw
        client waits after an acknowledgement before it sends its next batch (the load's CPU cost is about
        proportional to its request rate; what a fault meets is the requests in flight, which every client has
        in turn). ``cluster_replicas``: run on
        a local 3-primary cluster with that many replicas per primary (None: one Redis), its nodes' AOF
        fsync policy ``appendfsync`` (``always``: as the shipped deploy/redis-container.conf). The one Redis runs
        the shipped ``redis_config`` (deploy/redis.conf; None: the embedded server's own flags, everysec)."""
        self.tmp, self.raw_clients, self.n_reporters, self.batch, self.seed = tmp, raw_clients, reporters, batch, seed
        self.report_interval = report_interval
        self.raw_pause = raw_pause
        self.redis = EmbeddedRedis(appendonly=True, data_dir=tmp / "redis", config_file=redis_config)  # unused on a cluster
        self.cluster = None if cluster_replicas is None else LocalCluster(primaries=3, replicas=cluster_replicas,
                                                                             appendfsync=appendfsync)
        self.extra: dict[str, Any] = {}  # figures of the last injection beside recovery_s
        self.port = free_port()
        self.gunicorn: subprocess.Popen[bytes] | None = None
        self.aggregators: dict[str, subprocess.Popen[bytes]] = {}
        self.acks = _Acks()
        self.reporters: list[Reporter] = []
        self.delivered_before: list[int] = []
        self._run = threading.Event()  # load runs while set
        self._stop = threading.Event()
        self._idle: list[threading.Event] = []  # per load thread: set while it holds no unacknowledged batch
        self._threads: list[threading.Thread] = []
        self._next_worker = 0
        self.errors: list[BaseException] = []

    # ------------------------------------------------------------------------------------------ stack
    @property
    def url(self) -> str:
        """What gunicorn and the aggregators get as LDPTEL_REDIS_URL."""
        if self.cluster is None:
            return self.redis.url
        return self.cluster.url + ("?wait_replicas=1" if self.cluster.replicas else "")

    def client(self) -> redis_lib.Redis:
        return connect(self.url)

    def __enter__(self) -> FaultRun:
        try:
            return self._enter()
        except BaseException:  # a failed set-up stops what it started (no process or socket outlives the test)
            self.__exit__()
            raise

    def _enter(self) -> FaultRun:
        if self.cluster is None:
            self.redis.start()
        else:
            self.cluster.start()
        self.start_gunicorn()
        create_metric(self.port, RAW)
        create_metric(self.port, SDK)
        for _ in range(2):
            self.start_aggregator()
        self._wait_aggregators()
        endpoint = f"http://127.0.0.1:{self.port}"
        for i in range(self.n_reporters):
            self.reporters.append(Reporter(endpoint, APP_TOKEN, self.tmp / f"device{i}", batch_size=self.batch,
                                           flush_interval=0.2, metrics=[SDK.name], timeout=3.0,
                                           backoff_base=0.05, backoff_cap=0.5,
                                           policy=OPEN_POLICY))  # a "device" here is a load generator
        for r in self.reporters:
            assert r.wait_for_specs(20), "the Reporters never got the spec"
        for i in range(self.raw_clients):
            self._spawn(self._raw_client, self.seed * 1000 + i)
        for i, rep in enumerate(self.reporters):
            self._spawn(self._reporter_load, rep, i)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._run.set()
        for t in self._threads:
            t.join(timeout=30)
        for rep in self.reporters:
            rep.close(timeout=5)
        for proc in self.aggregators.values():
            self._end(proc)
        if self.gunicorn is not None:
            _stop(self.gunicorn)
        if self.cluster is None:
            self.redis.stop()
        else:
            self.cluster.stop()

    def start_gunicorn(self) -> None:
        log = self.tmp / "gunicorn.log"
        cmd = [sys.executable, "-m", "gunicorn", "-c", str(DEPLOY / "gunicorn.conf.py"), "-w", "2",
               "-b", f"127.0.0.1:{self.port}"]
        with log.open("ab") as out:
            env = _env(self.url) | {"PROMETHEUS_MULTIPROC_DIR": str(self.tmp / "prometheus")}  # emptied at start
            self.gunicorn = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        _wait_http(self.port, self.gunicorn, log, timeout=30)

    def start_aggregator(self) -> str:
        worker_id = f"agg{self._next_worker}"
        self._next_worker += 1
        log = (self.tmp / f"{worker_id}.log").open("ab")
        cmd = [sys.executable, "-m", "ldptel.aggregator.cli", "aggregate", "--worker-id", worker_id,
               "--lease-ttl", str(LEASE_TTL), "--checkpoint-seconds", "0.2", "--block", "0.2", "--rescan", "0.5",
               "--retention", "86400", "--log-level", "warning"]
        # Real shuffle blocks (docs/shuffle.md): a block of ≥ 4 uploads, or whatever is held after 1 s.
        shuffle = {"LDPTEL_SHUFFLE_N_MIN": "4", "LDPTEL_SHUFFLE_MAX_BLOCK_UPLOADS": "0", "LDPTEL_SHUFFLE_HOLD_SECONDS": "1"}
        self.aggregators[worker_id] = subprocess.Popen(cmd, env={**os.environ, "LDPTEL_REDIS_URL": self.url, **shuffle},
                                                       stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.close()
        return worker_id

    def _wait_aggregators(self, timeout: float = 60) -> None:
        """Until every aggregator process heartbeats (it reached Redis and runs its loop)."""
        r = self.client()

        def started() -> bool:
            for worker_id, proc in self.aggregators.items():
                assert proc.poll() is None, (self.tmp / f"{worker_id}.log").read_text()[-2000:]
            return {m.decode() for m in r.zrange(keys.aggregators(), 0, -1)} >= set(self.aggregators)

        try:
            wait_until(started, timeout=timeout, what="every aggregator to heartbeat")
        finally:
            r.close()

    @staticmethod
    def _end(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    # ------------------------------------------------------------------------------------------- load
    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        idle = threading.Event()
        idle.set()
        self._idle.append(idle)

        def run() -> None:
            try:
                target(*args, idle)
            except BaseException as exc:  # surfaced by the audit
                self.errors.append(exc)
                idle.set()

        thread = threading.Thread(target=run, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _post(self, conn: http.client.HTTPConnection | None, data: bytes) -> tuple[http.client.HTTPConnection, int]:
        conn = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        with self.acks.lock:
            self.acks.in_flight += 1
        try:
            conn.request("POST", "/v1/reports", body=data,
                         headers={"Authorization": f"Bearer {APP_TOKEN}", "Content-Type": OCTET})
            response = conn.getresponse()
            response.read()
            status = response.status
            if response.getheader("Connection", "").lower() == "close":
                conn.close()
        except (OSError, http.client.HTTPException):
            conn.close()
            status = 0
        finally:
            with self.acks.lock:
                self.acks.in_flight -= 1
        return conn, status

    def _when_in_flight(self) -> None:
        """Until a raw client has a request sent and not yet answered: a process fault injected right after
        this meets it mid-request (the load is throttled, so at a random moment it may meet none).
        ``extra["in_flight_at_fault"]``: how many were."""
        self.extra["in_flight_at_fault"] = wait_until(lambda: self.acks.in_flight, interval=0.001,
                                                      max_interval=0.002, what="a raw client's request in flight")

    def _raw_client(self, seed: int, idle: threading.Event) -> None:
        rng = np.random.default_rng(seed)
        conn: http.client.HTTPConnection | None = None
        try:
            self._raw_loop(rng, conn_box := [conn], idle)
        finally:
            if conn_box[0] is not None:
                conn_box[0].close()

    def _raw_loop(self, rng: np.random.Generator, conn_box: list[http.client.HTTPConnection | None],
                  idle: threading.Event) -> None:
        while not self._stop.is_set():
            self._run.wait()
            if self._stop.is_set():
                break
            idle.clear()
            values = [f"v{int(i)}" for i in rng.integers(0, 64, self.batch)]
            batch = privatize_batch(values, RAW.params, rng=rng)
            bid = os.urandom(16)
            data = encode_batch(metric=RAW.name, version=1, batch_id=bid, batch=batch, params=RAW.params)
            while True:  # keep the batch until it is acknowledged, as the SDK does
                sent = time.monotonic()
                conn_box[0], status = self._post(conn_box[0], data)
                with self.acks.lock:
                    self.acks.statuses[status] = self.acks.statuses.get(status, 0) + 1
                    if status == 202:
                        self.acks.batches[bid] = batch
                        self.acks.times.append((sent, time.monotonic()))
                        self.acks.acked.set()
                if status == 202:
                    break
                if status not in (0, 503):
                    raise AssertionError(f"raw client: HTTP {status}")
                time.sleep(0.05)
            idle.set()
            time.sleep(self.raw_pause)

    def _reporter_load(self, rep: Reporter, index: int, idle: threading.Event) -> None:
        i = 0
        while not self._stop.is_set():
            self._run.wait()
            if self._stop.is_set():
                break
            rep.report(SDK.name, f"v{(i * 7 + index) % 64}")
            i += 1
            time.sleep(self.report_interval)

    # ---------------------------------------------------------------------------------------- scenario
    def scenario(self, name: str, *, load_seconds: float = 1.0) -> dict[str, Any]:
        with self.acks.lock:
            self.acks.statuses = {}
        self._run.set()
        time.sleep(load_seconds)
        self.extra = {}
        log = self.tmp / "gunicorn.log"
        log_start = log.stat().st_size
        recovery = getattr(self, f"_inject_{name}")()
        time.sleep(load_seconds)
        result = {"scenario": name, "backend": self.backend, "recovery_s": round(recovery, 3), **self.extra,
                  **self.drain_and_audit()}
        result["statuses"] = {str(k): v for k, v in sorted(self.acks.statuses.items())}
        bad = {s: n for s, n in self.acks.statuses.items() if s >= 500 and s != 503}
        result["http_5xx_other_than_503"] = sum(bad.values())
        result["http_503"] = self.acks.statuses.get(503, 0)
        reasons: dict[str, int] = {}  # why ingest answered 503 (raw clients and Reporters), from its log
        with log.open("rb") as text:
            text.seek(log_start)
            for line in text.read().decode(errors="replace").splitlines():
                if (reason := line.partition("redis unavailable: ")[2].strip()):
                    reasons[reason] = reasons.get(reason, 0) + 1
        result["http_503_reasons"] = reasons
        print(json.dumps({"bench": "faults", **result}), flush=True)
        return result

    def _inject_redis_kill9(self) -> float:
        self._when_in_flight()
        self.redis.kill()
        time.sleep(0.5)
        restarted = time.monotonic()
        self.redis.start()
        return self._wait_ack_after(restarted)

    def _inject_redis_kill9_after_ack(self) -> float:
        """kill -9 Redis the moment a batch has been acknowledged, while its AOF fsyncs are slow: a competing
        writer fsyncs large writes on the same disk (:class:`~tests.disk_pressure.DiskPressure`). Under ``appendfsync everysec``
        Redis then postpones its AOF writes (up to 2 s) yet still replies: the acknowledged batches of that
        window exist only in its memory, and this kill takes them. Under ``always`` a reply follows the fsync."""
        with DiskPressure(self.tmp / "pressure.bin"):
            self._wait_ack_in_loss_window()
            self.redis.kill()
        time.sleep(0.2)
        restarted = time.monotonic()
        self.redis.start()
        return self._wait_ack_after(restarted)

    def _wait_ack_in_loss_window(self, timeout: float = 10.0) -> None:
        """Until a raw client's batch is acknowledged, and, under ``everysec``, one after which Redis still
        reports an AOF fsync running in the background with writes waiting behind it (:func:`fsync_backlog`):
        that batch is then in Redis's memory only (``extra["fsync_backlog_seen"]``; False: none came within
        ``timeout``, the kill follows an ack anyway). Under ``always`` there is no such window to aim at: a
        reply follows the fsync of its write, so the first acknowledgement will do."""
        r = self.redis.client()
        try:
            everysec = r.config_get("appendfsync")["appendfsync"] in ("everysec", b"everysec")
            deadline = time.monotonic() + timeout
            while True:
                self.acks.acked.clear()
                assert self.acks.acked.wait(10), "no acknowledgement under disk pressure"
                if not everysec:
                    return
                backlog = fsync_backlog(r)
                if backlog or time.monotonic() > deadline:
                    self.extra["fsync_backlog_seen"] = backlog
                    return
        finally:
            r.close()

    @property
    def backend(self) -> str:
        if self.cluster is None:
            return "redis"
        c = self.cluster
        return f"cluster-{c.primaries}p{c.primaries * c.replicas}r" + ("" if c.replicas else f"-{c.appendfsync}")

    def _victim_primary(self) -> EmbeddedRedis:
        """The primary that holds shard 0 of ``fault.raw`` (written to and folded from under load)."""
        assert self.cluster is not None
        r = self.client()
        try:
            port = int(r.get_node_from_key(keys.stream(RAW.name, 0)).port)  # type: ignore[attr-defined]
        finally:
            r.close()
        return next(node for node in self.cluster.nodes if node.running and node.port == port)

    def _wait_primaries(self, running: int, timeout: float = 60) -> None:
        """Until ``running`` running nodes are primaries and the cluster says ok on every running node."""
        assert self.cluster is not None
        cluster = self.cluster
        wait_until(lambda: len(cluster.primary_nodes()) == running, timeout=timeout, what="a replica to take over",
                   max_interval=0.05)
        cluster.wait_ok(timeout=timeout)

    def _inject_primary_failover(self) -> float:
        """kill -9 the primary of a shard under load; its replica takes over (readiness and acks come back); then
        the old primary restarts on its own data dir and rejoins as a replica (``?wait_replicas=1`` needs one)."""
        assert self.cluster is not None and self.cluster.replicas
        victim = self._victim_primary()
        self._when_in_flight()
        victim.kill()
        killed = time.monotonic()
        self._wait_primaries(self.cluster.primaries)
        promoted = time.monotonic()
        victim.start()
        self.cluster.wait_ok(timeout=60)
        cluster = self.cluster
        wait_until(lambda: cluster.role(victim) == "slave", what="the old primary to rejoin as a replica",
                   max_interval=0.05)
        rejoined = time.monotonic()
        self.extra |= {"failover_s": round(promoted - killed, 3), "rejoined_s": round(rejoined - killed, 3)}
        return rejoined - killed + self._wait_ack_after(rejoined)

    def _inject_primary_restart(self) -> float:
        """kill -9 a primary of a cluster without replicas; it comes back on its own data dir (AOF, nodes.conf)."""
        assert self.cluster is not None and not self.cluster.replicas
        victim = self._victim_primary()
        self._when_in_flight()
        victim.kill()
        killed = time.monotonic()
        time.sleep(0.5)
        victim.start()
        self.cluster.wait_ok(timeout=60)
        ready = time.monotonic()
        return ready - killed + self._wait_ack_after(ready)

    def _inject_redis_maxmemory(self) -> float:
        r = self.client()
        try:
            fill_to_maxmemory(r)
            time.sleep(1.0)  # every write refused meanwhile: 503
            lifted = time.monotonic()
            lift_maxmemory(r)
            for key in r.scan_iter("test:fill:*"):
                r.delete(key)
        finally:
            r.close()
        return self._wait_ack_after(lifted)

    def _inject_aggregator_kill9(self) -> float:
        victim = self._lease_holder()
        self.aggregators[victim].kill()  # SIGKILL mid-fold: its uncommitted work stays pending in Redis
        self.aggregators[victim].wait(timeout=10)
        del self.aggregators[victim]
        killed = time.monotonic()
        self.start_aggregator()
        taken = self._wait_leases_without(victim) - killed
        self._wait_aggregators()
        return taken

    def _inject_lease_holder_sigstop(self) -> float:
        victim = self._lease_holder()
        proc = self.aggregators[victim]
        proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            taken = self._wait_leases_without(victim)
            time.sleep(LEASE_TTL / 2)  # past its lease: it resumes believing it holds shards; fencing refuses
        finally:
            proc.send_signal(signal.SIGCONT)
        return taken - stopped

    def _inject_gunicorn_worker_kill9(self) -> float:
        assert self.gunicorn is not None
        victim = worker_pids(self.gunicorn.pid)[0]
        self._when_in_flight()
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        master = self.gunicorn.pid
        wait_until(lambda: len(pids := worker_pids(master)) >= 2 and victim not in pids,
                   what="gunicorn to replace the killed worker", max_interval=0.02)
        return max(self._wait_ack_after(killed), time.monotonic() - killed)

    def _inject_gunicorn_master_kill9(self) -> float:
        assert self.gunicorn is not None
        orphans = worker_pids(self.gunicorn.pid)
        self._when_in_flight()
        self.gunicorn.kill()
        self.gunicorn.wait(timeout=10)
        killed = time.monotonic()

        def restarted() -> bool:  # a supervisor's restart (gunicorn retries the bind while the orphans hold the port)
            try:
                self.start_gunicorn()
                return True
            except AssertionError:  # the new master gave up on the port: start it again
                return False

        wait_until(restarted, what="a new gunicorn master to serve", interval=0.1, max_interval=0.1)
        # Served by the new master: the orphans are gone (they exit ~2 s after the kill) and its workers run.
        assert self.gunicorn is not None
        master = self.gunicorn.pid
        wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in orphans)
                   and len(worker_pids(master)) >= 2,
                   what="the orphaned workers to exit and the new master's workers to run", max_interval=0.02)
        ready = time.monotonic()
        return ready - killed + self._wait_ack_after(ready)

    def _lease_holder(self) -> str:
        r = self.client()

        def holder() -> str | None:
            for metric in (RAW.name, SDK.name):
                for shard in range(SHARDS):
                    owner = r.get(keys.lease(metric, shard))
                    if owner is not None and owner.decode() in self.aggregators:
                        return str(owner.decode())
            return None

        try:
            return wait_until(holder, what="an aggregator to hold a lease")
        finally:
            r.close()

    def _wait_leases_without(self, victim: str, timeout: float = 60) -> float:
        """Monotonic time at which every shard is leased by a live worker other than ``victim``."""
        r = self.client()

        def taken() -> float | None:
            owners = [r.get(keys.lease(m, s)) for m in (RAW.name, SDK.name) for s in range(SHARDS)]
            return time.monotonic() if all(o is not None and o.decode() != victim for o in owners) else None

        try:  # polled every 20 ms: the time returned is a recovery figure
            return wait_until(taken, timeout=timeout, what=f"the shards of {victim} to be taken over",
                              max_interval=0.02)
        finally:
            r.close()

    def _wait_ack_after(self, t: float, timeout: float = 60) -> float:
        first = wait_until(lambda: self.acks.first_after(t), timeout=timeout,
                           what="an acknowledgement after the fault")
        return first - t

    # ------------------------------------------------------------------------------------ drain, audit
    def drain_and_audit(self) -> dict[str, Any]:
        self._run.clear()
        for idle in self._idle:
            assert idle.wait(60), "a raw client never got its batch acknowledged"
        for rep in self.reporters:
            assert rep.flush(60), f"a Reporter kept {rep.stats().pending} reports: {rep.stats()}"
        assert not self.errors, self.errors
        for worker_id, proc in self.aggregators.items():  # every fault is survived: no aggregator exits
            assert proc.poll() is None, (worker_id, (self.tmp / f"{worker_id}.log").read_text()[-2000:])
        r = self.client()
        try:
            self._wait_folded(r)
            return self._audit(r)
        finally:
            r.close()

    def _wait_folded(self, r: redis_lib.Redis, timeout: float = 90) -> None:
        wait_until(lambda: [lag for m in (RAW.name, SDK.name) for s in range(SHARDS) if (lag := shard_lag(r, m, s)) != 0] == [],
                   timeout=timeout, what="the aggregators to catch up (lag 0 on every shard)")

    def _audit(self, r: redis_lib.Redis) -> dict[str, Any]:
        # The fold reads shuffled blocks (ldptel.storage.shuffle): no batch id is left in them, so an upload is
        # found stored by its dedupe key (kept to the end of its day + the horizon), and counted once by the
        # sketches: the fold of exactly the acknowledged raw batches, and of exactly the released SDK reports.
        released: dict[str, list[ReportBatch]] = {RAW.name: [], SDK.name: []}
        held = 0
        for spec in (RAW, SDK):
            for shard in range(SHARDS):
                for _, fields in r.xrange(keys.stream(spec.name, shard)):
                    released[spec.name].append(decode_batch(fields[b"b"], spec.params)[1])
                held += r.xlen(keys.held(spec.name, shard))
        with self.acks.lock:
            acked = dict(self.acks.batches)
        pipe = r.pipeline(transaction=False)
        for bid in acked:
            pipe.exists(keys.seen(RAW.name, keys.shard_for(bid, SHARDS), bid.hex()))
        stored = dict(zip(acked, pipe.execute(), strict=True)) if acked else {}
        lost = sum(b.n for bid, b in acked.items() if not stored[bid])
        raw_folded = _total(r, RAW.name)
        raw_expected = fold(RAW.params, list(acked.values()))
        sdk_folded = _total(r, SDK.name)
        sdk_expected = fold(SDK.params, released[SDK.name])
        delivered = sum(rep.stats().delivered for rep in self.reporters)
        raw_released = sum(b.n for b in released[RAW.name])
        doubled = max(0, raw_folded.n - raw_expected.n) + max(0, sdk_folded.n - delivered)
        return {
            "acknowledged_reports": len(acked) * self.batch + delivered,
            "acknowledged_batches": len(acked) + sum(1 for _ in released[SDK.name]),
            "lost": lost + max(0, delivered - sdk_folded.n) + max(0, raw_expected.n - lost - raw_folded.n),
            "lost_unstored": lost,  # acknowledged, no dedupe key (the rest of "lost": stored, never folded)
            "doubled": doubled,
            "appended_unacknowledged": max(0, raw_released - raw_expected.n),
            "held": held,
            "raw_sketch_equal": raw_folded.equals(raw_expected),
            "sdk_sketch_equal": sdk_folded.equals(sdk_expected) and sdk_folded.n == delivered,
            "reporters_pending": sum(rep.stats().pending for rep in self.reporters),
        }


def _total(r: redis_lib.Redis, name: str) -> SketchState:
    record = registry.get_metric(r, name)
    index = store.sketch_index(r, name, record.shards)
    pairs = [(s, v, d) for s, members in index.items() for v, d in members]
    return store.sum_sketches(r, name, params=record.current.params, pairs=pairs)[0]
