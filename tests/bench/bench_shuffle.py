#!/usr/bin/env python3
"""What the shuffle stage (docs/shuffle.md) costs: fold reports/s and ingest requests/s with it against without it,
in one run, rounds alternating so drifts of this shared host hit both alike.

    .venv/bin/python tests/bench/bench_shuffle.py [--rounds 3] [--uploads 400] [--per 100] [--duration 3]

Private Redis with deploy/redis.conf (AOF, appendfsync always). A cms metric (ε = 4, k = 256, m = 1024), one
shard. Prints one JSON line per figure.

* **fold** (a second Redis, no persistence, so AOF rewrites the stage asks for do not enter the figure;
  ``stage: "without"``): ``--uploads`` uploads of ``--per`` reports stored where the fold reads, one
  entry per upload (the layout before the stage), folded by a ``--once`` worker with no stage. ``"with"``: the same
  uploads in the held stream, released by the worker's stage (n_min 100, blocks of any size) and folded. Reports/s
  of the whole drain; the stage alone (``"shuffle_only"``) is timed too.
* **ingest**: the real ingest (gunicorn -w 2, deploy/gunicorn.conf.py) under load from ``tests/bench/bench_ingest.py``'s
  generator (batches of ``--per`` reports) while a follow worker runs beside it on the same 2 cores: ``"with"`` the
  ingest appends to the held stream and the worker shuffles and folds; ``"without"`` is the pipeline before the
  stage: an ingest whose held stream is the fold's stream (a two-line wrapper app, bench only) and a worker with
  ``--no-shuffle`` folding it. The ingest code is the same (the stage changed only the stream it appends to): the
  difference is the CPU the stage takes from ingest on this shared 2-core host.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ldptel.aggregator.worker import Worker, WorkerConfig  # noqa: E402
from ldptel.client import CmsParams, MetricSpec, encode_batch, privatize_batch  # noqa: E402
from ldptel.storage import keys, registry  # noqa: E402
from ldptel.storage.append import utc_day  # noqa: E402
from ldptel.storage.embedded import EmbeddedRedis  # noqa: E402
from ldptel.storage.shuffle import ShuffleConfig, Shuffler  # noqa: E402
from tests.bench.bench_ingest import ADMIN_TOKEN, APP_TOKEN, run_load, start_gunicorn, stop  # noqa: E402

SPEC = MetricSpec(name="bench.shuffle", params=CmsParams(epsilon=4.0, k=256, m=1024), reports_per_day=1)
STAGE = ShuffleConfig(n_min=100, max_block_uploads=0, hold_seconds=3600, purge_seconds=3600)


def emit(**fields: object) -> None:
    print(json.dumps({"bench": "shuffle", **fields}), flush=True)


def _blobs(count: int, per: int) -> list[bytes]:
    rng = np.random.default_rng(28)
    distinct = min(count, 50)
    out = []
    for _ in range(distinct):
        batch = privatize_batch([f"/p/{v}" for v in rng.integers(0, 500, per)], SPEC.params, rng=rng)
        out.append(encode_batch(metric=SPEC.name, version=1, batch_id=os.urandom(16), batch=batch, params=SPEC.params))
    return out


def _reset(r) -> None:  # type: ignore[no-untyped-def]
    for key in r.scan_iter(match=f"ldp:v1:{{{SPEC.name}:*"):
        r.delete(key)


def _fill(r, key: str, blobs: list[bytes], count: int, per: int) -> None:  # type: ignore[no-untyped-def]
    day = utc_day()
    pipe = r.pipeline(transaction=False)
    for i in range(count):
        blob = bytearray(blobs[i % len(blobs)])
        blob[16:32] = os.urandom(16)  # a distinct batch id per upload
        pipe.xadd(key, {"d": day, "v": 1, "n": per, "b": bytes(blob)}, id=f"{int(time.time()) // 86400 * 86_400_000}-*")
        if i % 50 == 49:
            pipe.execute()
    pipe.execute()


def fold_round(r, blobs: list[bytes], count: int, per: int) -> None:  # type: ignore[no-untyped-def]
    reports = count * per
    _reset(r)
    _fill(r, keys.stream(SPEC.name, 0), blobs, count, per)
    t0 = time.perf_counter()
    stats = Worker(r, WorkerConfig(once=True, shuffle=None, retention_seconds=0)).run()
    without = time.perf_counter() - t0
    assert stats.reports == reports, stats
    _reset(r)
    _fill(r, keys.held(SPEC.name, 0), blobs, count, per)
    t0 = time.perf_counter()
    stats = Worker(r, WorkerConfig(once=True, shuffle=STAGE, retention_seconds=0)).run()
    with_stage = time.perf_counter() - t0
    assert stats.reports == reports and r.xlen(keys.held(SPEC.name, 0)) == 0, stats
    _reset(r)
    _fill(r, keys.held(SPEC.name, 0), blobs, count, per)
    shuffler = Shuffler(r, lambda m, v: SPEC.params, STAGE)
    t0 = time.perf_counter()
    while shuffler.shuffle(SPEC.name, 0).blocks:
        pass
    alone = time.perf_counter() - t0
    common = {"figure": "fold_reports_per_s", "reports": reports, "uploads": count, "per_upload": per}
    emit(stage="without", value=round(reports / without), seconds=round(without, 3), **common)
    emit(stage="with", value=round(reports / with_stage), seconds=round(with_stage, 3), **common)
    emit(stage="shuffle_only", value=round(reports / alone), seconds=round(alone, 3), **common)
    emit(figure="fold_ratio_with_over_without", value=round(without / with_stage, 3), uploads=count, per_upload=per)


_NO_STAGE_APP = """# the ingest as it was before the stage: it appends to the stream the fold reads (bench only)
from ldptel.storage import keys
keys.held = keys.stream
from ldptel.server import create_app
app = create_app()
"""


def ingest_round(server: EmbeddedRedis, ports: dict[str, int], body: bytes, args: argparse.Namespace,
                 tmp: Path) -> None:
    rates = {}
    for stage in ("without", "with"):
        log = (tmp / f"worker-{stage}.log").open("wb")
        cmd = [sys.executable, "-m", "ldptel.aggregator.cli", "aggregate", "--retention", "0", "--no-progress",
               "--log-level", "warning", "--shuffle-n-min", "100", "--shuffle-hold", "5", "--shuffle-purge", "3600"]
        if stage == "without":
            cmd.append("--no-shuffle")  # it folds what the old-style ingest appended straight to its stream
        env = {**os.environ, "LDPTEL_REDIS_URL": server.url, "LDPTEL_SHUFFLE_MAX_BLOCK_UPLOADS": "0"}
        worker = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            time.sleep(1.0)
            result = run_load(ports[stage], body, procs=args.procs, conns=args.conns, warmup=args.warmup,
                              duration=args.duration)
        finally:
            stop(worker)
            log.close()
        bad = {k: v for k, v in result["statuses"].items() if k != 202}
        assert not bad, bad
        rates[stage] = result["rps"]
        emit(figure="ingest_requests_per_s", stage=stage, value=round(result["rps"], 1),
             p50_ms=round(result["p50_ms"], 2), p99_ms=round(result["p99_ms"], 2), per_upload=args.per)
        r = server.client()
        _reset(r)
        registry.create_metric(r, SPEC, shards=1)
        r.close()
    emit(figure="ingest_ratio_with_over_without", value=round(rates["with"] / rates["without"], 3),
         per_upload=args.per)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--uploads", type=int, default=400, help="uploads folded per fold slice")
    parser.add_argument("--per", type=int, default=100, help="reports per upload")
    parser.add_argument("--duration", type=float, default=3.0, help="measured seconds per ingest slice")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--conns", type=int, default=4)
    args = parser.parse_args(argv)
    blobs = _blobs(args.uploads, args.per)
    with tempfile.TemporaryDirectory(prefix="ldptel-bench-shuffle-") as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "nostage_app.py").write_text(_NO_STAGE_APP)
        with EmbeddedRedis(appendonly=False, data_dir=tmp / "fold-redis") as fold_redis, \
                EmbeddedRedis(appendonly=True, data_dir=tmp / "redis", config_file=ROOT / "deploy" / "redis.conf") as server:
            folds = fold_redis.client()
            registry.create_metric(folds, SPEC, shards=1)
            r = server.client()
            registry.create_metric(r, SPEC, shards=1)
            env = {k: v for k, v in os.environ.items() if not k.startswith("LDPTEL_")}
            env.update(LDPTEL_REDIS_URL=server.url, LDPTEL_APP_TOKENS=APP_TOKEN, LDPTEL_ADMIN_TOKEN=ADMIN_TOKEN,
                       LDPTEL_RATE_LIMIT="off", LDPTEL_ACCESS_LOG="")
            from tests.bench.bench_ingest import _free_port

            ports = {"with": _free_port(), "without": _free_port()}
            servers = [start_gunicorn("ldptel.server:create_app()", ports["with"], env, ROOT, tmp / "gunicorn.log"),
                       start_gunicorn("nostage_app:app", ports["without"], env, tmp, tmp / "gunicorn-nostage.log")]
            try:
                for _ in range(args.rounds):
                    fold_round(folds, blobs, args.uploads, args.per)
                    registry.create_metric(folds, SPEC, shards=1)
                    ingest_round(server, ports, blobs[0], args, tmp)
            finally:
                for proc in servers:
                    stop(proc)
                r.close()
                folds.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
