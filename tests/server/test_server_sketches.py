"""The sketch store's index reads (server/storage/sketches.py), on a real Redis."""

from __future__ import annotations

import redis as redis_lib

from ldptel.storage import keys
from ldptel.storage.sketches import available_days, index_member, sketch_index


def test_available_days_are_the_days_of_one_version_over_every_shard(redis: redis_lib.Redis) -> None:
    members = {
        0: [(1, "2026-01-02"), (2, "2026-01-03")],
        1: [(1, "2026-01-01"), (1, "2026-01-02")],
        2: [],
        3: [(2, "2026-01-05")],
    }
    for shard, pairs in members.items():
        if pairs:
            redis.sadd(keys.sketch_index("m", shard), *(index_member(v, d) for v, d in pairs))
    assert sketch_index(redis, "m", 4) == {shard: sorted(pairs) for shard, pairs in members.items()}
    assert available_days(redis, "m", 4, version=1) == ["2026-01-01", "2026-01-02"]
    assert available_days(redis, "m", 4, version=2) == ["2026-01-03", "2026-01-05"]
    assert available_days(redis, "m", 4, version=3) == []
    assert available_days(redis, "other", 4, version=1) == []
