#!/usr/bin/env python3
"""Ingest and fold on a 3-primary Redis Cluster beside one Redis, in the same run, and what one node costs.

    .venv/bin/python tests/bench/bench_cluster.py [--rounds 3] [--duration 3] [--sizes 100,1000] [--fold-reports 1000000]

Starts one Redis and a local 3-primary cluster (:mod:`tests.cluster.local`; every server AOF on, everysec,
all on this machine's cores), creates the same cms metric (k = 256, m = 1024, 6 shards) on both, and then:

* **ingest**: gunicorn ``-w 2`` (``deploy/gunicorn.conf.py``) on each, loaded in turn (order rotating per
  round) by the load generator of ``bench_ingest.py``; per target: requests/s and reports/s, and over the
  measured slices the commands/s each Redis node executed (``total_commands_processed``) and CPU per report in
  the gunicorn workers and in all Redis nodes together (from ``/proc``);
* **fold**: ``--fold-reports`` reports appended (1,000-report entries) to each, then one fold worker
  (``Worker(once)``, cms k = 256) drains them: reports/s and Redis CPU per folded report.

From the per-report Redis CPU it projects what one more primary adds: ``1 / (Redis CPU s per report)``
reports/s per core of Redis, for ingest and for the fold (the HTTP tier and the fold workers scale by adding
processes; their per-report CPU is printed too). On a 2-core machine the cluster cannot be faster than one
Redis (load generator, gunicorn and every node share the cores), so throughput is printed for the same-run
comparison and the per-node costs for the projection. One JSON line per figure; servers stopped by pid.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tests.cluster.local

import bench_ingest as bi  # noqa: E402  (same directory)

METRIC = "bench.cms"
SHARDS = 6


def emit(**fields: object) -> None:
    print(json.dumps({"bench": "cluster", **fields}), flush=True)


class Nodes:
    """The Redis server processes behind one target: CPU seconds and commands executed, sampled together."""

    def __init__(self, servers: list[Any]) -> None:
        self.servers = servers
        self.clients = [s.client() for s in servers]

    def sample(self) -> dict[str, Any]:
        return {
            "cpu": sum(bi._proc_cpu(s.pid)[0] for s in self.servers),
            "commands": [int(c.info("stats")["total_commands_processed"]) for c in self.clients],
            "t": time.perf_counter(),
        }

    def close(self) -> None:
        for c in self.clients:
            c.close()


def _window(nodes: Nodes, gunicorn_pid: int | None, warmup: float, duration: float, out: dict[str, Any]) -> None:
    time.sleep(warmup)
    pids = [] if gunicorn_pid is None else [gunicorn_pid, *bi._children(gunicorn_pid)]
    a, ga = nodes.sample(), sum(bi._proc_cpu(p)[0] for p in pids)
    time.sleep(duration)
    b, gb = nodes.sample(), sum(bi._proc_cpu(p)[0] for p in pids)
    out.update(redis_cpu=b["cpu"] - a["cpu"], gunicorn_cpu=gb - ga, t=b["t"] - a["t"],
               commands=[y - x for x, y in zip(a["commands"], b["commands"], strict=True)])


def _trim(r: Any, stop: threading.Event) -> None:
    from ldptel.storage import keys

    while not stop.wait(0.5):
        for shard in range(SHARDS):
            r.xtrim(keys.stream(METRIC, shard), maxlen=1000, approximate=True)


def _fill(r: Any, spec: Any, reports: int, rng: np.random.Generator) -> int:
    from ldptel.client import encode_batch, privatize_batch
    from ldptel.storage.append import BatchAppender, utc_day

    batch = privatize_batch([f"v{i % 97}" for i in range(1000)], spec.params, rng=rng)
    appender = BatchAppender(r)
    entries = reports // 1000
    for _ in range(entries):
        bid = rng.bytes(16)
        data = encode_batch(metric=spec.name, version=1, batch_id=bid, batch=batch, params=spec.params)
        appender.append(metric=spec.name, shards=SHARDS, batch_id=bid, version=1, n=1000, data=data, day=utc_day(),
                        dedupe_days=1)
    appender.close()
    return entries * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--conns", type=int, default=4)
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--fold-reports", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    if not (0 < args.duration <= 60 and 1 <= args.rounds <= 10 and 1000 <= args.fold_reports <= 20_000_000):
        parser.error("bounded: duration ≤ 60 s, rounds ≤ 10, 1,000 ≤ fold-reports ≤ 20,000,000")

    from ldptel.aggregator.worker import Worker, WorkerConfig
    from ldptel.client import CmsParams, MetricSpec, encode_batch, privatize_batch
    from ldptel.storage.client import connect
    from ldptel.storage.embedded import EmbeddedRedis
    from ldptel.storage.registry import create_metric
    from tests.cluster.local import LocalCluster

    spec = MetricSpec(name=METRIC, params=CmsParams(epsilon=4.0, k=256, m=1024))
    rng = np.random.default_rng(1)
    bodies = {}
    for size in (int(s) for s in args.sizes.split(",")):
        batch = privatize_batch([f"v{i % 97}" for i in range(size)], spec.params, rng=rng)
        bodies[size] = encode_batch(metric=spec.name, version=1, batch_id=bytes(16), batch=batch, params=spec.params)

    with tempfile.TemporaryDirectory(prefix="ldptel-bench-cluster-") as tmp, \
            EmbeddedRedis(data_dir=Path(tmp) / "redis") as single, LocalCluster(primaries=3) as cluster:
        targets = {"single": (single.url, Nodes([single])), "cluster3": (cluster.url, Nodes(cluster.nodes))}
        clients = {name: connect(url) for name, (url, _) in targets.items()}
        for r in clients.values():
            create_metric(r, spec, shards=SHARDS)
        env = {k: v for k, v in os.environ.items() if not k.startswith("LDPTEL_")}
        env.update(LDPTEL_APP_TOKENS=bi.APP_TOKEN, LDPTEL_ADMIN_TOKEN=bi.ADMIN_TOKEN, LDPTEL_RATE_LIMIT="off",
                   LDPTEL_ACCESS_LOG="", LDPTEL_LOG_LEVEL="warning", LDPTEL_MAX_BODY_BYTES=str(8 << 20))
        stop_trim = threading.Event()
        trimmers = [threading.Thread(target=_trim, args=(r, stop_trim), daemon=True) for r in clients.values()]
        for t in trimmers:
            t.start()
        log = Path(tmp) / "gunicorn.log"
        results: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for size, body in bodies.items():
            servers = {}
            try:
                for name, (url, _) in targets.items():
                    port = bi._free_port()
                    servers[name] = (bi.start_gunicorn("ldptel.server:create_app()", port, {**env, "LDPTEL_REDIS_URL": url},
                                                       Path(tmp), log), port)
                for rnd in range(args.rounds):
                    order = list(targets)[rnd % 2:] + list(targets)[: rnd % 2]
                    for name in order:
                        proc, port = servers[name]
                        window: dict[str, Any] = {}
                        sampler = threading.Thread(target=_window, args=(targets[name][1], proc.pid, args.warmup,
                                                                          args.duration, window))
                        sampler.start()
                        res = bi.run_load(port, body, procs=args.procs, conns=args.conns, warmup=args.warmup,
                                          duration=args.duration)
                        sampler.join()
                        bad = {k: v for k, v in res["statuses"].items() if k != 202}
                        if bad:
                            print(f"warning: {name} batch {size}: non-202 statuses {bad}", file=sys.stderr)
                        results.setdefault((name, size), []).append({**window, "requests": res["requests"]})
            finally:
                for proc, _ in servers.values():
                    bi.stop(proc)
        stop_trim.set()
        for t in trimmers:
            t.join(timeout=10)

        for size in bodies:
            for name in targets:
                runs = results[(name, size)]
                requests = sum(x["requests"] for x in runs)
                seconds = sum(x["t"] for x in runs)
                reports = requests * size
                per_node = [round(sum(x["commands"][i] for x in runs) / seconds) for i in range(len(runs[0]["commands"]))]
                redis_us = 1e6 * sum(x["redis_cpu"] for x in runs) / max(reports, 1)
                gunicorn_us = 1e6 * sum(x["gunicorn_cpu"] for x in runs) / max(reports, 1)
                common = {"target": name, "batch": size, "rounds": args.rounds, "slice_s": args.duration}
                emit(figure="ingest_requests_per_s", value=round(requests / seconds, 1), **common)
                emit(figure="ingest_reports_per_s", value=round(reports / seconds), **common)
                emit(figure="ingest_commands_per_s_per_node", value=per_node, **common)
                emit(figure="ingest_cpu_us_per_report", value={"redis_all_nodes": round(redis_us, 2),
                                                               "gunicorn": round(gunicorn_us, 2)}, **common)
                if redis_us > 0:
                    emit(figure="projected_ingest_reports_per_s_per_added_primary_core", value=round(1e6 / redis_us),
                         note="Redis CPU only: the HTTP tier needs 1/gunicorn-CPU-per-report cores more", **common)

        for name, (_, nodes) in targets.items():
            r = clients[name]
            for shard in range(SHARDS):  # fold from an empty stream: drop what ingest left
                r.delete(f"ldp:v1:{{{METRIC}:{shard}}}:reports", f"ldp:v1:{{{METRIC}:{shard}}}:checkpoint")
            filled = _fill(r, spec, args.fold_reports, rng)
            a = nodes.sample()
            t0 = time.perf_counter()
            stats = Worker(r, WorkerConfig(once=True)).run()
            elapsed = time.perf_counter() - t0
            b = nodes.sample()
            assert stats.reports >= filled, (stats.reports, filled)
            redis_us = 1e6 * (b["cpu"] - a["cpu"]) / stats.reports
            emit(figure="fold_reports_per_s", target=name, value=round(stats.reports / elapsed), reports=stats.reports,
                 workers=1, k=256, m=1024)
            emit(figure="fold_redis_cpu_us_per_report", target=name, value=round(redis_us, 3))
            emit(figure="fold_commands_per_s_per_node", target=name,
                 value=[round((y - x) / elapsed) for x, y in zip(a["commands"], b["commands"], strict=True)])
            if redis_us > 0:
                emit(figure="projected_fold_reports_per_s_per_added_primary_core", target=name, value=round(1e6 / redis_us))
        for r in clients.values():
            r.close()
        for _, nodes in targets.values():
            nodes.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
