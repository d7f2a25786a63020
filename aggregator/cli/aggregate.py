"""``ldptel aggregate``: run a fold worker (:class:`~ldptel.aggregator.worker.Worker`) until stopped or drained.

Its tuning options map one to one onto :class:`~ldptel.aggregator.worker.WorkerConfig` fields, whose defaults
are the only ones: an option not given is not passed, and ``--help`` shows the dataclass's defaults. Logs are
JSON lines on stderr; on a terminal a progress line is redrawn in place instead. SIGTERM and SIGINT stop the
worker after its current commit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from ldptel.aggregator.cli.common import EXIT_OK, SOCKET_TIMEOUT, UserError, connected, positive_int
from ldptel.aggregator.cli.output import write_json
from ldptel.aggregator.json_api import versioned

if TYPE_CHECKING:
    from ldptel.aggregator.worker import Worker, WorkerConfig, WorkerStats
    from ldptel.storage.shuffle import ShuffleConfig

NAME = "aggregate"
EXTRA = "aggregator"
NEEDS = ("redis", "prometheus_client")  # top-level modules the command imports beyond the SDK
LOG_LEVELS = ("debug", "info", "warning", "error")
PROGRESS_WIDTH = 100  # the progress line is padded to this many columns so a shorter one overwrites it

# WorkerConfig field -> (option, type, metavar, help); the default comes from WorkerConfig itself
TUNING: dict[str, tuple[str, Callable[[str], object], str, str]] = {
    "batch": ("--batch", positive_int, "N", "entries per read"),
    "checkpoint_every": ("--checkpoint-every", positive_int, "N", "commit a shard after N entries"),
    "checkpoint_seconds": ("--checkpoint-seconds", float, "T", "... or after T seconds"),
    "lease_ttl": ("--lease-ttl", float, "S", "seconds a shard lease lives without renewal"),
    "retention_seconds": ("--retention", float, "S", "trim folded entries older than S seconds; 0 trims at once"),
    "block_seconds": ("--block", float, "S", "longest wait for new entries"),
    "rescan_seconds": ("--rescan", float, "S", "look for new shards and rebalance every S seconds"),
    "seal_seconds": ("--seal-every", float, "S", "seal the days that can no longer change every S seconds (inf: never)"),
    "retry_horizon_days": ("--retry-horizon-days", int, "N",
                           "the ingest's LDPTEL_RETRY_HORIZON_DAYS: day D is sealed once D + N + 2 <= today"),
    "worker_id": ("--worker-id", str, "ID", "name of this worker in leases (default host:pid:random)"),
}


def worker_defaults() -> dict[str, object]:
    """WorkerConfig's field defaults (empty when the worker cannot be imported, e.g. without redis-py)."""
    try:
        from ldptel.aggregator.worker import WorkerConfig
    except ModuleNotFoundError:
        return {}
    return {f.name: f.default for f in dataclasses.fields(WorkerConfig) if f.default is not dataclasses.MISSING}


class _WorkerDefaultsHelp(argparse.HelpFormatter):
    """Appends "(default X)" to each tuning option's help, read from WorkerConfig only when help is printed."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        default = worker_defaults().get(action.dest) if action.dest in TUNING else None
        if text is None or default is None:
            return text
        return f"{text} (default {default:g})" if isinstance(default, (int, float)) else f"{text} (default {default})"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="fold stream shards into per-day sketches",
                       description="Run a fold worker: lease shards, fold their streams, commit exactly once.",
                       formatter_class=_WorkerDefaultsHelp)
    p.add_argument("--once", action="store_true",
                   help="drain what is there and exit (default: follow); held uploads are released too, a group "
                        "short of --shuffle-n-min as a block marked below it (no central ε for its day)")
    p.add_argument("--metric", action="append", metavar="NAME", help="fold only this metric (repeatable)")
    p.add_argument("--seal", action="store_true",
                   help="with --once: after draining, seal every day that can no longer change (as ldptel seal)")
    for field, (option, kind, metavar, text) in TUNING.items():
        p.add_argument(option, dest=field, type=kind, metavar=metavar, help=text)
    shuffle = p.add_argument_group("shuffle stage", "release held uploads as shuffled blocks before the fold "
                                   "(docs/shuffle.md); defaults from LDPTEL_SHUFFLE_N_MIN / _HOLD_SECONDS / "
                                   "_PURGE_SECONDS, else 100 uploads, 3600 s, 3600 s")
    shuffle.add_argument("--shuffle-n-min", type=positive_int, metavar="N",
                         help="distinct uploads a block must hold (released below it only at the hold bound)")
    shuffle.add_argument("--shuffle-n-min-for", action="append", metavar="METRIC=N",
                         help="n_min of one metric (repeatable)")
    shuffle.add_argument("--shuffle-hold", type=float, metavar="S",
                         help="longest time an upload is held before its group is released below n_min")
    shuffle.add_argument("--shuffle-purge", type=float, metavar="S",
                         help="least time between two AOF rewrites this worker asks for after releases")
    shuffle.add_argument("--no-shuffle", action="store_true",
                         help="run no shuffle stage here: this worker never reads held uploads (a separate "
                              "`ldptel shuffle` process releases them)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress line (default: when stderr is a terminal)")
    p.add_argument("--log-level", choices=LOG_LEVELS, help="structured log level")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve the worker's Prometheus metrics (folded reports, commits, errors, lag per held "
                        "shard) on http://HOST:PORT/metrics (default: off; 0 picks a free port, logged)")
    p.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                   help="address of --metrics-port (default 127.0.0.1; 0.0.0.0 in a container)")
    p.set_defaults(func=run)


class _Progress:
    """One status line on a terminal, rewritten in place."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.last_reports = 0
        self.last_elapsed = 0.0

    def __call__(self, worker: Worker) -> None:
        stats = worker.stats(with_lag=True)
        dt = max(stats.elapsed - self.last_elapsed, 1e-9)
        rate = (stats.reports - self.last_reports) / dt
        self.last_reports, self.last_elapsed = stats.reports, stats.elapsed
        line = (
            f"\rfolded {stats.reports:,} reports in {stats.entries:,} entries ({rate:,.0f} reports/s) · "
            f"{len(stats.shards)} shards · lag {stats.lag:,} entries · dead {stats.dead}"
        )
        self.out.write(line.ljust(PROGRESS_WIDTH))
        self.out.flush()


class _JsonFormatter(logging.Formatter):
    """One JSON object per log record: day (UTC), level, msg and the record's extra fields.

    No time finer than the day (issue 12): commit and dead-letter lines are tied to batches."""

    _SKIP = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        day = time.strftime("%Y-%m-%d", time.gmtime(record.created))
        out: dict[str, Any] = {"day": day, "level": record.levelname.lower(), "msg": record.getMessage()}
        out.update({k: v for k, v in record.__dict__.items() if k not in self._SKIP})
        return json.dumps(out, default=str)


def _setup_logging(level: str, stream: TextIO) -> None:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_JsonFormatter())
    logger = logging.getLogger("ldptel.aggregator")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False


def _serve_metrics(worker: Worker, host: str, port: int) -> None:
    from ldptel.aggregator.worker.prometheus import serve_worker_metrics

    if not 0 <= port <= 65535:
        raise UserError(f"--metrics-port {port}: a TCP port is 0 (any free one) to 65535")
    try:
        bound = serve_worker_metrics(worker, host=host, port=port)
    except OSError as exc:
        raise UserError(f"--metrics-port {port}: cannot listen on {host}:{port}: {exc.strerror}") from None
    logging.getLogger("ldptel.aggregator").info(
        "serving Prometheus metrics", extra={"event": "metrics", "url": f"http://{host}:{bound}/metrics"})


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ldptel.aggregator.worker import WorkerConfig

    tty = err.isatty() if args.progress is None else args.progress
    _setup_logging(args.log_level or ("warning" if tty else "info"), err)
    given = {field: getattr(args, field) for field in TUNING if getattr(args, field) not in (None, "")}
    try:
        if args.seal and not args.once:
            raise UserError("--seal is for --once (a following worker seals every --seal-every seconds)")
        config = WorkerConfig(metrics=tuple(args.metric or ()), once=args.once, seal_after_once=args.seal,
                              shuffle=_shuffle_config(args), **given)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    # SIGTERM/SIGINT stop the worker cleanly from the start: one that arrives while it still connects (a
    # supervisor stopping it right after starting it) makes it stop before its first step, exit status 0.
    stopping: list[Worker] = []
    requested = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        requested.set()
        for running in stopping:
            running.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        stats = _fold(args, config, err, tty=tty, stopping=stopping, requested=requested)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if tty:
        err.write("\n")
    if args.once:
        write_json(versioned("aggregate", stats.to_dict()), out, indent=None)
        if stats.unclaimed:  # drain and exit promised everything: say what was not folded, and why
            raise UserError(
                f"{len(stats.unclaimed)} shard(s) not folded ({', '.join(stats.unclaimed)}): other workers still "
                f"held their leases after waiting for them to expire (a live worker folds them; else retry)")
    return EXIT_OK


def _shuffle_config(args: argparse.Namespace) -> ShuffleConfig | None:
    """The shuffle stage's settings from the options (None: --no-shuffle); ValueError for a bad one."""
    from ldptel.storage.shuffle import ShuffleConfig

    if args.no_shuffle:
        return None
    given: dict[str, Any] = {}
    if args.shuffle_n_min is not None:
        given["n_min"] = args.shuffle_n_min
    if args.shuffle_hold is not None:
        given["hold_seconds"] = args.shuffle_hold
    if args.shuffle_purge is not None:
        given["purge_seconds"] = args.shuffle_purge
    per_metric = []
    for item in args.shuffle_n_min_for or ():
        name, _, count = item.partition("=")
        if not name or not count.isdigit():
            raise ValueError(f"--shuffle-n-min-for takes METRIC=N, got {item!r}")
        per_metric.append((name, int(count)))
    return ShuffleConfig(n_min_by_metric=tuple(per_metric), **given)


def _fold(args: argparse.Namespace, config: WorkerConfig, err: TextIO, *, tty: bool, stopping: list[Worker],
          requested: threading.Event) -> WorkerStats:
    """Connect, check the metrics, run the worker (stopped at once if a signal came while connecting)."""
    import redis

    from ldptel.aggregator.worker import Worker
    from ldptel.storage import registry
    from ldptel.storage.connection import refused_write

    with connected(args.redis_url, socket_timeout=max(SOCKET_TIMEOUT, config.block_seconds + 10)) as r:
        worker = Worker(r, config)
        stopping.append(worker)
        if requested.is_set():
            worker.stop()
        for name in config.metrics:
            registry.get_metric(r, name)  # unknown metric: a user error before any lease is taken
        if args.metrics_port is not None:
            _serve_metrics(worker, args.metrics_host, args.metrics_port)
        try:
            return worker.run(on_progress=_Progress(err) if tty else None)
        except redis.ResponseError as exc:
            reason = refused_write(exc)
            if reason is None:
                raise
            raise UserError(f"Redis refuses writes, nothing more can be folded: {reason}") from None
