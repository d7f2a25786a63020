"""Sealing, roll-ups and retention on a real 3-primary Redis Cluster: the per-shard states live in the shards' slots
(spread over every primary), each metric's sealed states in its one sealed slot; sealing reads across slots and writes
each slot in its own transactions, and every range reads the exact sum of its days before and after."""

from __future__ import annotations

import json

import numpy as np
import pytest
import redis as redis_lib

from ldptel.aggregator.query import estimate_by_day, estimate_metric
from ldptel.client import GrrParams, MetricSpec
from ldptel.storage import keys, registry, sealed
from ldptel.storage import sketches as store
from tests.aggregator.agg_helpers import append_reports, drain, run_cli
from tests.cluster.local import LocalCluster

pytestmark = pytest.mark.cluster
SHARDS = 6
DAYS = ("2026-01-05", "2026-01-06", "2026-01-09", "2026-02-03", "2026-02-04", "2026-03-01")


def test_sealing_on_a_cluster_keeps_every_estimate(
    local_cluster: LocalCluster, cluster_redis: redis_lib.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LDPTEL_REDIS_URL", local_cluster.url)
    record = registry.create_metric(cluster_redis, MetricSpec(name="colors", params=GrrParams(epsilon=2.0, domain=("r", "g", "b"))),
                                    shards=SHARDS)
    nodes = cluster_redis.nodes_manager  # type: ignore[attr-defined]
    slots = {nodes.get_node_from_slot(cluster_redis.keyslot(keys.sketch("colors", s, 1, DAYS[0]))).name  # type: ignore[attr-defined]
             for s in range(SHARDS)}
    assert len(slots) == 3  # the shards' states spread over every primary
    rng = np.random.default_rng(11)
    for j, day in enumerate(DAYS):
        append_reports(cluster_redis, record, ["r", "g", "g", "b"][j % 4:] * 50, rng, day=day, batch_size=40)
    drain(cluster_redis)
    ranges = [(None, None), (DAYS[1], DAYS[4]), (DAYS[2], DAYS[2])]
    before = [estimate_metric(cluster_redis, "colors", day_from=lo, day_to=hi).to_dict() for lo, hi in ranges]
    daily = estimate_by_day(cluster_redis, "colors").to_dict()

    code, out, err = run_cli("seal")
    assert code == 0, err
    assert json.loads(out)["days_sealed"] == len(DAYS)
    assert not any(store.sketch_index(cluster_redis, "colors", SHARDS).values())
    assert [estimate_metric(cluster_redis, "colors", day_from=lo, day_to=hi).to_dict() for lo, hi in ranges] == before
    assert estimate_by_day(cluster_redis, "colors").to_dict() == daily

    registry.set_retention(cluster_redis, "colors", 30)
    code, out, err = run_cli("seal")
    assert code == 0, err
    assert json.loads(out)["states_dropped"] > 0
    assert estimate_metric(cluster_redis, "colors").to_dict()["n"] == before[0]["n"]
    view = sealed.read_view(cluster_redis, "colors")
    assert view.dropped is not None and all(level >= sealed.KEEP_LEVEL for _, level, _ in view.index)
    assert [res.days for res in estimate_by_day(cluster_redis, "colors").results] == [DAYS[:3], DAYS[3:5], DAYS[5:]]
