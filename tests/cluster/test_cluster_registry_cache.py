"""While the primary that holds the metric registry is down (the first seconds of its failover, before the
cluster marks it failed), the ingest keeps accepting batches of metrics it already knows whose shards live on
healthy primaries: the registry record it cached serves on, past its ``registry_ttl``. Batches for shards on
the dead primary answer 503 (never 500), as does a metric this process never saw.

The cluster's node timeout is long here (20 s), so the dead primary is not yet marked failed while the test
posts: the window is deterministic, not a race with the failover."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ldptel.server import ServerConfig, create_app
from ldptel.storage import keys, registry
from ldptel.storage.client import connect
from tests.cluster.local import LocalCluster
from tests.server.srv_helpers import OCTET, cms_spec, make_batch

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
APP_TOKEN = "cluster-app-token-0123456789abcdef"
ADMIN_TOKEN = "cluster-admin-token-0123456789abcdef"
SHARDS = 6
REGISTRY_TTL = 0.2


def test_a_cached_registry_record_serves_while_the_registry_primary_is_down() -> None:
    with LocalCluster(primaries=3, replicas=0, node_timeout_ms=20_000) as cluster:
        r = connect(cluster.url)
        spec = cms_spec("cached.metric")
        registry.create_metric(r, spec, shards=SHARDS)
        registry.create_metric(r, cms_spec("never.seen"), shards=SHARDS)
        owner = r.nodes_manager.get_node_from_slot(r.keyslot(keys.registry()))  # type: ignore[attr-defined]
        on_dead = {s for s in range(SHARDS)
                   if r.nodes_manager.get_node_from_slot(r.keyslot(keys.stream(spec.name, s))).name == owner.name}  # type: ignore[attr-defined]
        assert len(on_dead) < SHARDS
        r.close()
        app = create_app(ServerConfig(app_tokens=frozenset({APP_TOKEN}), admin_token=ADMIN_TOKEN,
                                      redis_url=cluster.url, rate_limit=None, registry_ttl=REGISTRY_TTL))
        http = app.test_client()
        rng = np.random.default_rng(2)

        def post(metric_spec: object, shard_on_dead: bool) -> int:
            while True:
                data, bid = make_batch(metric_spec, 50, rng)  # type: ignore[arg-type]
                if (keys.shard_for(bid, SHARDS) in on_dead) == shard_on_dead:
                    break
            return http.post("/v1/reports", data=data, content_type=OCTET,
                             headers={"Authorization": f"Bearer {APP_TOKEN}"}).status_code

        try:
            assert post(spec, False) == 202  # the record is cached now
            next(n for n in cluster.nodes if f"127.0.0.1:{n.port}" == owner.name).kill()
            time.sleep(2 * REGISTRY_TTL)  # the cached record is past its time-to-live: the registry is asked
            assert [post(spec, False) for _ in range(3)] == [202, 202, 202]  # 503 before the fix
            if on_dead:
                assert post(spec, True) == 503  # its shard is on the dead primary
            assert post(cms_spec("never.seen"), False) == 503  # no record known: nothing to serve from
        finally:
            app.extensions["ldptel"].close()
