"""The append path under thread-per-request servers (werkzeug, `ldptel serve`): connections are reused."""

from __future__ import annotations

import threading

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
                            data=b"x", day="2026-11-22", dedupe_ttl=60)
        except BaseException as exc:
            errors.append(exc)

    for i in range(200):
        t = threading.Thread(target=one, args=(i,))
        t.start()
        t.join()
    assert errors == []
    assert redis.xlen(keys.stream("m", 0)) == 200
    assert len(appender._single._idle) <= BatchAppender.MAX_IDLE
    assert len(appender._single._idle) == 1  # sequential threads: one connection, reused 200 times
