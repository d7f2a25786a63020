"""What the query-side benchmarks (``bench_query``, ``bench_dashboard``) share: their Redis (``LDPTEL_REDIS_URL``
when set, flushed!, else a private embedded server), plausible folded cms days written straight to it as the
fold worker would leave them, and their JSON lines. Not collected by pytest."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import redis as redis_lib

from ldptel.client import CmsParams, MetricSpec, SketchState
from ldptel.storage import keys, registry
from ldptel.storage import sketches as store
from ldptel.storage.embedded import EmbeddedRedis

FIRST_DAY = dt.date(2026, 1, 1)


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


@contextmanager
def bench_redis() -> Iterator[redis_lib.Redis]:
    """A flushed client of ``LDPTEL_REDIS_URL``, else of a private embedded server (stopped after)."""
    url = os.environ.get("LDPTEL_REDIS_URL")
    server = None if url else EmbeddedRedis(appendonly=False).start()
    try:
        r = redis_lib.Redis.from_url(url or server.url, socket_timeout=120)  # type: ignore[union-attr]
        r.flushdb()
        yield r
    finally:
        if server is not None:
            server.stop()


def seed_cms_days(r: redis_lib.Redis, metric: str, params: CmsParams, *, shards: int, days: int,
                  reports_per_shard_day: int, seed: int) -> list[str]:
    """Create ``metric`` and store, per shard and day, a sketch of ``reports_per_shard_day`` reports spread
    evenly over the rows with bits set with probability ~0.12 (cms at ε = 4); returns the days."""
    registry.create_metric(r, MetricSpec(name=metric, params=params), shards=shards)
    rng = np.random.default_rng(seed)
    names = [(FIRST_DAY + dt.timedelta(days=i)).isoformat() for i in range(days)]
    for shard in range(shards):
        for day in names:
            row_counts = rng.multinomial(reports_per_shard_day, np.full(params.k, 1 / params.k)).astype(np.int64)
            counts = rng.binomial(row_counts[:, None], 0.12, size=(params.k, params.m)).astype(np.int64)
            pipe = r.pipeline(transaction=True)
            pipe.set(keys.sketch(metric, shard, 1, day), SketchState(params.mechanism, counts, row_counts).to_bytes())
            pipe.sadd(keys.sketch_index(metric, shard), store.index_member(1, day))
            pipe.execute()
    return names
