"""Redis connections are closed by whoever opened them, never left to the garbage collector.

A redis-py connection left in a reference cycle is freed by the cyclic collector, which finalizes a cycle's
objects in no fixed order: when the socket goes first, Python warns "unclosed socket" in whatever code runs
then (the suite turned that into a failure of an unrelated test in about half of its full runs). These tests
pin the three parts of the fix: the raw connection stack keeps no cycle, an ingest app closes every connection
it opened, and the suite's guard (``tests/leaks.py``) reports a connection dropped with its socket open.
"""

from __future__ import annotations

import gc
import warnings
import weakref

import numpy as np
import redis as redis_lib

from ldptel.server import ServerConfig, create_app
from ldptel.server.state import EXTENSION, IngestState
from ldptel.storage import keys, registry
from ldptel.storage.append import BatchAppender
from ldptel.storage.streamread import StreamReader
from tests.leaks import made_at
from tests.server.srv_helpers import grr_spec, make_batch
from tests.wait import wait_until


def _clients(redis: redis_lib.Redis) -> set[str]:
    """The addresses of the clients connected to the test Redis now."""
    return {c["addr"] for c in redis.client_list()}


def test_a_raw_client_dropped_without_close_closes_its_connections_at_once(redis: redis_lib.Redis) -> None:
    """The append and stream-read stacks keep their idle connections. Before the fix each connection pointed back
    at its stack (and carried redis-py's notification handlers, another cycle), so a raw client dropped unclosed
    waited for the cyclic collector, which may finalize a socket before the connection that would close it."""
    redis.xadd("s", {"a": "b"})
    made: list[weakref.ref[object]] = []
    sockets: list[weakref.ref[object]] = []
    gc.disable()  # only reference counting may free them here
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            appender, reader = BatchAppender(redis), StreamReader(redis)
            appender.append(metric="m", shards=1, batch_id=bytes(16), version=1, n=1, data=b"x", day="2026-11-22",
                            dedupe_days=0)
            with reader.read("s", "0", count=10) as entries:
                assert len(entries) == 1
            for client in (appender, reader):
                assert client._single is not None
                (idle,) = client._single._idle
                made.append(weakref.ref(idle.conn))
                sockets.append(weakref.ref(idle.conn._sock))
                del idle
            del appender, reader, client, entries
            assert [ref() for ref in made] == [None, None], "a dropped raw client's connections outlived it (a cycle)"
            assert [ref() for ref in sockets] == [None, None]
        # closed at the drop by redis-py's own finalizer, before the socket object went: nothing to warn about
        assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    finally:
        gc.enable()


def test_an_ingest_app_closes_every_redis_connection_it_opened(
    redis: redis_lib.Redis, server_config: ServerConfig, app_token: str, rng: np.random.Generator
) -> None:
    """IngestState.close(): the appender's raw connections and the redis-py client's pool (before the fix the
    test fixtures closed only the latter, and every app's append connections were left to the collector)."""
    spec = grr_spec()
    before = _clients(redis)
    registry.create_metric(redis, spec, shards=1)
    app = create_app(server_config)
    state = app.extensions[EXTENSION]
    assert isinstance(state, IngestState)
    web = app.test_client()
    try:
        for _ in range(3):
            data, _ = make_batch(spec, 20, rng)
            resp = web.post("/v1/reports", data=data, content_type="application/octet-stream",
                            headers={"Authorization": f"Bearer {app_token}"})
            assert resp.status_code == 202, resp.get_data(as_text=True)
        assert web.get("/readyz").status_code == 200
        assert redis.xlen(keys.held(spec.name, 0)) == 3
        assert len(_clients(redis) - before) >= 2, "the app holds no connections of its own: the test proves nothing"
    finally:
        state.close()
    wait_until(lambda: _clients(redis) <= before, what="the app's connections to be closed")


class _Holder:
    """Something that holds a client and is in a reference cycle (as a Flask app holding its Redis client)."""

    def __init__(self, client: redis_lib.Redis) -> None:
        self.client = client
        self.me = self


def test_the_suite_reports_a_redis_client_left_to_the_garbage_collector(redis_url: str) -> None:
    """tests/leaks.py: a client only the cyclic collector frees warns when it is collected, every time, and says
    where it was made; a closed one, or one freed at once by reference counting (its own finalizer closes it
    then, before any socket could be finalized), does not."""
    def collect(held: list[_Holder]) -> list[str]:
        """Drop the only reference to the holder and collect: the warnings of this file's leaks."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            held.clear()
            gc.collect()
        return [str(w.message) for w in caught
                if issubclass(w.category, ResourceWarning) and "test_connection_lifetime.py" in str(w.message)]

    client = redis_lib.Redis.from_url(redis_url)
    client.ping()
    assert "test_connection_lifetime.py" in (made_at(client) or "")
    assert "test_connection_lifetime.py" in (made_at(client.connection_pool._available_connections[0]) or "")
    held = [_Holder(client)]
    del client
    left = collect(held)
    assert len(left) == 1 and "garbage-collected" in left[0], left

    closed = redis_lib.Redis.from_url(redis_url)
    closed.ping()
    closed.close()
    held = [_Holder(closed)]
    del closed
    assert collect(held) == []

    dropped = redis_lib.Redis.from_url(redis_url)
    dropped.ping()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del dropped  # freed by reference counting: its finalizer closes it
        gc.collect()
    assert [w for w in caught if "test_connection_lifetime.py" in str(w.message)] == []
