"""Failover under load: kill -9 a primary of a 3-primary, 3-replica cluster while gunicorn ingests and a fold
worker folds; its replica takes over. The promoted replica has no replica of its own, so nothing on its shards may
be acknowledged from then on, not even a retry of a batch it already stores (a duplicate): before the fix such a
retry got its 202 with the batch on one node. (The old primary rejoining as its replica, after which acks come back:
the fault harness's ``primary_failover``, tests/cluster/test_cluster_faults.py.) Audit: 0 acknowledged batches
lost, 0 stored or folded twice.

The ingest runs with ``?wait_replicas=1`` (a batch is acknowledged only once a replica holds it): without it,
replication is asynchronous and a failover may drop the last acknowledged writes of the dead primary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ldptel.client.protocol.wire import decode_header
from ldptel.storage import keys, registry
from ldptel.storage import sketches as store
from ldptel.storage.client import connect
from tests.aggregator.agg_helpers import ldptel
from tests.cluster.local import LocalCluster
from tests.server.srv_helpers import OCTET, cms_spec, make_batch
from tests.server.test_server_http import (
    ADMIN_TOKEN,
    APP_TOKEN,
    Http,
    _free_port,
    _gunicorn,
    _stop,
    _wait_for,
    _wait_http,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
SHARDS = 6
BATCH_REPORTS = 100
# Acks after the failover before the load stops (on the other primaries' shards), and how many batches of the
# promoted replica's shards must have been refused to the end: the first attempt and GIVE_UP - 1 retries, each a
# duplicate after the first, each refused after WAIT's 1 s. A client then gives the batch up and goes on (an SDK
# keeps it queued and retries later): such a batch may be stored, never acknowledged.
AFTER_FAILOVER = 8
REFUSED_ON_PROMOTED = 2
GIVE_UP = 3


def test_kill_a_primary_under_load_loses_and_doubles_nothing(tmp_path: Path) -> None:
    with LocalCluster(primaries=3, replicas=1) as cluster:
        port = _free_port()
        log = tmp_path / "gunicorn.log"
        proc = _gunicorn(port, cluster.url + "?wait_replicas=1", log)
        worker = None
        try:
            _wait_http(port, proc, log)
            spec = cms_spec()
            setup = Http(port)
            body = json.dumps({**{k: v for k, v in spec.to_dict().items() if k != "version"}, "shards": SHARDS}).encode()
            assert setup.request("POST", "/v1/metrics", body, token=ADMIN_TOKEN, content_type="application/json")[0] in (200, 201)
            with (tmp_path / "worker.log").open("wb") as out:  # a file, not a pipe: its logs never block it
                worker = subprocess.Popen(
                    [sys.executable, "-m", "ldptel.aggregator.cli", "aggregate", "--checkpoint-seconds", "0.2"],
                    env={**os.environ, "LDPTEL_REDIS_URL": cluster.url}, stdout=out, stderr=subprocess.STDOUT,
                )
            acked, statuses, errors, given_up = _load(port, spec, cluster, setup)
            setup.close()
        finally:
            if worker is not None:
                _stop(worker)
            _stop(proc)
        assert not errors, errors
        assert 503 in statuses and 202 in statuses  # the dead primary's shards were refused until the failover
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
        assert worker is not None and worker.returncode == 0, (tmp_path / "worker.log").read_text()[-3000:]

        done = ldptel("aggregate", "--once", redis_url=cluster.url)  # fold what the follow worker left
        assert done.returncode == 0, done.stderr
        r = connect(cluster.url)
        try:
            # The fold reads shuffled blocks (ldptel.storage.shuffle) with no batch id: an upload is stored when its
            # dedupe key exists, and each is released exactly once (the blocks hold exactly the uploads' reports).
            stored = [decode_header(fields[b"b"]) for s in range(SHARDS) for _, fields in r.xrange(keys.stream(spec.name, s))]
            assert sum(r.xlen(keys.held(spec.name, s)) for s in range(SHARDS)) == 0  # every upload released
            uploads = sum(1 for s in range(SHARDS) for _ in r.scan_iter(match=keys.seen(spec.name, s, "*")))
            assert all(r.exists(keys.seen(spec.name, keys.shard_for(bid, SHARDS), bid.hex())) for bid in acked)  # 0 lost
            assert uploads - len(acked) <= 2 + len(given_up)  # in flight when the load stopped, or given up
            assert sum(h.n for h in stored) == uploads * BATCH_REPORTS  # 0 doubled: each upload released once
            record = registry.get_metric(r, spec.name)
            index = store.sketch_index(r, spec.name, SHARDS)
            pairs = [(s, v, d) for s, members in index.items() for v, d in members]
            total, _ = store.sum_sketches(r, spec.name, params=record.current.params, pairs=pairs)
            assert total.n == sum(h.n for h in stored)  # every stored report folded exactly once
        finally:
            r.close()


def _load(port: int, spec, cluster: LocalCluster,  # type: ignore[no-untyped-def]
          http: Http) -> tuple[list[bytes], dict[int, int], list[BaseException], list[bytes]]:
    """Two clients post batches (a batch is retried until acknowledged or refused GIVE_UP times) while one primary
    is killed; returns the acknowledged batch ids, the status counts, the clients' errors and the given-up ids."""
    given_up: list[bytes] = []
    acked: list[bytes] = []
    statuses: dict[int, int] = {}
    stop = threading.Event()
    errors: list[BaseException] = []

    def client_loop(seed: int) -> None:
        client = Http(port)
        rng = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                data, bid = make_batch(spec, BATCH_REPORTS, rng)
                refused = 0
                while not stop.is_set():
                    status, _, _ = client.request("POST", "/v1/reports", data, token=APP_TOKEN, content_type=OCTET)
                    statuses[status] = statuses.get(status, 0) + 1
                    if status == 202:
                        acked.append(bid)
                        break
                    assert status == 503, status
                    refused += 1
                    if refused == GIVE_UP:
                        given_up.append(bid)
                        break
                    time.sleep(0.05)
        except BaseException as exc:
            errors.append(exc)
        finally:
            client.close()

    r = connect(cluster.url)
    try:  # the victim: the primary of shard 0 (and of whichever other shards share it)
        port_of = {s: int(r.get_node_from_key(keys.held(spec.name, s)).port) for s in range(SHARDS)}  # type: ignore[attr-defined]
    finally:
        r.close()
    victim = next(node for node in cluster.nodes if node.port == port_of[0])
    victim_shards = {s for s, port in port_of.items() if port == victim.port}

    def after_failover(acks_since: int, given_up_since: int) -> bool:
        """AFTER_FAILOVER acks and REFUSED_ON_PROMOTED given-up batches of the dead primary's shards (its replica's
        now) since the failover."""
        refused = sum(keys.shard_for(b, SHARDS) in victim_shards for b in given_up[given_up_since:])
        wrongly_acked = any(keys.shard_for(b, SHARDS) in victim_shards for b in acked[acks_since:])  # fails below
        return len(acked) - acks_since >= AFTER_FAILOVER and (refused >= REFUSED_ON_PROMOTED or wrongly_acked)

    threads = [threading.Thread(target=client_loop, args=(seed,)) for seed in (1, 2)]
    for t in threads:
        t.start()
    try:
        _wait_for(lambda: len(acked) >= 30, "acks before the kill")
        victim.kill()  # SIGKILL
        ready = [http.request("GET", "/readyz")[0] for _ in range(3)]
        assert 503 in ready  # a primary it writes to is gone: not ready
        _wait_for(lambda: http.request("GET", "/readyz")[0] == 200, "a replica promoted", timeout=60)
        at_ready, given_up_at_ready = len(acked), len(given_up)
        _wait_for(lambda: after_failover(at_ready, given_up_at_ready),
                  "acks after the failover, and refusals on the promoted replica's shards", timeout=60)
        on_promoted = [b for b in acked[at_ready:] if keys.shard_for(b, SHARDS) in victim_shards]
        assert not on_promoted, f"{len(on_promoted)} batch(es) acknowledged by a primary that no replica backs"
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    return acked, statuses, errors, given_up
