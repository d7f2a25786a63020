"""Real worker processes: SIGKILL mid-fold and restart, two workers splitting shards, leases and fencing."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import redis as redis_lib
from flask.testing import FlaskClient

from ldptel.aggregator.worker import LeaseLostError, Worker, WorkerConfig, shard_lag
from ldptel.client import CmsParams, GrrParams, MetricSpec
from ldptel.storage import keys, registry
from ldptel.storage import sketches as store
from tests.aggregator.agg_helpers import append_reports, create, drain, ldptel, ldptel_popen, post_reports
from tests.redis_gate import RedisGate
from tests.server.srv_helpers import fill_to_maxmemory, lift_maxmemory
from tests.wait import wait_until


def _total(r: redis_lib.Redis, name: str) -> store.SketchState:  # type: ignore[name-defined]
    record = registry.get_metric(r, name)
    index = store.sketch_index(r, name, record.shards)
    pairs = [(s, v, d) for s, members in index.items() for v, d in members]
    return store.sum_sketches(r, name, params=record.current.params, pairs=pairs)[0]


def _lag(r: redis_lib.Redis, name: str, shards: int) -> int:
    return sum(shard_lag(r, name, s) or 0 for s in range(shards))


def _wait(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    wait_until(predicate, timeout=max(timeout, 60), what=what, interval=0.005, max_interval=0.005)  # a race to see a moment


@pytest.mark.slow
def test_sigkill_mid_fold_then_restart_counts_every_report_once(
    redis: redis_lib.Redis, redis_url: str, client: FlaskClient, token: str, rng: np.random.Generator
) -> None:
    shards = 2
    record = create(redis, MetricSpec(name="pages", params=CmsParams(epsilon=4.0, k=16, m=256)), shards=shards)
    sent = post_reports(client, token, record, [f"v{i % 17}" for i in range(60_000)], rng, batch_size=50)
    entries = len(sent.batches)
    args = ("aggregate", "--once", "--metric", "pages", "--batch", "3", "--checkpoint-every", "9", "--retention", "0")

    kills = 0
    where = redis_lib.connection.parse_url(redis_url)
    markers = [keys.checkpoint("pages", s).encode() for s in range(shards)]
    for count in (1, 3):  # kill twice, each time right after this worker's count-th commit reached Redis
        before = {s: redis.get(keys.checkpoint("pages", s)) for s in range(shards)}
        # The worker talks to Redis through a gate that stops forwarding right after the commit: it cannot
        # finish before the kill however the machine schedules it (polling for the moment was a race).
        with RedisGate(where["port"], host=where.get("host", "127.0.0.1"), markers=markers, count=count) as gate:
            proc = ldptel_popen(*args, redis_url=gate.url)
            try:
                _wait(gate.frozen.is_set, timeout=60, what="the worker's commits to reach the gate")
                _wait(lambda before=before: any(redis.get(keys.checkpoint("pages", s)) != before[s]
                                                for s in range(shards)), timeout=30, what="a new checkpoint")
                proc.send_signal(signal.SIGKILL)
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.communicate(timeout=10)
        assert proc.returncode == -signal.SIGKILL
        kills += 1
        assert _lag(redis, "pages", shards) > 0, "the worker finished before it was killed; the test proves nothing"
        # The killed worker's leases stay until they expire; the next worker waits them out (TTL 10 s by default,
        # so expire them now as an operator would after confirming the process is gone).
        for s in range(shards):
            redis.delete(keys.lease("pages", s))

    done = ldptel(*args, redis_url=redis_url, check=True)
    stats = json.loads(done.stdout)
    assert kills == 2 and stats["dead"] == 0
    assert _lag(redis, "pages", shards) == 0
    assert _total(redis, "pages").equals(sent.expected_state()), "sketch differs from the reports acknowledged"
    assert _total(redis, "pages").n == 60_000
    assert sum(redis.xlen(keys.stream("pages", s)) for s in range(shards)) == 0  # retention 0: all trimmed
    assert entries == 1200


@pytest.mark.slow
def test_two_workers_split_the_shards_and_totals_are_exact(
    redis: redis_lib.Redis, redis_url: str, rng: np.random.Generator
) -> None:
    shards = 4
    record = create(redis, MetricSpec(name="color", params=GrrParams(epsilon=2.0, domain=("a", "b", "c"))), shards=shards)
    first = append_reports(redis, record, ["a", "b", "c", "a"] * 2500, rng, day="2026-03-01", batch_size=100)
    args = ("aggregate", "--lease-ttl", "2", "--rescan", "0.2", "--block", "0.2", "--checkpoint-seconds", "0.2")
    procs = [ldptel_popen(*args, "--worker-id", f"w{i}", redis_url=redis_url) for i in range(2)]
    try:
        def owners() -> list[bytes | None]:
            return [redis.get(keys.lease("color", s)) for s in range(shards)]

        _wait(lambda: sorted(o or b"" for o in owners()) == [b"w0", b"w0", b"w1", b"w1"], timeout=30,
              what="the shards to be split 2 + 2")
        second = append_reports(redis, record, ["c"] * 3000, rng, day="2026-03-02", batch_size=100)
        _wait(lambda: _lag(redis, "color", shards) == 0 and _total(redis, "color").n == first.n + second.n,
              timeout=30, what="both workers to fold everything")
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        errors = [proc.communicate(timeout=20)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], errors
    assert all(redis.get(keys.lease("color", s)) is None for s in range(shards))  # released on SIGTERM
    expected = first.expected_state()
    expected.add_inplace(second.expected_state())
    assert _total(redis, "color").equals(expected)
    assert redis.zcard("ldp:v1:aggregators") == 0


def test_a_leased_shard_is_taken_over_only_after_the_lease_expires(redis: redis_lib.Redis, rng: np.random.Generator) -> None:
    record = create(redis, MetricSpec(name="color", params=GrrParams(epsilon=2.0, domain=("a", "b"))), shards=2)
    sent = append_reports(redis, record, ["a", "b"] * 200, rng, day="2026-03-01", batch_size=20)
    for s in range(2):
        redis.set(keys.lease("color", s), "a-dead-worker", px=600)
    t0 = time.monotonic()
    stats = drain(redis)  # both shards are someone else's: --once waits for the leases to expire
    assert time.monotonic() - t0 >= 0.5
    assert stats.reports == sent.n and stats.unclaimed == ()
    assert _total(redis, "color").equals(sent.expected_state())


@pytest.mark.slow
def test_aggregate_once_waits_for_a_dead_workers_leases_with_progress(
        redis: redis_lib.Redis, redis_url: str, rng: np.random.Generator) -> None:
    record = create(redis, MetricSpec(name="color", params=GrrParams(epsilon=2.0, domain=("a", "b"))), shards=2)
    sent = append_reports(redis, record, ["a", "b"] * 100, rng, day="2026-03-01", batch_size=20)
    # What a SIGKILLed worker leaves behind: its leases, expiring. They are kept alive until the CLI has seen
    # them and said it waits (a fixed TTL raced the CLI's start-up on a loaded machine: sometimes the leases
    # were gone before it looked and nothing waited); then they expire on their own 2 s later.
    def hold() -> None:
        for s in range(2):
            redis.set(keys.lease("color", s), "a-dead-worker", px=2000)

    hold()
    proc = ldptel_popen("aggregate", "--once", redis_url=redis_url)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    _wait(lambda: hold() or any('"wait_leases"' in line for line in lines), timeout=60,
          what="the CLI to wait for the dead worker's leases")
    released = time.monotonic()
    out, _ = proc.communicate(timeout=60)
    reader.join(timeout=10)
    assert proc.returncode == 0, "".join(lines)
    assert time.monotonic() - released >= 1.0  # it waited for the leases to expire
    stats = json.loads(out)
    assert stats["reports"] == sent.n and stats["unclaimed"] == []
    waits = [json.loads(line) for line in lines if '"wait_leases"' in line]
    assert waits and waits[0]["shards"] == 2 and waits[0]["holders"] == ["a-dead-worker"]
    assert _total(redis, "color").equals(sent.expected_state())


@pytest.mark.slow
def test_aggregate_once_says_which_shards_a_live_worker_kept_and_exits_2(
        redis: redis_lib.Redis, redis_url: str, rng: np.random.Generator) -> None:

    record = create(redis, MetricSpec(name="color", params=GrrParams(epsilon=2.0, domain=("a", "b"))), shards=2)
    append_reports(redis, record, ["a", "b"] * 100, rng, day="2026-03-01", batch_size=20)
    in_shard_1 = sum(int(fields[b"n"]) for _, fields in redis.xrange(keys.held("color", 1)))
    lease = keys.lease("color", 0)
    redis.set(lease, "a-live-worker", px=1000)
    done = threading.Event()

    def renew() -> None:  # a live worker renews its lease long before it expires
        while not done.wait(0.2):
            redis.pexpire(lease, 1000)

    thread = threading.Thread(target=renew, daemon=True)
    thread.start()
    try:
        proc = ldptel("aggregate", "--once", redis_url=redis_url)
    finally:
        done.set()
        thread.join(5)
    assert proc.returncode == 2, proc.stderr
    stats = json.loads(proc.stdout)
    assert stats["unclaimed"] == ["color:0"] and stats["reports"] == in_shard_1 > 0
    error = proc.stderr.splitlines()[-1]
    assert error.startswith("ldptel: error: 1 shard(s) not folded (color:0)"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_worker_that_lost_its_lease_cannot_commit(redis: redis_lib.Redis, rng: np.random.Generator) -> None:
    record = create(redis, MetricSpec(name="color", params=GrrParams(epsilon=2.0, domain=("a", "b"))), shards=1)
    append_reports(redis, record, ["a"] * 100, rng, day="2026-03-01", batch_size=10)
    worker = Worker(redis, WorkerConfig(checkpoint_seconds=60, lease_ttl=5))
    try:
        worker._heartbeat()
        worker._rebalance()
        assert worker.owned() == ["color:0"]
        worker._round()  # everything folded in memory, nothing committed
        sh = worker._owned[("color", 0)]
        assert sh.uncommitted == 10 and redis.get(keys.checkpoint("color", 0)) is None
        redis.set(keys.lease("color", 0), "another-worker")  # e.g. after a long pause the lease expired and moved
        with pytest.raises(LeaseLostError):
            worker._commit(sh)
    finally:
        worker.close()  # never run: its read connections are closed here
    assert redis.get(keys.checkpoint("color", 0)) is None
    assert redis.smembers(keys.sketch_index("color", 0)) == set()
    assert redis.xlen(keys.stream("color", 0)) == 10 and _lag(redis, "color", 1) == 10  # left for the owner


@pytest.mark.slow
def test_a_following_worker_survives_a_redis_crash_and_restart(rng: np.random.Generator, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import threading

    from ldptel.storage.embedded import EmbeddedRedis

    with EmbeddedRedis(appendonly=True, data_dir=tmp_path / "redis") as server:
        r = server.client()
        record = create(r, MetricSpec(name="color", params=GrrParams(epsilon=2.0, domain=("a", "b"))), shards=2)
        first = append_reports(r, record, ["a"] * 500, rng, day="2026-03-01", batch_size=50)
        wr = server.client()
        clients = [r, wr]
        worker = Worker(wr, WorkerConfig(lease_ttl=1, rescan_seconds=0.1, block_seconds=0.1,
                                                      checkpoint_seconds=0.05))
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        try:
            _wait(lambda: _total(r, "color").n == first.n, timeout=20, what="the first fold")
            server.kill()  # SIGKILL: the AOF write(2) precedes every reply, so acknowledged commits survive
            time.sleep(0.3)
            server.start()
            r = server.client()
            clients.append(r)
            second = append_reports(r, record, ["b"] * 300, rng, day="2026-03-01", batch_size=50)
            _wait(lambda: _total(r, "color").n == first.n + second.n, timeout=30, what="the fold after the restart")
        finally:
            worker.stop()
            thread.join(timeout=20)
        assert not thread.is_alive()
        expected = first.expected_state()
        expected.add_inplace(second.expected_state())
        assert _total(r, "color").equals(expected)
        for client in clients:
            client.close()


@pytest.mark.slow
def test_a_following_worker_waits_while_redis_refuses_writes_and_resumes(
        rng: np.random.Generator, tmp_path, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    import threading

    from ldptel.storage.embedded import EmbeddedRedis

    # the clients close however the test ends: one left to the garbage collector fails whichever test it meets
    with EmbeddedRedis(data_dir=tmp_path / "redis") as server, server.client() as r, server.client() as wr:
        record = create(r, MetricSpec(name="color", params=GrrParams(epsilon=2.0, domain=("a", "b"))), shards=2)
        first = append_reports(r, record, ["a"] * 300, rng, day="2026-03-01", batch_size=50)
        worker = Worker(wr, WorkerConfig(lease_ttl=1, rescan_seconds=0.1, block_seconds=0.1, checkpoint_seconds=0.05))
        caplog.set_level(logging.INFO, logger="ldptel.aggregator")
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        try:
            _wait(lambda: _total(r, "color").n == first.n, timeout=20, what="the first fold")
            second = append_reports(r, record, ["b"] * 300, rng, day="2026-03-01", batch_size=50)
            fill_to_maxmemory(r)  # heartbeats, leases and commits are refused from now on
            time.sleep(2.5)  # several lease TTLs
            assert thread.is_alive()
            refusals = [rec for rec in caplog.records if getattr(rec, "event", None) == "redis_refuses_writes"]
            assert len(refusals) == 1 and str(getattr(refusals[0], "error", "")).startswith("OOM command not allowed")
            lift_maxmemory(r)
            _wait(lambda: _total(r, "color").n == first.n + second.n, timeout=30, what="the fold after the limit was lifted")
        finally:
            worker.stop()
            thread.join(timeout=20)
        assert not thread.is_alive()
        expected = first.expected_state()
        expected.add_inplace(second.expected_state())
        assert _total(r, "color").equals(expected)  # exactly once across the refusals


@pytest.mark.slow
def test_aggregate_once_says_in_one_line_that_redis_refuses_writes(rng: np.random.Generator, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ldptel.storage.embedded import EmbeddedRedis

    with EmbeddedRedis(data_dir=tmp_path / "redis") as server:
        r = server.client()
        record = create(r, MetricSpec(name="color", params=GrrParams(epsilon=2.0, domain=("a", "b"))), shards=2)
        append_reports(r, record, ["a"] * 100, rng, day="2026-03-01", batch_size=50)
        fill_to_maxmemory(r)
        proc = ldptel("aggregate", "--once", redis_url=server.url)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stdout == ""
        lines = [line for line in proc.stderr.splitlines() if line.startswith("ldptel: error:")]
        assert len(lines) == 1 and "Redis refuses writes" in lines[0] and "OOM command not allowed" in lines[0], proc.stderr
        lift_maxmemory(r)
        assert json.loads(ldptel("aggregate", "--once", redis_url=server.url, check=True).stdout)["reports"] == 100
        r.close()


def test_the_worker_package_loads_neither_flask_nor_sqlite() -> None:
    """The aggregator runs without the ingest service's web stack or the SDK's on-device store."""
    code = (
        "import sys, ldptel.aggregator.worker as w\n"
        "for name in w.__all__: getattr(w, name)\n"
        "print(sorted(m for m in ('flask', 'werkzeug', 'sqlite3', '_sqlite3') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.strip() == "[]", proc.stdout
