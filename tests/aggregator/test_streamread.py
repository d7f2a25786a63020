"""The worker's in-place XREADGROUP reader against redis-py's own parse of the same replies (real Redis)."""

from __future__ import annotations

import os

import pytest
import redis as redis_lib

from ldptel.storage.streamread import StreamReader


def _pending_reply(r: redis_lib.Redis, stream: str, group: str) -> list[tuple[bytes, dict[bytes, bytes] | None]]:
    """redis-py's parse of the consumer's pending list (read from id 0), as (id, fields)."""
    resp = r.xreadgroup(group, "c", {stream: "0"}, count=10_000)
    return [(eid, fields or None) for eid, fields in resp[0][1]] if resp else []


def _materialized(entries: list) -> list[tuple[bytes, dict[bytes, bytes] | None]]:  # type: ignore[type-arg]
    return [(eid, None if f is None else {k: bytes(v) for k, v in f.items()}) for eid, f in entries]


def test_reads_match_redis_py_including_big_values_deleted_entries_and_reuse(redis: redis_lib.Redis) -> None:
    stream, group = "s", "g"
    values = [os.urandom(size) for size in (0, 1, 100, 70_000, 3_000_000, 5)]  # 3 MB: the buffer grows
    for i, value in enumerate(values):
        redis.xadd(stream, {"d": "2026-01-01", "v": str(i), "b": value})
    redis.xgroup_create(stream, group, id="0")
    reader = StreamReader(redis)
    with reader.read(group, "c", stream, ">", count=4) as first:
        got = _materialized(first)
        assert [f[b"b"] for _, f in got] == values[:4]  # type: ignore[index]
        assert isinstance(first[3][1][b"b"], memoryview) and isinstance(first[3][1][b"d"], bytes)  # type: ignore[index]
    with reader.read(group, "c", stream, ">", count=100) as rest:  # the same connection and buffer, reused
        got += _materialized(rest)
    assert [f[b"b"] for _, f in got] == values  # type: ignore[index]
    with reader.read(group, "c", stream, ">", count=100) as none:
        assert none == []
    # Entries trimmed while pending come back with no fields (a nil), as redis-py reports them.
    ids = [eid for eid, _ in got]
    redis.xdel(stream, ids[1], ids[4])
    with reader.read(group, "c", stream, "0", count=100) as pending:
        mine = _materialized(pending)
    assert mine == _pending_reply(redis, stream, group)
    assert [eid for eid, f in mine if f is None] == [ids[1], ids[4]]
    reader.close()


def test_errors_and_block_timeouts(redis: redis_lib.Redis) -> None:
    reader = StreamReader(redis)
    with pytest.raises(redis_lib.ResponseError, match="NOGROUP"):
        with reader.read("missing", "c", "nostream", ">", count=10):
            pass
    redis.xgroup_create("s", "g", id="$", mkstream=True)
    with reader.read("g", "c", "s", ">", count=10, block_ms=50) as entries:  # nothing arrives: a null reply
        assert entries == []
    redis.xadd("s", {"b": b"x"})
    with reader.read("g", "c", "s", ">", count=10, block_ms=50) as entries:  # the connection still works
        assert [bytes(f[b"b"]) for _, f in entries] == [b"x"]  # type: ignore[index]
    reader.close()


def test_an_idle_connection_closed_by_the_server_is_replaced(redis: redis_lib.Redis) -> None:
    redis.xgroup_create("s", "g", id="0", mkstream=True)
    redis.xadd("s", {"b": b"1"})
    reader = StreamReader(redis)
    with reader.read("g", "c", "s", ">", count=10) as entries:
        assert len(entries) == 1
    (idle,) = reader._single._idle
    host, port = idle.conn._sock.getsockname()[:2]
    redis.client_kill(f"{host}:{port}")  # the server closes it, as a Redis restart would
    redis.xadd("s", {"b": b"2"})
    with reader.read("g", "c", "s", ">", count=10) as entries:  # no error: the stale connection is reopened
        assert [bytes(f[b"b"]) for _, f in entries] == [b"2"]  # type: ignore[index]
    reader.close()


def test_error_replies_keep_redis_py_classes() -> None:
    from ldptel.storage.connection import reply_error as _error

    assert isinstance(_error("LOADING Redis is loading the dataset in memory"), redis_lib.BusyLoadingError)
    assert type(_error("NOGROUP No such key")) is redis_lib.ResponseError
