"""The worker's in-place XREAD reader against redis-py's own parse of the same replies (real Redis)."""

from __future__ import annotations

import os

import pytest
import redis as redis_lib

from ldptel.storage.streamread import StreamReader


def _redis_py_read(r: redis_lib.Redis, stream: str, after: bytes | str) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """redis-py's parse of the same XREAD, as (id, fields)."""
    resp = r.xread({stream: after}, count=10_000)
    return [(eid, fields) for eid, fields in resp[0][1]] if resp else []


def _materialized(entries: list) -> list[tuple[bytes, dict[bytes, bytes]]]:  # type: ignore[type-arg]
    return [(eid, {k: bytes(v) for k, v in f.items()}) for eid, f in entries]


def test_reads_match_redis_py_including_big_values_and_reuse(redis: redis_lib.Redis) -> None:
    stream = "s"
    values = [os.urandom(size) for size in (0, 1, 100, 70_000, 3_000_000, 5)]  # 3 MB: the buffer grows
    for i, value in enumerate(values):
        redis.xadd(stream, {"d": "2026-01-01", "v": str(i), "b": value})
    reader = StreamReader(redis)
    with reader.read(stream, "0", count=4) as first:
        got = _materialized(first)
        assert [f[b"b"] for _, f in got] == values[:4]
        assert isinstance(first[3][1][b"b"], memoryview) and isinstance(first[3][1][b"d"], bytes)
    after = got[-1][0].decode()
    with reader.read(stream, after, count=100) as rest:  # the same connection and buffer, reused
        mine = _materialized(rest)
    assert mine == _redis_py_read(redis, stream, after)
    got += mine
    assert [f[b"b"] for _, f in got] == values
    with reader.read(stream, got[-1][0].decode(), count=100) as none:
        assert none == []
    reader.close()


def test_errors_and_block_timeouts(redis: redis_lib.Redis) -> None:
    reader = StreamReader(redis)
    with pytest.raises(redis_lib.ResponseError, match="Invalid stream ID"):
        with reader.read("s", "not-an-id", count=10):
            pass
    with reader.read("s", "0", count=10, block_ms=50) as entries:  # nothing arrives: a null reply
        assert entries == []
    redis.xadd("s", {"b": b"x"})
    with reader.read("s", "0", count=10, block_ms=50) as entries:  # the connection still works
        assert [bytes(f[b"b"]) for _, f in entries] == [b"x"]  # type: ignore[index]
    reader.close()


def test_an_idle_connection_closed_by_the_server_is_replaced(redis: redis_lib.Redis) -> None:
    first = redis.xadd("s", {"b": b"1"}).decode()
    reader = StreamReader(redis)
    with reader.read("s", "0", count=10) as entries:
        assert len(entries) == 1
    (idle,) = reader._single._idle
    host, port = idle.conn._sock.getsockname()[:2]
    redis.client_kill(f"{host}:{port}")  # the server closes it, as a Redis restart would
    redis.xadd("s", {"b": b"2"})
    with reader.read("s", first, count=10) as entries:  # no error: the stale connection is reopened
        assert [bytes(f[b"b"]) for _, f in entries] == [b"2"]  # type: ignore[index]
    reader.close()


def test_error_replies_keep_redis_py_classes() -> None:
    from ldptel.storage.connection import reply_error as _error

    assert isinstance(_error("LOADING Redis is loading the dataset in memory"), redis_lib.BusyLoadingError)
    assert type(_error("NOGROUP No such key")) is redis_lib.ResponseError
