"""Redis writes of the ingest path: one stream entry per accepted batch, deduplicated by batch id.

The dedupe check and the append run in one Lua script (``append.lua``) on the shard's hash tag, so they are
atomic with each other (and legal on Redis Cluster). Because the script is idempotent per batch id, a client
or connection retry after a lost reply can never append twice.

The dedupe key holds a digest of the batch's bytes (:func:`content_digest`), written in the same script as the
entry: a batch id seen again with the same bytes is a duplicate (202 again, nothing written), with other bytes a
conflict (409 ``batch_id_conflict``, nothing written) instead of a silent drop. The digest is a 128-bit
MurmurHash3 of the privatized batch (``d2:``; BLAKE2b-128 before, ``d1:``), the very bytes the stream entry holds:
it can tell nothing the entry does not, and every function of a privatized report is as private as the report
(post-processing), so it needs no key. 128 bits: two different batches under one id collide with probability
~2⁻¹²⁸; a client that forged a collision on purpose would only get its own second batch dropped as a
duplicate, so a fast non-cryptographic hash serves (:func:`content_digest`). A key holding a digest of another
kind (written by an earlier release within the retry horizon) cannot tell: any content is a duplicate, as it
was before digests. The command goes over the storage layer's raw
connection stack (:mod:`ldptel.storage.connection`), which says why the hot path does not use redis-py's.
"""

from __future__ import annotations

import calendar
import functools
import hashlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources

import mmh3
import redis
from redis.crc import key_slot

from ldptel.client.errors import LdpError
from ldptel.storage import keys
from ldptel.storage.connection import (
    PlainUrlAtClusterError,
    RawClient,
    RawConnection,
    UnexpectedReplyError,
    pack_command,
)

__all__ = ["AppendResult", "BatchAppender", "ReplicaWaitError", "content_digest", "utc_day"]

_INFO_CLUSTER = pack_command(b"INFO", b"cluster")
# The readiness probe: one SET of a constant, no expiry, in a script that is not propagated (redis.set_repl): a
# probe every few seconds in the AOF would timestamp the batch appends around it, and an expiry would hold its time.
_READY_PROBE_LUA = "redis.set_repl(redis.REPL_NONE) return redis.call('SET', KEYS[1], '1')"
WAIT_TIMEOUT_MS = 1_000  # how long an append waits for its replicas (``wait_replicas``)
# With ``wait_replicas`` a duplicate is acknowledged like a first append: only once that many replicas hold the
# batch. WAIT counts the calling connection's own last write, and a duplicate writes nothing (its first append may
# have gone through another connection, or timed out in WAIT and been answered 503), so the duplicate rewrites its
# dedupe key with the same value and expiry (SET ... KEEPTTL: nothing changes, but it is a write that replicates
# after the batch's own) and WAITs for that. It adds nothing to the AOF that the batch's own entry does not hold
# (the key and digest are there already; only that a retry came, in order after the appends before it).
_CONFIRM_LUA = "local v = redis.call('GET', KEYS[1]) if v then redis.call('SET', KEYS[1], v, 'KEEPTTL') end return 1"
_LUA = resources.files(__package__).joinpath("append.lua").read_text(encoding="utf-8")


_day_cache: tuple[int, str] = (-1, "")
DAY_MS = 86_400_000


def utc_day(now: datetime | None = None) -> str:
    """The server-assigned UTC day ``YYYY-MM-DD`` of an accepted batch (formatted at most once a second)."""
    global _day_cache
    if now is not None:
        return now.astimezone(UTC).strftime("%Y-%m-%d")
    second = int(time.time())
    cached_second, day = _day_cache
    if second != cached_second:
        day = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%d")
        _day_cache = (second, day)
    return day


@functools.lru_cache(maxsize=16)
def _day_start_ms(day: str) -> int:
    """Start of the UTC day ``YYYY-MM-DD`` in ms since the epoch (strptime costs ~15 µs; days repeat)."""
    return calendar.timegm(time.strptime(day, "%Y-%m-%d")) * 1000


DIGEST_KIND = b"d2:"  # the kind of content digest this release writes (b"d1:" was BLAKE2b-128)


def content_digest(data: bytes) -> bytes:
    """The dedupe key's value for a batch: ``b"d2:"`` + MurmurHash3 x64-128 of its bytes (see the module
    docstring). Not a cryptographic hash on purpose: it runs at memory speed (62 µs for a 130 KB batch of
    1,000 reports, against 290-480 µs for BLAKE2b on this machine, the largest part of the ingest's own CPU per
    request at that size), and collision resistance buys nothing here: a client that forges a collision can only
    get its own second batch under its own secret id answered as a duplicate, which it could have had by not
    sending it; two honest batches collide with probability ~2⁻¹²⁸."""
    if isinstance(data, str):  # mmh3 would encode a str itself (and crash on a lone surrogate): bytes only
        raise TypeError("content_digest hashes a request body's bytes, not a str")
    return DIGEST_KIND + mmh3.hash_bytes(data, 0, True)  # seed 0, x64 variant on every platform


@dataclass(frozen=True, slots=True)
class AppendResult:
    duplicate: bool  # the batch id was seen on its shard already: nothing was written
    conflict: bool = False  # ... with other content (also a duplicate: nothing was written)


class BatchAppender(RawClient):
    """Appends batches with EVALSHA of ``append.lua`` (SCRIPT LOAD on NOSCRIPT), on raw connections.

    Up to ``MAX_IDLE`` idle connections are kept (one per concurrently appending thread). A broken
    connection (Redis restarted) is reopened and the command sent once more, which is safe because the
    script is idempotent per batch id; a second failure propagates as a ``redis`` error.
    """

    MAX_IDLE = 64
    BUFFER_BYTES = 512  # replies are an entry id, nil, a script sha or an error line

    def __init__(self, r: redis.Redis, *, wait_replicas: int = 0) -> None:
        super().__init__(r)
        self.wait_replicas = wait_replicas
        self._sha = hashlib.sha1(_LUA.encode("utf-8")).hexdigest().encode("ascii")
        self._load = pack_command(b"SCRIPT", b"LOAD", _LUA)
        self._wait_command = pack_command(b"WAIT", wait_replicas, WAIT_TIMEOUT_MS)
        self._confirm_sha = hashlib.sha1(_CONFIRM_LUA.encode("utf-8")).hexdigest().encode("ascii")
        self._confirm_load = pack_command(b"SCRIPT", b"LOAD", _CONFIRM_LUA)
        self._probe_sha = hashlib.sha1(_READY_PROBE_LUA.encode("utf-8")).hexdigest().encode("ascii")
        self._probe_load = pack_command(b"SCRIPT", b"LOAD", _READY_PROBE_LUA)

    def _seen(self, key: str, digest: bytes) -> AppendResult | None:
        """The dedupe key's verdict on a batch of content ``digest`` (as ``append.lua`` gives it), None if absent."""
        conn, value = self._routed(key, pack_command(b"GET", key), RawConnection.reply)
        self._checkin(conn)
        if value is None:
            return None
        # a value of another kind (an older release's digest, none, a released upload's "1") cannot tell: duplicate
        conflict = isinstance(value, bytes) and value[:3] == digest[:3] and value != digest
        if not conflict:
            self._confirm_duplicate(key)
        return AppendResult(duplicate=True, conflict=conflict)

    def _confirm_duplicate(self, seen_key: str) -> None:
        """With ``wait_replicas``: a duplicate is acknowledged only once ``wait_replicas`` replicas hold its batch
        (:data:`_CONFIRM_LUA` says how), else a ReplicaWaitError. Nothing to do without replicas to wait for."""
        if not self.wait_replicas:
            return
        confirm = pack_command(b"EVALSHA", self._confirm_sha, b"1", seen_key)
        conn, _ = self._routed(seen_key, confirm, RawConnection.reply, load=self._confirm_load)
        try:
            self._wait(conn)
        finally:
            self._checkin(conn)

    def _wait(self, conn: RawConnection) -> None:
        """WAIT until ``wait_replicas`` replicas hold what this connection wrote, else a ReplicaWaitError."""
        acked = conn.call(self._wait_command, RawConnection.reply)
        if not isinstance(acked, int) or acked < self.wait_replicas:
            raise ReplicaWaitError(
                f"the batch reached {acked!r} of {self.wait_replicas} replicas within {WAIT_TIMEOUT_MS} ms"
            )

    def check_writable(self) -> None:
        """Raise the redis error of the first server this appender writes to that refuses a small write now
        (unreachable, a replica, OOM, a failed save): one Redis, or every primary of a cluster (one probe key
        per primary, on a slot it serves). The readiness check of the ingest service: a constant SET, no expiry,
        in a script that neither the AOF nor the replicas see (``redis.set_repl``)."""
        primaries = self.primaries()
        probes = [keys.ready_probe(_tag_for_slot(slot)) for _, slot in primaries] or [keys.ready_probe()]
        for key in probes:
            probe = pack_command(b"EVALSHA", self._probe_sha, b"1", key)
            conn, _ = self._routed(key, probe, RawConnection.reply, load=self._probe_load)
            self._checkin(conn)
        if not primaries:  # one Redis: refuse a cluster node behind a plain URL (it takes only its slots' writes)
            conn, info = self._routed(probes[0], _INFO_CLUSTER, RawConnection.reply)
            self._checkin(conn)
            if isinstance(info, bytes) and b"cluster_enabled:1" in info:
                raise PlainUrlAtClusterError("the Redis URL is a Redis Cluster node: use redis+cluster://host:port")

    def append(
        self,
        *,
        metric: str,
        shards: int,
        batch_id: bytes,
        version: int,
        n: int,
        data: bytes,
        day: str,
        dedupe_days: int,
        earlier_shards: tuple[int, ...] = (),
        cell: str = "",
    ) -> AppendResult:
        """Append ``data`` (the validated binary batch) unless ``batch_id`` was seen on its shard (then a
        ``duplicate``, and a ``conflict`` too when it was seen with other bytes).

        ``day`` is the UTC arrival day; the batch id is remembered until the end of ``day`` + ``dedupe_days``.
        ``earlier_shards``: the metric's shard counts before a recent growth
        (:meth:`~ldptel.storage.registry.MetricRecord.earlier_shards`). A batch whose shard differs under one
        of them is first looked up there (EXISTS of its dedupe key: one more round trip, only for those
        batches, only while dedupe keys from before the growth can exist), so a retry of a batch accepted
        before the growth stays a duplicate. ``cell``: the batch's canonical breakdown cell (stream field ``c``;
        "" writes no field). Not atomic with the append: a retry racing its own first attempt
        across a growth (the first still in flight in a process that has not yet seen the new count) could be
        appended twice.
        """
        day_start = _day_start_ms(day)
        digest = content_digest(data)
        shard = keys.shard_for(batch_id, shards)
        for count in earlier_shards:
            before = keys.shard_for(batch_id, count)
            if before != shard and (seen := self._seen(keys.seen(metric, before, batch_id.hex()), digest)):
                return seen
        evalsha = pack_command(
            b"EVALSHA",
            self._sha,
            b"2",
            keys.held(metric, shard),  # the shuffle stage releases it to the fold (ldptel.storage.shuffle)
            keys.seen(metric, shard, batch_id.hex()),
            day,
            version,
            n,
            data,
            day_start + (dedupe_days + 1) * DAY_MS,  # the dedupe key expires at a day boundary
            day_start,  # entry ids carry only the day
            digest,  # the dedupe key's value: a retry with other content is a conflict
            cell,  # the breakdown cell ('' for none)
        )
        stream = keys.held(metric, shard)
        for attempt in range(2):
            try:
                conn, result = self._routed(stream, evalsha, RawConnection.reply, load=self._load)
                break
            except (redis.ConnectionError, redis.TimeoutError):  # dropped: the send reconnects (and re-routes)
                if attempt:
                    raise
        try:
            if result is not None and result != 0 and self.wait_replicas:
                self._wait(conn)
        finally:
            self._checkin(conn)
        if result is None:
            self._confirm_duplicate(keys.seen(metric, shard, batch_id.hex()))
            return AppendResult(duplicate=True)
        if result == 0:
            return AppendResult(duplicate=True, conflict=True)
        if not isinstance(result, bytes):
            raise UnexpectedReplyError(f"the append script returned {result!r}, not an entry id, nil or 0")
        return AppendResult(duplicate=False)


class ReplicaWaitError(LdpError, redis.TimeoutError):
    """Fewer replicas than ``wait_replicas`` acknowledged an appended batch in time: it is not acknowledged
    (the client retries; the batch id makes the retry idempotent)."""


@functools.lru_cache(maxsize=16384)
def _tag_for_slot(slot: int) -> str:
    """A short hash-tag text whose key slot is ``slot`` (for a probe key on a given cluster node)."""
    n = 0
    while key_slot(f"{{probe:{n}}}".encode()) != slot:
        n += 1
    return f"probe:{n}"
