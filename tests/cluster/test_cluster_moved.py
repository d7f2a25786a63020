"""MOVED on the fold's commit path, made deterministic on a real cluster: a shard's slot (stream, lease,
checkpoint, sketches: one hash tag) is migrated to another primary with its keys (``CLUSTER SETSLOT``
IMPORTING/MIGRATING, ``MIGRATE``, ``SETSLOT NODE``), exactly what a resharding does and what a failover looks
like to a client with an old slot map. A client whose slot map predates the move gets ``MOVED`` on its next
command about that slot.

redis-py follows MOVED itself a bounded number of times (10 retries by default, its
slot map refreshed only every 5th redirect inside a transaction). During a failover on a loaded machine the
nodes can keep redirecting longer than that, and the MOVED reaches ldptel: that is how the follow aggregator
died in the cluster fault suite. The tests make that moment deterministic by giving the client with the old
map no retries of its own (``cluster_retries=0``): the first MOVED reaches ldptel's code, which
must refresh the map and resend.

* the commit (WATCH/GET/MULTI/EXEC through redis-py's cluster pipeline) of a client with the old map commits
  on the new owner, exactly once (it raised ``MovedError`` before);
* a follow worker whose shard moves mid-run keeps folding and ends with exactly the sketch of what was sent;
* the CLI names a cluster URL's MOVED as a cluster that is changing, and keeps the "use redis+cluster://"
  message for a plain URL at a cluster node.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import redis as redis_lib

from ldptel.aggregator.worker import Worker, WorkerConfig
from ldptel.aggregator.worker.commit import commit
from ldptel.aggregator.worker.shard import OwnedShard
from ldptel.client import CmsParams, MetricSpec, SketchState, fold
from ldptel.storage import keys, registry
from ldptel.storage import sketches as store
from ldptel.storage.client import connect
from ldptel.storage.leases import Leases
from ldptel.storage.sketches import ZERO_ID, format_id
from tests.aggregator.agg_helpers import append_reports
from tests.cluster.local import LocalCluster
from tests.wait import wait_until

pytestmark = pytest.mark.cluster
SPEC = MetricSpec(name="moved", params=CmsParams(epsilon=4.0, k=8, m=64))


def _migrate_slot(r: redis_lib.Redis, key: str) -> str:
    """Move the slot of ``key`` with all its keys to another primary; returns the new owner's host:port."""
    slot = r.keyslot(key)  # type: ignore[attr-defined]
    source = r.nodes_manager.get_node_from_slot(slot)  # type: ignore[attr-defined]
    target = next(n for n in r.get_primaries() if n.name != source.name)  # type: ignore[attr-defined]
    src, dst = source.redis_connection, target.redis_connection
    ids = {n.name: n.redis_connection.execute_command("CLUSTER", "MYID").decode() for n in (source, target)}
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source.name])
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target.name])
    while moving := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
        src.execute_command("MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *moving)
    for node in r.get_primaries():  # type: ignore[attr-defined]
        node.redis_connection.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[target.name])
    return str(target.name)


def _stored(r: redis_lib.Redis, shards: int) -> SketchState:
    index = store.sketch_index(r, SPEC.name, shards)
    pairs = [(s, v, d) for s, members in index.items() for v, d in members]
    return store.sum_sketches(r, SPEC.name, params=SPEC.params, pairs=pairs)[0]


def test_a_commit_with_a_stale_slot_map_lands_on_the_new_owner_once(
    local_cluster: LocalCluster, cluster_redis: redis_lib.Redis
) -> None:
    record = registry.create_metric(cluster_redis, SPEC, shards=1)
    sent = append_reports(cluster_redis, record, [f"v{i % 5}" for i in range(300)], np.random.default_rng(3),
                          day="2026-01-02", batch_size=100)
    stale = connect(local_cluster.url, cluster_retries=0)  # its slot map is taken now, before the move
    try:
        leases = Leases(stale, owner="w1", ttl_seconds=30)
        assert leases.claim(SPEC.name, 0)
        entries = stale.xrange(keys.held(SPEC.name, 0))  # as appended (the commit below only needs their last id)
        last = store.parse_id(entries[-1][0])
        state = fold(SPEC.params, sent.batches)
        sh = OwnedShard(metric=SPEC.name, shard=0, checkpoint=ZERO_ID, last_folded=last, leased_at=0.0,
                        cursor=format_id(last), states={(1, "2026-01-02", ""): state}, dirty={(1, "2026-01-02", "")},
                        uncommitted=len(entries))
        new_owner = _migrate_slot(cluster_redis, keys.stream(SPEC.name, 0))
        assert stale.nodes_manager.get_node_from_slot(stale.keyslot(keys.stream(SPEC.name, 0))).name != new_owner  # type: ignore[attr-defined]

        assert commit(stale, sh, worker_id="w1", retention_seconds=3600) is True  # MovedError before the fix

        fresh = connect(local_cluster.url)
        try:
            assert store.read_checkpoint(fresh, SPEC.name, 0) == last
            assert int(fresh.get(keys.folded(SPEC.name, 0)) or 0) == len(entries)
            assert _stored(fresh, 1).equals(state)  # written once, on the new owner
        finally:
            fresh.close()
    finally:
        stale.close()


def test_a_follow_worker_folds_through_a_slot_move_exactly_once(
    local_cluster: LocalCluster, cluster_redis: redis_lib.Redis
) -> None:
    record = registry.create_metric(cluster_redis, SPEC, shards=2)
    rng = np.random.default_rng(5)
    first = append_reports(cluster_redis, record, [f"v{i % 7}" for i in range(400)], rng, day="2026-01-02",
                           batch_size=50)
    worker = Worker(connect(local_cluster.url, cluster_retries=0),
                    WorkerConfig(checkpoint_seconds=0.05, lease_ttl=2.0, block_seconds=0.1, rescan_seconds=0.2))
    failures: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:  # surfaced below
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: _stored(cluster_redis, 2).n == first.n or bool(failures), timeout=60,
                   what="the first part folded")
        for shard in range(2):  # both shards' slots move while the worker holds them
            _migrate_slot(cluster_redis, keys.stream(SPEC.name, shard))
        second = append_reports(cluster_redis, record, [f"v{i % 3}" for i in range(400)], rng, day="2026-01-02",
                                batch_size=50)
        total = first.n + second.n
        wait_until(lambda: _stored(cluster_redis, 2).n >= total or bool(failures), timeout=60,
                   what="everything folded after the move")
        assert not failures, failures
        assert thread.is_alive()
        assert _stored(cluster_redis, 2).equals(fold(SPEC.params, first.batches + second.batches))
    finally:
        worker.stop()
        thread.join(timeout=30)
        worker.r.close()
    assert not thread.is_alive() and not failures, failures
