"""XREADGROUP for the fold worker, with the reply parsed in place instead of by hiredis.

A read of 1,000 cms entries is a ~130 MB reply. Through redis-py, every entry's batch bytes are copied twice on
the client: into hiredis's buffer, then into a ``bytes`` object. Here the reply is received into one buffer
per connection (kept and reused; it grows to the largest reply) and parsed in place: the batch field (``b``)
of each entry is a ``memoryview`` into that buffer, the other fields and the ids are small ``bytes``. Measured
with ``tests/bench/bench_aggregate.py``, this made the prefetch thread, which had become the fold's critical path,
about twice as fast.

The views are only valid inside :meth:`StreamReader.read`'s ``with`` block: the buffer is reused by the next
read on that connection. Connections are redis-py's own (same URL, auth, TLS, db; RESP2 forced), used for
the handshake and for sending; the reply is read from the connection's socket. Any error while reading
(a timeout, a reply of an unexpected shape) disconnects that connection, so no partial reply is ever read
as the next one.
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis as redis_lib

__all__ = ["Entry", "StreamReader"]

Entry = tuple[bytes, dict[bytes, bytes | memoryview] | None]  # (id, fields); fields None: deleted while pending
_INITIAL = 1 << 20
_BIG_FIELDS = frozenset({b"b"})  # fields returned as views (the batch bytes); the rest are copied


def _error(message: str) -> redis_lib.RedisError:
    """The exception redis-py raises for this error reply (LOADING is a BusyLoadingError, a ConnectionError)."""
    try:
        from redis._parsers import BaseParser
    except ImportError:  # pragma: no cover - a redis-py without it: the generic class
        return redis_lib.ResponseError(message)
    return BaseParser.parse_error(message)  # type: ignore[no-any-return]


class _ProtocolError(redis_lib.ConnectionError):
    """The reply did not have the shape of an XREADGROUP reply (the connection is dropped)."""


class _Conn:
    """One redis-py connection and the receive buffer its replies are parsed in."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.buf = bytearray(_INITIAL)
        self.view = memoryview(self.buf)
        self.pos = 0  # parse position
        self.end = 0  # bytes received

    # ---------------------------------------------------------------------------------------- receiving
    def _fill(self, need: int) -> None:
        """Receive until ``need`` bytes of the reply are in the buffer (growing it if needed)."""
        if need > len(self.buf):
            size = len(self.buf)
            while size < need:
                size *= 2
            grown = bytearray(size)
            grown[: self.end] = self.view[: self.end]
            self.view.release()
            self.buf, self.view = grown, memoryview(grown)
        sock: socket.socket = self.conn._sock  # noqa: SLF001 - redis-py keeps the socket here
        while self.end < need:
            n = sock.recv_into(self.view[self.end :], len(self.buf) - self.end)
            if n == 0:
                raise redis_lib.ConnectionError("Redis closed the connection during a read")
            self.end += n

    def _line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n", self.pos, self.end)
            if i >= 0:
                line = bytes(self.view[self.pos : i])
                self.pos = i + 2
                return line
            self._fill(self.end + 1)  # whatever has arrived, at least one byte

    def _len(self, kind: bytes) -> int:
        line = self._line()
        if line[:1] == b"-":
            raise _error(line[1:].decode("utf-8", "replace"))
        if line[:1] != kind:
            raise _ProtocolError(f"expected a {kind!r} header, got {line[:20]!r}")
        return int(line[1:])

    def _bulk(self) -> memoryview:
        size = self._len(b"$")
        if size < 0:
            raise _ProtocolError("unexpected null bulk string")
        start = self.pos
        self._fill(start + size + 2)
        self.pos = start + size + 2
        return self.view[start : start + size]

    # ----------------------------------------------------------------------------------------- parsing
    def xreadgroup(self, args: list[Any]) -> list[Entry]:
        self.pos = self.end = 0
        self.conn.send_command(*args)
        streams = self._len(b"*")
        if streams <= 0:  # null (BLOCK timed out) or empty
            return []
        if streams != 1 or self._len(b"*") != 2:
            raise _ProtocolError("expected one stream in the reply")
        self._bulk()  # the stream's name
        entries: list[Entry] = []
        for _ in range(self._len(b"*")):
            if self._len(b"*") != 2:
                raise _ProtocolError("expected [id, fields] entries")
            eid = bytes(self._bulk())
            pairs = self._len(b"*")
            if pairs < 0:  # an entry trimmed from the stream while pending
                entries.append((eid, None))
                continue
            fields: dict[bytes, bytes | memoryview] = {}
            for _ in range(pairs // 2):
                name = bytes(self._bulk())
                value = self._bulk()
                fields[name] = value if name in _BIG_FIELDS else bytes(value)
            entries.append((eid, fields))
        if self.pos != self.end:
            raise _ProtocolError("bytes left after the XREADGROUP reply")
        return entries


def _stale(conn: Any) -> bool:
    """An idle connection with something to read (EOF after the server closed it, or stray bytes)."""
    sock = getattr(conn, "_sock", None)
    if sock is None:
        return False
    try:
        poller = select.poll()  # not select(): no limit on the descriptor number
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


class StreamReader:
    """XREADGROUP on connections of its own (thread-safe: a small stack of idle connections)."""

    MAX_IDLE = 4

    def __init__(self, r: redis_lib.Redis) -> None:
        pool = r.connection_pool
        kwargs = dict(pool.connection_kwargs)
        kwargs["protocol"] = 2
        self._new = lambda: pool.connection_class(**kwargs)
        self._idle: list[_Conn] = []
        self._lock = threading.Lock()

    @contextmanager
    def read(
        self, group: str, consumer: str, stream: str, cursor: str, *, count: int, block_ms: int | None = None
    ) -> Iterator[list[Entry]]:
        """The entries of one XREADGROUP; their ``b`` views are valid inside the ``with`` block only."""
        args: list[Any] = ["XREADGROUP", "GROUP", group, consumer, "COUNT", count]
        if block_ms is not None:
            args += ["BLOCK", block_ms]
        args += ["STREAMS", stream, cursor]
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = _Conn(self._new())
        elif _stale(conn.conn):
            conn.conn.disconnect()  # e.g. Redis restarted while it was idle: send_command reconnects
        try:
            try:
                entries = conn.xreadgroup(args)
            except TimeoutError as exc:  # socket.timeout: raised by the raw recv, not by redis-py
                raise redis_lib.TimeoutError(f"timeout reading an XREADGROUP reply: {exc}") from exc
            except OSError as exc:
                raise redis_lib.ConnectionError(f"error reading an XREADGROUP reply: {exc}") from exc
        except BaseException:
            conn.conn.disconnect()  # never read the rest of a reply as the next one
            raise
        try:
            yield entries
        finally:
            with self._lock:
                if len(self._idle) < self.MAX_IDLE:
                    self._idle.append(conn)
                    conn = None
            if conn is not None:
                conn.conn.disconnect()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.conn.disconnect()
