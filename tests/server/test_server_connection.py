"""The storage layer's raw connection stack (server/storage/connection.py) against redis-py, on a real Redis."""

from __future__ import annotations

import pytest
import redis as redis_lib
from redis.connection import PythonRespSerializer

from ldptel.client.errors import LdpError
from ldptel.storage.connection import (
    RawClient,
    RawConnection,
    Reply,
    ReplyTimeoutError,
    UnexpectedReplyError,
    pack_command,
)


class _Client(RawClient):
    def call(self, *args: bytes | str | int) -> Reply:
        conn, reply = self._routed("k", pack_command(*args), RawConnection.reply)
        self._checkin(conn)
        return reply


def test_pack_command_matches_redis_py() -> None:
    args: tuple[bytes | str | int, ...] = ("XADD", "k", "*", "f", b"\x00\r\n\xff", 12, "é", b"")
    chunks = PythonRespSerializer(6000, lambda a: a if isinstance(a, bytes) else str(a).encode()).pack(*args)
    assert pack_command(*args) == b"".join(chunks)


def test_replies_as_python_values(redis: redis_lib.Redis) -> None:
    client = _Client(redis)
    redis.rpush("list", b"a", b"", b"\r\n" * 3000)  # a bulk string bigger than the initial buffer
    entry_id = redis.xadd("s", {"f": b"v", "g": b"w"})
    assert client.call("PING") == b"PONG"  # a simple string
    assert client.call("GET", "missing") is None  # a null bulk string
    assert client.call("INCRBY", "n", "-5") == -5  # an integer
    assert client.call("LRANGE", "list", "0", "-1") == [b"a", b"", b"\r\n" * 3000]
    assert client.call("XRANGE", "s", "-", "+") == [[entry_id, [b"f", b"v", b"g", b"w"]]]  # nested arrays
    assert client.call("XREAD", "STREAMS", "nostream", "0") is None  # a null array
    assert len(client._single._idle) == 1
    client.close()


def test_an_error_reply_keeps_the_connection_and_the_redis_py_class(redis: redis_lib.Redis) -> None:
    client = _Client(redis)
    client.call("PING")
    (conn,) = client._single._idle
    sock = conn.conn._sock
    with pytest.raises(redis_lib.exceptions.NoScriptError):
        client.call("EVALSHA", "0" * 40, "0")
    with pytest.raises(redis_lib.ResponseError, match="wrong number of arguments"):
        client.call("GET")
    assert client.call("PING") == b"PONG"
    assert client._single._idle == [conn] and conn.conn._sock is sock
    client.close()


def test_a_reply_of_the_wrong_shape_drops_the_connection(redis: redis_lib.Redis) -> None:
    client = _Client(redis)
    conn = client._single.checkout()
    redis.rpush("list", b"a", b"b")
    with pytest.raises(UnexpectedReplyError, match="bytes left") as info:
        conn.call(pack_command("LRANGE", "list", "0", "-1"), RawConnection.array)  # reads the header only
    assert isinstance(info.value, LdpError) and isinstance(info.value, redis_lib.ConnectionError)
    assert conn.conn._sock is None
    with pytest.raises(UnexpectedReplyError, match="expected a"):
        conn.call(pack_command("PING"), RawConnection.bulk)
    assert conn.call(pack_command("LRANGE", "list", "0", "-1"), RawConnection.reply) == [b"a", b"b"]  # reconnected
    client._checkin(conn)
    client.close()


def test_a_timeout_is_a_redis_timeout_and_the_next_call_reconnects(redis_url: str, redis: redis_lib.Redis) -> None:
    client = _Client(redis_lib.Redis.from_url(redis_url, socket_timeout=0.1))
    with pytest.raises(redis_lib.TimeoutError) as info:
        client.call("BLPOP", "nothing", "2")
    assert isinstance(info.value, ReplyTimeoutError) and isinstance(info.value, LdpError)
    redis.rpush("something", b"x")
    assert client.call("BLPOP", "something", "1") == [b"something", b"x"]
    client.close()


def test_a_forked_child_does_not_reuse_the_parents_connections(redis: redis_lib.Redis) -> None:
    client = _Client(redis)
    client.call("PING")
    (parent_conn,) = client._single._idle
    client._single._pid = -1
    conn = client._single.checkout()
    assert conn is not parent_conn and client._single._idle == []
    client._checkin(conn)
    client.close()
    parent_conn.disconnect()
