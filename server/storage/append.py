"""Redis writes of the ingest path: one stream entry per accepted batch, deduplicated by batch id.

The dedupe check and the append run in one Lua script (``append.lua``) on the shard's hash tag, so they are
atomic with each other (and legal on Redis Cluster). Because the script is idempotent per batch id, a client
or redis-py retry after a lost reply can never append twice.
"""

from __future__ import annotations

import calendar
import functools
import hashlib
import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources

import redis

from ldptel.storage import keys

__all__ = ["AppendResult", "BatchAppender", "utc_day"]

_LUA = resources.files(__package__).joinpath("append.lua").read_text(encoding="utf-8")


_day_cache: tuple[int, str] = (-1, "")


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


def _pack(*args: str) -> bytes:
    """A command in the Redis protocol (RESP): ``*<argc>`` then ``$<len>`` + bytes per argument."""
    return _pack_parts([a.encode("utf-8") for a in args])


def _pack_parts(parts: list[bytes]) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        out.append(b"$%d\r\n" % len(part))
        out.append(part)
        out.append(b"\r\n")
    return b"".join(out)


def _pack_evalsha(sha: str, stream: str, seen: str, day: str, version: str, n: str, data: bytes, ttl: str, day_ms: str) -> bytes:
    """``EVALSHA sha 2 stream seen day version n data ttl day_ms`` in RESP, with one copy of ``data``.

    Built here rather than by redis-py's command packer, which costs more than the rest of the append's
    Python code for a batch of 100 reports (py-spy of ``tests/bench/bench_ingest.py``)."""
    text = [x.encode("ascii") for x in (sha, "2", stream, seen, day, version, n)]
    tail = [ttl.encode("ascii"), day_ms.encode("ascii")]
    return _pack_parts([b"EVALSHA", *text, data, *tail])


@dataclass(frozen=True, slots=True)
class AppendResult:
    duplicate: bool
    entry_id: str | None
    shard: int


class BatchAppender:
    """Appends batches with EVALSHA of ``append.lua`` (SCRIPT LOAD on NOSCRIPT).

    Hot path: connections come from a small idle stack of our own (a lock and a list), built with the client's
    connection settings, instead of redis-py's pool. Measured on the project machine, redis-py's pool checkout
    + command machinery costs more than the Redis round trip itself (EVALSHA of a 13 KB batch: ~500 µs
    through ``Redis.evalsha`` vs ~200-260 µs on a held connection). Connections go back to the stack after
    every call, so servers that start a thread per request (werkzeug) reuse them instead of leaking one per
    thread; at most ``MAX_IDLE`` are kept. A broken connection (Redis restarted) is reopened and the call
    retried once, which is safe because the script is idempotent per batch id; a second failure propagates
    as a ``redis`` error.
    """

    MAX_IDLE = 64

    def __init__(self, r: redis.Redis) -> None:
        self._pool = r.connection_pool
        self._sha = hashlib.sha1(_LUA.encode("utf-8")).hexdigest()
        self._lock = threading.Lock()
        self._idle: list[redis.connection.AbstractConnection] = []
        self._pid = os.getpid()

    def _checkout(self) -> redis.connection.AbstractConnection:
        with self._lock:
            if self._pid != os.getpid():  # a forked child must not share the parent's sockets
                self._idle, self._pid = [], os.getpid()
            if self._idle:
                return self._idle.pop()
        return self._pool.connection_class(**self._pool.connection_kwargs)

    def _checkin(self, conn: redis.connection.AbstractConnection) -> None:
        with self._lock:
            if self._pid == os.getpid() and len(self._idle) < self.MAX_IDLE:
                self._idle.append(conn)
                return
        conn.disconnect()

    def _call(self, packed: bytes) -> object:
        """Send one command in RESP form (built by :func:`_pack`) and read its reply."""
        conn = self._checkout()
        try:
            for attempt in (0, 1):
                try:
                    conn.send_packed_command([packed], check_health=False)
                    return conn.read_response()
                except (redis.ConnectionError, redis.TimeoutError, OSError):
                    conn.disconnect()
                    if attempt:
                        raise
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            self._checkin(conn)

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
        dedupe_ttl: int,
    ) -> AppendResult:
        """Append ``data`` (the validated binary batch) unless ``batch_id`` was seen on its shard."""
        shard = keys.shard_for(batch_id, shards)
        day_ms = _day_start_ms(day)  # entry ids carry only the day
        evalsha = _pack_evalsha(
            self._sha,
            keys.stream(metric, shard),
            keys.seen(metric, shard, batch_id.hex()),
            day,
            str(version),
            str(n),
            data,
            str(dedupe_ttl),
            str(day_ms),
        )
        try:
            result = self._call(evalsha)
        except redis.exceptions.NoScriptError:
            self._call(_pack("SCRIPT", "LOAD", _LUA))
            result = self._call(evalsha)
        if result is None:
            return AppendResult(duplicate=True, entry_id=None, shard=shard)
        entry = result.decode() if isinstance(result, bytes) else str(result)
        return AppendResult(duplicate=False, entry_id=entry, shard=shard)
