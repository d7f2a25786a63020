"""The fold worker (:class:`Worker`): its run loop, polling rounds, idle wait, shard claims and rebalancing, stats.

Each step of the loop heartbeats and renews the leases (every third of a TTL), rebalances (every
``rescan_seconds``), then polls every owned shard once without blocking: read a batch
(:mod:`~ldptel.aggregator.worker.reading`), fold it (:mod:`~ldptel.aggregator.worker.folding`) and commit the
shard when due (:mod:`~ldptel.aggregator.worker.commit`). When no shard had anything, the worker blocks on one
shard (rotating) so that it sleeps in Redis. A follow worker outlives a Redis restart and a Redis that refuses
writes for a while (maxmemory, read-only, failed save: it logs one line, backs off and resumes); a ``once``
worker stops when every shard is drained, waiting (up to the longest time-to-live they had when first seen) for shards
leased by other workers: a dead worker's leases expire within that time; shards a live worker keeps are
named in :attr:`WorkerStats.unclaimed`. It raises on a lost or refusing Redis.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis as redis_lib
from redis.exceptions import RedisClusterException

from ldptel.aggregator.worker.commit import commit
from ldptel.aggregator.worker.config import WorkerConfig
from ldptel.aggregator.worker.folding import fold_read
from ldptel.aggregator.worker.lag import shard_lag
from ldptel.aggregator.worker.reading import Reader, forget_prefetch
from ldptel.aggregator.worker.sealing import SEAL_DAYS_PER_PASS, seal_pass
from ldptel.aggregator.worker.shard import OwnedShard
from ldptel.aggregator.worker.specs import MetricSpecs
from ldptel.client.errors import InvalidParameterError, LdpError
from ldptel.storage import sketches as store
from ldptel.storage.client import (
    CLUSTER_REDIRECT_ERRORS,
    TRANSIENT_ERRORS,
    decodes_responses,
    refresh_slot_map,
    transient_on,
)
from ldptel.storage.connection import refused_write
from ldptel.storage.leases import LeaseLostError, Leases
from ldptel.storage.shuffle import Shuffler
from ldptel.storage.sketches import format_id

__all__ = ["Worker", "WorkerStats"]

log = logging.getLogger(__name__)

LEASE_POLL = 0.2  # seconds between two looks at the leases a ``once`` worker waits for
LEASE_WAIT_MARGIN = 0.1  # seconds a ``once`` worker waits past the longest lease time-to-live it saw
WAIT_PROGRESS = 1.0  # seconds between two progress lines while it waits


@dataclass(frozen=True, kw_only=True)
class WorkerStats:
    """A snapshot of what a worker did since it started."""

    entries: int
    reports: int
    dead: int
    commits: int
    shards: tuple[str, ...]
    lag: int | None
    elapsed: float
    unclaimed: tuple[str, ...] = ()  # ``once``: shards other workers still held when it gave up waiting

    def to_dict(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "reports": self.reports,
            "dead": self.dead,
            "commits": self.commits,
            "shards": list(self.shards),
            "lag": self.lag,
            "unclaimed": list(self.unclaimed),
            "elapsed": round(self.elapsed, 3),
        }


class Worker:
    """A fold worker over one Redis connection (``decode_responses`` must be off: entries are binary)."""

    def __init__(self, r: redis_lib.Redis, config: WorkerConfig | None = None) -> None:
        if decodes_responses(r):
            raise InvalidParameterError("r", "a Redis client with decode_responses=False (entries are binary)", r)
        self.r = r
        self.config = config or WorkerConfig()
        self._specs = MetricSpecs(r)
        self._reader = Reader(r, self._specs, batch=self.config.batch, prefetch=self.config.prefetch)
        shuffle = self.config.shuffle
        self._shuffler = None if shuffle is None else Shuffler(r, self._specs.params, shuffle,
                                                               n_min_of=self._specs.shuffle_n_min)
        self._leases = Leases(r, owner=self.config.worker_id, ttl_seconds=self.config.lease_ttl)
        self._stop = threading.Event()
        self._owned: dict[tuple[str, int], OwnedShard] = {}
        self._finished: set[tuple[str, int]] = set()  # --once: shards drained in this run
        self._lease_wait_until: float | None = None  # --once: until when it waits for other workers' leases
        self._last_wait_log = -1e18
        self._unclaimed: tuple[str, ...] = ()
        self._started = time.monotonic()
        self._entries = self._reports = self._dead = self._commits = 0
        self._errors: dict[str, int] = {}  # errors the follow loop survived, by kind (Prometheus: prometheus.py)
        self._last_scan = -1e18
        self._last_heartbeat = -1e18
        self._last_seal = time.monotonic()  # a follow worker's first pass comes one seal_seconds after start
        self._sealed_days = 0
        self._rr = 0

    # ------------------------------------------------------------------------------------------ control
    def stop(self) -> None:
        """Ask the loop to commit, release its leases and return (safe from a signal handler)."""
        self._stop.set()

    def close(self) -> None:
        """Disconnect the worker's own read connections; :meth:`run` does when it returns, so this is for a worker
        that was made and not run (or whose run is over: then it does nothing)."""
        self._reader.close()

    def owned(self) -> list[str]:
        return sorted(sh.name for sh in self._owned.values())

    def owned_shards(self) -> list[tuple[str, int]]:
        """(metric, shard) of every shard this worker holds now."""
        return sorted(self._owned)

    def errors(self) -> dict[str, int]:
        """Errors survived since start, by kind: ``redis_connection``, ``redis_refuses_writes``, ``seal``."""
        return dict(self._errors)

    def sealed_days(self) -> int:
        """(version, day) pairs this worker sealed since start (:mod:`ldptel.storage.sealed`)."""
        return self._sealed_days

    def stats(self, *, with_lag: bool = False) -> WorkerStats:
        return WorkerStats(
            entries=self._entries,
            reports=self._reports,
            dead=self._dead,
            commits=self._commits,
            shards=tuple(self.owned()),
            lag=self.lag() if with_lag else None,
            elapsed=time.monotonic() - self._started,
            unclaimed=self._unclaimed,
        )

    def lag(self) -> int:
        """Entries in the owned streams not yet folded (committed), from :func:`shard_lag`."""
        total = 0
        for sh in self._owned.values():
            total += shard_lag(self.r, sh.metric, sh.shard) or 0
        return total

    # --------------------------------------------------------------------------------------------- run
    def run(
        self,
        *,
        on_progress: Callable[[Worker], None] | None = None,
        progress_seconds: float = 1.0,
    ) -> WorkerStats:
        """Fold until stopped (or, with ``once``, until every claimable shard is drained)."""
        cfg = self.config
        log.info("worker starting", extra={"event": "start", "worker": cfg.worker_id, "once": cfg.once})
        last_progress = time.monotonic()
        backoff = 0.1
        refused = False  # in an episode of refused writes (logged once)
        try:
            while not self._stop.is_set():
                try:
                    if not self._step(on_progress, progress_seconds, last_progress):
                        if cfg.seal_after_once and not self._stop.is_set():
                            self._seal(max_days=None)
                        break
                    if on_progress is not None and time.monotonic() - last_progress >= progress_seconds:
                        last_progress = time.monotonic()
                    backoff = 0.1
                    refused = False
                except (*TRANSIENT_ERRORS, *CLUSTER_REDIRECT_ERRORS) as exc:  # lost Redis, or a cluster mid-failover
                    # MOVED/ASK/TRYAGAIN/CLUSTERDOWN that outlasted the client's own retries are transient on a
                    # cluster (the slot map is refreshed before the next try); on one Redis a MOVED is a
                    # configuration error (a plain URL at a cluster node), raised like in ``once`` mode.
                    if cfg.once or not transient_on(self.r, exc):
                        raise
                    if isinstance(exc, CLUSTER_REDIRECT_ERRORS):
                        try:
                            refresh_slot_map(self.r, exc)
                        except TRANSIENT_ERRORS:
                            pass  # no map yet: the next step asks again
                    # Follow mode outlives a Redis restart: forget every shard (uncommitted work is still
                    # in the stream after the checkpoint), wait, and claim again once Redis answers.
                    log.error("lost Redis; retrying", extra={"event": "redis_error", "error": str(exc), "retry_in": backoff})
                    self._errors["redis_connection"] = self._errors.get("redis_connection", 0) + 1
                    backoff = self._back_off(backoff, "Redis connection lost")
                except redis_lib.ResponseError as exc:
                    reason = refused_write(exc)
                    if cfg.once or reason is None:
                        raise
                    # Nothing can be committed (nor a lease renewed) until Redis accepts writes again: the same
                    # as a lost connection, logged once per episode (it is polled every backoff).
                    if not refused:
                        log.error("Redis refuses writes; waiting for it to accept them",
                                  extra={"event": "redis_refuses_writes", "error": reason})
                    refused = True
                    self._errors["redis_refuses_writes"] = self._errors.get("redis_refuses_writes", 0) + 1
                    backoff = self._back_off(backoff, "Redis refuses writes")
        finally:
            self._shutdown()
        stats = self.stats()
        log.info("worker stopped", extra={"event": "stop", "worker": cfg.worker_id, **stats.to_dict()})
        return stats

    def _back_off(self, backoff: float, why: str) -> float:
        """Forget every shard (uncommitted work is read again from the checkpoint), wait ``backoff`` seconds and make the
        next step heartbeat and claim again; returns the next, doubled backoff."""
        for sh in list(self._owned.values()):
            self._drop(sh, why)
        self._last_scan = self._last_heartbeat = -1e18
        self._stop.wait(backoff)
        return min(backoff * 2, self.config.lease_ttl / 2)

    def _step(self, on_progress: Callable[[Worker], None] | None, progress_seconds: float, last_progress: float) -> bool:
        """One pass of the loop; False when a ``once`` worker has nothing left to claim (the loop ends)."""
        cfg = self.config
        now = time.monotonic()
        if now - self._last_heartbeat >= cfg.lease_ttl / 3:
            self._heartbeat()
            self._renew_leases()
        if now - self._last_scan >= cfg.rescan_seconds or (cfg.once and not self._owned):
            self._rebalance()
        if cfg.once and not self._owned:
            return self._wait_for_leases()
        worked = self._round()
        if not cfg.once and time.monotonic() - self._last_seal >= cfg.seal_seconds:
            self._seal()
        if on_progress is not None and time.monotonic() - last_progress >= progress_seconds:
            on_progress(self)
        if not worked and not cfg.once and self._owned and not self._stop.is_set():
            self._idle_wait()
        elif not self._owned and not cfg.once and not self._stop.is_set():
            self._stop.wait(min(cfg.rescan_seconds, cfg.lease_ttl / 3))
        return True

    def _wait_for_leases(self) -> bool:
        """A ``once`` worker that owns nothing: True (keep looping) while shards it has not drained are leased
        by other workers and the wait has not run out; False when it is done."""
        pending = [s for s in self._all_shards() if s not in self._finished]
        held = self._leases.held_elsewhere(pending)
        now = time.monotonic()
        if not held:
            self._unclaimed = ()
            return False
        holders = sorted({holder for holder, _ in held.values()})
        if self._lease_wait_until is None:
            wait = max(left for _, left in held.values()) / 1000 + LEASE_WAIT_MARGIN
            self._lease_wait_until = now + wait
            self._last_wait_log = now
            log.warning(
                f"waiting up to {wait:.1f} s for {len(held)} shard(s) leased by other workers",
                extra={"event": "wait_leases", "shards": len(held), "holders": holders, "wait": round(wait, 1)},
            )
        if now >= self._lease_wait_until or self._stop.is_set():
            self._unclaimed = tuple(sorted(f"{metric}:{shard}" for metric, shard in held))
            log.warning("shards still leased by other workers were not folded",
                        extra={"event": "unclaimed", "shards": list(self._unclaimed), "holders": holders})
            return False
        if now - self._last_wait_log >= WAIT_PROGRESS:
            self._last_wait_log = now
            log.info("waiting for leased shards", extra={
                "event": "wait_leases", "shards": len(held), "holders": holders,
                "left": round(self._lease_wait_until - now, 1)})
        self._stop.wait(min(LEASE_POLL, self._lease_wait_until - now))
        return True

    def _round(self) -> bool:
        """Poll every owned shard once without blocking; commit the ones that are due. True if any read."""
        worked = False
        for key in list(self._owned):
            if self._stop.is_set():
                break
            sh = self._owned.get(key)
            if sh is None:
                continue
            try:
                got = self._poll(sh, block_ms=None)
                worked = worked or got > 0
                self._maybe_commit(sh)
                if self.config.once and sh.drained:
                    self._commit(sh)
                    self._release_shard(sh)
                    self._finished.add(key)
            except LeaseLostError:
                self._drop(sh, "lease lost")
        return worked

    def _idle_wait(self) -> None:
        """Block on one shard (rotating) so an idle worker sleeps in Redis, not in a busy loop."""
        shards = list(self._owned.values())
        sh = shards[self._rr % len(shards)]
        self._rr += 1
        block_ms = max(50, int(self.config.block_seconds * 1000 / len(shards)))
        try:
            self._poll(sh, block_ms=block_ms)
            self._maybe_commit(sh)
        except LeaseLostError:
            self._drop(sh, "lease lost")
        for other in list(self._owned.values()):
            try:
                self._maybe_commit(other)
            except LeaseLostError:
                self._drop(other, "lease lost")

    # ------------------------------------------------------------------------------------ read + fold
    def _poll(self, sh: OwnedShard, *, block_ms: int | None) -> int:
        """Read one batch of entries from a shard and fold it; returns the number of entries read."""
        self._ensure_lease(sh)
        if self._shuffler is not None:  # release held uploads as shuffled blocks first (ldptel.storage.shuffle);
            # a ``once`` worker drains them too: a group short of n_min goes out as a block marked below n_min
            self._shuffler.shuffle(sh.metric, sh.shard, flush=self.config.once)
        read = self._reader.next_read(sh, block_ms=block_ms)
        if read.entries:
            folded = fold_read(self.r, self._specs, sh, read)
            self._entries += folded.entries
            self._reports += folded.reports
        self._reader.done(read)
        return len(read.entries)

    # ------------------------------------------------------------------------------------------ sealing
    def _seal(self, *, max_days: int | None = SEAL_DAYS_PER_PASS) -> None:
        """Seal the days of every metric this worker folds that can no longer change (``sealing``). A metric
        that cannot be sealed (unreadable state, a metric removed meanwhile) is logged and counted in the errors
        (``seal``); folding goes on. A lost Redis propagates to the loop, as a read would."""
        self._last_seal = time.monotonic()
        names = list(self.config.metrics) or self._specs.registry_names()

        def keep_leases() -> None:
            if time.monotonic() - self._last_heartbeat >= self.config.lease_ttl / 3:
                self._heartbeat()
                self._renew_leases()

        for name in names:
            try:
                for report in seal_pass(self.r, [name], horizon_days=self.config.retry_horizon_days,
                                        owner=self.config.worker_id, max_days=max_days, between=keep_leases):
                    self._sealed_days += report.days_sealed
            except LdpError as exc:
                self._errors["seal"] = self._errors.get("seal", 0) + 1
                log.error("could not seal a metric", extra={"event": "seal_error", "metric": name, "error": str(exc)})

    # ------------------------------------------------------------------------------------------ commit
    def _maybe_commit(self, sh: OwnedShard) -> None:
        if sh.uncommitted >= self.config.checkpoint_every:
            self._commit(sh)
        elif time.monotonic() - sh.last_commit >= self.config.checkpoint_seconds:
            self._commit(sh)

    def _commit(self, sh: OwnedShard) -> None:
        dead = len(sh.dead)
        if commit(self.r, sh, worker_id=self.config.worker_id, retention_seconds=self.config.retention_seconds):
            self._commits += 1
            self._dead += dead

    # ---------------------------------------------------------------------------------- leases + shards
    def _heartbeat(self) -> None:
        self._leases.heartbeat()
        self._last_heartbeat = time.monotonic()

    def _renew_leases(self) -> None:
        for sh in list(self._owned.values()):
            started = time.monotonic()
            if self._leases.renew(sh.metric, sh.shard):
                sh.leased_at = started
            else:
                self._drop(sh, "lease lost at renewal")

    def _ensure_lease(self, sh: OwnedShard) -> None:
        """Renew before reading when the last renewal is older than half a TTL (or fail)."""
        if time.monotonic() - sh.leased_at < self.config.lease_ttl / 2:
            return
        started = time.monotonic()
        if not self._leases.renew(sh.metric, sh.shard):
            raise LeaseLostError(f"shard {sh.name}: lease expired")
        sh.leased_at = started

    def _all_shards(self) -> list[tuple[str, int]]:
        names = list(self.config.metrics) or self._specs.registry_names()
        return [(name, s) for name in names for s in range(self._specs.shard_count(name))]

    def _rebalance(self) -> None:
        """Claim free shards up to a fair share; release extras when more workers are alive."""
        self._last_scan = time.monotonic()
        self._specs.forget_shards()  # rescan: shard counts come from the registry (they can grow)
        all_shards = [s for s in self._all_shards() if s not in self._finished]
        if self.config.once:
            target = len(all_shards)
        else:
            target = -(-len(self._all_shards()) // self._leases.live_workers())
        while len(self._owned) > target and not self.config.once:
            key = sorted(self._owned)[-1]
            sh = self._owned[key]
            try:
                self._commit(sh)
                self._release_shard(sh)
            except LeaseLostError:
                self._drop(sh, "lease lost")
            log.info("released a shard to rebalance", extra={"event": "release", "shard": sh.name})
        for metric, shard in all_shards:
            if len(self._owned) >= target or self._stop.is_set():
                break
            if (metric, shard) in self._owned:
                continue
            started = time.monotonic()
            if self._leases.claim(metric, shard):
                self._adopt(metric, shard, started)

    def _adopt(self, metric: str, shard: int, leased_at: float) -> None:
        checkpoint = store.read_checkpoint(self.r, metric, shard)
        sh = OwnedShard(metric=metric, shard=shard, checkpoint=checkpoint, last_folded=checkpoint, leased_at=leased_at,
                        cursor=format_id(checkpoint))
        self._owned[(metric, shard)] = sh
        log.info(
            "claimed a shard",
            extra={"event": "claim", "shard": sh.name, "checkpoint": format_id(checkpoint), "worker": self.config.worker_id},
        )

    def _release_shard(self, sh: OwnedShard) -> None:
        forget_prefetch(sh)
        self._owned.pop((sh.metric, sh.shard), None)
        self._leases.release(sh.metric, sh.shard)

    def _drop(self, sh: OwnedShard, why: str) -> None:
        """Forget a shard without writing (its uncommitted entries are read again by the next owner)."""
        forget_prefetch(sh)
        self._owned.pop((sh.metric, sh.shard), None)
        log.warning("dropped a shard", extra={"event": "drop", "shard": sh.name, "reason": why})

    def _shutdown(self) -> None:
        for sh in list(self._owned.values()):
            try:
                self._commit(sh)
                self._release_shard(sh)
            except LeaseLostError:
                self._drop(sh, "lease lost at shutdown")
            except (redis_lib.RedisError, RedisClusterException) as exc:  # a cluster mid-failover too: the
                # uncommitted entries stay after the checkpoint and the next owner folds them
                log.error("could not commit at shutdown", extra={"event": "error", "shard": sh.name, "error": str(exc)})
        try:
            self._leases.leave()
            if self._shuffler is not None:
                self._shuffler.finish()  # the AOF forgets the uploads it released (ldptel.storage.shuffle)
        except (redis_lib.RedisError, RedisClusterException):
            pass
        self._reader.close()
