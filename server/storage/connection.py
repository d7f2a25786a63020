"""The one raw-RESP connection stack of the storage layer: the ingest append and the fold's XREAD use it.

Both hot paths bypass redis-py's command machinery, each for a measured reason:

* the append (:class:`~ldptel.storage.append.BatchAppender`): redis-py's pool checkout, command packer and
  reply machinery cost more than the Redis round trip itself (EVALSHA of a 13 KB batch: ~500 µs through
  ``Redis.evalsha`` vs ~200-260 µs on a held connection; py-spy of ``tests/bench/bench_ingest.py``);
* the stream read (:class:`~ldptel.storage.streamread.StreamReader`): a read of 1,000 cms entries is a ~130 MB
  reply, which redis-py copies twice (into hiredis's buffer, then into ``bytes`` objects); parsed in place
  here, it made the fold's prefetch thread about twice as fast (``tests/bench/bench_aggregate.py``).

What lives here:

* :class:`RawClient`, the base of both: a small stack of idle :class:`RawConnection` of its own (a lock and
  a list), built with the settings of a redis-py client's pool (same URL, auth, TLS, db; RESP2 forced) but
  not taken from that pool. A connection goes back to the stack after every call, so servers that start a
  thread per request (werkzeug) reuse connections instead of leaking one per thread; at most ``MAX_IDLE``
  are kept. A forked child never reuses its parent's sockets, and an idle connection with something to read
  (the server closed it, e.g. a Redis restart) is disconnected before use, so the send reconnects.
* :class:`RawConnection`: one redis-py connection (which connects, authenticates, selects the db and sends)
  and the receive buffer its replies are read into (kept and reused; it grows to the largest reply). Replies
  are parsed in place by one RESP2 parser: :meth:`RawConnection.reply` returns a whole (small) reply as
  Python values; :meth:`RawConnection.array` and :meth:`RawConnection.bulk` walk a big reply and return its
  bulk strings as ``memoryview`` s of the buffer, valid until the next command on that connection.
* :func:`pack_command` (a command in RESP), :func:`reply_error` (the redis-py exception of an error reply) and
  the errors of a read.

Failures: an error reply raises the exception redis-py would raise for it (``NOSCRIPT`` is a
``NoScriptError``, ``LOADING`` a ``BusyLoadingError``, ...); a socket error or a closed connection is a
:class:`ConnectionLostError`, a reply of the wrong shape an :class:`UnexpectedReplyError` (both are
``redis.ConnectionError`` s), a socket timeout a :class:`ReplyTimeoutError` (a ``redis.TimeoutError``), so
callers handle them as they handle redis-py's own. Anything but a plain error reply also
disconnects the connection first, so the rest of a partial reply is never read as the next one.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import ClassVar, Protocol, TypeAlias, TypeVar, cast

import redis
from redis._parsers import BaseParser
from redis.cluster import ClusterNode, NodesManager, RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException

from ldptel.client.errors import LdpError
from ldptel.storage.client import ClusterUnavailableError, is_cluster

__all__ = [
    "ConnectionLostError",
    "PlainUrlAtClusterError",
    "RawClient",
    "RawConnection",
    "Reply",
    "ReplyTimeoutError",
    "UnexpectedReplyError",
    "pack_command",
    "refused_write",
    "reply_error",
]

T = TypeVar("T")
# A RESP2 reply as Python values: bulk and simple strings as bytes, integers, nil (null bulk or array), arrays.
Reply: TypeAlias = "bytes | int | None | list[Reply]"
_CRLF = b"\r\n"
_ERROR = 0x2D  # "-": the first byte of an error reply

# redis-py's own mapping of error replies to exception classes (its parsers carry no annotations).
_parse_error: Callable[[str], redis.RedisError] = BaseParser.parse_error


class UnexpectedReplyError(LdpError, redis.ConnectionError):
    """A reply did not have the shape the command returns; its connection is dropped."""


class ConnectionLostError(LdpError, redis.ConnectionError):
    """The socket failed, or the server closed it, while a reply was being read."""


class PlainUrlAtClusterError(LdpError, redis.ResponseError):
    """A plain ``redis://`` URL points at a Redis Cluster node (it redirected a command, or says it is one)."""


class ReplyTimeoutError(LdpError, redis.TimeoutError):
    """No reply (or not all of it) within the client's socket timeout."""


class _RedisPyConnection(Protocol):
    """What is used of a redis-py connection object (redis-py's connection classes carry no annotations)."""

    _sock: socket.socket | None  # redis-py keeps the connected socket here (None when disconnected)

    def send_packed_command(self, command: list[bytes], check_health: bool = ...) -> None: ...

    def disconnect(self) -> None: ...


def refused_write(exc: BaseException) -> str | None:
    """Why Redis refuses writes for now, when ``exc`` says so: ``OOM`` (maxmemory under ``noeviction``),
    ``READONLY`` (a replica) or ``MISCONF`` (writes stopped after a failed save); a script or MULTI/EXEC
    refused for one of these raises the same error. None for any other error. The reason is Redis's own
    message, one line, without the command (and its arguments) redis-py quotes in a pipeline's error."""
    message = str(exc).splitlines()[0].rsplit("caused error: ", 1)[-1] if str(exc) else ""
    if isinstance(exc, redis.exceptions.OutOfMemoryError):  # redis-py strips the error code from these two
        return f"OOM {message}"
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return f"READONLY {message}"
    return message if isinstance(exc, redis.ResponseError) and message.startswith("MISCONF") else None


def reply_error(message: str) -> redis.RedisError:
    """The exception redis-py raises for the error reply ``-<message>`` (LOADING is a BusyLoadingError, ...)."""
    return _parse_error(message)


def pack_command(*args: bytes | str | int) -> bytes:
    """A command in RESP: ``*<argc>``, then ``$<len>`` and the bytes of each argument (str as UTF-8).

    One copy of every argument (the final join); redis-py's packer costs more than the rest of the append's
    Python code for a batch of 100 reports.
    """
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        part = arg if isinstance(arg, bytes) else str(arg).encode("utf-8")
        out.append(b"$%d\r\n" % len(part))
        out.append(part)
        out.append(_CRLF)
    return b"".join(out)


class RawConnection:
    """One redis-py connection and the buffer its replies are received into and parsed in place (RESP2)."""

    def __init__(self, conn: _RedisPyConnection, *, buffer_bytes: int, stack: _Stack) -> None:
        self.conn = conn
        # The server's stack it goes back to, held weakly: the stack holds its idle connections, and a strong
        # reference back would make a reference cycle. A RawClient dropped without close() would then be freed
        # by the cyclic garbage collector only, which finalizes the objects of a cycle in no fixed order: the
        # socket could go before redis-py's connection (whose __del__ closes it) and warn ResourceWarning
        # ("unclosed socket"). Without the cycle, dropping the client frees its connections at once, each
        # closing its socket. A connection checked in after its stack is gone is disconnected.
        self._stack = weakref.ref(stack)
        self.buf = bytearray(buffer_bytes)
        self.view = memoryview(self.buf)
        self.pos = 0  # parse position in the current reply
        self.end = 0  # bytes of the current reply received so far

    # ---------------------------------------------------------------------------------------------- calls
    def call(self, packed: bytes, parse: Callable[[RawConnection], T]) -> T:
        """Send one command (from :func:`pack_command`) and return ``parse(self)`` of its reply.

        ``parse`` reads the reply through :meth:`reply`, :meth:`array` and :meth:`bulk`; every byte of the
        reply must be consumed. A top-level error reply raises its redis-py exception without ``parse``.
        """
        self.pos = self.end = 0
        try:
            self.conn.send_packed_command([packed], check_health=False)  # connects (handshake) when needed
            self._fill(1)
            if self.buf[0] != _ERROR:
                result = parse(self)
                self._check_consumed()
                return result
            error = reply_error(self._line()[1:].decode("utf-8", "replace"))
            self._check_consumed()
        except BaseException:
            self.disconnect()  # never read the rest of a reply as the next one
            raise
        # A whole error reply was read, so the connection is in step with the server and can be reused,
        # unless the error says the server cannot serve it yet (LOADING): then the retry gets a fresh one.
        if isinstance(error, redis.ConnectionError):
            self.disconnect()
        try:
            raise error
        finally:  # its traceback holds this frame: the frame must not hold it (a cycle that keeps this connection)
            del error

    def stale(self) -> bool:
        """An idle connection with something to read (EOF after the server closed it, or stray bytes)."""
        sock = self.conn._sock
        if sock is None:
            return False
        try:
            poller = select.poll()  # not select(): no limit on the descriptor number
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True

    @property
    def stack(self) -> _Stack | None:
        """The stack this connection goes back to (None once its client is gone)."""
        return self._stack()

    def disconnect(self) -> None:
        self.conn.disconnect()

    # -------------------------------------------------------------------------------------------- parsing
    def reply(self) -> Reply:
        """The next value of the reply, copied: bytes, int, None (nil) or a list of values."""
        line = self._line()
        kind = line[:1]
        if kind == b"$":
            size = _int(line)
            return None if size < 0 else bytes(self._take(size))
        if kind == b"*":
            count = _int(line)
            return None if count < 0 else [self.reply() for _ in range(count)]
        if kind == b":":
            return _int(line)
        if kind == b"+":
            return line[1:]
        if kind == b"-":
            raise reply_error(line[1:].decode("utf-8", "replace"))
        raise UnexpectedReplyError(f"not a RESP2 reply: {line[:20]!r}")

    def array(self) -> int:
        """The next array header: its element count, -1 for a null array."""
        return self._header(b"*")

    def bulk(self) -> memoryview:
        """The next bulk string as a view of the buffer (valid until the next command on this connection)."""
        size = self._header(b"$")
        if size < 0:
            raise UnexpectedReplyError("unexpected null bulk string")
        return self._take(size)

    def _header(self, kind: bytes) -> int:
        line = self._line()
        if line[:1] == kind:
            return _int(line)
        if line[:1] == b"-":
            raise reply_error(line[1:].decode("utf-8", "replace"))
        raise UnexpectedReplyError(f"expected a {kind!r} header, got {line[:20]!r}")

    def _take(self, size: int) -> memoryview:
        start = self.pos
        self._fill(start + size + 2)
        self.pos = start + size + 2
        return self.view[start : start + size]

    def _line(self) -> bytes:
        while True:
            i = self.buf.find(_CRLF, self.pos, self.end)
            if i >= 0:
                line = bytes(self.view[self.pos : i])
                self.pos = i + 2
                return line
            self._fill(self.end + 1)  # whatever has arrived, at least one byte

    def _check_consumed(self) -> None:
        if self.pos != self.end:
            raise UnexpectedReplyError("bytes left after the reply")

    # ------------------------------------------------------------------------------------------ receiving
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
        sock = self.conn._sock
        if sock is None:
            raise ConnectionLostError("the connection closed during a read")
        while self.end < need:
            try:
                n = sock.recv_into(self.view[self.end :], len(self.buf) - self.end)
            except TimeoutError as exc:  # socket.timeout: raised by the raw recv, not by redis-py
                raise ReplyTimeoutError(f"timeout reading a reply: {exc}") from exc
            except OSError as exc:
                raise ConnectionLostError(f"error reading a reply: {exc}") from exc
            if n == 0:
                raise ConnectionLostError("Redis closed the connection during a read")
            self.end += n


def _int(line: bytes) -> int:
    try:
        return int(line[1:])
    except ValueError:
        raise UnexpectedReplyError(f"not a RESP2 length or integer: {line[:20]!r}") from None


class _Stack:
    """The idle raw connections to one server (thread-safe), made with the settings of a redis-py pool."""

    def __init__(self, name: str, pool: redis.ConnectionPool, *, max_idle: int, buffer_bytes: int) -> None:
        self.name = name  # "host:port" of a cluster node ("" for a single Redis)
        self._connection_class = pool.connection_class
        self._connection_kwargs = {**pool.connection_kwargs, "protocol": 2}  # the parser here speaks RESP2
        # redis-py's maintenance notifications are RESP3 push messages, which a RESP2 connection never gets;
        # their handlers also tie each connection into a reference cycle (connection <-> handler), which only
        # the cyclic garbage collector frees, in no fixed order: a connection dropped unclosed could then have
        # its socket finalized first ("ResourceWarning: unclosed socket"). Off: dropped means closed at once.
        if "maint_notifications_config" in self._connection_kwargs:
            self._connection_kwargs["maint_notifications_config"] = None
            self._connection_kwargs.pop("maint_notifications_pool_handler", None)
        self._max_idle = max_idle
        self._buffer_bytes = buffer_bytes
        self._idle: list[RawConnection] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def checkout(self) -> RawConnection:
        """An idle connection (disconnected first if stale: the send reconnects), else a new one."""
        with self._lock:
            if self._pid != os.getpid():  # a forked child must not share the parent's sockets
                self._idle, self._pid = [], os.getpid()
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            made: _RedisPyConnection = self._connection_class(**self._connection_kwargs)
            return RawConnection(made, buffer_bytes=self._buffer_bytes, stack=self)
        if conn.stale():
            conn.disconnect()
        return conn

    def checkin(self, conn: RawConnection) -> None:
        with self._lock:
            if self._pid == os.getpid() and len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        conn.disconnect()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.disconnect()


class RawClient:
    """Commands on raw connections of its own (thread-safe: a small stack of idle connections per server).

    Subclasses set ``MAX_IDLE`` (idle connections kept per server) and ``BUFFER_BYTES`` (initial receive buffer
    of a connection) and send a command about one key with :meth:`_routed` and give its connection back with
    :meth:`_checkin`.

    On one Redis every command goes to it. On a cluster (a ``RedisCluster`` from
    :func:`ldptel.storage.client.connect`) a command goes to the primary that serves its key's slot (CRC16 of
    the hash tag: redis-py's ``key_slot``), taken from the slot map that redis-py's cluster client keeps.
    A ``MOVED`` reply (resharding, failover) updates that map and resends to the new owner; ``ASK`` (a slot
    being migrated) resends once to the importing node after ``ASKING``; ``TRYAGAIN`` (a multi-key command while
    the slot's keys are split between the two) and ``CLUSTERDOWN`` wait a little and resend. A redirected or
    refused command was not executed, so resending is always safe. A lost connection is not resent here
    (the caller decides: the append's script is idempotent, a read is not); on a cluster it also makes the next
    command refresh the slot map, so once a replica has been promoted the command reaches it.
    """

    MAX_IDLE: ClassVar[int] = 4
    BUFFER_BYTES: ClassVar[int] = 4096
    MAX_REDIRECTS: ClassVar[int] = 16  # MOVED/ASK/TRYAGAIN/CLUSTERDOWN rounds before the error propagates
    RETRY_WAIT: ClassVar[float] = 0.05  # seconds before resending after TRYAGAIN or CLUSTERDOWN (doubles)

    def __init__(self, r: redis.Redis) -> None:
        self._cluster: RedisCluster | None = cast(RedisCluster, r) if is_cluster(r) else None
        self._single = None if self._cluster is not None else self._stack("", r.connection_pool)
        self._stacks: dict[str, _Stack] = {}
        self._stacks_lock = threading.Lock()
        self._refresh = False  # refresh the cluster's slot map before the next command
        # key -> the stack of the primary serving its slot: skips redis-py's locked slot lookup on the hot
        # path (~10 µs an append); emptied whenever the slot map may have changed (MOVED, a lost node, ...)
        self._routes: dict[str, _Stack] = {}

    def _stack(self, name: str, pool: redis.ConnectionPool) -> _Stack:
        return _Stack(name, pool, max_idle=self.MAX_IDLE, buffer_bytes=self.BUFFER_BYTES)

    # ------------------------------------------------------------------------------------------- routing
    def _node_stack(self, node: ClusterNode) -> _Stack:
        stack = self._stacks.get(node.name)  # a dict read is atomic; inserts take the lock
        if stack is None:
            assert self._cluster is not None
            client: redis.Redis = self._cluster.get_redis_connection(node)
            made = self._stack(node.name, client.connection_pool)
            with self._stacks_lock:
                stack = self._stacks.setdefault(node.name, made)
        return stack

    def _slot_map(self) -> NodesManager:
        """redis-py's slot map of the cluster, refreshed first when a lost node or CLUSTERDOWN asked for it."""
        cluster = self._cluster
        assert cluster is not None
        if self._refresh:
            self._routes = {}
            try:
                cluster.nodes_manager.initialize()
            except RedisClusterException as exc:  # not a RedisError: no node gave a full slot map
                raise ClusterUnavailableError(f"no slot map from the cluster: {exc}") from None
            self._refresh = False
        return cluster.nodes_manager

    def _primary(self, key: str) -> ClusterNode:
        try:
            node: ClusterNode = self._slot_map().get_node_from_slot(key_slot(key.encode("utf-8")))
        except RedisClusterException as exc:  # SlotNotCoveredError: a slot without a node
            self._refresh = True
            raise ClusterUnavailableError(str(exc)) from None
        return node

    def primaries(self) -> list[tuple[ClusterNode, int]]:
        """On a cluster: every primary that serves slots, with one slot it serves (empty on one Redis)."""
        if self._cluster is None:
            return []
        manager = self._slot_map()
        seen: dict[str, tuple[ClusterNode, int]] = {}
        for slot, nodes in list(manager.slots_cache.items()):  # a refresh replaces the dict
            if nodes and nodes[0].name not in seen:
                seen[nodes[0].name] = (nodes[0], slot)
        return sorted(seen.values(), key=lambda item: item[0].name)

    def _routed(
        self, key: str, packed: bytes, parse: Callable[[RawConnection], T], *, load: bytes | None = None
    ) -> tuple[RawConnection, T]:
        """Send a command about ``key`` where its slot lives; returns the connection (checked out: give it back
        with :meth:`_checkin` once done with the reply's views) and ``parse`` of the reply. ``load``: a
        SCRIPT LOAD sent on a ``NOSCRIPT`` reply to the server that gave it (then the command once more)."""
        if self._single is not None:
            conn = self._single.checkout()
            try:
                return conn, _send(conn, packed, parse, load=load, asking=False)
            except redis.exceptions.AskError as exc:  # MOVED or ASK: this one Redis is a cluster node
                self._single.checkin(conn)
                raise PlainUrlAtClusterError(
                    f"the Redis URL is a Redis Cluster node ({exc}): use redis+cluster://host:port[,host:port...]"
                ) from None
            except BaseException:
                self._single.checkin(conn)
                raise
        cluster = self._cluster
        assert cluster is not None
        ask: ClusterNode | None = None
        wait = self.RETRY_WAIT
        for _ in range(self.MAX_REDIRECTS):
            stack = None if ask is not None or self._refresh else self._routes.get(key)
            if stack is None:
                stack = self._node_stack(ask if ask is not None else self._primary(key))
                if ask is None:
                    if len(self._routes) >= _MAX_ROUTES:
                        self._routes = {}
                    self._routes[key] = stack
            conn = stack.checkout()
            try:
                return conn, _send(conn, packed, parse, load=load, asking=ask is not None)
            except redis.exceptions.MovedError as exc:
                stack.checkin(conn)
                self._routes = {}
                cluster.nodes_manager.move_slot(exc)
                ask = None
            except redis.exceptions.AskError as exc:
                stack.checkin(conn)
                ask = ClusterNode(exc.host, int(exc.port))  # type: ignore[no-untyped-call]  # redis-py: no annotations
            except (redis.exceptions.TryAgainError, redis.exceptions.ClusterDownError) as exc:
                stack.checkin(conn)
                ask = None
                if isinstance(exc, redis.exceptions.ClusterDownError):
                    self._refresh = True
                time.sleep(wait)
                wait = min(wait * 2, 1.0)
            except (redis.ConnectionError, redis.TimeoutError):
                stack.checkin(conn)
                self._refresh = True  # a failover may have promoted a replica: ask the cluster again
                raise
            except BaseException:
                stack.checkin(conn)
                raise
        raise redis.exceptions.ClusterError(f"too many cluster redirections for {key}")

    def _checkin(self, conn: RawConnection) -> None:
        stack = conn.stack
        if stack is None:
            conn.disconnect()
        else:
            stack.checkin(conn)

    def close(self) -> None:
        """Disconnect the idle connections."""
        if self._single is not None:
            self._single.close()
        with self._stacks_lock:
            stacks = list(self._stacks.values())
        for stack in stacks:
            stack.close()


def _send(conn: RawConnection, packed: bytes, parse: Callable[[RawConnection], T], *, load: bytes | None,
          asking: bool) -> T:
    """One command (after ASKING when redirected by ASK; ASKING lasts one command), and once more after
    ``load`` when the server did not have the script."""
    try:
        if asking:
            conn.call(_ASKING, RawConnection.reply)
        return conn.call(packed, parse)
    except redis.exceptions.NoScriptError:
        if load is None:
            raise
        conn.call(load, RawConnection.reply)
        if asking:
            conn.call(_ASKING, RawConnection.reply)
        return conn.call(packed, parse)


_ASKING = pack_command(b"ASKING")
_MAX_ROUTES = 65536  # keys whose route is remembered (metric shards and probe keys: far fewer in practice)
