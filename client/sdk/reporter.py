"""The SDK runtime: :class:`Reporter` privatizes on the device, queues durably and uploads in the background.

Quick start::

    from ldptel.client.sdk.reporter import Reporter

    with Reporter("https://telemetry.example.com", token, "/var/lib/myapp/ldptel") as rep:
        rep.report("homepage", "example.com")      # privatized now; the raw value is never stored or sent

What happens on ``report(metric, value)``
=========================================
1. The metric's spec is taken from the pinned ``specs``, else the on-disk cache, else fetched once from
   ``GET /v1/metrics/<name>`` (a failed fetch is not retried for a minute; the report is then refused with
   status ``"no_spec"``). Cached specs are refreshed in the background after ``spec_ttl`` seconds and
   whenever the server answers 409.
2. The privacy-budget ledger (:mod:`ldptel.client.sdk.ledger`) is checked: past the metric's daily policy the
   call returns status ``"budget_exceeded"`` **without privatizing or queueing anything** (no exception:
   the SDK never breaks the app's control flow for a policy decision). The budget day is the UTC day, but
   never earlier than the latest day already recorded (a clock moved backwards cannot reopen a spent day).
3. The value is privatized at once with the OS CSPRNG, with longitudinal protection
   (:mod:`ldptel.client.sdk.memo`): rr and grr go through a permanent randomized response derived from the
   device secret plus fresh instantaneous noise; sketches reuse the day's memoized report of that value.
4. In one sqlite transaction the privatized report is queued and the spend recorded; the raw value is not
   kept anywhere (not in sqlite, not in logs or errors, not in the returned result).

A value of the wrong type for the mechanism raises :class:`~ldptel.client.errors.InvalidValueError`
(:class:`~ldptel.client.errors.UnknownValueError` for a label outside a grr domain) before anything is
spent: that is a bug in the calling code, not a runtime condition. Everything else is reported through the
returned :class:`ReportResult`, ``on_error`` and :mod:`logging` (logger ``ldptel.client.sdk.reporter``).

Privacy guarantees (per device, per metric)
===========================================
* One report is ε₁-LDP with ε₁ = the spec's ``effective_epsilon`` (for rr/grr the PRR+IRR split is exact:
  one report has precisely the spec's channel, so the server's estimators need no change).
* rr, grr: all reports of one value under one metric version, ever, are together ε∞-LDP, with
  ε∞ = ln((1 − f₁)/f₁) (rr) or ln(p₁(d − 1)/(1 − p₁)) (grr), f₁/p₁ the permanent stage; about 1.66·ε₁
  at ε₁ = 1. See :func:`longitudinal_epsilon`.
* cms, oue-cms, hcms: all reports of one value on one budget day are together ε₁-LDP (memoized); the
  budget renews daily, so over D days a value costs at most D·ε₁.
* Per budget day at most ``reports_per_day`` reports and ``daily_epsilon`` are spent per metric.

Delivery
========
Reports are stored in ``storage_dir/ldptel.sqlite3`` (WAL) until the server acknowledges their batch. A
batch gets a random 16-byte id when it is formed, stored with its exact bytes, so every retry is the same
batch and the server counts it once. Uploads happen on a background thread when ``batch_size`` reports are
queued or every ``flush_interval`` seconds, with exponential backoff and jitter on network errors, 5xx and
429 (``Retry-After`` honoured). See :mod:`ldptel.client.sdk.transport` for how each status is handled.

Stale versions: reports already privatized under a version keep that version (they cannot be
re-privatized: the value is gone). They are sent as they are; if the server refuses the version (409) the
batch is dropped and counted in :attr:`ReporterStats.dropped_stale`, and its budget stays spent.

The queue holds at most ``max_queue`` unacknowledged reports; past that ``report()`` returns
``"queue_full"`` (nothing spent, nothing privatized) and logs once. The app is never blocked on the
network: ``report()`` only touches the local database (plus the one-time spec fetch of a new metric).

Testing: ``start=False`` runs no thread; :meth:`Reporter.flush` then uploads in the calling thread and waits
out backoffs with the injected ``sleep`` against the injected ``clock`` (no wall-clock time needed).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ldptel.client.sdk import ledger as _ledger

from ldptel.client.sdk import queue as _queue
from ldptel.client.sdk.memo import (
    grr_split,
    load_or_create_secret,
    memo_key,
    privatize_grr,
    privatize_rr,
    rr_split,
)
from ldptel.client.sdk.store import REPORT_AUTOCHECKPOINT, connect, init_schema
from ldptel.client.sdk.transport import NETWORK_ERRORS, Backoff, Transport, UploadError, classify
from ldptel.client.errors import LdpError
from ldptel.client.protocol.hashing import value_bytes
from ldptel.client.mechanisms import privatize
from ldptel.client.protocol.specs import MetricSpec
from ldptel.client.mechanisms import GrrParams, RrParams
from ldptel.client.protocol.wire import ReportBatch

__all__ = ["ReportResult", "Reporter", "ReporterStats", "UploadError", "longitudinal_epsilon"]

log = logging.getLogger("ldptel.client.sdk.reporter")

Status = Literal["queued", "budget_exceeded", "queue_full", "no_spec", "storage_error", "closed"]
MAX_BATCH_SIZE = 10_000  # the ingest default max_batch_reports: a larger batch would be refused with 413
NO_SPEC_RETRY = 60.0  # seconds before a failed first fetch of a spec is tried again from report()


def longitudinal_epsilon(spec: MetricSpec) -> float:
    """ε∞: the bound for any number of reports of one value (rr/grr: per version; sketches: per day)."""
    params = spec.params
    if isinstance(params, RrParams):
        return rr_split(params).epsilon_inf
    if isinstance(params, GrrParams):
        return grr_split(params).epsilon_inf
    return params.effective_epsilon


@dataclass(frozen=True, slots=True)
class ReportResult:
    """What ``report()`` did. ``report`` is the exact privatized report queued (None unless queued)."""

    status: Status
    metric: str
    version: int | None = None
    report: ReportBatch | None = None
    memoized: bool = False

    @property
    def queued(self) -> bool:
        return self.status == "queued"


@dataclass(frozen=True, slots=True)
class ReporterStats:
    """Counters since this Reporter started, plus ``pending`` (unacknowledged reports on disk)."""

    pending: int
    queued: int
    memoized: int
    delivered: int
    refused_budget: int
    dropped_queue_full: int
    dropped_rejected: int
    dropped_stale: int
    no_spec: int
    retries: int


class Reporter:
    """Privatize, queue durably and upload LDP reports for one app installation.

    :param endpoint: base URL of the ingest service (``http://`` or ``https://``).
    :param token: the app's bearer token.
    :param storage_dir: a directory private to this installation (created, mode 0700): queue, ledger, memo,
        spec cache and the device secret. Deleting it resets the longitudinal guarantees.
    :param batch_size: reports per uploaded batch (also the queue length that triggers an upload), 1 to 10,000.
    :param flush_interval: seconds between uploads of partial batches, > 0.
    :param max_queue: most unacknowledged reports kept on disk; more are dropped and counted.
    :param specs: pinned specs (offline use): a mapping name → :class:`MetricSpec` or an iterable of specs.
        Pinned metrics are never fetched.
    :param on_error: called with an :class:`UploadError` for every delivery problem; exceptions it raises
        are logged and swallowed.
    :param clock: wall-clock seconds since the epoch (budget days, backoff deadlines); ``time.time``.
    :param sleep: used by :meth:`flush` when no background thread runs; ``time.sleep``.
    :param start: start the background upload thread.
    :param timeout: HTTP timeout in seconds.
    :param spec_ttl: seconds after which a cached spec is refreshed in the background.
    :param backoff_base: first retry delay scale in seconds; :param backoff_cap: largest delay.
    """

    def __init__(
        self,
        endpoint: str,
        token: str,
        storage_dir: str | os.PathLike[str],
        *,
        batch_size: int = 256,
        flush_interval: float = 30.0,
        max_queue: int = 10_000,
        specs: Mapping[str, MetricSpec] | Iterable[MetricSpec] | None = None,
        on_error: Callable[[UploadError], None] | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
        start: bool = True,
        timeout: float = 10.0,
        spec_ttl: float = 3600.0,
        backoff_base: float = 1.0,
        backoff_cap: float = 300.0,
    ) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"batch_size must be an integer in [1, {MAX_BATCH_SIZE}], got {batch_size!r}")
        if not isinstance(max_queue, int) or isinstance(max_queue, bool) or max_queue < 1:
            raise ValueError(f"max_queue must be an integer >= 1, got {max_queue!r}")
        for name, val in (("flush_interval", flush_interval), ("timeout", timeout), ("spec_ttl", spec_ttl),
                          ("backoff_base", backoff_base), ("backoff_cap", backoff_cap)):
            if not isinstance(val, (int, float)) or isinstance(val, bool) or not val > 0:
                raise ValueError(f"{name} must be a number of seconds > 0, got {val!r}")
        if not isinstance(token, str) or not token:
            raise ValueError("token must be a non-empty string")
        self._clock = clock or time.time
        self._sleep = sleep or time.sleep
        self._batch_size = batch_size
        self._flush_interval = float(flush_interval)
        self._max_queue = max_queue
        self._spec_ttl = float(spec_ttl)
        self._on_error = on_error
        self._timeout = float(timeout)

        self._dir = Path(storage_dir)
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._secret = load_or_create_secret(self._dir)
        self._db = connect(self._dir, synchronous="NORMAL", autocheckpoint=REPORT_AUTOCHECKPOINT)  # report() path, guarded by _lock
        init_schema(self._db)
        self._up_db = connect(self._dir, synchronous="FULL")  # uploader, guarded by _upload_lock
        self._tx = Transport(endpoint, token, timeout=timeout, clock=self._clock)  # uploader
        self._fetch_tx = Transport(endpoint, token, timeout=timeout, clock=self._clock)  # report() first fetch

        self._lock = threading.RLock()
        self._upload_lock = threading.Lock()
        self._fetch_lock = threading.Lock()
        self._cond = threading.Condition()
        self._wake = threading.Event()

        # specs: pinned ones, every (name, version) seen, the current one per name with its fetch time
        self._pinned: dict[str, MetricSpec] = {}
        if specs is not None:
            items = specs.values() if isinstance(specs, Mapping) else specs
            for spec in items:
                if not isinstance(spec, MetricSpec):
                    raise TypeError(f"specs must hold MetricSpec objects, got {type(spec).__name__}")
                self._pinned[spec.name] = spec
        self._versions: dict[tuple[str, int], MetricSpec] = {}
        self._current: dict[str, tuple[MetricSpec, float]] = {}
        self._no_spec_until: dict[str, float] = {}
        self._want_refresh: set[str] = set()
        self._eps_cache: dict[tuple[str, int, int], tuple[float, float]] = {}
        with self._lock:
            self._load_specs()
            for spec in self._pinned.values():
                self._save_spec(self._db, spec, current=False)
            self._pending = _queue.pending_count(self._db)
            self._unbatched = _queue.unbatched_count(self._db)

        self._backoff = Backoff(base=float(backoff_base), cap=float(backoff_cap))
        self._retry_at = 0.0
        self._next_flush_at = self._clock()  # leftovers from a previous run go out at once
        self._force = False
        self._closed = False
        self._stopping = False
        self._full_logged = False
        self._n = dict.fromkeys(
            ("queued", "memoized", "delivered", "refused_budget", "dropped_queue_full", "dropped_rejected",
             "dropped_stale", "no_spec", "retries"), 0)
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(target=self._run, name="ldptel-uploader", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------------------------------ public
    def report(self, metric: str, value: object) -> ReportResult:
        """Privatize ``value`` for ``metric`` now and queue the privatized report (see the module docs).

        Never blocks on the network except for the first fetch of an unknown, unpinned metric.
        """
        if self._closed:
            return ReportResult("closed", metric)
        spec = self._spec_for(metric)
        if spec is None:
            self._count("no_spec")
            return ReportResult("no_spec", metric)
        eps_one, daily = self._budget_of(spec)
        now = self._clock()
        with self._lock:
            if self._closed:
                return ReportResult("closed", metric)
            if self._pending >= self._max_queue:
                self._n["dropped_queue_full"] += 1
                if not self._full_logged:
                    self._full_logged = True
                    log.warning("ldptel queue is full (%d reports); new reports are dropped", self._max_queue)
                return ReportResult("queue_full", metric, spec.version)
            conn = self._db
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    day, high, count, eps = _ledger.state(conn, metric, now)
                    if not _ledger.allows(spec, count, eps, eps_one=eps_one, daily=daily):
                        conn.execute("ROLLBACK")
                        self._n["refused_budget"] += 1
                        return ReportResult("budget_exceeded", metric, spec.version)
                    if day > high:
                        _ledger.set_day(conn, day)
                        conn.execute("DELETE FROM memo WHERE day < ?", (day,))
                    batch, payload, memoized = self._privatize(conn, spec, value, day)
                    _queue.enqueue(conn, metric, spec.version, payload)
                    _ledger.spend(conn, metric, day, eps_one)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                log.error("ldptel could not store a report: %s", exc)
                self._emit(UploadError(f"local storage error: {exc}", outcome="storage_error", metric=metric))
                return ReportResult("storage_error", metric, spec.version)
            self._pending += 1
            self._unbatched += 1
            self._n["queued"] += 1
            self._n["memoized"] += memoized
            wake = self._unbatched >= self._batch_size
        if wake:
            self._wake.set()
        return ReportResult("queued", metric, spec.version, batch, memoized)

    def flush(self, timeout: float = 30.0) -> bool:
        """Upload everything queued now; True when nothing is left unacknowledged within ``timeout`` seconds.

        Backoffs are honoured (a flush does not hammer a server that asked for Retry-After). With a
        background thread this waits for it (real time); without one (``start=False``) it uploads in the
        calling thread and waits out backoffs with the injected ``sleep`` against the injected ``clock``.
        """
        if self._thread is not None and self._thread.is_alive():
            deadline = time.monotonic() + timeout
            with self._cond:
                self._force = True
                self._wake.set()
                while self._pending > 0:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(min(left, 0.5))
            return True
        deadline = self._clock() + timeout
        for _ in range(1_000_000):
            self._cycle(force=True)
            if self._pending == 0:
                return True
            now = self._clock()
            wait = max(self._retry_at - now, 0.0)
            if now + wait > deadline:
                return False
            if wait > 0:
                self._sleep(wait)
        return False  # pragma: no cover - unreachable in practice

    def close(self, timeout: float = 10.0) -> None:
        """Try to deliver what is queued (up to ``timeout`` s), stop the thread, close the database.

        Undelivered reports stay on disk and go out on the next start.
        """
        if self._closed:
            return
        try:
            if self._pending > 0:
                self.flush(timeout)
        finally:
            with self._lock:
                self._closed = True
            self._stopping = True
            self._wake.set()
            if self._thread is not None:
                self._thread.join(timeout + self._timeout + 1.0)
            with self._upload_lock, self._lock:
                self._tx.close()
                self._fetch_tx.close()
                self._db.close()
                self._up_db.close()

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> ReporterStats:
        with self._lock:
            return ReporterStats(pending=self._pending, **self._n)

    def budget_remaining(self, metric: str) -> int | None:
        """Reports the ledger still allows for ``metric`` today (None when its spec is not known)."""
        spec = self._pinned.get(metric) or (self._current.get(metric) or (None, 0.0))[0]
        if spec is None:
            return None
        with self._lock:
            return _ledger.remaining(self._db, spec, self._clock())

    def _budget_of(self, spec: MetricSpec) -> tuple[float, float]:
        """(effective ε of one report, daily ε) of a spec, computed once (the properties are not cached)."""
        key = (spec.name, spec.version, id(spec))
        cached = self._eps_cache.get(key)
        if cached is None:
            cached = self._eps_cache[key] = (spec.effective_epsilon, spec.daily_epsilon)
        return cached

    # -------------------------------------------------------------------------------- privatization
    def _privatize(self, conn: sqlite3.Connection, spec: MetricSpec, value: object, day: int) -> tuple[ReportBatch, bytes, bool]:
        params, metric, version = spec.params, spec.name, spec.version
        if isinstance(params, RrParams):
            batch = privatize_rr(value, params, secret=self._secret, metric=metric, version=version)
            return batch, _queue.pack_report(batch, params), False
        if isinstance(params, GrrParams):
            batch = privatize_grr(value, params, secret=self._secret, metric=metric, version=version)
            return batch, _queue.pack_report(batch, params), False
        key = memo_key(self._secret, metric, version, day, value_bytes(value))
        row = conn.execute("SELECT payload FROM memo WHERE key = ?", (key,)).fetchone()
        if row is not None:
            payload = bytes(row[0])
            return _queue.unpack_reports([payload], params), payload, True
        batch = privatize(value, params)
        payload = _queue.pack_report(batch, params)
        conn.execute("INSERT INTO memo(key, day, payload) VALUES (?, ?, ?)", (key, day, payload))
        return batch, payload, False

    # ----------------------------------------------------------------------------------------- specs
    def _load_specs(self) -> None:
        for metric, version, text in self._db.execute("SELECT metric, version, json FROM specs"):
            try:
                self._versions[(metric, version)] = MetricSpec.from_json(text)
            except LdpError:
                log.warning("ignoring an unreadable cached spec for %s v%d", metric, version)
        for metric, version, fetched in self._db.execute("SELECT metric, version, fetched FROM current_spec"):
            spec = self._versions.get((metric, version))
            if spec is not None:
                self._current[metric] = (spec, float(fetched))

    def _save_spec(self, conn: sqlite3.Connection, spec: MetricSpec, *, current: bool) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO specs(metric, version, json) VALUES (?, ?, ?)",
            (spec.name, spec.version, spec.to_json()),
        )
        self._versions[(spec.name, spec.version)] = spec
        if current:
            now = self._clock()
            conn.execute(
                "INSERT OR REPLACE INTO current_spec(metric, version, fetched) VALUES (?, ?, ?)",
                (spec.name, spec.version, now),
            )
            self._current[spec.name] = (spec, now)

    def _spec_of(self, metric: str, version: int) -> MetricSpec | None:
        pinned = self._pinned.get(metric)
        if pinned is not None and pinned.version == version:
            return pinned
        return self._versions.get((metric, version))

    def _spec_for(self, metric: str) -> MetricSpec | None:
        pinned = self._pinned.get(metric)
        if pinned is not None:
            return pinned
        entry = self._current.get(metric)
        if entry is not None:
            if self._clock() - entry[1] > self._spec_ttl:
                self._want_refresh.add(metric)
            return entry[0]
        with self._fetch_lock:
            entry = self._current.get(metric)
            if entry is not None:
                return entry[0]
            now = self._clock()
            if now < self._no_spec_until.get(metric, float("-inf")):
                return None
            spec = self._fetch_spec(self._fetch_tx, metric, self._db, self._lock)  # type: ignore[arg-type]
            if spec is None:
                self._no_spec_until[metric] = now + NO_SPEC_RETRY
            return spec

    def _fetch_spec(self, tx: Transport, metric: str, conn: sqlite3.Connection, lock: contextlib.AbstractContextManager[object]) -> MetricSpec | None:
        try:
            resp = tx.get_metric(metric)
        except NETWORK_ERRORS as exc:
            self._emit(UploadError(f"could not fetch the spec of {metric!r}: {exc}", metric=metric))
            return None
        spec = _spec_from_body(resp.json(), metric) if resp.status == 200 else None
        if spec is None:
            self._emit(UploadError(
                f"no usable spec for {metric!r} (HTTP {resp.status})", status=resp.status,
                outcome="no_spec", metric=metric))
            return None
        with lock:
            self._save_spec(conn, spec, current=True)
        self._want_refresh.discard(metric)
        return spec

    # -------------------------------------------------------------------------------------- uploading
    def _run(self) -> None:
        while not self._stopping:
            try:
                delay = self._cycle(force=self._force)
            except Exception as exc:  # never let the thread die; never raise into the app
                log.exception("ldptel uploader cycle failed")
                self._emit(UploadError(f"uploader error: {exc!r}", outcome="internal"))
                delay = self._flush_interval
            with self._cond:
                if self._pending == 0:
                    self._force = False
                self._cond.notify_all()
            if self._stopping:
                break
            self._wake.wait(max(delay, 0.001))
            self._wake.clear()

    def _cycle(self, *, force: bool) -> float:
        """One round: refresh specs, form due batches, send them in order. Seconds until the next round."""
        with self._upload_lock:
            if self._stopping and self._closed:
                return self._flush_interval
            now = self._clock()
            if now < self._retry_at:
                return self._retry_at - now
            for metric in list(self._want_refresh):
                if metric not in self._pinned:
                    self._fetch_spec(self._tx, metric, self._up_db, contextlib.nullcontext())
            due = force or now >= self._next_flush_at
            if due:
                self._next_flush_at = now + self._flush_interval
            if self._unbatched > 0 and (due or self._unbatched >= self._batch_size):
                res = _queue.form_batches(self._up_db, batch_size=self._batch_size, partial=due, spec_of=self._spec_of)
                with self._lock:
                    self._unbatched -= res.moved
                    self._pending -= res.unencodable
                    self._n["dropped_stale"] += res.unencodable
            last = 0
            while True:
                batch = _queue.next_batch(self._up_db, last)
                if batch is None:
                    break
                last = batch.id
                if not self._send(batch):
                    break
            try:
                self._up_db.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.Error as exc:  # a busy database: the next cycle tries again
                log.debug("ldptel WAL checkpoint skipped: %s", exc)
            now = self._clock()
            nxt = self._next_flush_at if self._retry_at <= now else max(self._retry_at, self._next_flush_at)
            return max(nxt - now, 0.0)

    def _send(self, batch: _queue.StoredBatch) -> bool:
        """Post one batch; False when the uploader must back off."""
        info = {"metric": batch.metric, "version": batch.version, "n": batch.n, "batch_id": batch.batch_id}
        try:
            resp = self._tx.post_batch(batch.body)
        except NETWORK_ERRORS as exc:
            self._retry(None)
            self._emit(UploadError(f"network error: {exc!r}", outcome="retry", **info))  # type: ignore[arg-type]
            return False
        outcome = classify(resp.status)
        if outcome == "ack":
            self._settle(batch, "delivered")
            self._backoff.reset()
            return True
        if outcome in ("retry", "auth"):
            self._retry(resp.retry_after)
            self._emit(UploadError(f"HTTP {resp.status}; will retry", status=resp.status, outcome=outcome, **info))  # type: ignore[arg-type]
            return False
        if outcome == "stale":
            self._settle(batch, "dropped_stale")
            spec = _spec_from_body(resp.json(), batch.metric)
            if spec is not None and batch.metric not in self._pinned:
                self._save_spec(self._up_db, spec, current=True)
            elif batch.metric not in self._pinned:
                self._want_refresh.add(batch.metric)
            self._emit(UploadError(
                f"HTTP 409: version {batch.version} of {batch.metric!r} is no longer accepted; {batch.n} reports dropped",
                status=409, outcome="stale", **info))  # type: ignore[arg-type]
            return True
        self._settle(batch, "dropped_rejected")
        self._emit(UploadError(
            f"HTTP {resp.status}: batch rejected for good; {batch.n} reports dropped ({resp.body[:200]!r})",
            status=resp.status, outcome="rejected", **info))  # type: ignore[arg-type]
        return True

    def _settle(self, batch: _queue.StoredBatch, counter: str) -> None:
        _queue.remove_batch(self._up_db, batch)
        with self._lock:
            self._pending -= batch.n
            self._n[counter] += batch.n
            if self._pending < self._max_queue:
                self._full_logged = False

    def _retry(self, retry_after: float | None) -> None:
        delay = self._backoff.next_delay(retry_after)
        self._retry_at = self._clock() + delay
        with self._lock:
            self._n["retries"] += 1
        log.info("ldptel upload will be retried in %.1f s", delay)

    # ------------------------------------------------------------------------------------------ misc
    def _count(self, counter: str) -> None:
        with self._lock:
            self._n[counter] += 1

    def _emit(self, err: UploadError) -> None:
        log.warning("ldptel: %s", err)
        if self._on_error is not None:
            try:
                self._on_error(err)
            except Exception:
                log.exception("ldptel on_error callback raised")


def _spec_from_body(data: object, metric: str) -> MetricSpec | None:
    """The current spec from a registry record (``{"current": {...}, ...}``), a ``{"spec": ...}`` body or a spec."""
    if not isinstance(data, dict):
        return None
    if data.get("status") == "retired":
        return None
    candidates = [data.get("current"), data.get("spec"), data.get("current_spec"), data]
    for cand in candidates:
        if isinstance(cand, dict) and "params" in cand:
            try:
                spec = MetricSpec.from_dict(cand)
            except LdpError:
                continue
            if spec.name == metric:
                return spec
    return None
