"""The uploader: turns queued reports into batches and sends them, with backoff, until the server settles them.

One cycle (:meth:`Uploader.cycle`):

1. fetch the specs of metrics requested before their spec was known
   (:meth:`~ldptel.client.sdk.spec_cache.SpecCache.fetch_due`), even while a backoff runs;
2. nothing more while a backoff runs (a server's ``Retry-After`` included);
3. refresh the specs marked for refresh (:meth:`~ldptel.client.sdk.spec_cache.SpecCache.refresh_due`);
4. form batches (:func:`ldptel.client.sdk.queue.form_batches`): full ones as soon as ``batch_size`` reports
   of one version are queued, partial ones every ``flush_interval`` seconds or when flushing. Each batch gets
   its random id and exact bytes once, on disk, so every retry resends the same batch;
5. send the stored batches in order and settle each by the server's answer
   (:func:`ldptel.client.sdk.transport.classify`): acknowledged → delivered; 409 → dropped as stale and the
   spec the answer carries adopted; 422 ``batch_too_old`` → dropped as too old; another 4xx → dropped as
   rejected; 401/403, 408/425/429, 5xx or a network error → kept, and the uploader backs off
   (:class:`~ldptel.client.sdk.transport.Backoff`). Each batch is sent with its age (UTC days since it was
   formed, by this device's clock); one older than ``retry_horizon_days`` is dropped without sending (the server may have forgotten its
   id and would refuse it: a batch is either deduplicated or dropped, never counted twice);
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
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from ldptel.client.sdk import queue as _queue
from ldptel.client.sdk.counters import Counters
from ldptel.client.sdk.notify import Notifier, UploadError, log
from ldptel.client.sdk.spec_cache import SpecCache
from ldptel.client.sdk.store import connect
from ldptel.client.sdk.transport import NETWORK_ERRORS, Backoff, Transport, classify

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
        flush_interval: float,
        backoff: Backoff,
        notify: Notifier,
        retry_horizon_days: int,
    ) -> None:
        self._db = connect(storage_dir, synchronous="FULL")
        self._tx = transport
        self._specs = specs
        self._counters = counters
        self._state = state
        self._clock = clock
        self._sleep = sleep
        self._batch_size = batch_size
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
                    day=_utc_day(self._clock()))
                with self._state:
                    self._counters.unbatched -= res.moved
                    self._counters.pending -= res.unencodable
                    self._counters.dropped_stale += res.unencodable
            last = 0
            while (batch := _queue.next_batch(self._db, last)) is not None:
                last = batch.id
                if not self._send(batch):
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
        age = None if batch.formed_day is None else _age_days(batch.formed_day, self._clock())
        if age is not None and age > self._horizon:
            self._settle(batch, "too_old")
            self._notify(_batch_error(
                batch, f"batch formed on {batch.formed_day}, beyond the retry horizon of {self._horizon} day(s); "
                f"{batch.n} reports dropped", status=None, outcome="too_old"))
            return True
        try:
            resp = self._tx.post_batch(batch.body, age_days=age)
        except NETWORK_ERRORS as exc:
            self._retry(None)
            self._notify(_batch_error(batch, f"network error: {exc!r}", status=None, outcome="retry"))
            return False
        outcome = classify(resp.status)
        if outcome == "ack":
            self._settle(batch, "ack")
            self._backoff.reset()
            return True
        if outcome == "retry" or outcome == "auth":
            self._retry(resp.retry_after)
            self._notify(_batch_error(batch, f"HTTP {resp.status}; will retry", status=resp.status, outcome=outcome))
            return False
        if outcome == "stale":
            self._settle(batch, "stale")
            self._specs.adopt(batch.metric, resp.json())
            self._notify(_batch_error(
                batch, f"HTTP 409: version {batch.version} of {batch.metric!r} is no longer accepted; "
                f"{batch.n} reports dropped", status=409, outcome="stale"))
            return True
        body = resp.json()
        if resp.status == 422 and isinstance(body, dict) and body.get("error") == "batch_too_old":
            self._settle(batch, "too_old")
            self._notify(_batch_error(batch, f"HTTP 422: batch too old for the server's retry horizon; {batch.n} "
                                      "reports dropped", status=422, outcome="too_old"))
            return True
        self._settle(batch, "rejected")
        self._notify(_batch_error(
            batch, f"HTTP {resp.status}: batch rejected for good; {batch.n} reports dropped ({resp.body[:200]!r})",
            status=resp.status, outcome="rejected"))
        return True

    def _settle(self, batch: _queue.StoredBatch, outcome: Literal["ack", "stale", "rejected", "too_old"]) -> None:
        _queue.remove_batch(self._db, batch)
        with self._state:
            self._counters.settle(batch.n, outcome)

    def _retry(self, retry_after: float | None) -> None:
        delay = self._backoff.next_delay(retry_after)
        self._retry_at = self._clock() + delay
        with self._state:
            self._counters.retries += 1
        log.info("ldptel upload will be retried in %.1f s", delay)

    def _pending(self) -> int:
        with self._state:
            return self._counters.pending


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
