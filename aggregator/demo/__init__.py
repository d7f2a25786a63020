"""``ldptel demo``: the whole system on one machine, end to end, in one command.

What it runs, all real and all on loopback:

1. a private Redis (:class:`~ldptel.storage.embedded.EmbeddedRedis`, AOF on);
2. the ingest service as a real HTTP server in its own process group: gunicorn (gthread) when it is
   installed, else ``ldptel serve``; a free port and bearer tokens generated for this run;
3. two metrics created through the HTTP admin API: ``demo.dark_mode`` (a boolean, ``rr``) and
   ``demo.emoji`` (a sketch: ``cms``, ``oue-cms`` or ``hcms``);
4. the fold worker, ``ldptel aggregate`` following the streams, in its own process group;
5. a fleet of simulated devices. Each device is a real :class:`~ldptel.client.sdk.reporter.Reporter` with its
   own storage directory (sqlite queue, budget ledger, device secret), privatizing with the OS CSPRNG and
   uploading over HTTP. The true values are drawn from the emoji distribution shipped in
   ``ldptel/aggregator/data/emoji.tsv``; ``--seed`` seeds only that draw, never the privatization.

Then it waits until the worker has folded every report the server acknowledged, queries the sketches
(:func:`~ldptel.aggregator.query.estimate_metric`), prints the top-k estimates beside the true counts with
their intervals and the rr proportion beside the truth, writes a PNG chart (the ``plot`` extra), and prints
the wall time and an accuracy summary.

Every process it started is stopped on the way out: on success, on errors, on Ctrl-C (SIGINT) and on SIGTERM
(try/finally; each child runs in its own process group, which is terminated, then killed). The work
directory (device storage, Redis data, logs) is removed unless ``--keep``.

Exit status: 0 success, 1 a component failed, 2 a user error (one line on stderr), 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.util
import json
import logging
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import numpy as np

__all__ = ["Distribution", "load_distribution", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USER = 2
EXIT_INTERRUPTED = 130

FLAG_METRIC = "demo.dark_mode"
SKETCH_METRIC = "demo.emoji"
SKETCH_MECHANISMS = ("cms", "oue-cms", "hcms")
DARK_MODE_SHARE = 0.35  # the true share of devices with dark mode on (the simulation draws around it)

# Default size. At ε = 4 one oue-cms report has a count variance of about 0.076 (reference/ldp-math.md §9.2),
# so 4,000 devices give a 95% half-width of 1.96·√(4000·0.076) ≈ ±34 reports, while the 10th most used emoji
# of the shipped distribution has about 72 (the 1st about 280): the top ten stand clear of zero and the head
# is ordered. (cms: ±53, hcms: ±129 at the same size.) Every device is a real Reporter (its own sqlite
# database, two HTTP posts): about 14 ms of CPU per device across the simulation, the ingest service, the
# worker and Redis, so the default fits in well under a minute on 2 cores.
DEFAULT_DEVICES = 4_000
DEFAULT_EPSILON = 4.0
DEFAULT_MECHANISM = "oue-cms"
DEFAULT_K = 256
DEFAULT_M = 1024
DEFAULT_TOP = 10
DEFAULT_CHART = "ldptel-demo.png"
MAX_DEVICES = 1_000_000

START_TIMEOUT = 30.0  # seconds for the ingest server to answer /readyz
FOLD_TIMEOUT = 60.0  # seconds for the worker to fold everything after the last device
DEVICE_RETRY = 30.0  # seconds one device keeps retrying its upload before it gives up
STALL_TIMEOUT = 20.0  # seconds without any acknowledged report before the demo gives up on the ingest server
STOP_TIMEOUT = 5.0  # seconds between SIGTERM and SIGKILL of a child process group

log = logging.getLogger("ldptel.aggregator.demo")


class DemoUserError(Exception):
    """Bad arguments or environment: one line on stderr, exit status 2."""


class DemoFailure(Exception):
    """A component of the demo failed (a server did not start, reports were not folded): exit status 1."""


class _Terminated(BaseException):
    """Raised in the main thread by the SIGTERM handler so that the same cleanup runs as for Ctrl-C."""


# ------------------------------------------------------------------------------------ the distribution
@dataclass(frozen=True, kw_only=True)
class Distribution:
    """Values with their relative frequencies (``weights`` sum to 1) and a readable name for each."""

    values: tuple[str, ...]
    names: tuple[str, ...]
    weights: np.ndarray


def load_distribution(*, path: str | os.PathLike[str] | None = None) -> Distribution:
    """Read a ``value<TAB>weight<TAB>name`` file (``#`` comments); default: the shipped ``emoji.tsv``."""
    if path is None:
        text = (resources.files("ldptel.aggregator") / "data" / "emoji.tsv").read_text(encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    values: list[str] = []
    names: list[str] = []
    weights: list[float] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) < 2:
            raise ValueError(f"line {lineno}: expected value<TAB>weight[<TAB>name]")
        weight = float(parts[1])
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"line {lineno}: weight must be a positive number")
        values.append(parts[0])
        weights.append(weight)
        names.append(parts[2].strip() if len(parts) > 2 and parts[2].strip() else parts[0])
    if len(values) < 2 or len(set(values)) != len(values):
        raise ValueError("a distribution needs at least two distinct values")
    w = np.asarray(weights, dtype=np.float64)
    return Distribution(values=tuple(values), names=tuple(names), weights=w / w.sum())


# ---------------------------------------------------------------------------------------------- output
class _Status:
    """Phase lines and a progress bar on stderr: redrawn in place on a terminal, sparse plain lines otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._last_draw = 0.0
        self._last_step = -1
        self._open = False

    def line(self, text: str) -> None:
        self._end_bar()
        self.stream.write(f"ldptel demo: {text}\n")
        self.stream.flush()

    def progress(self, label: str, done: int, total: int, *, started: float, final: bool = False) -> None:
        now = time.monotonic()
        elapsed = max(now - started, 1e-9)
        rate = done / elapsed
        if self.tty:
            if not final and now - self._last_draw < 0.1:
                return
            self._last_draw = now
            width = 30
            filled = int(width * done / total) if total else width
            eta = (total - done) / rate if rate > 0 else float("inf")
            eta_text = f"ETA {eta:4.0f}s" if math.isfinite(eta) else "ETA    ?"
            bar = "█" * filled + "░" * (width - filled)
            self.stream.write(
                f"\r{label} {bar} {done:>{len(str(total))}}/{total} {100 * done / max(total, 1):3.0f}% "
                f"· {rate:,.0f}/s · {eta_text} "
            )
            self._open = True
            if final:
                self._end_bar()
            self.stream.flush()
            return
        step = int(10 * done / total) if total else 10  # plain output: a line at every 10%
        if step > self._last_step or final:
            if step == self._last_step and final:
                return
            self._last_step = step
            self.stream.write(f"ldptel demo: {label} {done}/{total} ({rate:,.0f}/s)\n")
            self.stream.flush()

    def reset(self) -> None:
        self._last_step = -1
        self._last_draw = 0.0

    def _end_bar(self) -> None:
        if self._open:
            self.stream.write("\n")
            self._open = False


# ------------------------------------------------------------------------------------------- processes
def _pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGTERM if the demo dies without cleaning up (e.g. SIGKILL)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass
class _Child:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path


class _Children:
    """Child processes, each the leader of its own process group; :meth:`stop_all` ends every group."""

    def __init__(self) -> None:
        self.children: list[_Child] = []

    def start(self, name: str, argv: Sequence[str], *, env: dict[str, str], log_path: Path) -> _Child:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_file:
            proc = subprocess.Popen(
                list(argv),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: Ctrl-C reaches only the demo, which stops it
                preexec_fn=_pdeathsig if sys.platform.startswith("linux") else None,  # noqa: PLW1509
            )
        child = _Child(name, proc, log_path)
        self.children.append(child)
        return child

    def stop(self, child: _Child, *, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM the child's process group, wait, then SIGKILL whatever is left of the group."""
        proc = child.proc
        pgid = proc.pid  # start_new_session: the child leads a group with its own pid
        if proc.poll() is None:
            _signal_group(pgid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(pgid, signal.SIGKILL)
                proc.wait(timeout)
        _signal_group(pgid, signal.SIGKILL)  # stragglers of the group (gunicorn workers)
        _wait_group_gone(pgid, timeout=timeout)

    def stop_all(self) -> None:
        for child in reversed(self.children):
            with contextlib.suppress(Exception):
                self.stop(child)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_group_gone(pgid: int, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.02)


def _log_tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------------------------------------ HTTP
def _http(method: str, url: str, *, token: str | None = None, body: object = None, timeout: float = 5.0) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode("utf-8")
    req = urllib.request.Request(url, data=data, method=method)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback URL we built
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, None


# ----------------------------------------------------------------------------------------------- config
@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    devices: int = DEFAULT_DEVICES
    epsilon: float = DEFAULT_EPSILON
    mechanism: str = DEFAULT_MECHANISM
    k: int = DEFAULT_K
    m: int = DEFAULT_M
    seed: int | None = None
    top: int = DEFAULT_TOP
    chart: str | None = DEFAULT_CHART
    chart_explicit: bool = False
    workdir: str | None = None
    keep: bool = False
    threads: int = 4
    server: str = "auto"


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2 (argparse would print the usage too)
        raise DemoUserError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _ArgumentParser(
        prog="ldptel demo",
        description=(
            "Run the whole system on this machine: an embedded Redis, the ingest server over HTTP, the fold "
            "worker and a fleet of simulated devices (each a real Reporter); then print the estimates beside "
            "the truth and write a chart."
        ),
    )
    p.add_argument("--devices", type=int, default=DEFAULT_DEVICES, metavar="N",
                   help=f"simulated devices, each reporting both metrics once (default {DEFAULT_DEVICES:,})")
    p.add_argument("--epsilon", type=float, default=DEFAULT_EPSILON, metavar="E",
                   help=f"ε per report of both metrics (default {DEFAULT_EPSILON:g})")
    p.add_argument("--mechanism", choices=SKETCH_MECHANISMS, default=DEFAULT_MECHANISM,
                   help=f"sketch mechanism of the emoji metric (default {DEFAULT_MECHANISM})")
    p.add_argument("--k", type=int, default=DEFAULT_K, help=f"sketch hash rows (default {DEFAULT_K})")
    p.add_argument("--m", type=int, default=DEFAULT_M, help=f"sketch columns, a power of two (default {DEFAULT_M})")
    p.add_argument("--seed", type=int, default=None, metavar="S",
                   help="seed of the simulated true values (default: random); privatization always uses the OS CSPRNG")
    p.add_argument("--top", type=int, default=DEFAULT_TOP, metavar="K", help=f"estimates to show (default {DEFAULT_TOP})")
    chart = p.add_mutually_exclusive_group()
    chart.add_argument("--chart", metavar="FILE.png", default=None,
                       help=f"write the chart here (default {DEFAULT_CHART}; needs the plot extra)")
    chart.add_argument("--no-chart", action="store_true", help="do not write a chart")
    p.add_argument("--workdir", metavar="DIR", default=None,
                   help="parent of the run's work directory (default: /dev/shm when available, else the temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (device storage, Redis data, logs)")
    p.add_argument("--threads", type=int, default=4, metavar="N",
                   help="devices simulated concurrently (default 4)")
    p.add_argument("--server", choices=("auto", "gunicorn", "werkzeug"), default="auto",
                   help="ingest server: gunicorn if installed (auto), or the development server of `ldptel serve`")
    return p


def parse_config(argv: Sequence[str]) -> DemoConfig:
    args = build_parser().parse_args(list(argv))
    if not 1 <= args.devices <= MAX_DEVICES:
        raise DemoUserError(f"--devices must be between 1 and {MAX_DEVICES:,}, got {args.devices}")
    if not 1 <= args.top <= 100:
        raise DemoUserError(f"--top must be between 1 and 100, got {args.top}")
    if not 1 <= args.threads <= 256:
        raise DemoUserError(f"--threads must be between 1 and 256, got {args.threads}")
    if not math.isfinite(args.epsilon):
        raise DemoUserError(f"--epsilon must be a finite number, got {args.epsilon}")
    if args.seed is not None and args.seed < 0:
        raise DemoUserError(f"--seed must be >= 0, got {args.seed}")
    chart: str | None = None if args.no_chart else (args.chart or DEFAULT_CHART)
    if chart is not None:
        parent = Path(chart).expanduser().resolve().parent
        if not parent.is_dir():
            raise DemoUserError(f"--chart {chart}: directory {parent} does not exist")
    if args.workdir is not None and not Path(args.workdir).is_dir():
        raise DemoUserError(f"--workdir {args.workdir}: not a directory")
    if args.server == "gunicorn" and importlib.util.find_spec("gunicorn") is None:
        raise DemoUserError("--server gunicorn: gunicorn is not installed (pip install 'ldp-telemetry[server]')")
    return DemoConfig(
        devices=args.devices,
        epsilon=args.epsilon,
        mechanism=args.mechanism,
        k=args.k,
        m=args.m,
        seed=args.seed,
        top=args.top,
        chart=chart,
        chart_explicit=args.chart is not None,
        workdir=args.workdir,
        keep=args.keep,
        threads=args.threads,
        server=args.server,
    )


def build_specs(config: DemoConfig) -> tuple[Any, Any]:
    """The two metric specs (raises InvalidParameterError for a bad ε, k or m)."""
    from ldptel.client.protocol.specs import MetricSpec
    from ldptel.client.mechanisms import CmsParams, HcmsParams, OueCmsParams, RrParams

    flag = MetricSpec(
        name=FLAG_METRIC,
        params=RrParams(epsilon=config.epsilon),
        description="ldptel demo: is dark mode on (randomized response)",
    )
    sketch_type = {"cms": CmsParams, "oue-cms": OueCmsParams, "hcms": HcmsParams}[config.mechanism]
    sketch = MetricSpec(
        name=SKETCH_METRIC,
        params=sketch_type(epsilon=config.epsilon, k=config.k, m=config.m),
        description=f"ldptel demo: the emoji a device used most today ({config.mechanism})",
    )
    return flag, sketch


def _default_parent() -> Path:
    shm = Path("/dev/shm")
    try:
        if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 512 * 1024 * 1024:
            return shm  # tmpfs: each device's sqlite commits cost no disk flushes
    except OSError:
        pass
    return Path(tempfile.gettempdir())


# -------------------------------------------------------------------------------------------- the fleet
@dataclass
class _FleetStats:
    devices_done: int = 0
    delivered: int = 0
    queued: int = 0
    refused: int = 0
    undelivered_devices: int = 0
    upload_errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True, kw_only=True)
class _Fleet:
    endpoint: str
    token: str
    specs: tuple[Any, ...]
    root: Path
    flags: np.ndarray  # bool per device
    values: tuple[str, ...]  # the true emoji of each device
    keep: bool
    cancel: threading.Event
    stats: _FleetStats

    def on_error(self, _exc: Exception) -> None:
        with self.stats.lock:
            self.stats.upload_errors += 1

    def run_device(self, i: int) -> None:
        """One device: a fresh Reporter reports both metrics, uploads over HTTP and shuts down."""
        from ldptel.client.sdk.reporter import Reporter

        if self.cancel.is_set():
            return
        storage = self.root / f"{i:07d}"
        rep = Reporter(
            self.endpoint,
            self.token,
            storage,
            specs=self.specs,  # the specs this app was built with, fetched once over HTTP (see run())
            start=False,  # the fleet's thread pool uploads: flush() sends in the calling thread
            timeout=5.0,
            backoff_base=0.05,
            backoff_cap=1.0,
            on_error=self.on_error,
        )
        queued = refused = 0
        give_up = time.monotonic() + DEVICE_RETRY
        try:
            for metric, value in ((FLAG_METRIC, bool(self.flags[i])), (SKETCH_METRIC, self.values[i])):
                result = rep.report(metric, value)
                queued += result.queued
                refused += not result.queued
            while not rep.flush(timeout=1.0):
                if self.cancel.is_set() or time.monotonic() > give_up:
                    break
            stats = rep.stats()
        finally:
            rep.close(timeout=0.5)
        with self.stats.lock:
            self.stats.devices_done += 1
            self.stats.delivered += stats.delivered
            self.stats.queued += queued
            self.stats.refused += refused
            self.stats.undelivered_devices += stats.pending > 0
        if not self.keep and stats.pending == 0:
            shutil.rmtree(storage, ignore_errors=True)


# ------------------------------------------------------------------------------------------- the demo
@dataclass
class _Timings:
    start: float = field(default_factory=time.perf_counter)
    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, name: str) -> None:
        self.marks[name] = time.perf_counter()

    def span(self, a: str, b: str) -> float:
        return self.marks.get(b, time.perf_counter()) - self.marks.get(a, self.start)


def _server_argv(kind: str, *, port: int, workers: int) -> tuple[str, list[str]]:
    if kind == "gunicorn":
        return "gunicorn", [
            sys.executable, "-m", "gunicorn",
            "--bind", f"127.0.0.1:{port}",
            "--workers", str(workers),
            "--worker-class", "gthread",
            "--threads", "4",
            "--graceful-timeout", "3",
            "--log-level", "warning",
            "--access-logfile", "/dev/null",
            "ldptel.server:create_app()",
        ]  # fmt: skip
    return "ldptel serve", [sys.executable, "-m", "ldptel.aggregator.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPTEL_")}  # never the user's own services
    env.update(extra)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _start_ingest(children: _Children, config: DemoConfig, *, env: dict[str, str], logs: Path) -> tuple[_Child, str, str]:
    kind = config.server
    if kind == "auto":
        kind = "gunicorn" if importlib.util.find_spec("gunicorn") is not None else "werkzeug"
    workers = max(1, min(4, (os.cpu_count() or 2) // 2))
    last = ""
    for _attempt in range(3):  # the probed port can be taken before the server binds it
        port = _free_port()
        label, argv = _server_argv(kind, port=port, workers=workers)
        child = children.start("ingest", argv, env=env, log_path=logs / "ingest.log")
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if child.proc.poll() is not None:
                break
            try:
                status, _ = _http("GET", f"{endpoint}/readyz", timeout=1.0)
                if status == 200:
                    return child, endpoint, (f"{label}, {workers} worker{'s' if workers > 1 else ''}" if kind == "gunicorn" else label)
            except OSError:
                pass
            time.sleep(0.1)
        children.stop(child)
        last = _log_tail(child.log_path)
    raise DemoFailure(f"the ingest server did not start; its log ends with:\n{last}")


def _create_metrics(endpoint: str, *, admin_token: str, app_token: str, specs: Sequence[Any]) -> tuple[Any, ...]:
    """Create the metrics through the admin API, then fetch them back as an app would (GET /v1/metrics/<name>)."""
    from ldptel.storage.registry import MetricRecord

    served = []
    for spec in specs:
        status, body = _http("POST", f"{endpoint}/v1/metrics", token=admin_token, body=spec.to_dict())
        if status not in (200, 201):
            raise DemoFailure(f"creating metric {spec.name} failed: HTTP {status} {body}")
        status, body = _http("GET", f"{endpoint}/v1/metrics/{spec.name}", token=app_token)
        if status != 200:
            raise DemoFailure(f"fetching metric {spec.name} failed: HTTP {status} {body}")
        served.append(MetricRecord.from_dict(body).current)
    return tuple(served)


def _folded(r: Any, name: str, candidate: str | None) -> int:
    from ldptel.aggregator.query import EmptyRangeError, estimate_metric

    try:
        return estimate_metric(r, name, candidates=None if candidate is None else [candidate]).n
    except EmptyRangeError:
        return 0


def _watch_children(children: _Children) -> None:
    for child in children.children:
        code = child.proc.poll()
        if code is not None:
            raise DemoFailure(f"the {child.name} process exited with status {code}; its log ends with:\n{_log_tail(child.log_path)}")


def run(config: DemoConfig, *, out: TextIO, err: TextIO) -> int:
    """Run the demo (see the module docstring). Raises DemoUserError / DemoFailure / KeyboardInterrupt."""
    import redis as redis_lib

    from ldptel.client.errors import InvalidParameterError
    from ldptel.storage.embedded import EmbeddedRedis, EmbeddedRedisError

    from ldptel.aggregator.query import estimate_metric

    try:
        specs = build_specs(config)
    except InvalidParameterError as exc:
        raise DemoUserError(str(exc)) from None
    dist = load_distribution()
    if config.top > len(dist.values):
        raise DemoUserError(f"--top must be at most {len(dist.values)} (the distribution's size)")
    if config.chart is not None and importlib.util.find_spec("matplotlib") is None:
        if config.chart_explicit:
            raise DemoUserError("--chart needs matplotlib: pip install 'ldp-telemetry[plot]'")
        config = _replace_chart(config, None)
        err.write("ldptel demo: matplotlib is not installed, no chart (pip install 'ldp-telemetry[plot]')\n")

    status = _Status(err)
    times = _Timings()
    seed = config.seed if config.seed is not None else secrets.randbits(32)
    parent = Path(config.workdir) if config.workdir else _default_parent()
    try:
        workdir = Path(tempfile.mkdtemp(prefix="ldptel-demo-", dir=parent))
    except OSError as exc:
        raise DemoUserError(f"cannot create a work directory in {parent}: {exc}") from None

    children = _Children()
    cancel = threading.Event()
    executor: ThreadPoolExecutor | None = None
    redis_server: EmbeddedRedis | None = None
    client_logger = logging.getLogger("ldptel.client")
    old_level = client_logger.level
    client_logger.setLevel(logging.ERROR)  # delivery problems are counted through on_error, not logged per device
    try:
        status.line(f"work directory {workdir}{' (kept)' if config.keep else ''}")
        # ---- Redis, ingest, metrics, worker
        try:
            redis_server = EmbeddedRedis(appendonly=True, data_dir=workdir / "redis").start()
        except EmbeddedRedisError as exc:
            raise DemoFailure(str(exc)) from None
        app_token, admin_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        env = _child_env({
            "LDPTEL_REDIS_URL": redis_server.url,
            "LDPTEL_APP_TOKENS": app_token,
            "LDPTEL_ADMIN_TOKEN": admin_token,
            "LDPTEL_RATE_LIMIT": "off",  # the whole fleet shares one app token here
        })
        ingest, endpoint, server_label = _start_ingest(children, config, env=env, logs=workdir / "logs")
        served = _create_metrics(endpoint, admin_token=admin_token, app_token=app_token, specs=specs)
        worker = children.start(
            "aggregator",
            [sys.executable, "-m", "ldptel.aggregator.cli", "aggregate", "--redis-url", redis_server.url,
             "--rescan", "1", "--no-progress",
             "--log-level", "warning"],
            env=env,
            log_path=workdir / "logs" / "aggregator.log",
        )  # fmt: skip
        status.line(
            f"processes: redis pid {redis_server.pid}, ingest pid {ingest.proc.pid} ({server_label}) at {endpoint}, "
            f"aggregator pid {worker.proc.pid}"
        )
        out.write(
            f"pids: redis={redis_server.pid} ingest={ingest.proc.pid} aggregator={worker.proc.pid}\n"
        )
        out.flush()
        times.mark("ready")

        # ---- the simulated truth (seeded); privatization inside each Reporter uses the CSPRNG
        rng = np.random.default_rng(seed)
        flags = rng.random(config.devices) < DARK_MODE_SHARE
        picks = rng.choice(len(dist.values), size=config.devices, p=dist.weights)
        true_counts = np.bincount(picks, minlength=len(dist.values))
        fleet = _Fleet(
            endpoint=endpoint,
            token=app_token,
            specs=served,
            root=workdir / "devices",
            flags=flags,
            values=tuple(dist.values[j] for j in picks.tolist()),
            keep=config.keep,
            cancel=cancel,
            stats=_FleetStats(),
        )
        status.line(
            f"simulating {config.devices:,} devices (seed {seed}), each a Reporter reporting {FLAG_METRIC} (rr) and "
            f"{SKETCH_METRIC} ({config.mechanism}) at ε = {config.epsilon:g} over HTTP"
        )
        executor = ThreadPoolExecutor(max_workers=config.threads, thread_name_prefix="ldptel-device")
        started = time.monotonic()
        status.reset()
        inflight: set[Future[None]] = set()
        submitted = finished = 0
        window = 2 * config.threads  # a short queue: waiting on it stays cheap, memory stays flat
        last_delivered, last_progress = 0, time.monotonic()
        while submitted < config.devices or inflight:
            while submitted < config.devices and len(inflight) < window:
                inflight.add(executor.submit(fleet.run_device, submitted))
                submitted += 1
            done, inflight = wait(inflight, timeout=0.25, return_when=FIRST_COMPLETED)
            for fut in done:
                fut.result()  # a bug in a device task stops the demo
            finished += len(done)
            _watch_children(children)
            status.progress("devices", finished, config.devices, started=started)
            now = time.monotonic()
            if fleet.stats.delivered != last_delivered:
                last_delivered, last_progress = fleet.stats.delivered, now
            elif now - last_progress > STALL_TIMEOUT:
                raise DemoFailure(
                    f"the ingest server acknowledged no report for {STALL_TIMEOUT:.0f}s "
                    f"({fleet.stats.upload_errors} upload errors); its log ends with:\n{_log_tail(ingest.log_path)}"
                )
        status.progress("devices", config.devices, config.devices, started=started, final=True)
        times.mark("fleet")
        stats = fleet.stats
        if stats.undelivered_devices:
            raise DemoFailure(f"{stats.undelivered_devices} devices could not deliver their reports")

        # ---- wait for the worker to fold everything the server acknowledged
        r = redis_server.client()
        try:
            folded = 0
            fold_started = time.monotonic()
            status.reset()
            while True:
                folded = _folded(r, FLAG_METRIC, None) + _folded(r, SKETCH_METRIC, dist.values[0])
                status.progress("folded reports", folded, stats.delivered, started=fold_started)
                if folded >= stats.delivered:
                    break
                _watch_children(children)
                if time.monotonic() - fold_started > FOLD_TIMEOUT:
                    raise DemoFailure(f"the aggregator folded {folded:,} of {stats.delivered:,} reports in {FOLD_TIMEOUT:.0f}s")
                time.sleep(0.2)
            status.progress("folded reports", folded, stats.delivered, started=fold_started, final=True)
            times.mark("folded")

            # ---- estimates
            flag_result = estimate_metric(r, FLAG_METRIC)
            sketch_result = estimate_metric(r, SKETCH_METRIC, candidates=list(dist.values), top=config.top)
        except redis_lib.RedisError as exc:
            raise DemoFailure(f"Redis failed: {exc}") from None
        finally:
            r.close()
        report = _Report(
            config=config, dist=dist, specs=served, true_counts=true_counts, true_flags=int(flags.sum()),
            flag=flag_result, sketch=sketch_result, stats=stats, folded=folded,
        )
        report.print_results(out)
        if config.chart is not None:
            report.chart(config.chart)
        times.mark("done")
        report.print_summary(out, times=times, seed=seed, chart=config.chart)
        return EXIT_OK
    finally:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if _in_main_thread() else None
        try:
            cancel.set()
            children.stop_all()  # devices still uploading now fail fast and give up
            if redis_server is not None:
                redis_server.stop()
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
            client_logger.setLevel(old_level)
            if config.keep:
                err.write(f"ldptel demo: kept {workdir}\n")
            else:
                shutil.rmtree(workdir, ignore_errors=True)
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)


def _replace_chart(config: DemoConfig, chart: str | None) -> DemoConfig:
    from dataclasses import replace

    return replace(config, chart=chart)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


# -------------------------------------------------------------------------------------------- results
@dataclass(kw_only=True)
class _Report:
    config: DemoConfig
    dist: Distribution
    specs: tuple[Any, ...]
    true_counts: np.ndarray
    true_flags: int
    flag: Any
    sketch: Any
    stats: _FleetStats
    folded: int
    _rows: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        index = {v: i for i, v in enumerate(self.dist.values)}
        order = np.argsort(-self.true_counts, kind="stable")
        true_rank = np.empty_like(order)
        true_rank[order] = np.arange(1, order.size + 1)
        est = self.sketch.estimate
        for label, count, lo, hi, se in zip(est.labels, est.counts.tolist(), est.ci_low.tolist(),
                                            est.ci_high.tolist(), est.stderr.tolist()):
            j = index[label]
            truth = int(self.true_counts[j])
            self._rows.append({
                "value": label, "name": self.dist.names[j], "estimate": count, "stderr": se, "ci_low": lo,
                "ci_high": hi, "true": truth, "true_rank": int(true_rank[j]), "inside": lo <= truth <= hi,
            })

    # summary numbers
    @property
    def n(self) -> int:
        return int(self.sketch.n)

    def mae(self) -> tuple[float, float]:
        """Mean absolute error of the shown estimates (reports, and frequency in percentage points)."""
        errors = [abs(row["estimate"] - row["true"]) for row in self._rows]
        mean = float(np.mean(errors)) if errors else float("nan")
        return mean, 100.0 * mean / max(self.n, 1)

    def covered(self) -> int:
        return sum(row["inside"] for row in self._rows)

    def recall(self) -> int:
        return sum(row["true_rank"] <= len(self._rows) for row in self._rows)

    def print_results(self, out: TextIO) -> None:
        flag_spec, sketch_spec = self.specs
        est = self.sketch.estimate
        p = sketch_spec.params
        out.write(
            f"\n{SKETCH_METRIC}: {p.mechanism}, ε = {p.effective_epsilon:.4g}, k = {p.k}, m = {p.m} · "
            f"n = {self.n:,} reports · top {len(self._rows)} of {len(self.dist.values)} by estimate · "
            f"{est.confidence:.0%} intervals\n"
        )
        headers = ("rank", "emoji", "name", "estimate", f"{est.confidence:.0%} interval", "true", "true rank", "in")
        cells = [
            (str(i), row["value"], row["name"][:34], f"{row['estimate']:,.0f}",
             f"[{row['ci_low']:,.0f}, {row['ci_high']:,.0f}]", f"{row['true']:,}", str(row["true_rank"]),
             "yes" if row["inside"] else "NO")
            for i, row in enumerate(self._rows, 1)
        ]
        widths = [max(len(h), *(_display_width(c[i]) for c in cells)) for i, h in enumerate(headers)]
        left = {1, 2}
        for line in [headers, *cells]:
            parts = []
            for i, cell in enumerate(line):
                pad = " " * (widths[i] - _display_width(cell))
                parts.append(cell + pad if i in left else pad + cell)
            out.write("  ".join(parts).rstrip() + "\n")
        prop = self.flag.proportion
        true_share = self.true_flags / max(self.config.devices, 1)
        inside = prop.ci_low <= true_share <= prop.ci_high
        out.write(
            f"\n{FLAG_METRIC} (rr, ε = {flag_spec.effective_epsilon:.4g}): dark mode on for {100 * prop.estimate:.2f}% "
            f"estimated (95% interval {100 * prop.ci_low:.2f}% to {100 * prop.ci_high:.2f}%), true {100 * true_share:.2f}% "
            f"({self.true_flags:,} of {self.config.devices:,}): {'inside' if inside else 'OUTSIDE'} the interval\n"
        )
        out.flush()

    def print_summary(self, out: TextIO, *, times: _Timings, seed: int, chart: str | None) -> None:
        flag_spec, sketch_spec = self.specs
        wall = times.span("start", "done")
        fleet_time = times.span("ready", "fleet")
        mae, mae_pp = self.mae()
        k = len(self._rows)
        s = self.stats
        out.write("\n")
        out.write(
            f"wall time: {wall:.1f} s (start {times.span('start', 'ready'):.1f} s, devices {fleet_time:.1f} s = "
            f"{self.config.devices / max(fleet_time, 1e-9):,.0f} devices/s, fold wait {times.span('fleet', 'folded'):.1f} s, "
            f"estimate and chart {times.span('folded', 'done'):.1f} s)\n"
        )
        out.write(f"devices: {self.config.devices:,} (seed {seed}, {self.config.threads} threads)\n")
        out.write(
            f"reports delivered: {s.delivered:,} of {s.queued:,} queued (refused {s.refused}, upload retries "
            f"{s.upload_errors}); folded by the aggregator: {self.folded:,}\n"
        )
        out.write(
            f"epsilon per report (effective): {SKETCH_METRIC} {sketch_spec.effective_epsilon:.4f} "
            f"({sketch_spec.mechanism}), {FLAG_METRIC} {flag_spec.effective_epsilon:.4f} (rr)\n"
        )
        out.write(
            f"accuracy: top-{k} mean absolute error {mae:,.1f} reports = {mae_pp:.2f} percentage points of frequency; "
            f"{self.covered()}/{k} true counts inside their 95% intervals; {self.recall()}/{k} of the true top {k} found\n"
        )
        if chart is not None:
            out.write(f"chart: {chart}\n")
        out.flush()

    def chart(self, path: str) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        rows = self._rows
        x = np.arange(len(rows))
        counts = np.array([row["estimate"] for row in rows])
        low = counts - np.array([row["ci_low"] for row in rows])
        high = np.array([row["ci_high"] for row in rows]) - counts
        truth = np.array([row["true"] for row in rows])
        sketch_spec = self.specs[1]
        fig, (ax, ax2) = plt.subplots(
            1, 2, figsize=(max(7.0, 0.55 * len(rows) + 3.5), 5.0), gridspec_kw={"width_ratios": [max(len(rows), 3), 1.2]}
        )
        ax.bar(x, counts, yerr=np.vstack([low, high]), capsize=3, color="#4c72b0",
               label=f"estimate ± {self.sketch.estimate.confidence:.0%} interval")
        ax.scatter(x, truth, marker="D", color="#dd8452", zorder=3, label="true count")
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xticks(x, [f"{i}. {row['name'][:26]}" for i, row in enumerate(rows, 1)], rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("devices")
        ax.set_title(
            f"{SKETCH_METRIC}: {sketch_spec.mechanism}, ε = {sketch_spec.effective_epsilon:.3g}, "
            f"{self.config.devices:,} devices", fontsize=10
        )
        ax.legend(fontsize=8)
        prop = self.flag.proportion
        true_share = self.true_flags / max(self.config.devices, 1)
        ax2.bar([0], [100 * prop.estimate], yerr=[[100 * (prop.estimate - prop.ci_low)], [100 * (prop.ci_high - prop.estimate)]],
                capsize=6, color="#55a868", width=0.6)
        ax2.scatter([0], [100 * true_share], marker="D", color="#dd8452", zorder=3)
        ax2.set_xticks([0], ["dark mode on"], fontsize=8)
        ax2.set_xlim(-0.8, 0.8)
        ax2.set_ylim(0, max(100 * prop.ci_high, 100 * true_share) * 1.3)
        ax2.set_ylabel("% of devices")
        ax2.set_title(f"dark mode\n(rr, ε = {self.specs[0].effective_epsilon:.3g})", fontsize=10)
        fig.tight_layout()
        try:
            fig.savefig(path, dpi=110, format="png")
        except OSError as exc:
            raise DemoUserError(f"cannot write the chart {path}: {exc}") from None
        finally:
            plt.close(fig)


def _display_width(text: str) -> int:
    """Terminal columns: emoji and other wide characters take two."""
    import unicodedata

    width = 0
    for ch in text:
        if unicodedata.combining(ch) or ch == "\ufe0f":
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


# ------------------------------------------------------------------------------------------ entry point
@contextlib.contextmanager
def _sigterm_as_exception() -> Iterator[None]:
    if not _in_main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """``ldptel demo [ARGS]``: returns the exit status (``ldptel.aggregator.cli`` calls ``main(args)``)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        config = parse_config(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except DemoUserError as exc:
        err.write(f"ldptel demo: error: {exc}\n")
        return EXIT_USER
    try:
        with _sigterm_as_exception():
            return run(config, out=out, err=err)
    except DemoUserError as exc:
        err.write(f"ldptel demo: error: {exc}\n")
        return EXIT_USER
    except DemoFailure as exc:
        err.write(f"ldptel demo: failed: {exc}\n")
        return EXIT_FAILED
    except KeyboardInterrupt:
        err.write("\nldptel demo: interrupted; every process it started was stopped\n")
        return EXIT_INTERRUPTED
    except _Terminated:
        err.write("ldptel demo: terminated; every process it started was stopped\n")
        return 128 + signal.SIGTERM
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
