"""The uploader: turns queued reports into batches and sends them, with backoff, until the server settles them.

One cycle (:meth:`Uploader.cycle`):

1. fetch the specs of metrics requested before their spec was known
   (:meth:`~ldptel.client.sdk.spec_cache.SpecCache.fetch_due`), even while a backoff runs;
2. nothing more while a backoff runs (a server's ``Retry-After`` included);
3. refresh the specs marked for refresh (:meth:`~ldptel.client.sdk.spec_cache.SpecCache.refresh_due`);
4. form batches (:func:`ldptel.client.sdk.queue.form_batches`): full ones as soon as ``batch_size`` reports
   of one version are queued, partial ones every ``flush_interval`` seconds or when flushing. Each batch gets
   its random id and exact bytes once, on disk, so every retry resends the same batch;
5. send the stored batches, oldest first, combined into multi-part uploads of up to ``upload_parts``
   batches of distinct metrics and :data:`~ldptel.client.sdk.transport.MAX_UPLOAD_BYTES`
   (:func:`ldptel.client.sdk.queue.plan_uploads`; an upload of one batch is sent as that batch), and settle
   each batch by the server's answer for it (:func:`ldptel.client.sdk.transport.classify`; a multi-part
   upload is answered 200 with one status per part): acknowledged → delivered; 409 → dropped as stale and
   the spec the answer carries adopted (but 409 ``batch_id_conflict``, its id accepted before with other bytes,
   is dropped as rejected); 422 ``batch_too_old`` → dropped as too old; another 4xx → dropped as rejected; 401/403, 408/425/429, 5xx or a network error for the request → kept, and the uploader backs
   off (:class:`~ldptel.client.sdk.transport.Backoff`). A server that refuses the multi-part form itself
   (another 4xx for the whole upload: an older server) gets single batches from then on. Each request
   carries its age (UTC days since the batch was formed, by this device's clock; for a multi-part upload the
   oldest part's, so no part is accepted later than it would be alone); a batch older than
   ``retry_horizon_days`` is dropped without sending (the server may have forgotten its id and would refuse
   it: a batch is either deduplicated or dropped, never counted twice);
6. checkpoint the WAL (the ``report()`` connection leaves checkpoints to this one).

It runs on a background thread (``ldptel-uploader``) that sleeps until the next cycle is due or it is woken,
or, without that thread, in the thread that calls :meth:`Uploader.flush`. Its sqlite connection commits with
``synchronous=FULL`` (see :mod:`ldptel.client.sdk.store` for why); its transport carries the uploads and
every spec fetch.

Threads: ``_lock`` lets one cycle run at a time and guards the connection, the transport, the backoff and
the schedule (``_retry_at``, ``_next_flush_at``). The Reporter's state condition guards the shared
:class:`~ldptel.client.sdk.counters.Counters` and the flags ``_woken``, ``_force`` and ``_stopping``; the
thread sleeps on it and :meth:`flush` waits on it. ``_lock`` is always taken before the state condition.
"""

from __future__ import annotations

import datetime
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

from ldptel.client.protocol.wire import encode_upload
from ldptel.client.sdk import queue as _queue
from ldptel.client.sdk.counters import Counters
from ldptel.client.sdk.notify import Notifier, UploadError, log
from ldptel.client.sdk.spec_cache import SpecCache
from ldptel.client.sdk.store import connect
from ldptel.client.sdk.transport import MAX_UPLOAD_BYTES, NETWORK_ERRORS, Backoff, Response, Transport, classify

__all__ = ["Uploader"]

_IDLE = 0.001  # shortest sleep between two background cycles, seconds


class Uploader:
    """Batches, sends and settles the queued reports of one storage directory (see the module docs).

    :param state: the Reporter's state condition, which guards ``counters``.
    :param transport: used for ``POST /v1/reports`` and ``GET /v1/metrics/<name>``.
    """

    def __init__(
        self,
        storage_dir: Path,
        *,
        transport: Transport,
        specs: SpecCache,
        counters: Counters,
        state: threading.Condition,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        batch_size: int,
        upload_parts: int,
        flush_interval: float,
        backoff: Backoff,
        notify: Notifier,
        retry_horizon_days: int,
        profile: Mapping[str, str] | None = None,
        tick: Callable[[], None] | None = None,
    ) -> None:
        self._tick = tick  # the background thread calls it before each cycle (on-device periods that ended)
        self._profile = dict(profile or {})  # the device's system profile (breakdowns), sent in clear with batches
        self._db = connect(storage_dir, synchronous="FULL")
        self._tx = transport
        self._specs = specs
        self._counters = counters
        self._state = state
        self._clock = clock
        self._sleep = sleep
        self._batch_size = batch_size
        self._upload_parts = upload_parts  # 1 after a server refused the multi-part form
        self._flush_interval = flush_interval
        self._backoff = backoff
        self._notify = notify
        self._horizon = retry_horizon_days
        self._lock = threading.Lock()
        self._retry_at = 0.0
        self._next_flush_at = clock()  # leftovers from a previous run go out at once
        self._woken = False
        self._force = False
        self._stopping = False
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Run cycles on a background daemon thread until :meth:`stop`."""
        self._thread = threading.Thread(target=self._run, name="ldptel-uploader", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Ask the background thread for a cycle now. The caller holds the state condition."""
        self._woken = True
        self._state.notify_all()

    def flush(self, timeout: float) -> bool:
        """Upload everything queued now; True when nothing is left unacknowledged within ``timeout`` seconds.

        With the background thread this waits for it (real time); without it the cycles run in the calling
        thread and backoffs are waited out with the injected ``sleep`` against the injected ``clock``.
        """
        if self._thread is not None and self._thread.is_alive():
            with self._state:
                self._force = True
                self.wake()
                return self._state.wait_for(lambda: self._counters.pending == 0, timeout)
        deadline = self._clock() + timeout
        while True:
            before = self._pending()
            self.cycle(force=True)
            left = self._pending()
            if left == 0:
                return True
            now = self._clock()
            wait = max(self._retry_at - now, 0.0)
            if now + wait > deadline:
                return False
            if wait > 0:
                self._sleep(wait)
            elif left == before:  # nothing moved and no backoff to wait for: another cycle would not help
                return False

    def fetch_specs(self, timeout: float) -> bool:
        """Wait until every requested spec fetch has been tried (up to ``timeout`` s); True when every metric
        requested so far has a spec. Without the background thread the fetches run in the calling thread."""
        if self._thread is not None and self._thread.is_alive():
            with self._state:
                self.wake()
                self._state.wait_for(lambda: not self._specs.fetching(), timeout)
        else:
            with self._lock:
                self._specs.fetch_due(self._tx)
        return self._specs.all_known()

    def stop(self, timeout: float) -> None:
        """Stop the thread (waiting up to ``timeout`` s for it), then close the connection and the transport."""
        with self._state:
            self._stopping = True
            self.wake()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:  # a cycle still running (the join timed out) finishes first
            self._tx.close()
            self._db.close()

    # ---------------------------------------------------------------------------------------- cycles
    def _run(self) -> None:
        while True:
            with self._state:
                if self._stopping:
                    return
                force = self._force
            try:
                if self._tick is not None:
                    self._tick()
                delay = self.cycle(force=force)
            except Exception as exc:  # never let the thread die; never raise into the app
                log.exception("ldptel uploader cycle failed")
                self._notify(UploadError(f"uploader error: {exc!r}", outcome="internal"))
                delay = self._flush_interval
            with self._state:
                if self._counters.pending == 0:
                    self._force = False
                self._state.notify_all()  # flush() waiters check what is left
                if self._stopping:
                    return
                if not self._woken:
                    self._state.wait(max(delay, _IDLE))
                self._woken = False

    def cycle(self, *, force: bool) -> float:
        """One round (see the module docs); ``force`` sends partial batches now. Seconds until the next round."""
        with self._lock:
            with self._state:
                stopping = self._stopping
            if stopping:
                return self._flush_interval
            self._specs.fetch_due(self._tx)
            now = self._clock()
            if now < self._retry_at:
                return self._retry_at - now
            self._specs.refresh_due(self._tx)
            due = force or now >= self._next_flush_at
            if due:
                self._next_flush_at = now + self._flush_interval
            with self._state:
                unbatched = self._counters.unbatched
            if unbatched > 0 and (due or unbatched >= self._batch_size):
                res = _queue.form_batches(
                    self._db, batch_size=self._batch_size, partial=due, spec_of=self._specs.spec_of,
                    day=_utc_day(self._clock()), profile=self._profile)
                with self._state:
                    self._counters.unbatched -= res.moved
                    self._counters.pending -= res.unencodable
                    self._counters.dropped_stale += res.unencodable
            for ids in _queue.plan_uploads(self._db, max_parts=self._upload_parts, max_bytes=MAX_UPLOAD_BYTES):
                batches = _queue.load_batches(self._db, ids)
                sent = self._send(batches[0]) if len(batches) == 1 else self._send_upload(batches)
                if not sent:
                    break
            try:
                self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.Error as exc:  # a busy database: the next cycle tries again
                log.debug("ldptel WAL checkpoint skipped: %s", exc)
            now = self._clock()
            nxt = self._next_flush_at if self._retry_at <= now else max(self._retry_at, self._next_flush_at)
            return max(nxt - now, 0.0)

    def _send(self, batch: _queue.StoredBatch) -> bool:
        """Post one batch and settle it; False when the uploader must back off."""
        if self._drop_if_too_old(batch):
            return True
        age = self._age(batch)
        try:
            resp = self._tx.post_batch(batch.body, age_days=age)
        except NETWORK_ERRORS as exc:
            self._retry(None)
            self._notify(_batch_error(batch, f"network error reaching {self._tx.where}: {exc!r}", status=None, outcome="retry"))
            return False
        outcome = classify(resp.status)
        if outcome == "retry" or outcome == "auth":
            self._retry(resp.retry_after)
            why = f"the server rejected the token (HTTP {resp.status})" if outcome == "auth" else f"HTTP {resp.status}"
            self._notify(_batch_error(batch, f"{why}; will retry", status=resp.status, outcome=outcome))
            return False
        if outcome == "ack":
            self._backoff.reset()
        self._settle_answers([(batch, resp)])
        return True

    def _send_upload(self, batches: list[_queue.StoredBatch]) -> bool:
        """Post several batches as one multi-part upload and settle each by its part's answer; False when the
        uploader must back off."""
        batches = [batch for batch in batches if not self._drop_if_too_old(batch)]
        if len(batches) <= 1:
            return not batches or self._send(batches[0])
        ages = [self._age(batch) for batch in batches]
        known = [age for age in ages if age is not None]
        try:
            resp = self._tx.post_batch(encode_upload([b.body for b in batches]), age_days=max(known) if known else None)
        except NETWORK_ERRORS as exc:
            self._retry(None)
            self._notify(UploadError(f"network error reaching {self._tx.where}: {exc!r}", outcome="retry",
                                     n=sum(b.n for b in batches)))
            return False
        results = _part_results(resp, len(batches))
        if results is None:
            if _outcome(resp) == "too_old":  # the oldest part is past the server's horizon: send each alone
                return all(self._send(batch) for batch in batches)
            outcome = classify(resp.status)
            if outcome in ("retry", "auth") or resp.status == 200:  # 200 without a readable answer: retry
                self._retry(resp.retry_after)
                self._notify(UploadError(
                    f"HTTP {resp.status} for an upload of {len(batches)} batches; will retry", status=resp.status,
                    outcome="retry" if outcome == "ack" else outcome, n=sum(b.n for b in batches)))
                return False
            log.warning("ldptel: the server refused a multi-part upload (HTTP %d); sending single batches", resp.status)
            self._upload_parts = 1
            return all(self._send(batch) for batch in batches)
        self._backoff.reset()
        self._settle_answers([
            (batch, Response(status=status, retry_after=None, body=body))
            for batch, (status, body) in zip(batches, results, strict=True)])
        return True

    def _age(self, batch: _queue.StoredBatch) -> int | None:
        return None if batch.formed_day is None else _age_days(batch.formed_day, self._clock())

    def _drop_if_too_old(self, batch: _queue.StoredBatch) -> bool:
        """Drop (and tell) a batch older than the retry horizon, unsent; True if it was."""
        age = self._age(batch)
        if age is None or age <= self._horizon:
            return False
        _queue.remove_batches(self._db, [batch])
        with self._state:
            self._counters.settle(batch.n, "too_old")
        self._notify(_batch_error(
            batch, f"batch formed on {batch.formed_day}, beyond the retry horizon of {self._horizon} day(s); "
            f"{batch.n} reports dropped", status=None, outcome="too_old"))
        return True

    def _settle_answers(self, answers: list[tuple[_queue.StoredBatch, Response]]) -> None:
        """Settle the batches the server answered for good (ack, stale, too old or rejected), removed in one
        transaction; a part that asks for a retry stays stored for the next cycle."""
        final = [(batch, resp, outcome) for batch, resp in answers
                 if (outcome := _outcome(resp)) in ("ack", "stale", "rejected", "too_old")]
        _queue.remove_batches(self._db, [batch for batch, _, _ in final])
        with self._state:
            for batch, _, outcome in final:
                self._counters.settle(batch.n, outcome)
        for batch, resp, outcome in final:
            self._told(batch, resp, outcome)

    def _told(self, batch: _queue.StoredBatch, resp: Response, outcome: str) -> None:
        """What follows a settled batch: adopt the spec a 409 carries; tell the app about a dropped batch."""
        if outcome == "stale":
            body = resp.json()
            self._specs.adopt(batch.metric, body)
            retired = isinstance(body, dict) and body.get("error") == "metric_retired"
            why = f"metric {batch.metric!r} is retired" if retired else (
                f"version {batch.version} of {batch.metric!r} is no longer accepted")
            self._notify(_batch_error(
                batch, f"HTTP 409: {why}; {batch.n} reports dropped", status=409, outcome="stale"))
        elif outcome == "too_old":
            self._notify(_batch_error(batch, f"HTTP 422: batch too old for the server's retry horizon; {batch.n} "
                                      "reports dropped", status=422, outcome="too_old"))
        elif outcome == "rejected":
            self._notify(_batch_error(
                batch, f"HTTP {resp.status}: batch rejected for good; {batch.n} reports dropped ({resp.body[:200]!r})",
                status=resp.status, outcome="rejected"))

    def _retry(self, retry_after: float | None) -> None:
        delay = self._backoff.next_delay(retry_after)
        self._retry_at = self._clock() + delay
        with self._state:
            self._counters.retries += 1
        log.info("ldptel upload will be retried in %.1f s", delay)

    def _pending(self) -> int:
        with self._state:
            return self._counters.pending


def _outcome(resp: Response) -> Literal["ack", "stale", "auth", "retry", "rejected", "too_old"]:
    """:func:`classify`, with the server's 422 ``batch_too_old`` told apart (dropped as too old, not rejected),
    and its 409 ``batch_id_conflict`` (the id was taken by other bytes: no newer spec to adopt; dropped as rejected)."""
    if resp.status in (409, 422):
        body = resp.json()
        code = body.get("error") if isinstance(body, dict) else None
        if resp.status == 422 and code == "batch_too_old":
            return "too_old"
        if resp.status == 409 and code == "batch_id_conflict":
            return "rejected"
    return classify(resp.status)


def _part_results(resp: Response, parts: int) -> list[tuple[int, bytes]] | None:
    """(status, JSON body) of each part of a multi-part upload's 200 answer; None for any other answer."""
    if resp.status != 200:
        return None
    data = resp.json()
    items = data.get("parts") if isinstance(data, dict) else None
    if not isinstance(items, list) or len(items) != parts:
        return None
    out: list[tuple[int, bytes]] = []
    for item in items:
        status = item.get("http_status") if isinstance(item, dict) else None
        if not isinstance(status, int) or isinstance(status, bool):
            return None
        out.append((status, json.dumps(item).encode()))
    return out


def _utc_day(now: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(now))


def _age_days(day: str, now: float) -> int:
    """Whole UTC days from ``day`` to the day of ``now``, ≥ 0 (a clock turned back since, or a malformed stored
    day, counts as 0: the README states what a clock turned back allows)."""
    try:
        return max(0, (datetime.date.fromisoformat(_utc_day(now)) - datetime.date.fromisoformat(day)).days)
    except ValueError:
        return 0


def _batch_error(batch: _queue.StoredBatch, message: str, *, status: int | None, outcome: str) -> UploadError:
    return UploadError(
        message, status=status, outcome=outcome, metric=batch.metric, version=batch.version, n=batch.n,
        batch_id=batch.batch_id)
