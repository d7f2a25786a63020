"""Cluster fixtures: one real local Redis Cluster (3 primaries, no replicas) per session, started only when a
test asks for it (``valkey-cli --cluster create`` over embedded servers; :mod:`tests.cluster.local`). The
failover test starts its own cluster with replicas. Every test module here is marked ``cluster``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis as redis_lib

from ldptel.storage.client import connect
from tests.cluster.local import LocalCluster


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(primaries=3, replicas=0) as cluster:
        yield cluster


@pytest.fixture
def cluster_redis(local_cluster: LocalCluster) -> Iterator[redis_lib.Redis]:
    """A cluster client (``RedisCluster``) on an empty cluster (flushed before and after)."""
    local_cluster.flush()
    client = connect(local_cluster.url)
    try:
        yield client
    finally:
        client.close()
        local_cluster.flush()
