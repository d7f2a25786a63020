#!/usr/bin/env python3
"""What durability costs at the Redis level: appends/s and latency of one stream append per batch under each
way of making an acknowledged append survive kill -9, in the same run.

    .venv/bin/python tests/bench/bench_durability.py [--duration 3] [--threads 8] [--sizes 100,1000] [--rounds 2]

Each mode is a private Redis (AOF on, data dir on this machine's disk) and, for the replica modes, a replica
of it (``--replicaof``); ``--threads`` threads each append batches (XADD of a cms batch of 100 or 1,000
reports, m = 1024: ~13 KB or ~128 KB) on their own connection, one in flight each, for ``--duration`` seconds:

* ``everysec``: ``appendfsync everysec``, no wait (the old default; kill -9 can lose acknowledged appends);
* ``always``: ``appendfsync always``: Redis writes and fsyncs the AOF once per event-loop pass before it sends
  the replies of that pass, so every append acknowledged is on disk, and all appends served in one pass share
  one fsync (a group commit inside Redis);
* ``everysec+waitaof``: everysec, then ``WAITAOF 1 0`` on the same connection (the group commit of the
  Redis 7.2 command: the append is acknowledged once an fsync covered it);
* ``always+wait1`` / ``always+waitaof11`` / ``everysec+waitaof11``: with one replica, ``WAIT 1`` (a replica
  received it: ``?wait_replicas=1``) or ``WAITAOF 1 1`` (the local AOF and a replica's AOF fsynced it).

Every mode is run ``--rounds`` times, in rotating order. One JSON line per mode and size: appends/s (pooled),
p50/p99 latency, and the ratio to ``everysec`` of the same size.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MODES = ("everysec", "always", "everysec+waitaof", "always+wait1", "always+waitaof11", "everysec+waitaof11")


def _batch(size: int) -> bytes:
    from ldptel.client import CmsParams, privatize_batch
    from ldptel.client.protocol.wire import encode_batch

    params = CmsParams(epsilon=4.0, k=16, m=1024)
    batch = privatize_batch([f"v{i % 50}" for i in range(size)], params, rng=np.random.default_rng(size))
    return encode_batch(metric="bench", version=1, batch_id=os.urandom(16), batch=batch, params=params)


def run_mode(mode: str, body: bytes, *, threads: int, duration: float, tmp: Path) -> dict[str, object]:
    import redis

    from ldptel.storage.embedded import EmbeddedRedis

    fsync = "always" if mode.startswith("always") else "everysec"
    replica = mode.endswith(("wait1", "waitaof11"))
    primary = EmbeddedRedis(data_dir=tmp / f"{mode}-p", extra_args=("--appendfsync", fsync)).start()
    second = None
    try:
        if replica:
            second = EmbeddedRedis(data_dir=tmp / f"{mode}-r", extra_args=(
                "--appendfsync", fsync, "--replicaof", "127.0.0.1", str(primary.port))).start()
            client = second.client()
            deadline = time.monotonic() + 30
            while client.info("replication").get("master_link_status") != "up":
                assert time.monotonic() < deadline, "the replica never synced"
                time.sleep(0.05)
            client.close()
        wait: tuple[object, ...] | None = {
            "everysec+waitaof": ("WAITAOF", 1, 0, 2000), "always+wait1": ("WAIT", 1, 2000),
            "always+waitaof11": ("WAITAOF", 1, 1, 2000), "everysec+waitaof11": ("WAITAOF", 1, 1, 2000),
        }.get(mode)
        latencies: list[list[float]] = [[] for _ in range(threads)]
        stop = threading.Event()
        start_at = time.monotonic() + 0.5  # every thread connected first

        def load(i: int) -> None:
            r = redis.Redis(host="127.0.0.1", port=primary.port)
            r.ping()
            key = f"{{bench:{i % 4}}}:reports"
            while time.monotonic() < start_at:
                time.sleep(0.001)
            while not stop.is_set():
                t0 = time.perf_counter()
                pipe = r.pipeline(transaction=False)
                pipe.xadd(key, {"b": body})
                if wait is not None:
                    pipe.execute_command(*wait)
                out = pipe.execute()
                if wait is not None and wait[0] == "WAITAOF":
                    assert out[1][0] >= 1 and out[1][1] >= wait[2], out  # local fsynced, replicas fsynced
                latencies[i].append(time.perf_counter() - t0)
                if len(latencies[i]) % 200 == 0:
                    r.xtrim(key, maxlen=50, approximate=True)
            r.close()

        workers = [threading.Thread(target=load, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        time.sleep(max(0.0, start_at - time.monotonic()) + duration)
        stop.set()
        for w in workers:
            w.join(timeout=30)
        flat = sorted(x for lat in latencies for x in lat)
        return {"appends": len(flat), "seconds": duration,
                "p50_ms": round(1000 * flat[len(flat) // 2], 2) if flat else None,
                "p99_ms": round(1000 * flat[int(len(flat) * 0.99)], 2) if flat else None}
    finally:
        if second is not None:
            second.stop()
        primary.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    modes = args.modes.split(",")
    with tempfile.TemporaryDirectory(prefix="ldptel-bench-durability-", dir=str(Path.home())) as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            body = _batch(size)
            results: dict[str, list[dict[str, object]]] = {m: [] for m in modes}
            for rnd in range(args.rounds):
                order = modes[rnd % len(modes):] + modes[: rnd % len(modes)]
                for mode in order:
                    results[mode].append(run_mode(mode, body, threads=args.threads, duration=args.duration,
                                                  tmp=Path(tmp) / f"{size}-{rnd}"))
            rates = {m: sum(int(str(x["appends"])) for x in rs) / (args.duration * len(rs)) for m, rs in results.items()}
            for mode, rs in results.items():
                line = {"bench": "durability", "mode": mode, "reports_per_batch": size, "body_bytes": len(body),
                        "threads": args.threads, "appends_per_s": round(rates[mode], 1),
                        "p50_ms": statistics.median(float(str(x["p50_ms"])) for x in rs),
                        "p99_ms": max(float(str(x["p99_ms"])) for x in rs),
                        "per_round": [round(int(str(x["appends"])) / args.duration, 1) for x in rs]}
                if "everysec" in rates and rates["everysec"]:
                    line["ratio_to_everysec"] = round(rates[mode] / rates["everysec"], 3)
                print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
