"""``ldptel status``: per (metric, shard) stream length, lag, checkpoint and lease owner."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from ldptel.aggregator.cli.common import EXIT_OK, connected
from ldptel.aggregator.cli.output import table, write_json
from ldptel.aggregator.json_api import versioned

if TYPE_CHECKING:
    import redis

    from ldptel.storage.registry import MetricRecord

NAME = "status"
EXTRA = "aggregator"
NEEDS = ("redis",)  # top-level modules the command imports beyond the SDK
STATUS_FORMATS = ("table", "json")
STATUS_HEADERS = ("metric", "shard", "length", "lag", "checkpoint", "owner")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="per-shard stream length, checkpoint and lag")
    p.add_argument("--metric", action="append", metavar="NAME", help="only this metric (repeatable)")
    p.add_argument("--format", choices=STATUS_FORMATS, default="table")
    p.set_defaults(func=run)


def shard_status(r: redis.Redis, metrics: Sequence[MetricRecord]) -> list[dict[str, Any]]:
    """Per (metric, shard): stream length (held uploads + released blocks), held uploads, not-yet-folded entries
    (lag), checkpoint, lease owner."""
    from ldptel.aggregator.worker import shard_lag
    from ldptel.storage import keys

    rows: list[dict[str, Any]] = []
    for rec in metrics:
        pipe = r.pipeline(transaction=False)
        for shard in range(rec.shards):
            pipe.xlen(keys.stream(rec.name, shard))
            pipe.xlen(keys.held(rec.name, shard))  # uploads the shuffle stage holds (ldptel.storage.shuffle)
            pipe.get(keys.checkpoint(rec.name, shard))
            pipe.get(keys.lease(rec.name, shard))
            pipe.pttl(keys.lease(rec.name, shard))
        replies = pipe.execute()
        for shard in range(rec.shards):
            length, held, ckpt, owner, ttl = replies[5 * shard : 5 * shard + 5]
            lag = shard_lag(r, rec.name, shard)
            rows.append(
                {
                    "metric": rec.name,
                    "shard": shard,
                    "length": int(length) + int(held),  # held uploads + released blocks
                    "held": int(held),
                    "lag": lag,
                    "checkpoint": ckpt.decode() if ckpt else None,
                    "owner": owner.decode() if owner else None,
                    "lease_ms": int(ttl) if owner else None,
                }
            )
    return rows


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ldptel.storage import registry

    with connected(args.redis_url) as r:
        records = [registry.get_metric(r, name) for name in args.metric] if args.metric else registry.list_metrics(r)
        rows = shard_status(r, records)
    if args.format == "json":
        write_json(versioned("status", {"shards": rows}), out)
        return EXIT_OK
    if not rows:
        out.write("no metrics registered\n")
        return EXIT_OK
    table(
        STATUS_HEADERS,
        [[row["metric"], row["shard"], row["length"], "?" if row["lag"] is None else row["lag"],
          row["checkpoint"] or "-", row["owner"] or "-"] for row in rows],
        out,
    )
    return EXIT_OK
