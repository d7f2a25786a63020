"""The ``ldptel`` command line: a thin shell over the library functions.

    ldptel aggregate [--once] [--metric NAME ...]            fold stream shards into sketches
    ldptel estimate METRIC [--from DAY --to DAY] ...         debiased estimates with intervals
    ldptel metrics list|show|create|retire                   the metric registry
    ldptel status                                            per-shard stream length, pending, checkpoint, lag
    ldptel serve [--host H --port P]                         the ingest service (development server)
    ldptel demo ...                                          the end-to-end demo

``--redis-url`` falls back to ``LDPTEL_REDIS_URL``, then ``redis://127.0.0.1:6379/0``. User errors (unknown
metric, empty range, bad file, Redis unreachable, bad arguments) print one line to stderr and exit 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import redis as redis_lib

from ldptel.client.errors import LdpError
from ldptel.client.protocol.specs import MECHANISMS, MetricSpec, params_from_dict

from ldptel.aggregator.postprocess import POSTPROCESS_METHODS

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
ENV_REDIS_URL = "LDPTEL_REDIS_URL"
EXIT_OK = 0
EXIT_USER = 2
PLOT_EXTRA_HINT = "pip install 'ldp-telemetry[plot]'"


class UserError(Exception):
    """An expected failure: printed as one line on stderr, exit status 2."""


# ------------------------------------------------------------------------------------------- helpers
def _connect(url: str | None, *, socket_timeout: float | None = 30.0) -> redis_lib.Redis:
    url = url or os.environ.get(ENV_REDIS_URL) or DEFAULT_REDIS_URL
    try:
        r = redis_lib.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=socket_timeout)
    except ValueError as exc:
        raise UserError(f"bad Redis URL {url!r}: {exc}") from None
    try:
        r.ping()
    except redis_lib.RedisError as exc:
        raise UserError(f"cannot reach Redis at {url}: {exc} (set --redis-url or {ENV_REDIS_URL})") from None
    return r


def _fmt_num(value: float) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if abs(value) >= 1e5 or (abs(value) < 1e-3 and value != 0):
        return f"{value:.4g}"
    return f"{value:.2f}" if abs(value) >= 10 else f"{value:.4f}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]], out: TextIO) -> None:
    cells = [[str(h) for h in headers]] + [[_fmt_num(v) if isinstance(v, float) else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for idx, row in enumerate(cells):
        parts = [cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        out.write("  ".join(parts).rstrip() + "\n")
        if idx == 0:
            out.write("  ".join("-" * w for w in widths) + "\n")


def _read_candidates(path: str) -> list[str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read candidates file {path}: {exc}") from None
    values = [line.strip() for line in text.splitlines()]
    values = [v for v in values if v and not v.startswith("#")]
    if not values:
        raise UserError(f"candidates file {path} has no values (one per line)")
    return values


# ------------------------------------------------------------------------------------------ aggregate
class _Progress:
    """One status line on a terminal, rewritten in place."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.last_reports = 0
        self.last_elapsed = 0.0

    def __call__(self, worker: Any) -> None:
        stats = worker.stats(with_lag=True)
        dt = max(stats.elapsed - self.last_elapsed, 1e-9)
        rate = (stats.reports - self.last_reports) / dt
        self.last_reports, self.last_elapsed = stats.reports, stats.elapsed
        line = (
            f"\rfolded {stats.reports:,} reports in {stats.entries:,} entries ({rate:,.0f} reports/s) · "
            f"{len(stats.shards)} shards · lag {stats.lag:,} entries · dead {stats.dead}"
        )
        self.out.write(line.ljust(100))
        self.out.flush()


class _JsonFormatter(logging.Formatter):
    _SKIP = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": round(record.created, 3), "level": record.levelname.lower(), "msg": record.getMessage()}
        out.update({k: v for k, v in record.__dict__.items() if k not in self._SKIP})
        return json.dumps(out, default=str)


def _setup_logging(level: str, stream: TextIO) -> None:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_JsonFormatter())
    logger = logging.getLogger("ldptel.aggregator")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False


def cmd_aggregate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ldptel.aggregator.worker import Worker, WorkerConfig

    tty = err.isatty() if args.progress is None else args.progress
    _setup_logging(args.log_level or ("warning" if tty else "info"), err)
    try:
        config = WorkerConfig(
            metrics=tuple(args.metric or ()),
            batch=args.batch,
            checkpoint_every=args.checkpoint_every,
            checkpoint_seconds=args.checkpoint_seconds,
            lease_ttl=args.lease_ttl,
            retention_seconds=args.retention,
            block_seconds=args.block,
            rescan_seconds=args.rescan,
            once=args.once,
            **({"worker_id": args.worker_id} if args.worker_id else {}),
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    r = _connect(args.redis_url, socket_timeout=max(30.0, args.block + 10))
    worker = Worker(r, config)
    if args.metric:
        from ldptel.storage import registry

        for name in args.metric:
            registry.get_metric(r, name)  # unknown metric: a user error before any lease is taken

    def on_signal(signum: int, frame: FrameType | None) -> None:
        worker.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        stats = worker.run(on_progress=_Progress(err) if tty else None)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if tty:
        err.write("\n")
    if args.once:
        out.write(json.dumps(stats.to_dict()) + "\n")
    return EXIT_OK


# ------------------------------------------------------------------------------------------- estimate
RESULT_COLUMNS = ("value", "estimate", "stderr", "ci_low", "ci_high", "frequency", "adjusted", "adjusted_frequency")


def write_result(result: Any, fmt: str, out: TextIO) -> None:
    """Print a :class:`~ldptel.aggregator.query.QueryResult` as table, json or csv."""
    if fmt == "json":
        out.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return
    rows = result.rows()
    if fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=RESULT_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()})
        return
    days = result.days
    span = days[0] if len(days) == 1 else f"{days[0]} .. {days[-1]} ({len(days)} days)"
    out.write(
        f"{result.metric} v{result.version} ({result.mechanism}) · {span} · n = {result.n:,} reports · "
        f"{result.confidence:.0%} intervals\n"
    )
    prop = result.proportion
    if prop is not None:
        out.write(
            f"proportion true: {prop.estimate:.4f} ± {prop.stderr:.4f} (stderr), "
            f"interval [{prop.ci_low:.4f}, {prop.ci_high:.4f}]\n"
        )
    headers = ["value", "estimate", "stderr", "ci_low", "ci_high", "frequency"]
    if result.postprocess != "none":
        headers += [result.postprocess, f"{result.postprocess} freq"]
    table_rows = []
    for row in rows:
        cells = [row["value"], row["estimate"], row["stderr"], row["ci_low"], row["ci_high"], row["frequency"]]
        if result.postprocess != "none":
            cells += [row["adjusted"], row["adjusted_frequency"]]
        table_rows.append(cells)
    _table(headers, table_rows, out)


def plot_labels(labels: Sequence[str], *, width: int = 24) -> list[str]:
    """Tick labels a reader can read: labels with symbols (emoji) or characters the font lacks become their
    Unicode names, e.g. '😂' → 'face with tears of joy', instead of boxes, specks and font warnings."""
    import unicodedata

    from matplotlib import font_manager, ft2font

    charmap = ft2font.FT2Font(font_manager.findfont(font_manager.FontProperties())).get_charmap()
    out = []
    for label in labels:
        text = str(label)
        if any(ord(ch) not in charmap or unicodedata.category(ch) == "So" for ch in text):
            names = (unicodedata.name(ch, f"U+{ord(ch):04X}").lower() for ch in text if unicodedata.category(ch) not in ("Mn", "Cf"))
            text = " ".join(n for n in names if not n.startswith("variation selector"))
        out.append(text if len(text) <= width else text[: width - 1] + "…")
    return out


def plot_result(result: Any, path: str, *, max_bars: int = 50) -> None:
    """Bars of the raw estimates with their intervals (and post-processed values as markers)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError(f"--plot needs matplotlib: {PLOT_EXTRA_HINT}") from None
    import numpy as np

    est = result.estimate
    count = min(len(est.labels), max_bars)
    x = np.arange(count)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * count + 2), 4.5))
    err = est.z * est.stderr[:count]
    ax.bar(x, est.counts[:count], yerr=err, capsize=3, color="#4c72b0", label=f"estimate ± {est.confidence:.0%} interval")
    if result.postprocess != "none":
        ax.plot(x, result.adjusted[:count], "o", color="#dd8452", label=result.postprocess)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xticks(x, plot_labels(est.labels[:count]), rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("reports")
    ax.set_title(f"{result.metric} v{result.version} · {result.days[0]} .. {result.days[-1]} · n = {result.n:,}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise UserError(f"cannot write plot {path}: {exc}") from None
    finally:
        plt.close(fig)


def cmd_estimate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ldptel.aggregator.query import estimate_metric

    candidates: list[str] | None = None
    if args.candidates:
        candidates = _read_candidates(args.candidates)
    if args.candidate:
        candidates = (candidates or []) + list(args.candidate)
    day_from, day_to = args.day_from, args.day_to
    if args.day:
        day_from = day_to = args.day
    r = _connect(args.redis_url)
    result = estimate_metric(
        r,
        args.metric,
        version=args.version,
        day_from=day_from,
        day_to=day_to,
        candidates=candidates,
        top=args.top,
        confidence=args.confidence,
        postprocess=args.postprocess,
    )
    if args.plot:
        plot_result(result, args.plot)
    write_result(result, args.format, out)
    return EXIT_OK


# -------------------------------------------------------------------------------------------- metrics
def _record_rows(records: Sequence[Any]) -> list[list[object]]:
    rows: list[list[object]] = []
    for rec in records:
        spec = rec.current
        p = spec.params
        shape = f"k={p.k} m={p.m}" if hasattr(p, "k") else (f"d={p.d}" if hasattr(p, "d") else "")
        rows.append([rec.name, rec.status, rec.current_version, spec.mechanism, f"{p.epsilon:g}", shape,
                     spec.reports_per_day, rec.shards])
    return rows


def _write_records(records: Sequence[Any], fmt: str, out: TextIO) -> None:
    if fmt == "json":
        out.write(json.dumps([rec.to_dict() for rec in records], indent=2) + "\n")
        return
    headers = ["name", "status", "version", "mechanism", "epsilon", "shape", "reports/day", "shards"]
    if not records:
        out.write("no metrics registered (create one: ldptel metrics create NAME --mechanism ... --epsilon ...)\n")
        return
    _table(headers, _record_rows(records), out)


def _spec_from_args(args: argparse.Namespace) -> MetricSpec:
    if args.spec_file:
        try:
            text = Path(args.spec_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"cannot read spec file {args.spec_file}: {exc}") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UserError(f"spec file {args.spec_file} is not JSON: {exc}") from None
        if isinstance(data, dict) and args.name:
            data = {**data, "name": args.name}
        return MetricSpec.from_dict(data)
    if not args.name:
        raise UserError("metrics create needs a NAME (or a --spec-file that has one)")
    if not args.mechanism or args.epsilon is None:
        raise UserError("metrics create needs --mechanism and --epsilon (or --spec-file FILE)")
    params: dict[str, Any] = {"mechanism": args.mechanism, "epsilon": args.epsilon}
    if args.mechanism in ("cms", "oue-cms", "hcms"):
        if args.k is None or args.m is None:
            raise UserError(f"a {args.mechanism} metric needs --k ROWS and --m COLUMNS")
        params.update(k=args.k, m=args.m, hash_seed=args.hash_seed)
    elif args.mechanism == "grr":
        if not args.domain:
            raise UserError("a grr metric needs --domain LABEL,LABEL,... (or --domain-file FILE)")
        params["domain"] = args.domain
    if args.prob_bits is not None:
        params["prob_bits"] = args.prob_bits
    return MetricSpec(
        name=args.name,
        params=params_from_dict(params),
        reports_per_day=args.reports_per_day,
        description=args.description,
    )


def cmd_metrics(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ldptel.storage import registry

    r = _connect(args.redis_url)
    action = args.action
    if action == "list":
        _write_records(registry.list_metrics(r), args.format, out)
    elif action == "show":
        rec = registry.get_metric(r, args.name)
        out.write(json.dumps(rec.to_dict(), indent=2) + "\n")
    elif action == "create":
        if args.domain_file:
            args.domain = _read_candidates(args.domain_file)
        spec = _spec_from_args(args)
        rec = registry.create_metric(r, spec, shards=args.shards)
        if args.format == "json":
            out.write(json.dumps(rec.to_dict(), indent=2) + "\n")
        else:
            _write_records([rec], "table", out)
    elif action == "retire":
        rec = registry.retire_metric(r, args.name)
        _write_records([rec], args.format, out)
    return EXIT_OK


def _split_domain(text: str) -> list[str]:
    return [label.strip() for label in text.split(",") if label.strip()]


# --------------------------------------------------------------------------------------------- status
def shard_status(r: redis_lib.Redis, metrics: Sequence[Any]) -> list[dict[str, Any]]:
    """Per (metric, shard): stream length, pending, not-yet-folded entries (lag), checkpoint, lease owner."""
    from ldptel.storage import keys

    from ldptel.aggregator.worker import shard_lag

    rows: list[dict[str, Any]] = []
    for rec in metrics:
        pipe = r.pipeline(transaction=False)
        for shard in range(rec.shards):
            pipe.xlen(keys.stream(rec.name, shard))
            pipe.get(keys.checkpoint(rec.name, shard))
            pipe.get(keys.lease(rec.name, shard))
            pipe.pttl(keys.lease(rec.name, shard))
        replies = pipe.execute()
        for shard in range(rec.shards):
            length, ckpt, owner, ttl = replies[4 * shard : 4 * shard + 4]
            lag, pending = shard_lag(r, rec.name, shard)
            rows.append(
                {
                    "metric": rec.name,
                    "shard": shard,
                    "length": int(length),
                    "pending": pending,
                    "lag": lag,
                    "checkpoint": ckpt.decode() if ckpt else None,
                    "owner": owner.decode() if owner else None,
                    "lease_ms": int(ttl) if owner else None,
                }
            )
    return rows


def cmd_status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ldptel.storage import registry

    r = _connect(args.redis_url)
    records = [registry.get_metric(r, name) for name in args.metric] if args.metric else registry.list_metrics(r)
    rows = shard_status(r, records)
    if args.format == "json":
        out.write(json.dumps(rows, indent=2) + "\n")
        return EXIT_OK
    if not rows:
        out.write("no metrics registered\n")
        return EXIT_OK
    headers = ["metric", "shard", "length", "pending", "lag", "checkpoint", "owner"]
    _table(
        headers,
        [[row["metric"], row["shard"], row["length"], row["pending"], "?" if row["lag"] is None else row["lag"],
          row["checkpoint"] or "-", row["owner"] or "-"] for row in rows],
        out,
    )
    return EXIT_OK


# ---------------------------------------------------------------------------------------- serve, demo
def cmd_serve(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ldptel.server import ServerConfig, serve

    config = ServerConfig.from_env()
    url = args.redis_url or os.environ.get(ENV_REDIS_URL)
    if url:
        config = config.with_redis_url(url)
    serve(config, host=args.host, port=args.port)
    return EXIT_OK


def cmd_demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import importlib

    try:
        demo = importlib.import_module("ldptel.aggregator.demo")
    except ModuleNotFoundError as exc:
        if exc.name == "ldptel.aggregator.demo":
            raise UserError("the demo is not part of this build (ldptel.aggregator.demo is missing)") from None
        raise
    demo_args = list(args.demo_args)
    if demo_args[:1] == ["--"]:
        demo_args = demo_args[1:]
    result = demo.main(demo_args)
    return int(result or 0)


# --------------------------------------------------------------------------------------------- parser
def _day(text: str) -> str:
    from ldptel.storage.sketches import check_day

    try:
        return check_day(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a UTC day YYYY-MM-DD, got {text!r}") from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--redis-url",
        metavar="URL",
        help=f"Redis to use (default: ${ENV_REDIS_URL}, else {DEFAULT_REDIS_URL})",
    )
    parser = argparse.ArgumentParser(
        prog="ldptel",
        description="ldptel: local-differential-privacy telemetry — aggregation, queries and the metric registry.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    agg = sub.add_parser("aggregate", parents=[common], help="fold stream shards into per-day sketches",
                         description="Run a fold worker: lease shards, fold their streams, commit exactly once.")
    agg.add_argument("--once", action="store_true", help="drain what is there and exit (default: follow)")
    agg.add_argument("--metric", action="append", metavar="NAME", help="fold only this metric (repeatable)")
    agg.add_argument("--batch", type=_positive_int, default=1000, metavar="N", help="entries per read (default 1000)")
    agg.add_argument("--checkpoint-every", type=_positive_int, default=100_000, metavar="N",
                     help="commit a shard after N entries (default 100000)")
    agg.add_argument("--checkpoint-seconds", type=float, default=1.0, metavar="T",
                     help="... or after T seconds (default 1)")
    agg.add_argument("--lease-ttl", type=float, default=10.0, metavar="S",
                     help="seconds a shard lease lives without renewal (default 10)")
    agg.add_argument("--retention", type=float, default=3600.0, metavar="S",
                     help="trim folded entries older than S seconds (default 3600; 0: at once)")
    agg.add_argument("--block", type=float, default=1.0, metavar="S", help="longest wait for new entries (default 1)")
    agg.add_argument("--rescan", type=float, default=5.0, metavar="S",
                     help="look for new shards and rebalance every S seconds (default 5)")
    agg.add_argument("--worker-id", metavar="ID", help="name of this worker in leases (default host:pid:random)")
    agg.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="progress line (default: when stderr is a terminal)")
    agg.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="structured log level")
    agg.set_defaults(func=cmd_aggregate)

    est = sub.add_parser("estimate", parents=[common], help="debiased estimates with intervals",
                         description="Sum a metric's sketches over a day range and debias them.")
    est.add_argument("metric", metavar="METRIC")
    est.add_argument("--version", type=_positive_int, help="metric version (default: current)")
    est.add_argument("--from", dest="day_from", type=_day, metavar="DAY", help="first UTC day, YYYY-MM-DD")
    est.add_argument("--to", dest="day_to", type=_day, metavar="DAY", help="last UTC day, YYYY-MM-DD")
    est.add_argument("--day", type=_day, metavar="DAY", help="one UTC day (same as --from DAY --to DAY)")
    est.add_argument("--candidates", metavar="FILE", help="sketch metrics: values to estimate, one per line")
    est.add_argument("--candidate", action="append", metavar="VALUE", help="a value to estimate (repeatable)")
    est.add_argument("--top", type=_positive_int, metavar="N", help="keep the N largest estimates")
    est.add_argument("--format", choices=["table", "json", "csv"], default="table")
    est.add_argument("--confidence", type=_confidence, default=0.95, help="interval level (default 0.95)")
    est.add_argument("--postprocess", choices=POSTPROCESS_METHODS, default="none",
                     help="none | clip (to [0, n]) | norm-sub (non-negative, sum n); raw values are kept too")
    est.add_argument("--plot", metavar="FILE.png", help=f"bar chart with error bars (needs {PLOT_EXTRA_HINT})")
    est.set_defaults(func=cmd_estimate)

    met = sub.add_parser("metrics", help="manage the metric registry", description="List, show, create or retire metrics.")
    msub = met.add_subparsers(dest="action", metavar="ACTION", required=True)
    mlist = msub.add_parser("list", parents=[common], help="every metric")
    mlist.add_argument("--format", choices=["table", "json"], default="table")
    mshow = msub.add_parser("show", parents=[common], help="one metric's record (JSON)")
    mshow.add_argument("name", metavar="NAME")
    mcreate = msub.add_parser("create", parents=[common], help="create a metric or a new version of it",
                              description="Create a metric (or a new version when its parameters change).")
    mcreate.add_argument("name", metavar="NAME", nargs="?")
    mcreate.add_argument("--spec-file", metavar="FILE", help="a MetricSpec as JSON instead of the options below")
    mcreate.add_argument("--mechanism", choices=MECHANISMS)
    mcreate.add_argument("--epsilon", type=float, help="ε per report")
    mcreate.add_argument("--k", type=int, help="sketch rows (cms, oue-cms, hcms)")
    mcreate.add_argument("--m", type=int, help="sketch columns, a power of two (cms, oue-cms, hcms)")
    mcreate.add_argument("--hash-seed", type=int, default=0, help="sketch hash seed (default 0)")
    mcreate.add_argument("--domain", type=_split_domain, metavar="A,B,...", help="grr labels, comma-separated")
    mcreate.add_argument("--domain-file", metavar="FILE", help="grr labels, one per line")
    mcreate.add_argument("--prob-bits", type=int, help="probability resolution in bits (default: automatic)")
    mcreate.add_argument("--reports-per-day", type=int, default=1, help="reports a device may send per day")
    mcreate.add_argument("--description", default="")
    mcreate.add_argument("--shards", type=int, help="stream shards (new metrics only)")
    mcreate.add_argument("--format", choices=["table", "json"], default="table")
    mretire = msub.add_parser("retire", parents=[common], help="stop accepting reports (sketches stay)")
    mretire.add_argument("name", metavar="NAME")
    mretire.add_argument("--format", choices=["table", "json"], default="table")
    met.set_defaults(func=cmd_metrics)

    stat = sub.add_parser("status", parents=[common], help="per-shard stream length, pending, checkpoint and lag")
    stat.add_argument("--metric", action="append", metavar="NAME", help="only this metric (repeatable)")
    stat.add_argument("--format", choices=["table", "json"], default="table")
    stat.set_defaults(func=cmd_status)

    srv = sub.add_parser("serve", parents=[common], help="run the ingest service (development server)",
                         description="Run the Flask ingest app; configuration from LDPTEL_* variables.")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=8000)
    srv.set_defaults(func=cmd_serve)

    demo = sub.add_parser("demo", help="the end-to-end demo", add_help=False)
    demo.add_argument("demo_args", nargs=argparse.REMAINDER)
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Entry point of the ``ldptel`` console script; returns the exit status."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    parser = build_parser()
    arglist = list(sys.argv[1:] if argv is None else argv)
    if arglist[:1] == ["demo"]:  # everything after "demo" belongs to the demo, --help included
        arglist = ["demo", "--", *arglist[1:]]
    try:
        args = parser.parse_args(arglist)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed by argparse
        return int(exc.code or 0)
    try:
        return int(args.func(args, out, err))
    except UserError as exc:
        err.write(f"ldptel: error: {exc}\n")
        return EXIT_USER
    except LdpError as exc:
        err.write(f"ldptel: error: {exc}\n")
        return EXIT_USER
    except redis_lib.ConnectionError as exc:
        err.write(f"ldptel: error: lost the connection to Redis: {exc}\n")
        return EXIT_USER
    except BrokenPipeError:
        return EXIT_OK


