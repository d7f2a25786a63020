"""``ldptel shuffle``: run the shuffle stage alone, as its own (trusted) process (docs/shuffle.md).

By default every fold worker (``ldptel aggregate``) runs the stage on the shards it leases, so the aggregate
process is the shuffler and reads held uploads. A deployment that trusts the fold less runs its workers with
``--no-shuffle`` and this command as the only process that ever reads held uploads: it passes over every shard
of every metric (or ``--metric``), releases what is due, and sleeps ``--interval`` seconds when nothing was. Run one
(two are safe, each block is released by one atomic script, but they would race for the same uploads).
``--once``: one pass, then it asks Redis for an AOF rewrite after its releases and exits (a JSON line of totals).
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from types import FrameType
from typing import Any, TextIO

from ldptel.aggregator.cli.common import EXIT_OK, UserError, connected, positive_int
from ldptel.aggregator.cli.output import write_json

NAME = "shuffle"
EXTRA = "aggregator"
NEEDS = ("redis",)  # top-level modules the command imports beyond the SDK


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="run the shuffle stage alone (with `aggregate --no-shuffle`)",
                       description="Release held uploads as CSPRNG-shuffled blocks of at least n_min uploads "
                                   "(docs/shuffle.md), as the only process that reads them.")
    p.add_argument("--once", action="store_true", help="one pass over every shard, then exit")
    p.add_argument("--metric", action="append", metavar="NAME", help="only this metric (repeatable)")
    p.add_argument("--n-min", type=positive_int, metavar="N",
                   help="distinct uploads a block must hold (default LDPTEL_SHUFFLE_N_MIN, else 100)")
    p.add_argument("--hold", type=float, metavar="S",
                   help="longest hold before a group is released below n_min (default LDPTEL_SHUFFLE_HOLD_SECONDS, "
                        "else 3600)")
    p.add_argument("--interval", type=float, default=0.5, metavar="S",
                   help="seconds between passes that released nothing (default 0.5)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ldptel.storage import registry
    from ldptel.storage.shuffle import ShuffleConfig, Shuffler

    given: dict[str, Any] = {}
    if args.n_min is not None:
        given["n_min"] = args.n_min
    if args.hold is not None:
        given["hold_seconds"] = args.hold
    try:
        config = ShuffleConfig(**given)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    totals: dict[str, float] = {"blocks": 0, "uploads": 0, "reports": 0, "below_n_min": 0}
    try:
        with connected(args.redis_url) as r:
            specs: dict[tuple[str, int], Any] = {}

            def params_of(metric: str, version: int) -> Any:
                if (metric, version) not in specs:
                    specs[(metric, version)] = registry.spec_for(registry.get_metric(r, metric), version).params
                return specs[(metric, version)]

            stored: dict[str, int | None] = {}  # each metric's shuffle_n_min, as read at the top of each round
            shuffler = Shuffler(r, params_of, config, n_min_of=stored.get)
            while not stop.is_set():
                records = [registry.get_metric(r, n) for n in args.metric] if args.metric else registry.list_metrics(r)
                stored.update((record.name, record.shuffle_n_min) for record in records)
                released = 0
                for record in records:
                    for shard in range(record.shards):
                        done = shuffler.shuffle(record.name, shard)
                        released += done.blocks
                        for name in totals:
                            totals[name] += getattr(done, name)
                if args.once:
                    break
                if not released:
                    stop.wait(args.interval)
            started = time.monotonic()
            shuffler.finish()
            totals["purge_seconds"] = round(time.monotonic() - started, 3)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if args.once:
        write_json(totals, out, indent=None)
    return EXIT_OK
