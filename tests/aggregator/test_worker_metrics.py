"""``ldptel aggregate --metrics-port``: the worker's own Prometheus metrics, scraped from the real process."""

from __future__ import annotations

import re
import urllib.request

import numpy as np
import pytest
import redis as redis_lib

from ldptel.client import GrrParams, MetricSpec
from ldptel.storage.embedded import EmbeddedRedis
from tests.aggregator.agg_helpers import append_reports, create, ldptel, ldptel_popen
from tests.faults.stack import free_port
from tests.server.srv_helpers import fill_to_maxmemory, lift_maxmemory
from tests.wait import wait_until

pytestmark = pytest.mark.slow


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\w+(?:\{[^}]*\})?) (\S+)$", text, re.M)}


def _until(port: int, condition, what: str, timeout: float = 60) -> dict[str, float]:  # type: ignore[no-untyped-def]
    def scraped() -> dict[str, float] | None:
        try:
            got = _scrape(port)
        except OSError:
            return None
        return got if condition(got) else None

    return wait_until(scraped, timeout=timeout, what=what)  # type: ignore[no-any-return]


def test_aggregate_metrics_port_exports_folds_commits_lag_and_errors(tmp_path, rng: np.random.Generator) -> None:  # type: ignore[no-untyped-def]
    with EmbeddedRedis(data_dir=tmp_path / "redis") as server:
        r = server.client()
        record = create(r, MetricSpec(name="color", params=GrrParams(epsilon=2.0, domain=("a", "b"))), shards=2)
        sent = append_reports(r, record, ["a", "b"] * 500, rng, day="2026-03-01", batch_size=50)
        port = free_port()
        proc = ldptel_popen("aggregate", "--metrics-port", str(port), "--lease-ttl", "1", "--checkpoint-seconds", "0.1",
                            "--block", "0.1", "--rescan", "0.2", redis_url=server.url)
        try:
            # One scrape is no snapshot: the lag is read from Redis, the counters from the worker, which counts a
            # commit just after Redis has it and a fold before its commit; so wait for all of them to settle (the
            # old wait for shard 1 alone saw commits_total 0 under load: shard 0 not committed yet, or counted).
            got = _until(port, lambda m: m.get("ldptel_aggregator_reports_folded_total") == sent.n
                         and m.get("ldptel_aggregator_commits_total", 0) >= 1
                         and m.get('ldptel_aggregator_lag_entries{metric="color",shard="0"}') == 0.0
                         and m.get('ldptel_aggregator_lag_entries{metric="color",shard="1"}') == 0.0, "the fold")
            assert got["ldptel_aggregator_entries_folded_total"] == 20
            assert got["ldptel_aggregator_shards_held"] == 2
            assert got['ldptel_aggregator_errors_total{kind="redis_refuses_writes"}'] == 0
            fill_to_maxmemory(r)  # the worker's next lease renewal is refused: it backs off and counts it
            try:
                # counted, then its shards dropped (a scrape may fall between the two): it drops them and waits
                _until(port, lambda m: m.get('ldptel_aggregator_errors_total{kind="redis_refuses_writes"}', 0) >= 1
                       and m.get("ldptel_aggregator_shards_held") == 0, "a refused write counted, its shards dropped")
            finally:
                lift_maxmemory(r)
                for key in r.scan_iter("test:fill:*"):
                    r.delete(key)
            more = append_reports(r, record, ["a"] * 100, rng, day="2026-03-01", batch_size=50)
            _until(port, lambda m: m.get("ldptel_aggregator_reports_folded_total") == sent.n + more.n, "the resumed fold")
            assert proc.poll() is None
        finally:
            proc.terminate()
            proc.communicate(timeout=20)
        assert proc.returncode == 0
        r.close()


def test_aggregate_metrics_port_in_use_is_a_one_line_error(redis_url: str, redis: redis_lib.Redis) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = ldptel("aggregate", "--once", "--metrics-port", str(port), redis_url=redis_url)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(f"ldptel: error: --metrics-port {port}: cannot listen on")
