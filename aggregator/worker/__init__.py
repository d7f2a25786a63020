"""The fold worker: exactly-once aggregation of stream shards into per-(version, day) sketches.

One worker owns some shards at a time, by lease (``SET lease <worker> NX PX ttl``, renewed with a
compare-and-set script; a dead worker's leases expire and another worker takes its shards). Every shard
stream has exactly one consumer in the group, named :data:`CONSUMER`, so a new owner sees the entries the
previous owner read but never acknowledged: it first re-reads that pending list (id ``0``), then new
entries (``>``). Reads are large (``batch`` entries per XREADGROUP) and every read is folded in one
vectorized :func:`~ldptel.client.fold` call per (version, day).

Exactly once. The in-memory state of a (version, day) starts from what is stored. Every N entries or T
seconds the worker commits, per shard, in ONE MULTI/EXEC guarded by WATCH on the lease and the checkpoint:
the updated sketch blobs, the sketch index, the checkpoint (id of the last entry folded), dead letters,
the XACK of every folded id and the retention trim. A crash before EXEC applies nothing (the entries stay
pending and are refolded from the stored state); after EXEC they are acknowledged. So an entry is pending
exactly when it is not in the stored sketches, and the pending list is always folded. The group itself never
delivers an entry twice: it is created at the checkpoint, and moved forward to it if found behind (an
operator's XGROUP SETID); a new entry at or below the last folded id is skipped all the same. The WATCH
fences a worker that lost its lease (a long pause): its EXEC fails and it drops the shard without writing.

A worker only reads a shard while its lease is certainly valid (renewed less than half a TTL ago). If an
ex-owner still reads after a pause past that check, its entries land in the shared pending list behind the
new owner; the new owner's next commit counts more pending entries than it has in flight, skips the trim
and re-reads the pending list, so they are folded once, a commit later.

Poison entries (missing fields, unknown version, failed decode) never stop the worker: they are copied to
the shard's dead-letter stream (:func:`~ldptel.storage.sketches.dead_letter_key`) in the same commit and
acknowledged. Folded entries are trimmed (XTRIM MINID, in the commit) once older than ``retention_seconds``.

Several workers share the shards fairly: each registers a heartbeat in :data:`WORKERS_KEY` and holds at
most ⌈shards / live workers⌉ leases, releasing extras (after a commit) when more workers join.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import redis as redis_lib

from ldptel.client import SketchState, fold
from ldptel.client.errors import LdpError
from ldptel.client.protocol.specs import MetricSpec, Params
from ldptel.client.mechanisms.cms import merge_by_row, row_order
from ldptel.client.protocol.wire import ReportBatch, decode_batch
from ldptel.storage import keys

from ldptel.storage import sketches as store
from ldptel.storage.streamread import StreamReader
from ldptel.storage.sketches import StreamId, format_id, index_member, next_id, parse_id

log = logging.getLogger("ldptel.aggregator.worker")

CONSUMER = "fold"
WORKERS_KEY = keys.aggregators()
DEAD_LETTER_MAXLEN = 10_000
_ROW_MERGED = ("cms", "oue-cms")  # the mechanisms whose reads are merged by row (merge_by_row)
_ACK_CHUNK = 10_000

_RENEW_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """Tuning of one fold worker.

    metrics: names to fold (empty: every metric in the registry, rescanned every ``rescan_seconds``).
    batch: stream entries per XREADGROUP. checkpoint_every / checkpoint_seconds: commit a shard when
    either that many entries were read since its last commit or that much time passed. lease_ttl: seconds
    a lease lives without renewal (renewed every third of it). retention_seconds: folded entries older than
    this are trimmed (0: trimmed at the commit that folds them). once: drain what is there and stop.
    """

    metrics: tuple[str, ...] = ()
    batch: int = 1000
    checkpoint_every: int = 100_000
    checkpoint_seconds: float = 1.0
    lease_ttl: float = 10.0
    block_seconds: float = 1.0
    retention_seconds: float = 3600.0
    rescan_seconds: float = 5.0
    once: bool = False
    prefetch: bool = True
    worker_id: str = field(default_factory=default_worker_id)

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        if self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1, got {self.checkpoint_every}")
        if not self.checkpoint_seconds > 0:
            raise ValueError(f"checkpoint_seconds must be > 0, got {self.checkpoint_seconds}")
        if not self.lease_ttl >= 0.5:
            raise ValueError(f"lease_ttl must be >= 0.5 seconds, got {self.lease_ttl}")
        if not self.retention_seconds >= 0:
            raise ValueError(f"retention_seconds must be >= 0, got {self.retention_seconds}")
        if not self.rescan_seconds > 0 or not self.block_seconds > 0:
            raise ValueError("rescan_seconds and block_seconds must be > 0")


@dataclass(frozen=True, kw_only=True)
class WorkerStats:
    """A snapshot of what a worker did since it started."""

    entries: int
    reports: int
    skipped: int
    dead: int
    commits: int
    shards: tuple[str, ...]
    lag: int | None
    elapsed: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "reports": self.reports,
            "skipped": self.skipped,
            "dead": self.dead,
            "commits": self.commits,
            "shards": list(self.shards),
            "lag": self.lag,
            "elapsed": round(self.elapsed, 3),
        }


class _StopLoop(Exception):
    """Internal: a --once worker has nothing left to claim."""


class LeaseLostError(LdpError):
    """This worker no longer owns a shard (its lease expired and possibly another worker took it)."""


@dataclass(eq=False)
class _Shard:
    metric: str
    shard: int
    checkpoint: StreamId
    last_folded: StreamId
    leased_at: float
    cursor: str = "0"  # "0"…: re-reading our pending list; ">": new entries
    prefetch: tuple[str, Future[Any]] | None = None  # (cursor, read in flight)
    drained: bool = False
    scanned: int = 0  # entries read in the current pass over the pending list
    rescan_found: int = -1  # entries the last stray-triggered pass found (-1: none yet)
    rescanning: bool = False
    warned_foreign: bool = False
    states: dict[tuple[int, str], SketchState] = field(default_factory=dict)
    dirty: set[tuple[int, str]] = field(default_factory=set)
    to_ack: list[bytes] = field(default_factory=list)
    dead: list[tuple[bytes, dict[bytes, bytes], str]] = field(default_factory=list)
    uncommitted: int = 0
    last_commit: float = field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        return f"{self.metric}:{self.shard}"

    @property
    def stream(self) -> str:
        return keys.stream(self.metric, self.shard)


class Worker:
    """A fold worker over one Redis connection (``decode_responses`` must be off: entries are binary)."""

    def __init__(self, r: redis_lib.Redis, config: WorkerConfig | None = None) -> None:
        if r.connection_pool.connection_kwargs.get("decode_responses"):
            raise ValueError("the fold worker needs a Redis client with decode_responses=False")
        self.r = r
        # Stream reads move ~130 KB per entry: connections of their own whose replies are parsed in place.
        self._reads = StreamReader(r)
        self._buffers = _Buffers()
        self.config = config or WorkerConfig()
        self._stop = threading.Event()
        self._owned: dict[tuple[str, int], _Shard] = {}
        self._finished: set[tuple[str, int]] = set()  # --once: shards drained in this run
        self._specs: dict[str, dict[int, MetricSpec]] = {}
        self._spec_refresh: dict[str, float] = {}
        self._shard_counts: dict[str, int] = {}
        self._renew = r.register_script(_RENEW_LUA)
        self._release = r.register_script(_RELEASE_LUA)
        self._started = time.monotonic()
        self._entries = self._reports = self._skipped = self._dead = self._commits = 0
        self._last_scan = -1e18
        self._last_heartbeat = -1e18
        self._rr = 0
        self._pool: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------------------------------ control
    def stop(self) -> None:
        """Ask the loop to commit, release its leases and return (safe from a signal handler)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def owned(self) -> list[str]:
        return sorted(sh.name for sh in self._owned.values())

    def stats(self, *, with_lag: bool = False) -> WorkerStats:
        return WorkerStats(
            entries=self._entries,
            reports=self._reports,
            skipped=self._skipped,
            dead=self._dead,
            commits=self._commits,
            shards=tuple(self.owned()),
            lag=self.lag() if with_lag else None,
            elapsed=time.monotonic() - self._started,
        )

    def lag(self) -> int:
        """Entries in the owned streams not yet folded (undelivered + pending), from XINFO GROUPS."""
        total = 0
        for sh in self._owned.values():
            total += shard_lag(self.r, sh.metric, sh.shard)[0] or 0
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
        try:
            while not self._stop.is_set():
                try:
                    self._step(on_progress, progress_seconds, last_progress)
                    if on_progress is not None and time.monotonic() - last_progress >= progress_seconds:
                        last_progress = time.monotonic()
                    backoff = 0.1
                except _StopLoop:
                    break
                except (redis_lib.ConnectionError, redis_lib.TimeoutError) as exc:
                    if cfg.once:
                        raise
                    # Follow mode outlives a Redis restart: forget every shard (uncommitted work is still
                    # pending in Redis), wait, and claim again once Redis answers.
                    log.error("lost Redis; retrying", extra={"event": "redis_error", "error": str(exc), "retry_in": backoff})
                    for sh in list(self._owned.values()):
                        self._drop(sh, "Redis connection lost")
                    self._last_scan = self._last_heartbeat = -1e18
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, cfg.lease_ttl / 2)
        finally:
            self._shutdown()
        stats = self.stats()
        log.info("worker stopped", extra={"event": "stop", "worker": cfg.worker_id, **stats.to_dict()})
        return stats

    def _step(self, on_progress: Callable[[Worker], None] | None, progress_seconds: float, last_progress: float) -> None:
        cfg = self.config
        now = time.monotonic()
        if now - self._last_heartbeat >= cfg.lease_ttl / 3:
            self._heartbeat()
            self._renew_leases()
        if now - self._last_scan >= cfg.rescan_seconds or (cfg.once and not self._owned):
            self._rebalance()
        if cfg.once and not self._owned:
            raise _StopLoop
        worked = self._round()
        if on_progress is not None and time.monotonic() - last_progress >= progress_seconds:
            on_progress(self)
        if not worked and not cfg.once and self._owned and not self._stop.is_set():
            self._idle_wait()
        elif not self._owned and not cfg.once and not self._stop.is_set():
            self._stop.wait(min(cfg.rescan_seconds, cfg.lease_ttl / 3))

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
                    if sh.drained:  # a commit that finds entries left pending re-reads them first
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
    def _poll(self, sh: _Shard, *, block_ms: int | None) -> int:
        """Read one batch of entries from a shard and fold it; returns the number of entries read.

        With ``prefetch`` the next read of the shard is started on a second connection before this batch
        is folded, so Redis I/O and reply parsing overlap the fold (numpy releases the GIL). Entries read
        ahead are only pending, never acknowledged, until a commit after they are folded.
        """
        self._ensure_lease(sh)
        if sh.prefetch is not None:
            cursor, future = sh.prefetch
            sh.prefetch = None
            read = future.result()
        else:
            cursor = sh.cursor
            read = self._read(sh, cursor, None if cursor != ">" else block_ms)
        entries = read.entries
        if cursor != ">":
            if not entries:
                sh.cursor = ">"  # our pending list is done: switch to new entries
                if sh.rescanning:
                    sh.rescan_found, sh.rescanning = max(sh.scanned, 0), False
                sh.scanned = 0
                return 0
            sh.cursor = entries[-1][0].decode()
            sh.scanned += len(entries)
        sh.drained = not entries
        if entries:
            if self.config.prefetch:
                sh.prefetch = (sh.cursor, self._reader().submit(self._read, sh, sh.cursor, None))
            self._fold_entries(sh, read, pending=cursor != ">")
        self._buffers.give(read.buffers)  # folded: the merged bits are no longer needed
        return len(entries)

    def _read(self, sh: _Shard, cursor: str, block_ms: int | None) -> _Read:
        """One XREADGROUP, its entries decoded and their batches merged per (version, day).

        Run on the prefetch thread, so decoding and the merge (one copy of every report's bits into one
        array, which the fold would otherwise make) overlap the fold of the previous read.
        """
        decoded: list[tuple[int, str, ReportBatch] | str] = []
        groups: dict[tuple[int, str], list[ReportBatch]] = defaultdict(list)
        kept: list[tuple[bytes, dict[bytes, bytes] | None]] = []
        with self._reads.read(
            keys.CONSUMER_GROUP, CONSUMER, sh.stream, cursor, count=self.config.batch, block_ms=block_ms
        ) as entries:
            for eid, fields in entries:
                if fields is None:  # deleted from the stream while pending: nothing to fold
                    decoded.append("entry deleted from the stream before it was folded")
                    kept.append((eid, None))
                    continue
                try:
                    version, day, batch = self._decode(sh.metric, fields)
                except (LdpError, ValueError, KeyError, UnicodeDecodeError) as exc:
                    decoded.append(f"{type(exc).__name__}: {exc}")
                    kept.append((eid, {k: bytes(v) for k, v in fields.items()}))  # for its dead letter
                    continue
                decoded.append((version, day, batch))
                groups[(version, day)].append(batch)
                kept.append((eid, {}))
            # The batches are views into the reader's buffer until merged (_merge copies them).
            held: list[np.ndarray] = []
            merged = {key: self._merge(b, held) for key, b in groups.items()}
        return _Read(entries=kept, decoded=decoded, merged=merged, buffers=held)

    def _merge(self, batches: list[ReportBatch], held: list[np.ndarray]) -> list[ReportBatch]:
        """cms, oue-cms: one batch ordered by row, in a reused buffer (see :class:`_Buffers`)."""
        if not batches or batches[0].mechanism not in _ROW_MERGED:
            return batches
        buffer = self._buffers.take(sum(b.n for b in batches) * batches[0].bits.shape[1])  # type: ignore[union-attr]
        held.append(buffer)
        return [merge_by_row(batches, out=buffer)]

    def _reader(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ldptel-prefetch")
        return self._pool

    @staticmethod
    def _forget_prefetch(sh: _Shard) -> None:
        """Wait for a read in flight and discard it: its entries stay pending for whoever folds next."""
        if sh.prefetch is not None:
            _, future = sh.prefetch
            sh.prefetch = None
            try:
                future.result()
            except redis_lib.RedisError:
                pass

    def _fold_entries(self, sh: _Shard, read: _Read, *, pending: bool) -> None:
        """Fold entries read from the pending list (``pending``) or new ones (``>``).

        A pending entry was delivered but never acknowledged, and acknowledgements are committed with the
        sketches, so it was never folded into them: it is always folded, even below the checkpoint (an entry
        a former owner read after it lost its lease, while this worker had already moved past it). A new
        entry at or below the last folded id can only come from a group moved backwards under a running
        worker; it is already counted and skipped.
        """
        keep: list[bool] = []
        reports = skipped = 0
        for (eid, fields), decoded in zip(read.entries, read.decoded):
            sh.to_ack.append(eid)
            sid = parse_id(eid)
            keep.append(False)
            if not pending and sid <= sh.last_folded:
                skipped += 1
                continue
            if pending and sid <= sh.checkpoint:
                log.warning(
                    "folding an entry another reader left pending below the checkpoint",
                    extra={"event": "stray", "shard": sh.name, "id": eid.decode()},
                )
            sh.last_folded = max(sh.last_folded, sid)
            if isinstance(decoded, str):
                sh.dead.append((eid, fields or {}, decoded))
                if fields is not None:
                    log.warning(
                        "dead-lettered a stream entry",
                        extra={"event": "dead_letter", "shard": sh.name, "id": eid.decode(), "error": decoded},
                    )
                continue
            keep[-1] = True
            reports += decoded[2].n
        # Nothing skipped (the normal case): fold the batches the read merged already.
        groups = read.merged if not skipped else _without_skipped(read, keep)
        for (version, day), batches in groups.items():
            state = self._state(sh, version, day)
            fold(self._params(sh.metric, version), batches, into=state)
            sh.dirty.add((version, day))
        sh.uncommitted += len(read.entries)
        self._entries += len(read.entries)
        self._reports += reports
        self._skipped += skipped

    def _decode(self, metric: str, fields: dict[bytes, bytes | memoryview]) -> tuple[int, str, Any]:
        missing = [name.decode() for name in (b"d", b"v", b"n", b"b") if name not in fields]
        if missing:
            raise ValueError(f"entry lacks the field(s) {', '.join(missing)} (expected d, v, n, b)")
        version = int(fields[b"v"])
        day = store.check_day(fields[b"d"].decode("ascii"))
        n = int(fields[b"n"])
        params = self._params(metric, version)
        data = fields[b"b"]
        if params.mechanism not in _ROW_MERGED:
            data = bytes(data)  # kept as is by _merge: must not point into the reader's buffer
        header, batch = decode_batch(data, params)
        if header.metric != metric or header.version != version or header.n != n:
            raise ValueError(
                f"entry fields (metric {metric!r}, v {version}, n {n}) disagree with its batch header "
                f"(metric {header.metric!r}, v {header.version}, n {header.n})"
            )
        return version, day, batch

    def _params(self, metric: str, version: int) -> Params:
        specs = self._specs.get(metric, {})
        if version not in specs and time.monotonic() - self._spec_refresh.get(metric, -1e18) > 1.0:
            self._load_metric(metric)
            specs = self._specs.get(metric, {})
        if version not in specs:
            raise KeyError(f"metric {metric!r} has no version {version} in the registry")
        return specs[version].params

    def _state(self, sh: _Shard, version: int, day: str) -> SketchState:
        key = (version, day)
        state = sh.states.get(key)
        if state is None:
            params = self._params(sh.metric, version)
            stored = store.load_state(self.r, keys.sketch(sh.metric, sh.shard, version, day), params)
            state = stored if stored is not None else SketchState.empty(params)
            sh.states[key] = state
        return state

    # ------------------------------------------------------------------------------------------ commit
    def _maybe_commit(self, sh: _Shard) -> None:
        if sh.uncommitted >= self.config.checkpoint_every:
            self._commit(sh)
        elif time.monotonic() - sh.last_commit >= self.config.checkpoint_seconds:
            self._commit(sh)

    def _commit(self, sh: _Shard) -> None:
        """Write the shard's dirty sketches, checkpoint, index, dead letters, XACK and trim in one EXEC.

        Each commit also counts the group's pending entries. After it, the only ones left should be those of
        the read in flight; any more were read by someone else (a former owner that lost its lease while
        paused). Then the trim is skipped and the shard re-reads its pending list next, so those entries
        are folded, not lost.
        """
        prefetched = self._prefetched(sh)
        if not sh.to_ack and not sh.dirty and not sh.dead:
            # Nothing new: still let folded entries age out of the retention window. Entries at or below
            # the committed checkpoint are acknowledged, so trimming them needs no transaction.
            strays = self._our_pending(sh, self.r.xpending(sh.stream, keys.CONSUMER_GROUP)) > prefetched
            minid = None if strays or sh.cursor != ">" else self._trim_below(sh.checkpoint)
            if minid is not None:
                self.r.xtrim(sh.stream, minid=format_id(minid), approximate=False)
            sh.last_commit = time.monotonic()
            self._rescan_if(sh, strays, prefetched)
            return
        lease_key = keys.lease(sh.metric, sh.shard)
        ckpt_key = keys.checkpoint(sh.metric, sh.shard)
        blobs = {key: sh.states[key].to_bytes() for key in sorted(sh.dirty)}
        try:
            with self.r.pipeline(transaction=True) as pipe:
                pipe.watch(lease_key, ckpt_key)
                owner = pipe.get(lease_key)
                stored = pipe.get(ckpt_key)
                if owner != self.config.worker_id.encode() or (parse_id(stored) if stored else store.ZERO_ID) != sh.checkpoint:
                    pipe.unwatch()
                    raise LeaseLostError(f"shard {sh.name} is no longer leased to {self.config.worker_id}")
                pending = self._our_pending(sh, pipe.xpending(sh.stream, keys.CONSUMER_GROUP))
                strays = pending > len(set(sh.to_ack)) + prefetched
                pipe.multi()
                for (version, day), blob in blobs.items():
                    pipe.set(keys.sketch(sh.metric, sh.shard, version, day), blob)
                if blobs:
                    pipe.sadd(keys.sketch_index(sh.metric, sh.shard), *(index_member(v, d) for v, d in blobs))
                if sh.last_folded > sh.checkpoint:
                    pipe.set(ckpt_key, format_id(sh.last_folded))
                for eid, fields, reason in sh.dead:
                    letter: dict[bytes | str, bytes | str] = {"id": eid, "error": reason[:500]}
                    letter.update({k: v for k, v in fields.items() if k in (b"d", b"v", b"n", b"b")})
                    pipe.xadd(store.dead_letter_key(sh.metric, sh.shard), letter, maxlen=DEAD_LETTER_MAXLEN)  # type: ignore[arg-type]
                for lo in range(0, len(sh.to_ack), _ACK_CHUNK):
                    pipe.xack(sh.stream, keys.CONSUMER_GROUP, *sh.to_ack[lo : lo + _ACK_CHUNK])
                # No trim while strays are pending or the pending list is being read: entries below the
                # last folded id may still be waiting there (in a page read ahead, say).
                minid = None if strays or sh.cursor != ">" else self._trim_below(sh.last_folded)
                if minid is not None:
                    pipe.xtrim(sh.stream, minid=format_id(minid), approximate=False)
                pipe.execute()
        except redis_lib.WatchError:
            raise LeaseLostError(f"shard {sh.name} changed hands during a commit") from None
        self._commits += 1
        self._dead += len(sh.dead)
        log.debug(
            "committed",
            extra={"event": "commit", "shard": sh.name, "checkpoint": format_id(sh.last_folded),
                   "entries": sh.uncommitted, "sketches": len(blobs)},
        )
        sh.checkpoint = sh.last_folded
        # Keep only the states written now: an idle (version, day) is reloaded from the store if needed.
        sh.states = {key: sh.states[key] for key in sh.dirty}
        sh.dirty = set()
        sh.to_ack = []
        sh.dead = []
        sh.uncommitted = 0
        sh.last_commit = time.monotonic()
        self._rescan_if(sh, strays, prefetched)

    def _our_pending(self, sh: _Shard, summary: Any) -> int:
        """The fold consumer's pending entries. Another consumer's (an operator reading with this group) are
        not counted as strays; they are never folded and are trimmed like folded ones: warned about once."""
        ours, others = _pending_by_consumer(summary)
        if others and not sh.warned_foreign:
            sh.warned_foreign = True
            log.warning(
                "another consumer has entries pending in the fold group: they are not folded (read with a group of your own)",
                extra={"event": "foreign_consumer", "shard": sh.name, "pending": others},
            )
        return ours

    def _prefetched(self, sh: _Shard) -> int:
        """Entries of the read in flight (waited for; a failed read is dropped and its entries stay pending)."""
        if sh.prefetch is None:
            return 0
        try:
            return len(sh.prefetch[1].result().entries)
        except redis_lib.RedisError:
            sh.prefetch = None
            return 0

    def _rescan_if(self, sh: _Shard, strays: bool, prefetched: int) -> None:
        """Re-read the pending list next (dropping the read in flight: its entries are pending too).

        Not again while the previous such pass found nothing beyond that read's entries: then the count is off
        for a reason a re-read cannot fix, and re-reading would only spin (a --once worker would never
        finish). A commit that finds no strays clears that.
        """
        if not strays:
            sh.rescan_found = -1
            return
        if sh.cursor != ">" or sh.rescan_found == 0:
            return
        log.warning(
            "entries pending that this worker did not read; re-reading the pending list",
            extra={"event": "rescan", "shard": sh.name},
        )
        self._forget_prefetch(sh)
        sh.cursor = "0"
        sh.drained = False
        sh.rescanning, sh.scanned = True, -prefetched  # the dropped read's entries come back: not found ones

    def _trim_below(self, folded: StreamId) -> StreamId | None:
        """XTRIM MINID bound: every entry below it is folded and older than the retention window.

        Entry ids carry only the start of their UTC arrival day (the ingest never stores arrival times), so
        retention counts in whole days: an entry is kept until the day that contains now − retention has
        begun after its own day, i.e. at least ``retention_seconds`` and less than a day more.
        """
        if folded == store.ZERO_ID:
            return None
        limit = next_id(folded)
        if self.config.retention_seconds > 0:
            cutoff_s = time.time() - self.config.retention_seconds
            cutoff = (int(cutoff_s // 86400 * 86400 * 1000), 0)
            limit = min(limit, cutoff)
        return limit if limit > (0, 1) else None

    # ------------------------------------------------------------------------------------------ leases
    def _heartbeat(self) -> None:
        ttl_ms = int(self.config.lease_ttl * 1000)
        now_ms = int(time.time() * 1000)
        pipe = self.r.pipeline(transaction=False)
        pipe.zadd(WORKERS_KEY, {self.config.worker_id: now_ms + ttl_ms})
        pipe.zremrangebyscore(WORKERS_KEY, "-inf", now_ms)
        pipe.execute()
        self._last_heartbeat = time.monotonic()

    def _live_workers(self) -> int:
        return max(1, int(self.r.zcount(WORKERS_KEY, int(time.time() * 1000), "+inf")))

    def _renew_leases(self) -> None:
        ttl_ms = int(self.config.lease_ttl * 1000)
        for sh in list(self._owned.values()):
            started = time.monotonic()
            if self._renew(keys=[keys.lease(sh.metric, sh.shard)], args=[self.config.worker_id, ttl_ms]):
                sh.leased_at = started
            else:
                self._drop(sh, "lease lost at renewal")

    def _ensure_lease(self, sh: _Shard) -> None:
        """Renew before reading when the last renewal is older than half a TTL (or fail)."""
        if time.monotonic() - sh.leased_at < self.config.lease_ttl / 2:
            return
        started = time.monotonic()
        ttl_ms = int(self.config.lease_ttl * 1000)
        if not self._renew(keys=[keys.lease(sh.metric, sh.shard)], args=[self.config.worker_id, ttl_ms]):
            raise LeaseLostError(f"shard {sh.name}: lease expired")
        sh.leased_at = started

    def _all_shards(self) -> list[tuple[str, int]]:
        names = list(self.config.metrics) or self._registry_names()
        out: list[tuple[str, int]] = []
        for name in names:
            shards = self._shard_counts.get(name)
            if shards is None:
                self._load_metric(name)
                shards = self._shard_counts.get(name, 0)
            out.extend((name, s) for s in range(shards))
        return out

    def _registry_names(self) -> list[str]:
        from ldptel.storage import registry

        return sorted(_record_name(rec) for rec in registry.list_metrics(self.r))

    def _load_metric(self, name: str) -> None:
        from ldptel.storage import registry

        record = registry.get_metric(self.r, name)
        self._specs[name] = {v: registry.spec_for(record, v) for v in record.versions}
        self._shard_counts[name] = int(record.shards)
        self._spec_refresh[name] = time.monotonic()

    def _rebalance(self) -> None:
        """Claim free shards up to a fair share; release extras when more workers are alive."""
        self._last_scan = time.monotonic()
        for name in list(self._shard_counts):
            if not self.config.metrics:
                self._shard_counts.pop(name, None)  # rescan: shard counts come from the registry
        all_shards = [s for s in self._all_shards() if s not in self._finished]
        if self.config.once:
            target = len(all_shards)
        else:
            target = -(-len(self._all_shards()) // self._live_workers())
        while len(self._owned) > target and not self.config.once:
            key = sorted(self._owned)[-1]
            sh = self._owned[key]
            try:
                self._commit(sh)
                self._release_shard(sh)
            except LeaseLostError:
                self._drop(sh, "lease lost")
            log.info("released a shard to rebalance", extra={"event": "release", "shard": sh.name})
        ttl_ms = int(self.config.lease_ttl * 1000)
        for metric, shard in all_shards:
            if len(self._owned) >= target or self._stop.is_set():
                break
            if (metric, shard) in self._owned:
                continue
            started = time.monotonic()
            if self.r.set(keys.lease(metric, shard), self.config.worker_id, nx=True, px=ttl_ms):
                self._adopt(metric, shard, started)

    def _adopt(self, metric: str, shard: int, leased_at: float) -> None:
        stream = keys.stream(metric, shard)
        checkpoint = store.read_checkpoint(self.r, metric, shard)
        # The group delivers only entries after the checkpoint: one created now (first run, or after an operator
        # deleted it) starts there, and one whose last-delivered id is behind it is moved forward, so no
        # folded entry is ever delivered again.
        try:
            self.r.xgroup_create(stream, keys.CONSUMER_GROUP, id=format_id(checkpoint), mkstream=True)
        except redis_lib.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
            delivered = _group_last_delivered(self.r, stream)
            if delivered is not None and delivered < checkpoint:
                log.warning(
                    "consumer group was behind the checkpoint; moved it forward",
                    extra={"event": "group_setid", "shard": f"{metric}:{shard}", "from": format_id(delivered),
                           "to": format_id(checkpoint)},
                )
                self.r.xgroup_setid(stream, keys.CONSUMER_GROUP, format_id(checkpoint))
        sh = _Shard(metric=metric, shard=shard, checkpoint=checkpoint, last_folded=checkpoint, leased_at=leased_at)
        self._owned[(metric, shard)] = sh
        log.info(
            "claimed a shard",
            extra={"event": "claim", "shard": sh.name, "checkpoint": format_id(checkpoint), "worker": self.config.worker_id},
        )

    def _release_shard(self, sh: _Shard) -> None:
        self._forget_prefetch(sh)
        self._owned.pop((sh.metric, sh.shard), None)
        self._release(keys=[keys.lease(sh.metric, sh.shard)], args=[self.config.worker_id])

    def _drop(self, sh: _Shard, why: str) -> None:
        """Forget a shard without writing (its uncommitted work stays pending for the next owner)."""
        self._forget_prefetch(sh)
        self._owned.pop((sh.metric, sh.shard), None)
        log.warning("dropped a shard", extra={"event": "drop", "shard": sh.name, "reason": why})

    def _shutdown(self) -> None:
        for sh in list(self._owned.values()):
            try:
                self._commit(sh)
                self._release_shard(sh)
            except LeaseLostError:
                self._drop(sh, "lease lost at shutdown")
            except redis_lib.RedisError as exc:
                log.error("could not commit at shutdown", extra={"event": "error", "shard": sh.name, "error": str(exc)})
        try:
            self.r.zrem(WORKERS_KEY, self.config.worker_id)
        except redis_lib.RedisError:
            pass
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._reads.close()


@dataclass(frozen=True, eq=False)
class _Read:
    """One XREADGROUP reply: its entries, each decoded (or the reason it goes to the dead letters), and the
    decoded batches merged per (version, day)."""

    entries: list[tuple[bytes, dict[bytes, bytes] | None]]
    decoded: list[tuple[int, str, ReportBatch] | str]
    merged: dict[tuple[int, str], list[ReportBatch]]
    buffers: list[np.ndarray]  # the memory of the merged bits, for _Buffers.give once folded


class _Buffers:
    """Free buffers for merged reads (~130 MB each at 1,000 entries of 1,000 cms reports, m = 1024).

    Reusing them instead of allocating per read saves faulting in fresh pages for every merge: measured
    ~30% of the merge's time. A buffer is taken by a read (on the prefetch thread) and given back after its
    fold, so at most one per shard read in flight plus the one being folded are out; ``MAX_FREE`` are kept.
    """

    MAX_FREE = 2

    def __init__(self) -> None:
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> np.ndarray:
        with self._lock:
            for i, buffer in enumerate(self._free):
                if buffer.size >= size:
                    return self._free.pop(i)
        return np.empty(size, dtype=np.uint8)

    def give(self, buffers: list[np.ndarray]) -> None:
        with self._lock:
            self._free.extend(buffers)
            self._free.sort(key=lambda b: -b.size)
            del self._free[self.MAX_FREE :]


def _record_name(record: object) -> str:
    return record if isinstance(record, str) else str(getattr(record, "name"))


def _without_skipped(read: _Read, keep: list[bool]) -> dict[tuple[int, str], list[ReportBatch]]:
    """``read.merged`` without the reports of the entries not kept.

    The cms batches in ``read.decoded`` are views of the reader's buffer, which the next read may already be
    filling: only their rows (copies) are used, to find which merged report came from which entry.
    """
    per_key: dict[tuple[int, str], list[tuple[ReportBatch, bool]]] = defaultdict(list)
    for decoded, kept in zip(read.decoded, keep):
        if not isinstance(decoded, str):
            per_key[(decoded[0], decoded[1])].append((decoded[2], kept))
    out: dict[tuple[int, str], list[ReportBatch]] = {}
    for key, items in per_key.items():
        merged = read.merged[key]
        if items[0][0].mechanism in _ROW_MERGED:
            (whole,) = merged
            source = np.repeat(np.arange(len(items)), [b.n for b, _ in items])
            mask = np.array([k for _, k in items])[source][row_order(np.concatenate([b.rows for b, _ in items]))]
            if mask.any():
                out[key] = [ReportBatch(mechanism=whole.mechanism, n=int(mask.sum()), rows=whole.rows[mask], bits=whole.bits[mask])]
        else:  # decoded from copies (see _decode): safe to use as they are
            kept_batches = [b for b, k in items if k]
            if kept_batches:
                out[key] = kept_batches
    return out


def _pending_by_consumer(summary: Any) -> tuple[int, int]:
    """(entries pending for the fold consumer, for any other consumer) from an XPENDING summary."""
    ours = others = 0
    for consumer in summary.get("consumers") or []:
        if consumer.get("name") in (CONSUMER, CONSUMER.encode()):
            ours += int(consumer.get("pending") or 0)
        else:
            others += int(consumer.get("pending") or 0)
    return ours, others


def _fold_group(r: redis_lib.Redis, stream: str) -> dict[str, Any] | None:
    """XINFO GROUPS of ``stream``, the fold group's entry (None if it has none; ResponseError if no stream)."""
    for group in r.xinfo_groups(stream):
        if group.get("name") in (keys.CONSUMER_GROUP, keys.CONSUMER_GROUP.encode()):
            return group  # type: ignore[no-any-return]
    return None


def _group_last_delivered(r: redis_lib.Redis, stream: str) -> StreamId | None:
    group = _fold_group(r, stream)
    return None if group is None else parse_id(group["last-delivered-id"])


def shard_lag(r: redis_lib.Redis, metric: str, shard: int) -> tuple[int | None, int]:
    """(entries not yet folded = undelivered + pending, pending) for one shard, from XINFO GROUPS."""
    try:
        group = _fold_group(r, keys.stream(metric, shard))
    except redis_lib.ResponseError:
        return None, 0
    if group is None:
        return None, 0
    pending = int(group.get("pending") or 0)
    lag = group.get("lag")
    return (None if lag is None else int(lag) + pending), pending


def run_worker(r: redis_lib.Redis, config: WorkerConfig | None = None) -> WorkerStats:
    """Run one worker to completion (``once``) or until :meth:`Worker.stop`."""
    return Worker(r, config).run()


__all__ = [
    "CONSUMER",
    "LeaseLostError",
    "WORKERS_KEY",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
    "run_worker",
    "shard_lag",
]
