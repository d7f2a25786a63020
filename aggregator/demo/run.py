"""One demo run, phase by phase (see the package docstring): check, start the services, simulate the fleet,
wait for the fold, query and report; and, whatever happens, stop everything it started (:class:`_Session`).

Imports redis-py, Flask's configuration and the embedded server: :mod:`.entry` loads this module only after
checking that they are installed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import secrets
import shutil
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO, TypeVar

import numpy as np
import redis

from ldptel.aggregator.cli.extras import install_hint
from ldptel.aggregator.demo.config import (
    FLAG_METRIC,
    SESSION_HIST_METRIC,
    SESSION_MEAN_METRIC,
    SESSION_PERCENTILES,
    SKETCH_METRIC,
    WORDS_FILE,
    WORDS_METRIC,
    DemoConfig,
    build_numeric_specs,
    build_specs,
    build_words_spec,
)
from ldptel.aggregator.demo.distribution import Distribution, load_distribution
from ldptel.aggregator.demo.errors import EXIT_OK, DemoFailure, DemoUserError
from ldptel.aggregator.demo.fleet import Fleet, FleetStats, Truth, draw_words
from ldptel.aggregator.demo.processes import Child, Children, log_tail
from ldptel.aggregator.demo.progress import Status, Timings
from ldptel.aggregator.demo.report import Report
from ldptel.aggregator.demo.services import create_metrics, folded_reports, service_env, start_ingest, start_worker
from ldptel.aggregator.demo.signals import acknowledge, sigint_ignored
from ldptel.aggregator.discover import discover_metric
from ldptel.aggregator.query import FrequencyResult, HistogramResult, QueryResult, estimate_metric
from ldptel.client.errors import InvalidParameterError
from ldptel.client.protocol.specs import MetricSpec
from ldptel.storage.client import connect
from ldptel.storage.embedded import EmbeddedRedis, EmbeddedRedisError

FOLD_TIMEOUT = 60.0  # seconds for the worker to fold everything after the last device
STALL_TIMEOUT = 20.0  # seconds without any acknowledged report before the demo gives up on the ingest server
POLL_SECONDS = 0.25  # how often the fleet loop looks at finished devices and the children
FOLD_POLL_SECONDS = 0.2
MIN_SHM_FREE = 512 * 1024 * 1024  # bytes free on /dev/shm to put the work directory there
CLIENT_LOGGER = "ldptel.client"  # quieted during the run: delivery problems are counted through on_error


@dataclass
class _Session:
    """What a run starts; :meth:`close` stops it in order: children first (devices still uploading then fail
    fast and give up), Redis, the device threads; then the work directory goes unless ``keep``."""

    workdir: Path
    keep: bool
    children: Children = field(default_factory=Children)
    cancel: threading.Event = field(default_factory=threading.Event)
    executor: ThreadPoolExecutor | None = None
    redis_server: EmbeddedRedis | None = None
    client_log_level: int = logging.NOTSET

    def quiet_client_logs(self) -> None:
        logger = logging.getLogger(CLIENT_LOGGER)
        self.client_log_level = logger.level
        logger.setLevel(logging.ERROR)

    def close(self, err: TextIO) -> None:
        self.cancel.set()
        self.children.stop_all()
        if self.redis_server is not None:
            self.redis_server.stop()
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)
        logging.getLogger(CLIENT_LOGGER).setLevel(self.client_log_level)
        if self.keep:
            err.write(f"ldptel demo: kept {self.workdir}\n")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass(frozen=True, kw_only=True)
class _Services:
    redis_server: EmbeddedRedis
    ingest: Child
    endpoint: str
    app_token: str
    specs: tuple[MetricSpec, ...]  # as the ingest service serves them to apps


def run(config: DemoConfig, *, out: TextIO, err: TextIO) -> int:
    """Run the demo (see the package docstring). Raises DemoUserError / DemoFailure / KeyboardInterrupt."""
    try:
        specs = (*build_specs(config), build_words_spec(config), *build_numeric_specs(config))
    except InvalidParameterError as exc:
        raise DemoUserError(str(exc)) from None
    dist = load_distribution()
    words = load_distribution(shipped=WORDS_FILE)
    if config.top > len(dist.values):
        raise DemoUserError(f"--top must be at most {len(dist.values)} (the distribution's size)")
    if config.chart is not None and importlib.util.find_spec("matplotlib") is None:
        if config.chart_explicit:
            raise DemoUserError(f"--chart needs matplotlib: {install_hint('plot')}")
        config = dataclasses.replace(config, chart=None)
        err.write(f"ldptel demo: matplotlib is not installed, no chart ({install_hint('plot')})\n")

    status = Status(err)
    times = Timings()
    seed = config.seed if config.seed is not None else secrets.randbits(32)
    parent = Path(config.workdir) if config.workdir else _default_parent()
    try:
        workdir = Path(tempfile.mkdtemp(prefix="ldptel-demo-", dir=parent))
    except OSError as exc:
        raise DemoUserError(f"cannot create a work directory in {parent}: {exc}") from None

    session = _Session(workdir=workdir, keep=config.keep)
    session.quiet_client_logs()
    try:
        status.line(f"work directory {workdir}{' (kept)' if config.keep else ''}")
        services = _start_services(session, config, specs, status=status, out=out)
        times.mark("ready")
        truth = Truth.draw(dist, devices=config.devices, seed=seed)
        typed = draw_words(words, devices=config.devices, seed=seed)
        stats = _simulate(session, config, services, dist=dist, truth=truth, seed=seed, status=status,
                          words=tuple(tuple(words.values[j] for j in row) for row in typed.tolist()))
        times.mark("fleet")
        r = connect(services.redis_server.url)
        try:
            folded = _wait_folded(r, session, dist=dist, stats=stats, status=status, word=words.values[0])
            times.mark("folded")
            flag_result = _typed(estimate_metric(r, FLAG_METRIC), FrequencyResult)
            sketch_result = estimate_metric(r, SKETCH_METRIC, candidates=list(dist.values), top=config.top)
            found = discover_metric(r, WORDS_METRIC, top=config.top)  # no word list: discovered
            lengths = (estimate_metric(r, SESSION_MEAN_METRIC),
                       _typed(estimate_metric(r, SESSION_HIST_METRIC, percentiles=SESSION_PERCENTILES), HistogramResult))
        except redis.RedisError as exc:
            raise DemoFailure(f"Redis failed: {exc}") from None
        finally:
            r.close()
        report = Report(
            config=config, dist=dist, specs=(services.specs[0], services.specs[1]), true_counts=truth.true_counts,
            true_flags=int(truth.flags.sum()), flag=flag_result, sketch=sketch_result, stats=stats, folded=folded,
            words=words, true_words=np.bincount(typed.reshape(-1), minlength=len(words.values)), found=found,
            session=lengths, true_seconds=truth.seconds,
        )
        report.print_results(out)
        if config.chart is not None:
            report.chart(config.chart)
        times.mark("done")
        report.print_summary(out, times=times, seed=seed, chart=config.chart)
        return EXIT_OK
    finally:
        acknowledge()  # a signal's exception got here: it is not sent again while the cleanup runs
        with sigint_ignored():
            session.close(err)


def _default_parent() -> Path:
    shm = Path("/dev/shm")
    try:
        if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > MIN_SHM_FREE:
            return shm  # tmpfs: each device's sqlite commits cost no disk flushes
    except OSError:
        pass
    return Path(tempfile.gettempdir())


def _start_services(session: _Session, config: DemoConfig, specs: tuple[MetricSpec, ...], *, status: Status,
                    out: TextIO) -> _Services:
    """Redis, the ingest service, the metrics (over HTTP) and the worker; prints their pids."""
    try:
        # The shipped durability (appendfsync always, as deploy/redis.conf): the demo shows "acknowledged = counted
        # once", and its batches are large enough that the per-pass fsync costs it little.
        redis_server = session.redis_server = EmbeddedRedis(
            appendonly=True, appendfsync="always", data_dir=session.workdir / "redis").start()
    except EmbeddedRedisError as exc:
        raise DemoFailure(str(exc)) from None
    app_token, admin_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    env = service_env(redis_url=redis_server.url, app_token=app_token, admin_token=admin_token)
    logs = session.workdir / "logs"
    ingest, endpoint, server_label = start_ingest(session.children, config.server, env=env, logs=logs)
    served = create_metrics(endpoint, admin_token=admin_token, app_token=app_token, specs=specs)
    worker = start_worker(session.children, redis_url=redis_server.url, env=env, logs=logs)
    status.line(
        f"processes: redis pid {redis_server.pid}, ingest pid {ingest.proc.pid} ({server_label}) at {endpoint}, "
        f"aggregator pid {worker.proc.pid}"
    )
    out.write(f"pids: redis={redis_server.pid} ingest={ingest.proc.pid} aggregator={worker.proc.pid}\n")
    out.flush()
    return _Services(redis_server=redis_server, ingest=ingest, endpoint=endpoint, app_token=app_token, specs=served)


def _simulate(session: _Session, config: DemoConfig, services: _Services, *, dist: Distribution, truth: Truth, seed: int,
              status: Status, words: tuple[tuple[str, ...], ...]) -> FleetStats:
    """Run every device through a short queue of a thread pool, watching the children and the ingest progress."""
    fleet = Fleet(
        endpoint=services.endpoint,
        token=services.app_token,
        specs=services.specs,
        root=session.workdir / "devices",
        flags=truth.flags,
        values=tuple(dist.values[j] for j in truth.picks.tolist()),
        seconds=truth.seconds,
        keep=config.keep,
        cancel=session.cancel,
        stats=FleetStats(),
        words=words,
    )
    flag_spec, sketch_spec = services.specs[:2]
    status.line(
        f"simulating {config.devices:,} devices (seed {seed}), each a Reporter reporting {FLAG_METRIC} "
        f"({flag_spec.mechanism}), {SKETCH_METRIC} ({config.mechanism}), its session length "
        f"({SESSION_MEAN_METRIC}, {SESSION_HIST_METRIC}) and {len(words[0]) if words else 0} words "
        f"to {WORDS_METRIC} ({services.specs[2].mechanism}) at ε = {config.epsilon:g} over HTTP"
    )
    executor = session.executor = ThreadPoolExecutor(max_workers=config.threads, thread_name_prefix="ldptel-device")
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
        done, inflight = wait(inflight, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
        for fut in done:
            fut.result()  # a bug in a device task stops the demo
        finished += len(done)
        session.children.check()
        status.progress("devices", finished, config.devices, started=started)
        now = time.monotonic()
        if fleet.stats.delivered != last_delivered:
            last_delivered, last_progress = fleet.stats.delivered, now
        elif now - last_progress > STALL_TIMEOUT:
            raise DemoFailure(
                f"the ingest server acknowledged no report for {STALL_TIMEOUT:.0f}s "
                f"({fleet.stats.upload_errors} upload errors); its log ends with:\n{log_tail(services.ingest.log_path)}"
            )
    status.progress("devices", config.devices, config.devices, started=started, final=True)
    if fleet.stats.undelivered_devices:
        raise DemoFailure(f"{fleet.stats.undelivered_devices} devices could not deliver their reports")
    return fleet.stats


def _wait_folded(r: redis.Redis, session: _Session, *, dist: Distribution, stats: FleetStats, status: Status,
                 word: str) -> int:
    """Wait until the worker has folded every report the ingest service acknowledged; returns how many it folded."""
    folded = 0
    fold_started = time.monotonic()
    status.reset()
    while True:
        folded = folded_reports(r, FLAG_METRIC, None) + folded_reports(r, SKETCH_METRIC, dist.values[0])
        folded += folded_reports(r, WORDS_METRIC, word)
        folded += folded_reports(r, SESSION_MEAN_METRIC, None) + folded_reports(r, SESSION_HIST_METRIC, None)
        status.progress("folded reports", folded, stats.delivered, started=fold_started)
        if folded >= stats.delivered:
            break
        session.children.check()
        if time.monotonic() - fold_started > FOLD_TIMEOUT:
            raise DemoFailure(f"the aggregator folded {folded:,} of {stats.delivered:,} reports in {FOLD_TIMEOUT:.0f}s")
        time.sleep(FOLD_POLL_SECONDS)
    status.progress("folded reports", folded, stats.delivered, started=fold_started, final=True)
    return folded


R = TypeVar("R", bound=QueryResult)


def _typed(result: QueryResult, kind: type[R]) -> R:
    """``result`` as the result type the demo's metric gives (its spec fixes the kind)."""
    if not isinstance(result, kind):
        raise DemoFailure(f"{result.metric} gave a {result.kind} result, not {kind.kind}")
    return result
