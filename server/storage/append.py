"""Redis writes of the ingest path: one stream entry per accepted batch, deduplicated by batch id.

The dedupe check and the append run in one Lua script (``append.lua``) on the shard's hash tag, so they are
atomic with each other (and legal on Redis Cluster). Because the script is idempotent per batch id, a client
or connection retry after a lost reply can never append twice. The command goes over the storage layer's raw
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

import redis

from ldptel.storage import keys
from ldptel.storage.connection import RawClient, RawConnection, Reply, UnexpectedReplyError, pack_command

__all__ = ["AppendResult", "BatchAppender", "utc_day"]

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


@dataclass(frozen=True, slots=True)
class AppendResult:
    duplicate: bool  # the batch id was seen on its shard already: nothing was written


class BatchAppender(RawClient):
    """Appends batches with EVALSHA of ``append.lua`` (SCRIPT LOAD on NOSCRIPT), on raw connections.

    Up to ``MAX_IDLE`` idle connections are kept (one per concurrently appending thread). A broken
    connection (Redis restarted) is reopened and the command sent once more, which is safe because the
    script is idempotent per batch id; a second failure propagates as a ``redis`` error.
    """

    MAX_IDLE = 64
    BUFFER_BYTES = 512  # replies are an entry id, nil, a script sha or an error line

    def __init__(self, r: redis.Redis) -> None:
        super().__init__(r)
        self._sha = hashlib.sha1(_LUA.encode("utf-8")).hexdigest().encode("ascii")
        self._load = pack_command(b"SCRIPT", b"LOAD", _LUA)

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
    ) -> AppendResult:
        """Append ``data`` (the validated binary batch) unless ``batch_id`` was seen on its shard.

        ``day`` is the UTC arrival day; the batch id is remembered until the end of ``day`` + ``dedupe_days``.
        """
        day_start = _day_start_ms(day)
        shard = keys.shard_for(batch_id, shards)
        evalsha = pack_command(
            b"EVALSHA",
            self._sha,
            b"2",
            keys.stream(metric, shard),
            keys.seen(metric, shard, batch_id.hex()),
            day,
            version,
            n,
            data,
            day_start + (dedupe_days + 1) * DAY_MS,  # the dedupe key expires at a day boundary
            day_start,  # entry ids carry only the day
        )
        conn = self._checkout()
        try:
            try:
                result = _call(conn, evalsha)
            except redis.exceptions.NoScriptError:
                _call(conn, self._load)
                result = _call(conn, evalsha)
        finally:
            self._checkin(conn)
        if result is None:
            return AppendResult(duplicate=True)
        if not isinstance(result, bytes):
            raise UnexpectedReplyError(f"the append script returned {result!r}, not an entry id or nil")
        return AppendResult(duplicate=False)


def _call(conn: RawConnection, packed: bytes) -> Reply:
    """One command and its whole reply, sent once more on a fresh connection if the first one broke."""
    try:
        return conn.call(packed, RawConnection.reply)
    except (redis.ConnectionError, redis.TimeoutError):  # the connection was dropped: the send reconnects
        return conn.call(packed, RawConnection.reply)
