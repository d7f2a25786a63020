"""The ingest starts while the whole Redis Cluster is down and answers 503 (readiness and ingest, never 500)
until the cluster is back; then it accepts batches without a restart. The nodes are killed with SIGKILL and
restarted on their own ports and data dirs (``nodes.conf``, AOF), so the same cluster comes back."""

from __future__ import annotations

import numpy as np
import pytest

from ldptel.server import ServerConfig, create_app
from ldptel.storage import registry
from ldptel.storage.client import connect
from tests.cluster.local import LocalCluster
from tests.server.srv_helpers import OCTET, cms_spec, make_batch
from tests.wait import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
APP_TOKEN = "cluster-app-token-0123456789abcdef"
ADMIN_TOKEN = "cluster-admin-token-0123456789abcdef"


def test_the_ingest_starts_with_the_whole_cluster_down_and_serves_once_it_is_back() -> None:
    with LocalCluster(primaries=3, replicas=0) as cluster:
        r = connect(cluster.url)
        spec = cms_spec("startup.metric")
        registry.create_metric(r, spec, shards=3)
        r.close()
        for node in cluster.nodes:
            node.kill()

        app = create_app(ServerConfig(app_tokens=frozenset({APP_TOKEN}), admin_token=ADMIN_TOKEN,
                                      redis_url=cluster.url, rate_limit=None, redis_timeout=1.0))  # raised before
        http = app.test_client()
        rng = np.random.default_rng(4)

        def post() -> int:
            data, _ = make_batch(spec, 20, rng)
            return http.post("/v1/reports", data=data, content_type=OCTET,
                             headers={"Authorization": f"Bearer {APP_TOKEN}"}).status_code

        try:
            assert http.get("/healthz").status_code == 200  # the process is up
            assert http.get("/readyz").status_code == 503
            assert post() == 503
            assert http.get("/v1/metrics/startup.metric", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}).status_code == 503
            for node in cluster.nodes:
                node.start()
            cluster.wait_ok()
            wait_until(lambda: http.get("/readyz").status_code == 200, what="readiness once the cluster is back")
            assert [post() for _ in range(5)] == [202] * 5
        finally:
            app.extensions["ldptel"].close()
