"""The whole pipeline on a real 3-primary Redis Cluster: the ldptel CLI (registry, aggregate, status,
estimate), ingest through the app (the raw append routed by slot), readiness, exactly-once, and the one-line
error a single-node URL pointed at a cluster node gets."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import redis as redis_lib

from ldptel.client import privatize_batch
from ldptel.client.protocol.wire import encode_batch
from ldptel.server import ServerConfig, create_app
from ldptel.server.ratelimit import TokenRateLimiter
from ldptel.storage import keys, registry
from ldptel.storage import sketches as store
from ldptel.storage.append import BatchAppender, utc_day
from ldptel.storage.connection import PlainUrlAtClusterError
from ldptel.storage.leases import Leases
from tests.aggregator.agg_helpers import Ingested, run_cli
from tests.cluster.local import LocalCluster
from tests.stats import assert_close_normal

pytestmark = pytest.mark.cluster
APP_TOKEN = "cluster-app-token-0123456789abcdef"
ADMIN_TOKEN = "cluster-admin-token-0123456789abcdef"
SHARDS = 6


def _owners(r: redis_lib.Redis, metric: str, shards: int) -> set[str]:
    """The primaries (host:port) that serve the metric's shard streams."""
    nodes = r.nodes_manager  # type: ignore[attr-defined]  # a RedisCluster
    return {nodes.get_node_from_slot(r.keyslot(keys.stream(metric, s))).name for s in range(shards)}  # type: ignore[attr-defined]


def test_pipeline_and_every_command_on_a_cluster(
    local_cluster: LocalCluster, cluster_redis: redis_lib.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LDPTEL_REDIS_URL", local_cluster.url)
    code, _, err = run_cli("metrics", "create", "pages", "--mechanism", "cms", "--epsilon", "4", "--k", "16", "--m", "256",
                       "--shards", str(SHARDS))
    assert code == 0, err
    assert len(_owners(cluster_redis, "pages", SHARDS)) == 3  # the shards spread over every primary

    app = create_app(ServerConfig(app_tokens=frozenset({APP_TOKEN}), admin_token=ADMIN_TOKEN,
                                  redis_url=local_cluster.url, rate_limit=None))
    http = app.test_client()
    assert http.get("/readyz").status_code == 200
    record = registry.get_metric(cluster_redis, "pages")
    spec = record.current
    rng = np.random.default_rng(17)
    labels = [f"/p/{i}" for i in range(5)]
    values: list[str] = []
    sent: list[tuple[bytes, object]] = []
    for i in range(24):  # every batch lands on the shard of its id: all 24 accepted, wherever it lives
        chunk = [labels[(i + j) % 3 if j % 4 else 4] for j in range(250)]
        batch = privatize_batch(chunk, spec.params, rng=rng)
        data = encode_batch(metric="pages", version=spec.version, batch_id=rng.bytes(16), batch=batch, params=spec.params)
        resp = http.post("/v1/reports", data=data, content_type="application/octet-stream",
                         headers={"Authorization": f"Bearer {APP_TOKEN}"})
        assert resp.status_code == 202, resp.get_data(as_text=True)
        values += chunk
        sent.append((data, batch))
    for data, _ in sent[:5]:  # retries: deduplicated on their shard
        resp = http.post("/v1/reports", data=data, content_type="application/octet-stream",
                         headers={"Authorization": f"Bearer {APP_TOKEN}"})
        assert resp.status_code == 202 and resp.get_json()["duplicate"] is True
    app.extensions["ldptel"].close()

    code, out, err = run_cli("aggregate", "--once")
    assert code == 0, err
    assert json.loads(out)["reports"] == len(values)
    code, out, err = run_cli("status", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)["shards"]
    assert len(rows) == SHARDS and all(row["lag"] == 0 for row in rows)

    ingested = Ingested(record=record, batches=[b for _, b in sent], values=values)  # type: ignore[misc]
    index = store.sketch_index(cluster_redis, "pages", SHARDS)
    pairs = [(s, v, d) for s, members in index.items() for v, d in members]
    total, _ = store.sum_sketches(cluster_redis, "pages", params=spec.params, pairs=pairs)
    assert total.equals(ingested.expected_state())  # exactly the acknowledged batches, each once

    code, out, err = run_cli("estimate", "pages", "--candidate", labels[0], "--candidate", labels[4], "--format", "json")
    assert code == 0, err
    truth = Counter(values)
    doc = json.loads(out)
    assert doc["n"] == len(values)
    for row in doc["rows"]:
        assert_close_normal(row["estimate"], truth[row["value"]], row["stderr"], n=len(values), what=row["value"])
    assert run_cli("metrics", "list")[0] == 0 and "pages" in run_cli("metrics", "show", "pages")[1]
    assert run_cli("metrics", "retire", "pages")[0] == 0
    assert registry.get_metric(cluster_redis, "pages").status == "retired"


def test_a_plain_url_at_a_cluster_node_is_one_line_not_a_traceback(
    local_cluster: LocalCluster, cluster_redis: redis_lib.Redis
) -> None:
    slot = cluster_redis.keyslot(keys.registry())  # type: ignore[attr-defined]
    owner = cluster_redis.nodes_manager.get_node_from_slot(slot).name  # type: ignore[attr-defined]
    other = next(n for n in local_cluster.nodes if f"127.0.0.1:{n.port}" != owner)
    code, out, err = run_cli("metrics", "list", "--redis-url", other.url)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("ldptel: error: ") and "MOVED" in err, err
    assert "is a Redis Cluster node" in err and "redis+cluster://" in err


def test_the_appender_follows_moved_when_a_slot_changes_owner(
    local_cluster: LocalCluster, cluster_redis: redis_lib.Redis
) -> None:
    """Resharding: a shard's slot moves to another primary (CLUSTER SETSLOT ... NODE) after the appender
    cached the slot map; the append gets MOVED, follows it, and the batch lands on the new owner."""
    appender = BatchAppender(cluster_redis)
    stream = keys.held("moving", 0)
    slot = cluster_redis.keyslot(stream)  # type: ignore[attr-defined]
    nodes = cluster_redis.nodes_manager  # type: ignore[attr-defined]
    source = nodes.get_node_from_slot(slot)
    target = next(n for n in cluster_redis.get_primaries() if n.name != source.name)  # type: ignore[attr-defined]
    kwargs = {"metric": "moving", "shards": 1, "version": 1, "n": 1, "data": b"x", "day": utc_day(), "dedupe_days": 1}
    assert not appender.append(batch_id=b"a" * 16, **kwargs).duplicate  # type: ignore[arg-type]
    cluster_redis.delete(stream, keys.seen("moving", 0, (b"a" * 16).hex()))  # an empty slot moves at once
    ids = {n.name: n.redis_connection.execute_command("CLUSTER", "MYID").decode() for n in (source, target)}
    for node in cluster_redis.get_primaries():  # type: ignore[attr-defined]
        node.redis_connection.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[target.name])
    try:
        assert not appender.append(batch_id=b"b" * 16, **kwargs).duplicate  # type: ignore[arg-type]
        assert target.redis_connection.xlen(stream) == 1  # written where the slot now lives
        assert appender.append(batch_id=b"b" * 16, **kwargs).duplicate  # type: ignore[arg-type]
    finally:
        cluster_redis.delete(stream, keys.seen("moving", 0, (b"b" * 16).hex()))
        for node in cluster_redis.get_primaries():  # type: ignore[attr-defined]
            node.redis_connection.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[source.name])
        appender.close()


def test_a_metric_grows_its_shard_count_without_double_counting_retries(
    local_cluster: LocalCluster, cluster_redis: redis_lib.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 → 6 shards: new batches spread over all six (and the primaries they live on); a retry of a batch
    accepted before the growth is still a duplicate although its id now maps to another shard; the fold and
    the estimate count every shard, each report once."""
    monkeypatch.setenv("LDPTEL_REDIS_URL", local_cluster.url)
    assert run_cli("metrics", "create", "flag", "--mechanism", "rr", "--epsilon", "1", "--shards", "2")[0] == 0
    app = create_app(ServerConfig(app_tokens=frozenset({APP_TOKEN}), admin_token=ADMIN_TOKEN,
                                  redis_url=local_cluster.url, rate_limit=None, registry_ttl=0))
    http = app.test_client()
    rng = np.random.default_rng(5)

    def post(data: bytes) -> bool:
        resp = http.post("/v1/reports", data=data, content_type="application/octet-stream",
                         headers={"Authorization": f"Bearer {APP_TOKEN}"})
        assert resp.status_code == 202, resp.get_data(as_text=True)
        return bool(resp.get_json()["duplicate"])

    def batches(count: int) -> list[bytes]:
        spec = registry.get_metric(cluster_redis, "flag").current
        out = []
        for _ in range(count):
            batch = privatize_batch(list(rng.random(100) < 0.5), spec.params, rng=rng)
            out.append(encode_batch(metric="flag", version=spec.version, batch_id=rng.bytes(16), batch=batch,
                                    params=spec.params))
        return out

    before = batches(30)
    assert not any(post(data) for data in before)
    code, out, err = run_cli("metrics", "grow", "flag", "--shards", "6", "--format", "json")
    assert code == 0, err
    grown = registry.get_metric(cluster_redis, "flag")
    assert grown.shards == 6
    assert [count for count, _ in grown.resharded] == [2] and grown.resharded[0][1] % 86_400 == 0  # only its day
    assert all(post(data) for data in before)  # retries of pre-growth batches: still duplicates
    after = batches(30)
    assert not any(post(data) for data in after)
    app.extensions["ldptel"].close()
    lengths = [cluster_redis.xlen(keys.held("flag", s)) for s in range(6)]
    assert sum(lengths) == 60 and sum(lengths[2:]) > 0  # the new shards took new batches
    assert len(_owners(cluster_redis, "flag", 6)) == 3

    code, out, err = run_cli("aggregate", "--once")
    assert code == 0, err
    assert json.loads(out)["reports"] == 6000
    code, out, err = run_cli("estimate", "flag", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["n"] == 6000
    assert run_cli("metrics", "grow", "flag", "--shards", "3")[2].startswith("ldptel: error: metric 'flag' has 6 shards")


def test_the_raw_path_follows_ask_while_a_slot_migrates(local_cluster: LocalCluster, cluster_redis: redis_lib.Redis) -> None:
    """A slot MIGRATING from its owner and IMPORTING on another primary, the key not on the owner: the owner
    answers ASK, and the command is sent to the importing node after ASKING (and lands there)."""
    appender = BatchAppender(cluster_redis)
    key = keys.ready_probe("ask-test")
    slot = cluster_redis.keyslot(key)  # type: ignore[attr-defined]
    source = cluster_redis.nodes_manager.get_node_from_slot(slot)  # type: ignore[attr-defined]
    target = next(n for n in cluster_redis.get_primaries() if n.name != source.name)  # type: ignore[attr-defined]
    ids = {n.name: n.redis_connection.execute_command("CLUSTER", "MYID").decode() for n in (source, target)}
    target.redis_connection.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source.name])
    source.redis_connection.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target.name])
    try:
        conn, reply = appender._routed(key, b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$2\r\nok\r\n" % (len(key), key.encode()),
                                       lambda c: c.reply())
        appender._checkin(conn)
        assert reply == b"OK"
        pipe = target.redis_connection.pipeline(transaction=False)  # ASKING holds for the next command only
        pipe.execute_command("ASKING")
        pipe.get(key)
        assert pipe.execute()[1] == b"ok"  # it is on the importing node
        with pytest.raises(redis_lib.exceptions.AskError):  # not on the migrating owner: it redirects
            source.redis_connection.exists(key)
    finally:
        pipe = target.redis_connection.pipeline(transaction=False)
        pipe.execute_command("ASKING")
        pipe.delete(key)
        pipe.execute()
        for node in (source, target):
            node.redis_connection.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[source.name])
        appender.close()


def test_a_plain_url_at_a_cluster_node_is_not_ready_and_says_why(
    local_cluster: LocalCluster, cluster_redis: redis_lib.Redis
) -> None:
    """The node chosen serves the probe key's slot, so a probe write alone would succeed there; yet it would
    only take the batches of its own slots. /readyz is 503, and an append elsewhere names the fix."""
    owner = cluster_redis.nodes_manager.get_node_from_slot(cluster_redis.keyslot(keys.ready_probe()))  # type: ignore[attr-defined]
    node = next(n for n in local_cluster.nodes if f"127.0.0.1:{n.port}" == owner.name)
    app = create_app(ServerConfig(app_tokens=frozenset({APP_TOKEN}), admin_token=ADMIN_TOKEN, redis_url=node.url,
                                  rate_limit=None))
    assert app.test_client().get("/readyz").status_code == 503
    appender = app.extensions["ldptel"].appender
    nodes = cluster_redis.nodes_manager  # type: ignore[attr-defined]
    elsewhere = next(s for s in range(64)
                     if nodes.get_node_from_slot(cluster_redis.keyslot(keys.stream("m", s))).name != owner.name)  # type: ignore[attr-defined]
    bid = next(bytes([b]) * 16 for b in range(256) if keys.shard_for(bytes([b]) * 16, 64) == elsewhere)
    with pytest.raises(PlainUrlAtClusterError, match="redis\\+cluster://"):
        appender.append(metric="m", shards=64, batch_id=bid, version=1, n=1, data=b"x", day=utc_day(), dedupe_days=1)
    app.extensions["ldptel"].close()


def test_the_unpropagated_coordination_scripts_work_on_a_cluster(
    local_cluster: LocalCluster, cluster_redis: redis_lib.Redis
) -> None:
    """The readiness probe (one key per primary, no expiry), leases, heartbeats and the per-token rate limit
    are scripts with ``redis.set_repl(REPL_NONE)``, each about one key: every one runs where its slot lives."""
    app = create_app(ServerConfig(app_tokens=frozenset({APP_TOKEN}), admin_token=ADMIN_TOKEN,
                                  redis_url=local_cluster.url, rate_limit=None))
    assert app.test_client().get("/readyz").status_code == 200
    app.extensions["ldptel"].close()
    for node in cluster_redis.get_primaries():  # type: ignore[attr-defined]
        probes = list(node.redis_connection.scan_iter(match="*ready-probe"))
        assert len(probes) == 1 and node.redis_connection.pttl(probes[0]) == -1  # one per primary, no expiry

    leases = Leases(cluster_redis, owner="w1", ttl_seconds=5)
    rival = Leases(cluster_redis, owner="w2", ttl_seconds=5)
    assert leases.claim("m", 0) and not rival.claim("m", 0) and leases.renew("m", 0) and not rival.renew("m", 0)
    leases.heartbeat()
    rival.heartbeat()
    assert leases.live_workers() == 2
    leases.release("m", 0)
    assert rival.claim("m", 0)
    rival.leave()
    assert leases.live_workers() == 1

    limiter = TokenRateLimiter(cluster_redis, rate=0.001, burst=2)
    assert [limiter.acquire(b"\x01" * 32) for _ in range(2)] == [0.0, 0.0]
    assert limiter.acquire(b"\x01" * 32) > 0 and limiter.acquire(b"\x02" * 32) == 0.0  # per token
