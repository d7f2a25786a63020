"""The append path under thread-per-request servers (werkzeug, `ldptel serve`): connections are reused."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import redis as redis_lib

from ldptel.storage import keys
from ldptel.storage.append import BatchAppender


def test_short_lived_threads_reuse_a_bounded_set_of_connections(redis: redis_lib.Redis, redis_url: str) -> None:
    """200 threads, each appending once and exiting, through a client whose pool allows only 5 connections.

    Before the fix every thread built a connection the pool counted and never got back, and the 101st
    request of `ldptel serve` failed with MaxConnectionsError.
    """
    small = redis_lib.Redis.from_url(redis_url, max_connections=5)
    appender = BatchAppender(small)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            appender.append(metric="m", shards=1, batch_id=i.to_bytes(16, "little"), version=1, n=1,
                            data=b"x", day="2026-11-22", dedupe_days=0)
        except BaseException as exc:
            errors.append(exc)

    try:
        for i in range(200):
            t = threading.Thread(target=one, args=(i,))
            t.start()
            t.join()
        assert errors == []
        assert redis.xlen(keys.held("m", 0)) == 200
        assert len(appender._single._idle) <= BatchAppender.MAX_IDLE
        assert len(appender._single._idle) == 1  # sequential threads: one connection, reused 200 times
    finally:
        appender.close()
        small.close()


DAY_MS = 86_400_000


def _append(appender: BatchAppender, i: int, day: str) -> None:
    result = appender.append(metric="m", shards=1, batch_id=i.to_bytes(16, "little"), version=1, n=1, data=b"x",
                             day=day, dedupe_days=1)
    assert not result.duplicate


def test_an_earlier_day_after_a_later_id_keeps_day_only_ids(redis: redis_lib.Redis) -> None:
    """Issue 12: an append for an earlier day meeting a later id (an ingest whose clock is still on yesterday
    at midnight) used ``XADD *``, giving that entry and every later one of the day Redis's millisecond clock."""
    appender = BatchAppender(redis)
    _append(appender, 1, "2026-11-23")
    _append(appender, 2, "2026-11-22")  # yesterday, after today's entry
    _append(appender, 3, "2026-11-23")
    ids = [eid.decode() for eid, _ in redis.xrange(keys.held("m", 0))]
    assert all(int(eid.split("-")[0]) % DAY_MS == 0 for eid in ids), ids
    assert [eid.split("-")[0] for eid in ids] == ["1795392000000"] * 3 and len(set(ids)) == 3
    days = [fields[b"d"] for _, fields in redis.xrange(keys.held("m", 0))]
    assert days == [b"2026-11-23", b"2026-11-22", b"2026-11-23"]  # the day field is the batch's own


def test_an_id_finer_than_the_day_is_rounded_up_to_the_next_day(redis: redis_lib.Redis) -> None:
    """A stream whose last id carries a time (written before day-only ids) gets the next day boundary."""
    redis.xadd(keys.held("m", 0), {"d": "2026-11-23"}, id="1795441204552-0")
    _append(BatchAppender(redis), 1, "2026-11-23")
    last = redis.xrevrange(keys.held("m", 0), count=1)[0][0].decode()
    assert last == f"{1795392000000 + DAY_MS}-0"


def test_the_dedupe_key_expires_at_a_day_boundary(redis: redis_lib.Redis) -> None:
    appender = BatchAppender(redis)
    appender.append(metric="m", shards=1, batch_id=b"\x07" * 16, version=1, n=1, data=b"x", day="2099-01-01",
                    dedupe_days=3)
    expires = redis.execute_command("PEXPIRETIME", keys.seen("m", 0, (b"\x07" * 16).hex()))
    assert expires == 4070908800000 + 4 * DAY_MS  # the end of 2099-01-04: the arrival day + 3 days


def test_an_append_refused_for_memory_says_so_on_a_stream_not_created_yet(tmp_path: Path) -> None:
    """Regression: the append script took any error of its XADD for "an id smaller than the stream's last" and
    read that last id. Refused for memory on a shard's first upload, the read raised "no such key": ingest still
    answered 503, but logged a bare ResponseError, and no caller could tell Redis refuses writes (as the
    shuffle's release script did: tests/server/test_shuffle.py). Nothing may be written either."""
    from ldptel.storage.connection import refused_write
    from ldptel.storage.embedded import EmbeddedRedis
    from tests.server.srv_helpers import fill_to_maxmemory, lift_maxmemory

    with EmbeddedRedis(data_dir=tmp_path / "redis") as server, server.client() as r:
        appender = BatchAppender(r)
        try:
            fill_to_maxmemory(r)
            with pytest.raises(redis_lib.ResponseError) as raised:
                _append(appender, 1, "2026-11-23")
            assert (refused_write(raised.value) or "").startswith("OOM command not allowed"), raised.value.args
            assert not r.exists(keys.held("m", 0)) and not r.exists(keys.seen("m", 0, (1).to_bytes(16, "little").hex()))
            lift_maxmemory(r)
            _append(appender, 1, "2026-11-23")
            assert r.xlen(keys.held("m", 0)) == 1
        finally:
            appender.close()
