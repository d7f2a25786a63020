"""``ldptel seal``: seal the days that can no longer change, build their roll-ups, apply each metric's retention.

What a following ``ldptel aggregate`` does every ``--seal-every`` seconds, once, now (for cron, or after
``aggregate --once``). Safe to run at any time, next to running workers and concurrently with itself: see
:mod:`ldptel.storage.sealed`. Prints one JSON object per metric (what was sealed, built and dropped, and how
long it took).
"""

from __future__ import annotations

import argparse
from typing import TextIO

from ldptel.aggregator.cli.common import EXIT_OK, UserError, connected
from ldptel.aggregator.cli.output import write_json
from ldptel.aggregator.json_api import versioned

NAME = "seal"
EXTRA = "aggregator"
NEEDS = ("redis",)  # top-level modules the command imports beyond the SDK


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="seal finished days into one state each, build roll-ups, apply retention",
                       description="Merge each finished day's shard states into one sealed state (exactly once), sum "
                                   "sealed days into power-of-two roll-ups so any range reads O(log range) states, and "
                                   "drop daily states past each metric's retention_days.")
    p.add_argument("--metric", action="append", metavar="NAME", help="only this metric (repeatable; default: every metric)")
    p.add_argument("--retry-horizon-days", type=int, metavar="N",
                   help="the ingest's LDPTEL_RETRY_HORIZON_DAYS (default: that variable, else its default): "
                        "day D is sealed once D + N + 2 <= today and every shard has folded past it")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ldptel.aggregator.worker.config import WorkerConfig
    from ldptel.aggregator.worker.sealing import seal_pass
    from ldptel.storage import registry

    try:
        horizon = WorkerConfig(**({} if args.retry_horizon_days is None else {"retry_horizon_days": args.retry_horizon_days}))
    except ValueError as exc:
        raise UserError(str(exc)) from None
    with connected(args.redis_url) as r:
        names = args.metric or [record.name for record in registry.list_metrics(r)]
        for name in names:
            registry.get_metric(r, name)  # an unknown metric is a user error before anything is written
        reports = seal_pass(r, names, horizon_days=horizon.retry_horizon_days, owner="ldptel-seal", max_days=None)
    for report in reports:
        write_json(versioned("seal", report.to_dict()), out, indent=None)
    return EXIT_OK
