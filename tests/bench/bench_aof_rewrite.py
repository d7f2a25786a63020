#!/usr/bin/env python3
"""What an AOF rewrite of report streams costs Redis, with and without LZF compression of its RDB preamble.

    .venv/bin/python tests/bench/bench_aof_rewrite.py [--batches 400] [--reps 2]

Fills one stream of a private Redis (AOF on) with ``--batches`` real binary batches of 1,000 privatized cms
reports (m = 1024, ε = 4, each ~130 KB, all different), then runs BGREWRITEAOF with ``rdbcompression yes`` and
``no`` in turn and prints, per setting, the CPU seconds Redis and its rewrite child spent (from /proc, Linux)
and the size of the new base file; then the ratio of the two CPU figures. deploy/redis.conf and the embedded
server turn compression off on the strength of this figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _cpu_s(pid: int) -> float:
    """CPU seconds of a process and its reaped children (the rewrite child is reaped by Redis)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def emit(**fields: object) -> None:
    print(json.dumps({"bench": "aof_rewrite", **fields}), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=400, help="stream entries of 1,000 reports (~130 KB each)")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args(argv)
    if not (1 <= args.batches <= 4000 and 1 <= args.reps <= 5):
        parser.error("bounded: batches in [1, 4000], reps in [1, 5]")
    if not Path("/proc/self/stat").exists():
        print("needs Linux /proc", file=sys.stderr)
        return 2

    from ldptel.client import CmsParams, MetricSpec, privatize_batch
    from ldptel.client.protocol.wire import encode_batch
    from ldptel.storage.embedded import EmbeddedRedis

    spec = MetricSpec(name="bench.cms", params=CmsParams(epsilon=4.0, k=256, m=1024))
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory(prefix="ldptel-bench-") as tmp, EmbeddedRedis(data_dir=Path(tmp) / "redis") as server:
        r = server.client()
        stored = 0
        for i in range(args.batches):
            batch = privatize_batch([f"v{(i * 1000 + j) % 97}" for j in range(1000)], spec.params, rng=rng)
            body = encode_batch(metric=spec.name, version=1, batch_id=rng.bytes(16), batch=batch, params=spec.params)
            r.xadd("bench:reports", {"b": body})
            stored += len(body)
        cpu: dict[str, list[float]] = {"yes": [], "no": []}
        size: dict[str, int] = {}
        for _ in range(args.reps):
            for setting in ("yes", "no"):
                r.config_set("rdbcompression", setting)
                before = _cpu_s(server.pid or 0)
                r.bgrewriteaof()
                deadline = time.monotonic() + 120
                while True:
                    info = r.info("persistence")
                    if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
                        break
                    if time.monotonic() > deadline:
                        raise SystemExit("the AOF rewrite did not finish within 120 s")
                    time.sleep(0.02)
                time.sleep(0.2)  # let Redis reap the child, so its CPU is in the parent's children times
                cpu[setting].append(_cpu_s(server.pid or 0) - before)
                # the newest base file (the previous one is deleted in the background)
                base = max(Path(server.data_dir).rglob("*.base.*"), key=lambda p: p.stat().st_mtime_ns)
                size[setting] = base.stat().st_size
        r.close()
    for setting in ("yes", "no"):
        emit(figure="rewrite_cpu_s", rdbcompression=setting, value=round(statistics.median(cpu[setting]), 3),
             runs=[round(x, 3) for x in cpu[setting]], base_file_mb=round(size[setting] / 1e6, 1),
             stream_payload_mb=round(stored / 1e6, 1), batches=args.batches)
    emit(figure="rewrite_cpu_ratio_lzf_vs_none", value=round(statistics.median(cpu["yes"]) / max(1e-9, statistics.median(cpu["no"])), 2),
         base_file_ratio=round(size["yes"] / max(1, size["no"]), 3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
