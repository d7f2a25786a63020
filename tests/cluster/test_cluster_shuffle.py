"""The shuffle stage on a real Redis Cluster (3 primaries): shards on different nodes, each release one script on
its shard's slot (held stream, released stream, stats and the uploads' dedupe keys share the hash tag), the AOF
rewrite asked of the node that holds the shard, and the fold exactly once."""

from __future__ import annotations

import numpy as np
import pytest
import redis as redis_lib

from ldptel.client import CmsParams, MetricSpec
from ldptel.storage import keys, registry
from ldptel.storage.append import utc_day
from ldptel.storage.shuffle import ShuffleConfig, Shuffler, purge_aof, release_stats
from tests.aggregator.agg_helpers import append_reports, drain
from tests.faults.harness import _total

pytestmark = pytest.mark.cluster
SPEC = MetricSpec(name="csh", params=CmsParams(epsilon=2.0, k=4, m=64), reports_per_day=4)


def test_blocks_are_released_and_folded_exactly_once_on_a_cluster(cluster_redis: redis_lib.Redis) -> None:
    record = registry.create_metric(cluster_redis, SPEC, shards=6)
    nodes = {cluster_redis.get_node_from_key(keys.held(SPEC.name, s)).name for s in range(6)}  # type: ignore[attr-defined]
    assert len(nodes) > 1
    sent = append_reports(cluster_redis, record, [f"v{i % 5}" for i in range(60 * 4)], np.random.default_rng(6),
                          day=utc_day(), batch_size=4)
    shuffler = Shuffler(cluster_redis, lambda m, v: SPEC.params, ShuffleConfig(n_min=3, max_block_uploads=0))
    done = [shuffler.shuffle(SPEC.name, s, flush=True) for s in range(6)]
    assert sum(d.uploads for d in done) == 60 and sum(d.reports for d in done) == 240
    assert all(cluster_redis.xlen(keys.held(SPEC.name, s)) == 0 for s in range(6))
    stats = release_stats(cluster_redis, SPEC.name, version=1, days=[utc_day()], shards=6)[utc_day()]
    assert stats.reports == 240 and stats.blocks == sum(d.blocks for d in done)
    assert purge_aof(cluster_redis, keys.held(SPEC.name, 0), wait_seconds=30) is not None
    drain(cluster_redis)
    assert _total(cluster_redis, SPEC.name).equals(sent.expected_state())
