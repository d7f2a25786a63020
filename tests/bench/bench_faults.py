#!/usr/bin/env python3
"""Fault figures of the shipped deployment, each with a same-run baseline; one JSON line per figure.

    .venv/bin/python tests/bench/bench_faults.py [--slow 64] [--requests 20] [--rounds 3] [--load-seconds 4]
    .venv/bin/python tests/bench/bench_faults.py --cluster [--rounds 3] [--load-seconds 4]

* ``slow_clients``: 4 clients posting real 50-report batches (a new connection each, 5 s timeout) while
  ``--slow`` connections trickle headers or a body, against nginx with deploy/nginx.conf in front of gunicorn
  with deploy/gunicorn.conf.py, and against the same gunicorn bare (the baseline): failed requests, p50, max.
* one line per fault scenario (tests/faults/harness.py, the long version of tests/faults/test_fault_suite.py):
  ``--rounds`` times every scenario under load from 4 raw HTTP clients and 8 Reporters (100-report batches),
  ``--load-seconds`` before and after each fault, then drain and audit: acknowledged reports and batches (cumulative),
  lost, doubled, recovery seconds, HTTP statuses; then a ``faults_total`` line.
* ``--cluster`` (instead of the above; the long version of tests/cluster/test_cluster_faults.py): the same on a
  local Redis Cluster: ``--rounds`` times the cluster scenarios on 3 primaries + 3 replicas with
  ``?wait_replicas=1`` (``primary_failover``: kill -9 a primary, its replica takes over, the old one rejoins), then
  ``--rounds`` times ``primary_restart`` on 3 primaries without replicas (AOF ``everysec``, then ``always``); a
  ``faults_total`` line for each.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ldptel.storage.embedded import EmbeddedRedis  # noqa: E402
from tests.faults.harness import CLUSTER_RESTART_SCENARIOS, CLUSTER_SCENARIOS, SCENARIOS, FaultRun  # noqa: E402
from tests.faults.slow import create_metric, legit_load, slow_clients  # noqa: E402
from tests.faults.stack import gunicorn, nginx  # noqa: E402
from tests.server.srv_helpers import cms_spec  # noqa: E402


def bench_slow_clients(slow: int, requests: int) -> None:
    spec = cms_spec()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with EmbeddedRedis(data_dir=tmp / "redis") as redis_server, \
                gunicorn(redis_server.url, tmp / "gunicorn.log") as (gport, _), \
                nginx(gport, tmp / "nginx") as (nport, _):
            create_metric(gport, spec)
            figures = {}
            for target, port in (("nginx_front", nport), ("bare_gunicorn", gport)):
                with slow_clients(port, slow):
                    figures[target] = legit_load(port, spec, threads=4, requests=requests, timeout=5.0).summary()
    print(json.dumps({"bench": "faults", "figure": "slow_clients", "slow_connections": slow, **figures}), flush=True)


def bench_fault_scenarios(rounds: int, load_seconds: float, *, scenarios: tuple[str, ...] = SCENARIOS,
                          cluster_replicas: int | None = None, appendfsync: str = "everysec") -> None:
    results = []
    with tempfile.TemporaryDirectory() as tmp_name, \
            FaultRun(Path(tmp_name), raw_clients=4, reporters=8, batch=100, report_interval=0.01,
                     cluster_replicas=cluster_replicas, appendfsync=appendfsync) as run:
        for _ in range(rounds):
            for name in scenarios:
                results.append(run.scenario(name, load_seconds=load_seconds))  # prints its JSON line
    last = results[-1]
    recovery = {name: [r["recovery_s"] for r in results if r["scenario"] == name] for name in scenarios}
    print(json.dumps({"bench": "faults", "figure": "faults_total", "backend": last["backend"],
                      "scenarios": len(results),
                      "acknowledged_reports": last["acknowledged_reports"],
                      "acknowledged_batches": last["acknowledged_batches"],
                      "lost": max(r["lost"] for r in results), "doubled": max(r["doubled"] for r in results),
                      "http_5xx_other_than_503": sum(r["http_5xx_other_than_503"] for r in results),
                      "recovery_s_max": {k: max(v) for k, v in recovery.items()}}), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow", type=int, default=64, help="slow connections held open (default 64)")
    parser.add_argument("--requests", type=int, default=20, help="legitimate requests per client (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="times every fault scenario runs (default 3)")
    parser.add_argument("--load-seconds", type=float, default=4.0,
                        help="seconds of load before and after each fault (default 4)")
    parser.add_argument("--cluster", action="store_true",
                        help="the fault scenarios on a local Redis Cluster instead (no slow_clients figure)")
    args = parser.parse_args(argv)
    if args.cluster:
        bench_fault_scenarios(args.rounds, args.load_seconds, scenarios=CLUSTER_SCENARIOS, cluster_replicas=1)
        for fsync in ("everysec", "always"):  # the shipped policy, and the one the short test uses
            bench_fault_scenarios(args.rounds, args.load_seconds, scenarios=CLUSTER_RESTART_SCENARIOS,
                                  cluster_replicas=0, appendfsync=fsync)
        return 0
    bench_slow_clients(args.slow, args.requests)
    bench_fault_scenarios(args.rounds, args.load_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
