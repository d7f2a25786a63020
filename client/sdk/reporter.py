"""The SDK runtime: :class:`Reporter` privatizes on the device, queues durably and uploads in the background.

Quick start::

    from ldptel.client.sdk.reporter import Reporter

    with Reporter("https://telemetry.example.com", token, "/var/lib/myapp/ldptel") as rep:
        rep.report("homepage", "example.com")      # privatized now; the raw value is never stored or sent

What happens on ``report(metric, value)``
=========================================
1. The metric's spec is taken from the pinned ``specs``, else the on-disk cache. ``report()`` never waits on
   the network: a metric whose spec is not known yet is refused with status ``"no_spec"`` (nothing
   privatized, nothing spent, the value dropped) and its spec is fetched from ``GET /v1/metrics/<name>`` in
   the background (a failed fetch is not tried again for a minute). The value cannot be kept until the spec
   arrives: it would have to be stored raw, and the raw value is never stored. Declare the metrics with
   ``metrics=[...]`` so their specs are fetched at start-up, and :meth:`Reporter.wait_for_specs` if the first
   reports matter. Cached specs are refreshed in the background after ``spec_ttl`` seconds and whenever the
   server answers 409.
2. A served spec (fetched, cached or adopted; not a pinned one) beyond the app's
   :class:`~ldptel.client.sdk.policy.PrivacyPolicy` (per-report ε, daily ε, ε∞) is refused: status
   ``"policy_refused"`` with ``reason`` set, nothing privatized, queued or spent, and a
   :class:`~ldptel.client.sdk.policy.PolicyRefusal` to ``on_error`` once per metric version and reason.
   A metric with ``sample_rate`` β < 1 then asks the device's secret per-day draw (:mod:`ldptel.client.sdk.sampling`):
   a device that does not take part in the metric that day gets status ``"not_sampled"`` (nothing privatized,
   queued, sent or spent; the decision is kept for the day).
   Then the privacy-budget ledger (:mod:`ldptel.client.sdk.ledger`) is checked: past the metric's daily policy the
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
* rr, grr: all reports of one value under one privatization (mechanism and params: versions that only
  change metadata share it), ever, are together ε∞-LDP, with ε∞ = ln((1 − f₁)/f₁) (rr) or
  ln(p₁(d − 1)/(1 − p₁)) (grr), f₁/p₁ the permanent stage; about 1.66·ε₁ at ε₁ = 1. See
  :func:`longitudinal_epsilon`. Every privatization a metric used is charged once in the lifetime ledger
  (:func:`~ldptel.client.sdk.ledger.charge_lifetime`): all reports ever of one value are together
  (Σ ε∞)-LDP, and a served spec that would take that sum past the policy's ε∞ is refused. daily-mean: the
  same for its α-rounded bit, 2·ε∞ for histories that change it at the same times. This is the level: the
  times a value changes are not covered by ε∞; any two histories are together ε_irr-LDP per report that
  differs (ε_irr ≈ 1.66·ε₁ at ε₁ = 1), what each report is charged against the daily budget
  (:mod:`ldptel.client.mechanisms.longitudinal`).
* the other mechanisms: all reports of one value on one budget day are together ε₁-LDP (memoized); the
  budget renews daily, so over D days a value costs at most D·ε₁. Which of a day's reports repeat a value
  is not hidden.
* Per budget day at most ``reports_per_day`` reports and ``daily_epsilon`` (``reports_per_day`` × the
  per-report charge, ε₁ or ε_irr) are spent per metric, whatever the values.
* Whatever the server serves, a served spec is used only within the app's
  :class:`~ldptel.client.sdk.policy.PrivacyPolicy` (defaults: ε ≤ 4 per report, ≤ 8 per metric and day,
  ε∞ ≤ 8; the reasons are in :mod:`ldptel.client.sdk.policy`).

Delivery
========
Reports are stored in ``storage_dir/ldptel.sqlite3`` (WAL) until the server acknowledges their batch. A
batch gets a random 16-byte id when it is formed, stored with its exact bytes, so every retry is the same
batch and the server counts it once. Uploads happen on a background thread (:mod:`ldptel.client.sdk.uploader`)
when ``batch_size`` reports are queued or every ``flush_interval`` seconds, with exponential backoff and
jitter on network errors, 5xx and 429 (``Retry-After`` honoured). See :mod:`ldptel.client.sdk.transport`
for how each status is handled. A batch holds reports of one metric version and one budget day; up to
``upload_parts`` batches of distinct metrics go in one request (a multi-part upload), which the server
stores as unrelated entries (:func:`ldptel.client.sdk.queue.plan_uploads`).

Stale versions: reports already privatized under a version keep that version (they cannot be
re-privatized: the value is gone). They are sent as they are; if the server refuses the version (409) the
batch is dropped and counted in :attr:`ReporterStats.dropped_stale`, and its budget stays spent.

The queue holds at most ``max_queue`` unacknowledged reports; past that ``report()`` returns
``"queue_full"`` (nothing spent, nothing privatized) and logs once. The app is never blocked on the
network: ``report()`` only touches the local database (specs are fetched in the background).

Testing: ``start=False`` runs no thread; :meth:`Reporter.flush` then uploads in the calling thread and waits
out backoffs with the injected ``sleep`` against the injected ``clock`` (no wall-clock time needed).

Where things live
=================
This module: :class:`Reporter` (what the app sees; steps 2 to 4 above in one transaction),
:class:`ReportResult`; steps 2 and 3 are :func:`~ldptel.client.sdk.memo.privatize_for_device`
(re-exported here with :func:`~ldptel.client.sdk.memo.longitudinal_epsilon`). Step 1 is :mod:`ldptel.client.sdk.spec_cache`; uploading is
:mod:`ldptel.client.sdk.uploader` over :mod:`ldptel.client.sdk.transport` (HTTP, backoff,
:data:`MAX_BATCH_SIZE`); the tables are :mod:`ldptel.client.sdk.store`, :mod:`ldptel.client.sdk.queue`,
:mod:`ldptel.client.sdk.ledger` and :mod:`ldptel.client.sdk.memo`; :class:`ReporterStats` and the counters
behind it are :mod:`ldptel.client.sdk.counters`; :class:`UploadError`, ``on_error`` and the logger are
:mod:`ldptel.client.sdk.notify`.
"""

from __future__ import annotations

import math
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms.capabilities import OnDevice, on_device
from ldptel.client.mechanisms.registry import AnyMechanism, mechanism_of
from ldptel.client.protocol.breakdown import check_profile
from ldptel.client.protocol.identity import IdentityCache, by_identity
from ldptel.client.protocol.keyed import privatization_fingerprint
from ldptel.client.protocol.specs import NAME_RE, NAME_RULE, MetricSpec
from ldptel.client.protocol.validate import check_int, check_number
from ldptel.client.protocol.wire import (
    DEFAULT_RETRY_HORIZON_DAYS,
    MAX_RETRY_HORIZON_DAYS,
    MAX_UPLOAD_PARTS,
    ReportBatch,
)
from ldptel.client.sdk import ledger as _ledger
from ldptel.client.sdk import memo
from ldptel.client.sdk import queue as _queue
from ldptel.client.sdk import sampling as _sampling
from ldptel.client.sdk import tally as _tally
from ldptel.client.sdk.counters import Counters, ReporterStats
from ldptel.client.sdk.memo import load_or_create_secret, longitudinal_epsilon, privatize_for_device
from ldptel.client.sdk.notify import Notifier, UploadError, log
from ldptel.client.sdk.policy import PolicyRefusal, PrivacyPolicy
from ldptel.client.sdk.spec_cache import SpecCache, pinned_by_name
from ldptel.client.sdk.store import REPORT_AUTOCHECKPOINT, connect, init_schema, truncate_wal
from ldptel.client.sdk.transport import DEFAULT_UPLOAD_PARTS, MAX_BATCH_SIZE, Backoff, Transport
from ldptel.client.sdk.uploader import Uploader

__all__ = [
    "MAX_BATCH_SIZE",
    "PolicyRefusal",
    "PrivacyPolicy",
    "ReportResult",
    "Reporter",
    "ReporterStats",
    "UploadError",
    "longitudinal_epsilon",
    "privatize_for_device",
]

Status = Literal[
    "queued", "budget_exceeded", "policy_refused", "queue_full", "no_spec", "storage_error", "closed", "not_sampled",
    "counted",
]


# ------------------------------------------------------------------------------------------ the Reporter
@dataclass(frozen=True, slots=True)
class _Cost:
    """A spec's effective ε per report and per day, and why the policy refuses it (None: it does not)."""

    eps_one: float  # what the daily ledger charges per report (spec.report_charge)
    daily: float
    refusal: str | None
    fingerprint: bytes  # privatization_fingerprint(spec.params)
    lifetime: float | None  # ε∞ charged once per privatization in the lifetime ledger (permanent RR); else None
    mech: AnyMechanism  # mechanism_of(spec.params)
    on_device: bool  # the mechanism aggregates on the device (count(), not report())


@dataclass(frozen=True, slots=True)
class _Queued:
    """The report was privatized and queued and its ε spent (a new privatization's ε∞ charged too)."""

    batch: ReportBatch
    memoized: bool
    new_day: bool  # the budget day moved forward: past days' memo rows were deleted (empty the WAL once committed)


@dataclass(frozen=True, slots=True)
class _OverLifetime:
    """The lifetime ledger refused a new privatization: nothing may be recorded (the caller rolls back)."""

    reached: float  # the lifetime ε∞ the privatization would have taken the metric to


_Charged = _Queued | _OverLifetime | Literal["not_sampled", "budget_exceeded"]


def _charge_and_queue(
    conn: sqlite3.Connection, spec: MetricSpec, value: object, ledger_state: tuple[int, int, int, float], *,
    cost: _Cost, lifetime_cap: float, secret: bytes, lifetime_recorded: bool = False,
) -> _Charged:
    """The privacy-critical steps of one report, in this order: the sampling decision, the daily ledger, a new
    privatization's ε∞ in the lifetime ledger, privatize, queue, spend. ``report()`` and the release of an
    on-device period both go through here, so what is charged, and when, cannot drift between them.

    Runs inside the caller's open transaction and never ends it. What it has written by then: for
    ``"not_sampled"``, ``"budget_exceeded"`` and :class:`_OverLifetime` only the sampling state (the day's draw, past
    days' draws pruned), nothing charged; for :class:`_Queued` also the report, the day's spend, a new
    privatization's ε∞ and a new budget day. ``report()`` commits every outcome (a refusal keeps the day's draw:
    one sampling decision per metric and day); the release of a period undoes :class:`_OverLifetime` but for the
    day's draw (the period stays due) and otherwise commits with the tally (a refused release is dropped: the
    period counts as reported).
    ``ledger_state`` is ``_ledger.state(conn, spec.name, now)``, read in this transaction. ``lifetime_recorded``: the
    lifetime ledger is known to hold this privatization already (a committed earlier report; its rows are never
    deleted), so its ε∞ is not looked up again.
    """
    day, high, count, eps = ledger_state
    if day > high:
        _sampling.prune(conn, day)
    if not _sampling.takes_part(conn, spec.name, day, spec.sample_rate):
        return "not_sampled"
    if not _ledger.allows(spec, count, eps, eps_one=cost.eps_one, daily=cost.daily):
        return "budget_exceeded"
    if cost.lifetime is not None and not lifetime_recorded:
        over = _ledger.charge_lifetime(conn, spec.name, cost.fingerprint, cost.lifetime, cap=lifetime_cap)
        if over is not None:
            return _OverLifetime(over)
    if day > high:
        _ledger.set_day(conn, day)
        memo.prune(conn, day)
    batch, payload, memoized = privatize_for_device(
        conn, spec, value, day=day, secret=secret, fingerprint=cost.fingerprint)
    _queue.enqueue(conn, spec.name, spec.version, payload, day=day)
    _ledger.spend(conn, spec.name, day, cost.eps_one)
    return _Queued(batch, memoized, new_day=day > high)


@dataclass(frozen=True, slots=True)
class ReportResult:
    """What ``report()`` or ``count()`` did. ``report`` is the exact privatized report queued (None unless queued;
    ``count()``: the report of the period that ended, when this call made it); ``reason`` says which policy bound
    refused a ``"policy_refused"`` report."""

    status: Status
    metric: str
    version: int | None = None
    report: ReportBatch | None = None
    memoized: bool = False
    reason: str | None = None

    @property
    def queued(self) -> bool:
        return self.status == "queued"


class Reporter:
    """Privatize, queue durably and upload LDP reports for one app installation.

    :param endpoint: base URL of the ingest service (``http://`` or ``https://``).
    :param token: the app's bearer token.
    :param storage_dir: a directory private to this installation (created, mode 0700): queue, ledger, memo,
        spec cache and the device secret. Deleting it resets the longitudinal guarantees.
    :param batch_size: reports per uploaded batch (also the queue length that triggers an upload), 1 to
        :data:`MAX_BATCH_SIZE`.
    :param upload_parts: most batches (of distinct metrics) combined into one upload, 1 to
        :data:`~ldptel.client.protocol.wire.MAX_UPLOAD_PARTS`; 1 sends one batch per request.
    :param flush_interval: seconds between uploads of partial batches, > 0.
    :param max_queue: most unacknowledged reports kept on disk; more are dropped and counted.
    :param specs: pinned specs (offline use): a mapping name → :class:`MetricSpec` or an iterable of specs.
        Pinned metrics are never fetched.
    :param policy: the most a served spec may make this device spend
        (:class:`~ldptel.client.sdk.policy.PrivacyPolicy`; its defaults when None). Pinned specs are not
        checked against it.
    :param metrics: names of the metrics the app reports: their specs (unless pinned or cached) are fetched
        in the background at start-up (by the upload thread, else by :meth:`flush`/:meth:`wait_for_specs`).
    :param on_error: called with an :class:`UploadError` for every delivery problem; exceptions it raises
        are logged and swallowed.
    :param clock: wall-clock seconds since the epoch (budget days, backoff deadlines); ``time.time``.
    :param sleep: used by :meth:`flush` when no background thread runs; ``time.sleep``.
    :param start: start the background upload thread.
    :param timeout: HTTP timeout in seconds.
    :param spec_ttl: seconds after which a cached spec is refreshed in the background.
    :param backoff_base: first retry delay scale in seconds; :param backoff_cap: largest delay.
    :param retry_horizon_days: a batch formed longer ago than this many UTC days is dropped (counted in
        ``dropped_too_old``), never sent: the server (``LDPTEL_RETRY_HORIZON_DAYS``, the same default) forgets
        batch ids after that and refuses such batches, so a late retry can never count twice.
    :param profile: this device's system profile for breakdowns, ``{"os": "android", "app_version": "2.1",
        "channel": "beta"}``, given once. A batch of a metric broken down by some of these dimensions carries
        their values **in clear** (they are not privatized; ``docs/breakdowns.md``); a value the metric's spec does
        not declare is sent as ``other``, and so is a dimension missing here. Metrics without breakdown send none.

    Parts: the spec cache (:class:`~ldptel.client.sdk.spec_cache.SpecCache`) and the uploader
    (:class:`~ldptel.client.sdk.uploader.Uploader`), which owns the one transport (uploads and spec fetches)
    and its own sqlite connection. The Reporter keeps the connection ``report()`` writes through.

    Locks, always taken in this order (each may be held while taking a later one, never an earlier one):

    1. the uploader's cycle lock: one upload cycle at a time (its connection, transport, backoff);
    2. the spec cache's lock: its negative cache and requested metrics (fetches run under the cycle lock);
    3. ``_state``, a condition over a plain lock: guards the ``report()`` connection (the spec cache
       writes through it too), ``_closed``, ``_full_logged``, the
       :class:`~ldptel.client.sdk.counters.Counters` and the uploader's wake-up flags; the upload thread
       sleeps on it and :meth:`flush` waits on it. Callbacks (``on_error``) never run under it.
    """

    def __init__(
        self,
        endpoint: str,
        token: str,
        storage_dir: str | os.PathLike[str],
        *,
        batch_size: int = 256,
        upload_parts: int = DEFAULT_UPLOAD_PARTS,
        flush_interval: float = 30.0,
        max_queue: int = 10_000,
        specs: Mapping[str, MetricSpec] | Iterable[MetricSpec] | None = None,
        metrics: Iterable[str] = (),
        policy: PrivacyPolicy | None = None,
        on_error: Callable[[UploadError], None] | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
        start: bool = True,
        timeout: float = 10.0,
        spec_ttl: float = 3600.0,
        backoff_base: float = 1.0,
        backoff_cap: float = 300.0,
        retry_horizon_days: int = DEFAULT_RETRY_HORIZON_DAYS,
        profile: Mapping[str, str] | None = None,
    ) -> None:
        profile = check_profile(profile)  # breakdowns: sent in clear with each batch (docs/breakdowns.md)
        self._batch_size = check_int("batch_size", batch_size, 1, MAX_BATCH_SIZE)
        self._max_queue = check_int("max_queue", max_queue, 1, sys.maxsize)
        upload_parts = check_int("upload_parts", upload_parts, 1, MAX_UPLOAD_PARTS)
        retry_horizon_days = check_int("retry_horizon_days", retry_horizon_days, 0, MAX_RETRY_HORIZON_DAYS)
        flush_interval = check_number("flush_interval", flush_interval, 0.0, math.inf, open_interval=True, allow_inf=True)
        timeout = check_number("timeout", timeout, 0.0, math.inf, open_interval=True)
        spec_ttl = check_number("spec_ttl", spec_ttl, 0.0, math.inf, open_interval=True, allow_inf=True)
        backoff_base = check_number("backoff_base", backoff_base, 0.0, math.inf, open_interval=True)
        backoff_cap = check_number("backoff_cap", backoff_cap, 0.0, math.inf, open_interval=True)
        if not isinstance(token, str) or not token:  # never echo a token: only the empty string or a type
            raise InvalidParameterError("token", "a non-empty string", token if isinstance(token, str) else type(token))
        if policy is not None and not isinstance(policy, PrivacyPolicy):
            raise InvalidParameterError("policy", "a PrivacyPolicy", type(policy).__name__)
        self._policy = policy or PrivacyPolicy()
        pinned = pinned_by_name(specs)
        if isinstance(metrics, str):  # a name is an iterable of one-letter names: refuse it
            raise InvalidParameterError("metrics", "an iterable of metric names", metrics)
        declared = list(metrics)
        for name in declared:
            if not isinstance(name, str) or not NAME_RE.fullmatch(name):
                raise InvalidParameterError("metrics", f"metric names ({NAME_RULE})", name)
        self._clock = clock or time.time
        self._timeout = timeout
        self._notify = Notifier(on_error)
        upload_tx = Transport(endpoint, token, timeout=timeout, clock=self._clock)

        storage = Path(storage_dir)
        storage.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._secret = load_or_create_secret(storage)
        self._db = connect(storage, synchronous="NORMAL", autocheckpoint=REPORT_AUTOCHECKPOINT)
        self._state = threading.Condition(threading.Lock())
        self._closed = False
        self._full_logged = False  # the queue-full warning was logged since the queue was last below the limit
        self._pruned_in_wal = False  # the WAL may still hold memo rows of past days (until truncate_wal succeeds)
        self._costs: IdentityCache[_Cost] = {}
        # (metric, fingerprint) pairs a committed report recorded in the lifetime ledger (never deleted there)
        self._lifetime_recorded: set[tuple[str, bytes]] = set()
        self._policy_told: set[tuple[str, int, str]] = set()  # refusals already passed to on_error
        try:
            init_schema(self._db)
            self._counters = Counters(
                pending=_queue.pending_count(self._db), unbatched=_queue.unbatched_count(self._db))
            self._specs = SpecCache(
                self._db, self._state, pinned=pinned, clock=self._clock, ttl=spec_ttl, notify=self._notify)
            for name in declared:
                self._specs.request(name)
            self._uploader = Uploader(
                storage, transport=upload_tx, specs=self._specs, counters=self._counters, state=self._state,
                clock=self._clock, sleep=sleep or time.sleep, batch_size=self._batch_size, upload_parts=upload_parts,
                flush_interval=flush_interval, backoff=Backoff(base=backoff_base, cap=backoff_cap),
                notify=self._notify, retry_horizon_days=retry_horizon_days, profile=profile, tick=self.release_due)
        except BaseException:
            self._db.close()
            raise
        self.release_due()  # periods that ended while the app was not running (on-device aggregation)
        if start:
            self._uploader.start()

    # ------------------------------------------------------------------------------------------ public
    def _spec_or_refusal(self, metric: str) -> MetricSpec | ReportResult:
        """The metric's spec, or the result that ends a call without one: ``closed``, or ``no_spec`` (the spec
        is then requested in the background and the uploader woken to fetch it)."""
        if self._closed:
            return ReportResult("closed", metric)
        spec = self._specs.spec_for(metric)
        if spec is None:
            requested = self._specs.request(metric)
            with self._state:
                self._counters.no_spec += 1
                if requested:
                    self._uploader.wake()
            return ReportResult("no_spec", metric)
        return spec

    def report(self, metric: str, value: object) -> ReportResult:
        """Privatize ``value`` for ``metric`` now and queue the privatized report (see the module docs).

        Never waits on the network: a metric whose spec is not known yet answers ``"no_spec"`` at once and
        its spec is fetched in the background.
        """
        spec = self._spec_or_refusal(metric)
        if isinstance(spec, ReportResult):
            return spec
        cost = self._cost_of(spec)
        if cost.on_device:
            raise InvalidParameterError(
                "metric", f"a metric reported with report(); {metric!r} is aggregated on the device: call count()", metric)
        gate = self._policy_gate(spec, cost)
        if isinstance(gate, ReportResult):
            return gate
        cost, lifetime_cap = gate
        now = self._clock()
        with self._state:
            if self._closed:
                return ReportResult("closed", metric)
            counters = self._counters
            if counters.pending >= self._max_queue:
                counters.dropped_queue_full += 1
                if not self._full_logged:
                    self._full_logged = True
                    log.warning("ldptel queue is full (%d reports); new reports are dropped", self._max_queue)
                return ReportResult("queue_full", metric, spec.version)
            self._full_logged = False
            try:
                stored: _Charged | sqlite3.Error = self._store(spec, value, now, cost=cost, lifetime_cap=lifetime_cap)
            except sqlite3.Error as exc:
                stored = exc
            if not isinstance(stored, _OverLifetime | sqlite3.Error):
                self._account(stored)
                if not isinstance(stored, _Queued):
                    return ReportResult(stored, metric, spec.version)
                counters.clipped += cost.mech.clips(value, spec.params)
                return ReportResult("queued", metric, spec.version, stored.batch, stored.memoized)
        return self._failed(spec, stored, lifetime_cap, "report")  # told outside the lock

    def count(self, metric: str, n: int = 1) -> ReportResult:
        """Count ``n`` events of a metric aggregated on the device (its mechanism has the
        :class:`~ldptel.client.mechanisms.capabilities.OnDevice` capability: events per day, unique devices per window).

        Only the UTC day's count and a 30-day bitmap of the days with events are kept, in the device database
        (:mod:`ldptel.client.sdk.tally`); nothing is privatized or sent for the call itself. Once a reporting period has
        ended, the first ``count()``, :meth:`flush`, upload cycle or new Reporter of the next period privatizes its value
        and queues
        one report (the result's ``report`` when this call made it), charged to the ledgers like any report. Status
        ``"counted"``; ``"no_spec"`` (nothing recorded) while the spec is unknown, ``"policy_refused"`` for a served spec
        beyond the device policy. A metric reported with :meth:`report` raises
        :class:`~ldptel.client.errors.InvalidParameterError` (a bug in the calling code), as does ``n`` outside
        [1, 2^31].
        """
        n = check_int("n", n, 1, _tally.MAX_CALL)
        spec = self._spec_or_refusal(metric)
        if isinstance(spec, ReportResult):
            return spec
        mech = on_device(mechanism_of(spec.params))
        if mech is None:
            raise InvalidParameterError(
                "metric", f"a metric aggregated on the device; {metric!r} takes values: call report()", metric)
        return self._tally_and_release(spec, mech, n)

    def release_due(self) -> None:
        """Report every on-device metric's period that has ended. Called at start-up, by :meth:`flush` and by the
        background upload thread before each cycle (so a running app reports within ``flush_interval`` of a period's
        end even when it does not count); without the thread (``start=False``) call it, or flush, yourself."""
        with self._state:
            if self._closed:
                return
            names = _tally.metrics(self._db)
        for name in names:
            spec = self._specs.spec_for(name)
            mech = None if spec is None else on_device(mechanism_of(spec.params))
            if spec is not None and mech is not None:
                self._tally_and_release(spec, mech, 0)

    def _tally_and_release(self, spec: MetricSpec, mech: OnDevice[Any, Any], n: int) -> ReportResult:
        """:meth:`count` (``n`` ≥ 1) or a release check (``n`` = 0) once the spec is known."""
        metric = spec.name
        gate = self._policy_gate(spec)
        if isinstance(gate, ReportResult):
            return gate
        cost, lifetime_cap = gate
        now = self._clock()
        with self._state:
            if self._closed:
                return ReportResult("closed", metric)
            counters = self._counters
            room = counters.pending < self._max_queue  # a full queue defers the release (the count is kept)
            try:
                released: _Charged | sqlite3.Error | None = self._count_txn(
                    spec, mech, n, now, cost=cost, lifetime_cap=lifetime_cap, release=room)
            except sqlite3.Error as exc:
                released = exc
            if not isinstance(released, _OverLifetime | sqlite3.Error):
                if released is not None:
                    self._account(released)
                if isinstance(released, _Queued):
                    return ReportResult("counted", metric, spec.version, released.batch, released.memoized)
                return ReportResult("counted", metric, spec.version)
        return self._failed(spec, released, lifetime_cap, "count")  # told outside the lock

    def _count_txn(
        self, spec: MetricSpec, mech: OnDevice[Any, Any], n: int, now: float, *, cost: _Cost, lifetime_cap: float,
        release: bool,
    ) -> _Charged | None:
        """One transaction: report the period that ended (if due and ``release``: :func:`_charge_and_queue`, as
        :meth:`_store`), then add ``n`` events of the budget day to the tally. None when no period was released.

        :class:`_OverLifetime` when the lifetime ledger refuses: rolled back but for the day's sampling draw (nothing
        else recorded, nothing reported, the period still due). A release the daily budget or the sampling refuses
        is dropped (the period counts as reported, the day's draw kept) and the count recorded. The caller holds
        ``_state``.
        """
        conn = self._db
        period = mech.period_days(spec.params)
        outcome: _Charged | None = None
        conn.execute("BEGIN IMMEDIATE")
        try:
            state = _ledger.state(conn, spec.name, now)
            day = state[0]
            conn.execute("SAVEPOINT release")
            due = _tally.take_due(conn, spec.name, day, period,
                                  lambda counts: mech.period_value(spec.params, counts)) if release else None
            if due is not None:
                outcome = _charge_and_queue(conn, spec, due[1], state, cost=cost, lifetime_cap=lifetime_cap,
                                            secret=self._secret)
                if isinstance(outcome, _OverLifetime):  # undo the period's release, keep the day's draw
                    draw = _sampling.stored(conn, spec.name, day)
                    conn.execute("ROLLBACK TO release")
                    _sampling.keep(conn, spec.name, day, draw)
                    conn.execute("RELEASE release")
                    conn.execute("COMMIT")
                    return outcome
            conn.execute("RELEASE release")
            if n:
                _tally.record(conn, spec.name, day, n, period)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return outcome

    def flush(self, timeout: float = 30.0) -> bool:
        """Upload everything queued now; True when nothing is left unacknowledged within ``timeout`` seconds.

        Backoffs are honoured (a flush does not hammer a server that asked for Retry-After). With a
        background thread this waits for it (real time); without one (``start=False``) it uploads in the
        calling thread and waits out backoffs with the injected ``sleep`` against the injected ``clock``.
        After :meth:`close` nothing is sent.
        """
        if self._closed:
            return self.stats().pending == 0
        self.release_due()
        return self._uploader.flush(timeout)

    def wait_for_specs(self, timeout: float = 10.0) -> bool:
        """Wait (up to ``timeout`` s) until the spec of every declared metric, and of every metric reported
        before its spec was known, has been fetched or has failed; True when all of them are known now.

        With the background thread this waits for it; without one (``start=False``) the fetches run in the
        calling thread. After :meth:`close` nothing is fetched.
        """
        if self._closed:
            return self._specs.all_known()
        return self._uploader.fetch_specs(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Try to deliver what is queued (up to ``timeout`` s), stop the thread, close the database.

        Undelivered reports stay on disk and go out on the next start.
        """
        if self._closed:
            return
        try:
            if self.stats().pending > 0:
                self.flush(timeout)
        finally:
            with self._state:
                self._closed = True
            self._uploader.stop(timeout + self._timeout + 1.0)
            self._specs.close()
            with self._state:
                self._db.close()

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> ReporterStats:
        with self._state:
            return self._counters.snapshot()

    def budget_remaining(self, metric: str) -> int | None:
        """Reports the ledger still allows for ``metric`` today (None when its spec is not known; 0 when the
        policy refuses its served spec)."""
        spec = self._specs.known(metric)
        if spec is None:
            return None
        if self._cost_of(spec).refusal is not None and not self._specs.is_pinned(spec):
            return 0
        with self._state:
            return _ledger.remaining(self._db, spec, self._clock())

    # -------------------------------------------------------------------------------------- internals
    def _store(self, spec: MetricSpec, value: object, now: float, *, cost: _Cost, lifetime_cap: float) -> _Charged:
        """One transaction: :func:`_charge_and_queue` for ``value``, committed whatever it decided. A refusal of the
        daily budget or the lifetime ledger has recorded nothing but the day's sampling draw, which is kept: every
        report of the metric that day agrees with it (before, a refused first report rolled the draw back and the
        next report of the day drew again).

        The caller holds ``_state``. Every exception rolls the transaction back.
        """
        conn = self._db
        recorded = (spec.name, cost.fingerprint)
        conn.execute("BEGIN IMMEDIATE")
        try:
            state = _ledger.state(conn, spec.name, now)
            outcome = _charge_and_queue(conn, spec, value, state, cost=cost, lifetime_cap=lifetime_cap,
                                        secret=self._secret, lifetime_recorded=recorded in self._lifetime_recorded)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if cost.lifetime is not None and isinstance(outcome, _Queued):  # committed: the privatization is recorded
            self._lifetime_recorded.add(recorded)
        return outcome

    def _account(self, outcome: _Queued | Literal["not_sampled", "budget_exceeded"]) -> None:
        """Count what a committed or refused :func:`_charge_and_queue` did, wake the uploader when a batch is full,
        and empty the WAL after a new budget day deleted past days' memo rows. The caller holds ``_state``."""
        counters = self._counters
        if outcome == "not_sampled":
            counters.not_sampled += 1
        elif outcome == "budget_exceeded":
            counters.refused_budget += 1
        else:
            counters.pending += 1
            counters.unbatched += 1
            counters.queued += 1
            counters.memoized += outcome.memoized
            if counters.unbatched >= self._batch_size:
                self._uploader.wake()
            if outcome.new_day or self._pruned_in_wal:
                self._forget_pruned_rows()

    def _failed(
        self, spec: MetricSpec, failure: _OverLifetime | sqlite3.Error, lifetime_cap: float, what: str
    ) -> ReportResult:
        """The end of a report or count (``what``) that did not finish: refused by the lifetime ledger, or a local
        storage error. Called without ``_state`` (``on_error`` may call back into the Reporter)."""
        if isinstance(failure, _OverLifetime):
            return self._refuse(spec, f"longitudinal_epsilon: a new privatization would take the lifetime ε∞ of a "
                                f"value to {failure.reached:.4g}, above the device policy's maximum {lifetime_cap:.4g}")
        log.error("ldptel could not store a %s: %s", what, failure)
        self._notify(UploadError(f"local storage error: {failure}", outcome="storage_error", metric=spec.name))
        return ReportResult("storage_error", spec.name, spec.version)

    def _forget_pruned_rows(self) -> None:
        """Empty the WAL after the memo of past days was deleted (secure_delete zeroed them in the database).

        The caller holds ``_state``. A WAL kept busy by the uploader is emptied on a later report.
        """
        try:
            self._pruned_in_wal = not truncate_wal(self._db)
        except sqlite3.Error as exc:
            self._pruned_in_wal = True
            log.debug("ldptel WAL truncation deferred: %s", exc)

    def _policy_gate(self, spec: MetricSpec, cost: _Cost | None = None) -> tuple[_Cost, float] | ReportResult:
        """The spec's cost (``cost`` when the caller has it) and the lifetime ε∞ cap its new privatizations are charged
        against (none for a pinned spec: the app's own choice), or the ``policy_refused`` result for a served spec
        beyond the device policy."""
        if cost is None:
            cost = self._cost_of(spec)
        pinned = self._specs.is_pinned(spec)
        if cost.refusal is not None and not pinned:
            return self._refuse(spec, cost.refusal)
        return cost, math.inf if pinned else self._policy.max_longitudinal_epsilon

    def _refuse(self, spec: MetricSpec, reason: str) -> ReportResult:
        """A report refused by the policy: counted, and told to ``on_error`` once per version and bound."""
        told = (spec.name, spec.version, reason.split(" ", 1)[0].rstrip(":"))
        with self._state:
            self._counters.refused_policy += 1
            tell = told not in self._policy_told
            self._policy_told.add(told)
        if tell:
            self._notify(PolicyRefusal(
                f"the served spec of {spec.name!r} v{spec.version} is refused: {reason}; nothing is reported",
                metric=spec.name, version=spec.version, reason=reason))
        return ReportResult("policy_refused", spec.name, spec.version, reason=reason)

    def _cost_of(self, spec: MetricSpec) -> _Cost:
        """What a spec costs and whether the policy refuses it, computed once per spec object (the properties are
        not cached). Per object, not per (name, version): a refresh may replace a served spec by a different one of
        the same version (a hostile or broken server)."""
        return by_identity(self._costs, spec, lambda: self._new_cost(spec))

    def _new_cost(self, spec: MetricSpec) -> _Cost:
        eps_one, daily, eps_inf = spec.report_charge, spec.daily_epsilon, longitudinal_epsilon(spec)
        mech = mechanism_of(spec.params)
        return _Cost(
            eps_one=eps_one, daily=daily, refusal=self._policy.spec_refusal(spec),
            fingerprint=privatization_fingerprint(spec.params),
            lifetime=eps_inf if mech.permanent_channel(spec.params) is not None else None, mech=mech,
            on_device=on_device(mech) is not None)
