#!/usr/bin/env python3
"""Fault figures of the shipped deployment, each with a same-run baseline; one JSON line per figure.

    .venv/bin/python tests/bench/bench_faults.py [--slow 64] [--requests 20]

* ``slow_clients``: 4 clients posting real 50-report batches (a new connection each, 5 s timeout) while
  ``--slow`` connections trickle headers or a body, against nginx with deploy/nginx.conf in front of gunicorn
  with deploy/gunicorn.conf.py, and against the same gunicorn bare (the baseline): failed requests, p50, max.
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow", type=int, default=64, help="slow connections held open (default 64)")
    parser.add_argument("--requests", type=int, default=20, help="legitimate requests per client (default 20)")
    args = parser.parse_args(argv)
    bench_slow_clients(args.slow, args.requests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
