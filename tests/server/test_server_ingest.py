"""POST /v1/reports and the metric endpoints, through the real app on a real Redis."""

from __future__ import annotations

import json
import os
import secrets
import struct
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
import redis as redis_lib
from flask.testing import FlaskClient

from ldptel.client.protocol.wire import DEFAULT_RETRY_HORIZON_DAYS, decode_batch, decode_header
from ldptel.server import ServerConfig, create_app
from ldptel.storage import keys
from ldptel.storage.append import utc_day
from tests.server.schema_check import check_response
from tests.server.srv_helpers import (
    AUTH_JSON,
    OCTET,
    cms_spec,
    fill_to_maxmemory,
    grr_spec,
    lift_maxmemory,
    make_batch,
    make_json_batch,
    rr_spec,
    snapshot,
    stream_entries,
)


@pytest.fixture
def cms(api):  # type: ignore[no-untyped-def]
    spec = cms_spec()
    assert api.create(spec).status_code == 201
    return spec


# ---------------------------------------------------------------------------------------- acceptance
@pytest.mark.parametrize("make", [cms_spec, rr_spec, grr_spec])
def test_accepted_batch_is_one_stream_entry_with_the_exact_bytes(api, redis, rng, make) -> None:  # type: ignore[no-untyped-def]
    spec = make()
    assert api.create(spec).status_code == 201
    data, bid = make_batch(spec, 100, rng)
    response = api.post_batch(data)
    assert response.status_code == 202
    assert response.json == {
        "accepted": 100,
        "duplicate": False,
        "metric": spec.name,
        "version": 1,
        "batch_id": bid.hex(),
        "day": utc_day(),
    }
    entries = stream_entries(redis, spec.name, 4)
    assert len(entries) == 1
    shard, _, fields = entries[0]
    assert shard == keys.shard_for(bid, 4)
    assert fields == {b"d": utc_day().encode(), b"v": b"1", b"n": b"100", b"b": data}
    header, batch = decode_batch(fields[b"b"], spec.params)
    assert header.batch_id == bid and batch.n == 100
    # the dedupe key sits beside the stream (same hash tag) and expires at the end of today + the retry horizon + 1
    seen = keys.seen(spec.name, shard, bid.hex())
    assert redis.exists(seen) == 1
    today = datetime.strptime(utc_day(), "%Y-%m-%d").replace(tzinfo=UTC)
    end = today + timedelta(days=2 + DEFAULT_RETRY_HORIZON_DAYS)
    assert redis.execute_command("PEXPIRETIME", seen) == int(end.timestamp()) * 1000


def test_retries_are_acknowledged_but_appended_once(api, redis, rng, cms) -> None:  # type: ignore[no-untyped-def]
    batches = [make_batch(cms, 50, rng) for _ in range(20)]
    for data, _ in batches:
        assert api.post_batch(data).json["duplicate"] is False
    for data, _ in batches[::2]:  # client retries after lost acknowledgements
        response = api.post_batch(data)
        assert response.status_code == 202
        assert response.json["duplicate"] is True and response.json["accepted"] == 50
    entries = stream_entries(redis, cms.name, 4)
    got = sorted(decode_header(f[b"b"]).batch_id for _, _, f in entries)
    assert got == sorted(bid for _, bid in batches)
    assert {s for s, _, _ in entries} == {keys.shard_for(bid, 4) for _, bid in batches}


def test_json_form_is_stored_as_the_canonical_binary(api, redis, rng, cms) -> None:  # type: ignore[no-untyped-def]
    obj = make_json_batch(cms, 7, rng)
    response = api.post_batch(json.dumps(obj).encode(), content_type=AUTH_JSON)
    assert response.status_code == 202 and response.json["accepted"] == 7
    (_, _, fields), = stream_entries(redis, cms.name, 4)
    header, batch = decode_batch(fields[b"b"], cms.params)
    assert header.batch_id.hex() == obj["batch_id"]
    assert [r["bits"] for r in obj["reports"]] == [row.tobytes().hex() for row in batch.bits]
    # the same batch id in binary form is a duplicate of the JSON upload
    assert api.post_batch(json.dumps(obj).encode(), content_type=AUTH_JSON).json["duplicate"] is True


def test_new_version_moves_clients_and_old_version_gets_409_with_current_spec(api, redis, rng, cms) -> None:  # type: ignore[no-untyped-def]
    data_v1, _ = make_batch(cms, 10, rng)
    v2 = cms_spec(epsilon=2.0)
    response = api.create(v2)
    assert response.status_code == 201 and response.json["current_version"] == 2
    before = snapshot(redis)
    rejected = api.post_batch(data_v1)
    assert rejected.status_code == 409
    assert rejected.json["error"] == "version_conflict"
    assert rejected.json["current"] == v2.with_version(2).to_dict()
    assert snapshot(redis) == before
    data_v2, _ = make_batch(v2.with_version(2), 10, rng)
    assert api.post_batch(data_v2).status_code == 202
    (_, _, fields), = stream_entries(redis, cms.name, 4)
    assert fields[b"v"] == b"2"


def test_a_metadata_edit_keeps_the_version_and_queued_batches_are_accepted(api, rng, cms) -> None:  # type: ignore[no-untyped-def]
    """Regression: a new description made version 2, and batches of version 1 were then refused with 409."""
    data_v1, _ = make_batch(cms, 10, rng)
    response = api.create(replace(cms, description="feature usage, per device and day"))
    assert response.status_code == 200 and response.json["current_version"] == 1
    assert list(response.json["versions"]) == ["1"]
    assert api.post_batch(data_v1).status_code == 202
    edited = replace(cms, owner="growth", expires="2030-01-01", notes="n")
    response = api.create(edited)
    assert response.status_code == 200 and response.json["current"] == edited.to_dict()


def test_metric_endpoints(api, cms) -> None:  # type: ignore[no-untyped-def]
    listed = api.app("GET", "/v1/metrics")
    assert listed.status_code == 200
    assert [m["name"] for m in listed.json["metrics"]] == [cms.name]
    shown = api.app("GET", f"/v1/metrics/{cms.name}")
    assert shown.status_code == 200
    assert shown.json["current"] == cms.to_dict() and shown.json["shards"] == 4
    assert api.admin("GET", f"/v1/metrics/{cms.name}").status_code == 200
    again = api.create(cms)
    assert again.status_code == 200 and again.json == shown.json  # idempotent
    assert api.admin("GET", "/v1/metrics/nope").status_code == 404
    retired = api.admin("POST", f"/v1/metrics/{cms.name}/retire")
    assert retired.status_code == 200 and retired.json["status"] == "retired"
    assert api.admin("POST", "/v1/metrics/nope/retire").status_code == 404
    custom = api.create(cms_spec("other.metric"), shards=8)
    assert custom.status_code == 201 and custom.json["shards"] == 8
    conflict = api.create(cms_spec("other.metric", epsilon=1.0), shards=2)
    assert conflict.status_code == 409 and conflict.json["error"] == "registry_conflict"


def test_new_metrics_get_the_configured_shard_count(redis, redis_url, admin_token) -> None:  # type: ignore[no-untyped-def]
    """LDPTEL_SHARDS (ServerConfig.shards) is the shard count of a metric created without "shards"."""
    config = ServerConfig(app_tokens=frozenset({"test-ingest-token-0123456789abcdef"}), admin_token=admin_token, redis_url=redis_url, rate_limit=None, shards=8)
    app = create_app(config)
    admin = {"Authorization": f"Bearer {admin_token}"}
    created = app.test_client().post("/v1/metrics", json=cms_spec("sharded").to_dict(), headers=admin)
    assert created.status_code == 201 and created.json["shards"] == 8
    explicit = app.test_client().post("/v1/metrics", json={**cms_spec("two").to_dict(), "shards": 2}, headers=admin)
    assert explicit.status_code == 201 and explicit.json["shards"] == 2
    bad_name = app.test_client().post("/v1/metrics", json={**cms_spec("x").to_dict(), "name": "abc\n"}, headers=admin)
    assert bad_name.status_code == 400 and bad_name.json["parameter"] == "name"
    app.extensions["ldptel"].close()


def test_health_ready_metrics_openapi(api, rng, cms) -> None:  # type: ignore[no-untyped-def]
    assert api.request("GET", "/healthz").json == {"status": "ok"}
    assert api.request("GET", "/readyz").json == {"status": "ready"}
    data, _ = make_batch(cms, 30, rng)
    api.post_batch(data)
    api.post_batch(data)
    api.post_batch(data[:-1])
    text = api.admin("GET", "/metrics").get_data(as_text=True)
    assert f'ldptel_reports_accepted_total{{metric="{cms.name}"}} 30' in text
    assert f'ldptel_batches_duplicate_total{{metric="{cms.name}"}} 1' in text
    assert f'ldptel_reports_rejected_total{{metric="{cms.name}",reason="invalid_batch"}} 30' in text
    assert 'ldptel_http_request_duration_seconds_count{endpoint="/v1/reports"} 3' in text
    doc = api.request("GET", "/v1/openapi.json").json
    assert doc["openapi"].startswith("3.") and "/v1/reports" in doc["paths"]


def test_prometheus_metrics_are_for_operators_only(api, redis_url, admin_token, app_token) -> None:  # type: ignore[no-untyped-def]
    """/metrics shows live per-metric report counts: 401 without a token, 403 for an app token."""
    missing = api.request("GET", "/metrics")
    assert missing.status_code == 401 and "ldptel_" not in missing.get_data(as_text=True)
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert api.request("GET", "/metrics", token="z" * 40).status_code == 401
    assert api.app("GET", "/metrics").status_code == 403
    assert api.admin("GET", "/metrics").status_code == 200
    scrape = secrets.token_urlsafe(32)
    config = ServerConfig(app_tokens=frozenset({app_token}), admin_token=admin_token, metrics_token=scrape,
                          redis_url=redis_url, rate_limit=None)
    app = create_app(config)
    client = app.test_client()
    with_scrape = client.get("/metrics", headers={"Authorization": f"Bearer {scrape}"})
    assert with_scrape.status_code == 200 and "ldptel_http_requests_total" in with_scrape.get_data(as_text=True)
    assert client.get("/v1/metrics", headers={"Authorization": f"Bearer {scrape}"}).status_code == 403  # nothing else
    assert client.get("/metrics").status_code == 401
    app.extensions["ldptel"].close()


# ------------------------------------------------------------------------------------------ rejections
def _corrupt_row(data: bytes, offset: int) -> bytes:
    out = bytearray(data)
    out[offset : offset + 2] = struct.pack("<H", 0xFFFF)
    return bytes(out)


def _rejections(spec, rng, app_token, admin_token):  # type: ignore[no-untyped-def]
    """(name, request kwargs, status, error code) for every rejection path of the ingest API."""
    good, _ = make_batch(spec, 20, rng)
    header = decode_header(good)
    off = header.payload_offset
    other_name, _ = make_batch(cms_spec("not.registered"), 5, rng)
    old_version, _ = make_batch(spec, 5, rng, version=7)
    too_many, _ = make_batch(spec, 101, rng)
    app = {"Authorization": f"Bearer {app_token}"}
    admin = {"Authorization": f"Bearer {admin_token}"}
    post = {"method": "POST", "path": "/v1/reports"}
    j = make_json_batch(spec, 3, rng)
    bad_bits = dict(j, reports=[dict(j["reports"][0], bits="zz" * 128)])
    return [
        ("no token", dict(post, data=good, content_type=OCTET), 401, "unauthorized"),
        ("bad scheme", dict(post, data=good, content_type=OCTET, headers={"Authorization": "Basic eDp5"}), 401, "unauthorized"),
        ("unknown token", dict(post, data=good, content_type=OCTET, headers={"Authorization": "Bearer " + "x" * 30}), 401, "unauthorized"),
        ("admin token on ingest", dict(post, data=good, content_type=OCTET, headers=admin), 403, "forbidden"),
        ("app token on admin", dict(method="POST", path="/v1/metrics", json=spec.to_dict(), headers=app), 403, "forbidden"),
        ("app token retire", dict(method="POST", path=f"/v1/metrics/{spec.name}/retire", headers=app), 403, "forbidden"),
        ("wrong content type", dict(post, data=good, content_type="text/plain", headers=app), 415, "unsupported_media_type"),
        ("no content type", dict(post, data=good, headers=app), 415, "unsupported_media_type"),
        ("empty body", dict(post, data=b"", content_type=OCTET, headers=app), 400, "invalid_batch"),
        ("bad magic", dict(post, data=b"XXXX" + good[4:], content_type=OCTET, headers=app), 400, "invalid_batch"),
        ("truncated", dict(post, data=good[:-1], content_type=OCTET, headers=app), 400, "invalid_batch"),
        ("trailing byte", dict(post, data=good + b"\0", content_type=OCTET, headers=app), 400, "invalid_batch"),
        ("row out of range", dict(post, data=_corrupt_row(good, off), content_type=OCTET, headers=app), 400, "invalid_batch"),
        ("unknown metric", dict(post, data=other_name, content_type=OCTET, headers=app), 404, "unknown_metric"),
        ("unknown version", dict(post, data=old_version, content_type=OCTET, headers=app), 409, "version_conflict"),
        ("too many reports", dict(post, data=too_many, content_type=OCTET, headers=app), 413, "too_many_reports"),
        ("too many bytes", dict(post, data=b"\0" * 300_000, content_type=OCTET, headers=app), 413, "too_large"),
        ("json not json", dict(post, data=b"{nope", content_type=AUTH_JSON, headers=app), 400, "malformed_body"),
        ("json not object", dict(post, data=b"[1,2]", content_type=AUTH_JSON, headers=app), 400, "invalid_batch"),
        ("json bad bits", dict(post, data=json.dumps(bad_bits).encode(), content_type=AUTH_JSON, headers=app), 400, "invalid_batch"),
        ("json bad version type", dict(post, data=json.dumps(dict(j, version="1")).encode(), content_type=AUTH_JSON, headers=app), 400, "invalid_batch"),
        ("json unknown metric", dict(post, data=json.dumps(dict(j, metric="zz")).encode(), content_type=AUTH_JSON, headers=app), 404, "unknown_metric"),
        ("json too many", dict(post, data=json.dumps(dict(j, reports=[j["reports"][0]] * 101)).encode(), content_type=AUTH_JSON, headers=app), 413, "too_many_reports"),
        ("spec invalid", dict(method="POST", path="/v1/metrics", json={"name": "x", "params": {"mechanism": "cms", "epsilon": 99, "k": 4, "m": 64}}, headers=admin), 400, "invalid_spec"),
        ("spec not json", dict(method="POST", path="/v1/metrics", data=b"{", content_type=AUTH_JSON, headers=admin), 400, "malformed_body"),
        ("spec not object", dict(method="POST", path="/v1/metrics", json=[1], headers=admin), 400, "invalid_spec"),
        ("spec wrong type", dict(method="POST", path="/v1/metrics", data=b"{}", content_type="text/plain", headers=admin), 415, "unsupported_media_type"),
        ("spec unknown key", dict(method="POST", path="/v1/metrics", json={"name": "x", "params": {"mechanism": "rr", "epsilon": 1}, "colour": 1}, headers=admin), 400, "invalid_spec"),
        ("spec null shards", dict(method="POST", path="/v1/metrics", json={"name": "x", "params": {"mechanism": "rr", "epsilon": 1}, "shards": None}, headers=admin), 400, "invalid_spec"),
        ("unknown route", dict(method="GET", path="/v1/nothing", headers=app), 404, "not_found"),
        ("wrong method", dict(method="GET", path="/v1/reports", headers=app), 405, "method_not_allowed"),
        ("list without token", dict(method="GET", path="/v1/metrics"), 401, "unauthorized"),
    ]


def test_every_rejection_has_its_status_and_writes_nothing(redis, rng, redis_url, app_token, admin_token) -> None:  # type: ignore[no-untyped-def]
    config = ServerConfig(
        app_tokens=frozenset({app_token}),
        admin_token=admin_token,
        redis_url=redis_url,
        rate_limit=None,
        max_batch_reports=100,
        max_body_bytes=256 * 1024,
    )
    app = create_app(config)
    client: FlaskClient = app.test_client()
    spec = cms_spec()
    assert client.post("/v1/metrics", json=spec.to_dict(), headers={"Authorization": f"Bearer {admin_token}"}).status_code == 201
    data, _ = make_batch(spec, 10, rng)
    assert client.post("/v1/reports", data=data, content_type=OCTET, headers={"Authorization": f"Bearer {app_token}"}).status_code == 202
    before = snapshot(redis)
    assert before  # registry + stream + dedupe key
    cases = _rejections(spec, rng, app_token, admin_token)
    for name, kwargs, status, code in cases:
        kwargs = dict(kwargs)
        method, path = kwargs.pop("method"), kwargs.pop("path")
        response = client.open(path, method=method, **kwargs)
        assert (response.status_code, response.json["error"]) == (status, code), (name, response.json)
        assert response.json["message"]
        check_response(method, path, response.status_code, response.content_type, response.get_data())
        assert snapshot(redis) == before, f"{name} changed Redis"
    retired = client.post(f"/v1/metrics/{spec.name}/retire", headers={"Authorization": f"Bearer {admin_token}"})
    assert retired.status_code == 200
    before = snapshot(redis)
    response = client.post("/v1/reports", data=data, content_type=OCTET, headers={"Authorization": f"Bearer {app_token}"})
    assert response.status_code == 409 and response.json["error"] == "metric_retired"
    assert response.json["current"] == spec.to_dict()
    assert snapshot(redis) == before
    app.extensions["ldptel"].close()


def test_rate_limit_429_with_retry_after(redis, rng, redis_url, app_token, admin_token) -> None:  # type: ignore[no-untyped-def]
    app = create_app(
        ServerConfig(app_tokens=frozenset({app_token}), admin_token=admin_token, redis_url=redis_url, rate_limit=0.01, rate_burst=3)
    )
    client = app.test_client()
    headers = {"Authorization": f"Bearer {app_token}"}
    statuses = [client.get("/v1/metrics", headers=headers).status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]
    limited = client.get("/v1/metrics", headers=headers)
    assert limited.json["error"] == "rate_limited" and int(limited.headers["Retry-After"]) >= 1
    # other tokens have their own bucket
    assert client.get("/v1/metrics", headers={"Authorization": f"Bearer {admin_token}"}).status_code == 200
    before = snapshot(redis)
    data, _ = make_batch(cms_spec(), 5, rng)
    assert client.post("/v1/reports", data=data, content_type=OCTET, headers=headers).status_code == 429
    assert snapshot(redis) == before
    app.extensions["ldptel"].close()


def test_redis_unreachable_is_503_then_recovers(rng, tmp_path, app_token, admin_token) -> None:  # type: ignore[no-untyped-def]
    from ldptel.storage.embedded import EmbeddedRedis

    with EmbeddedRedis(data_dir=tmp_path / "redis") as server:
        app = create_app(ServerConfig(app_tokens=frozenset({app_token}), admin_token=admin_token, redis_url=server.url, rate_limit=None))
        client = app.test_client()
        spec = cms_spec()
        client.post("/v1/metrics", json=spec.to_dict(), headers={"Authorization": f"Bearer {admin_token}"})
        headers = {"Authorization": f"Bearer {app_token}"}
        acked = []
        data, bid = make_batch(spec, 10, rng)
        assert client.post("/v1/reports", data=data, content_type=OCTET, headers=headers).status_code == 202
        acked.append(bid)
        server.kill()
        data2, bid2 = make_batch(spec, 10, rng)
        down = client.post("/v1/reports", data=data2, content_type=OCTET, headers=headers)
        assert down.status_code == 503 and down.json["error"] == "redis_unavailable"
        assert down.headers["Retry-After"] == "1"
        check_response("POST", "/v1/reports", 503, down.content_type, down.get_data())
        assert client.get("/readyz").status_code == 503
        assert client.get("/healthz").status_code == 200
        server.start()
        assert client.get("/readyz").status_code == 200
        assert client.post("/v1/reports", data=data2, content_type=OCTET, headers=headers).status_code == 202
        acked.append(bid2)
        r = server.client()
        got = sorted(decode_header(f[b"b"]).batch_id for _, _, f in stream_entries(r, spec.name, 4))
        assert got == sorted(acked)
        r.close()
        app.extensions["ldptel"].close()


def test_logs_carry_no_identifiers_or_contents(api, rng, cms, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level("DEBUG")
    data, bid = make_batch(cms, 10, rng)
    api.request("POST", "/v1/reports", token=api.app_token, data=data, content_type=OCTET,
                headers={"User-Agent": "secret-agent/1.0", "X-Forwarded-For": "203.0.113.9"},
                environ_base={"REMOTE_ADDR": "198.51.100.7"})
    api.post_batch(data[:-1])
    text = "\n".join(record.getMessage() for record in caplog.records)
    for needle in ("secret-agent", "203.0.113.9", "198.51.100.7", bid.hex(), api.app_token):
        assert needle not in text


def test_large_batch_of_1000_cms_reports(api, redis, cms) -> None:  # type: ignore[no-untyped-def]
    data, _ = make_batch(cms, 1000, np.random.default_rng(7))
    assert len(data) > 100_000
    assert api.post_batch(data).json["accepted"] == 1000
    assert sum(int(f[b"n"]) for _, _, f in stream_entries(redis, cms.name, 4)) == 1000


def test_redis_client_is_injected(app) -> None:  # type: ignore[no-untyped-def]
    assert isinstance(app.extensions["redis"], redis_lib.Redis)
    assert os.path.basename(app.root_path) == "server"


def test_registry_changes_made_elsewhere_are_seen(redis, rng, redis_url, app_token) -> None:  # type: ignore[no-untyped-def]
    """Another process (CLI, another worker) changes the registry: a new version is usable at once (a cached
    record that would reject a batch is re-read first); a retirement is seen within registry_ttl."""
    from ldptel.storage.registry import create_metric, retire_metric

    app = create_app(ServerConfig(app_tokens=frozenset({app_token}), admin_token=secrets.token_urlsafe(32), redis_url=redis_url,
                                  rate_limit=None, registry_ttl=0.3))
    client = app.test_client()
    headers = {"Authorization": f"Bearer {app_token}"}
    create_metric(redis, cms_spec())
    data, _ = make_batch(cms_spec(), 5, rng)
    assert client.post("/v1/reports", data=data, content_type=OCTET, headers=headers).status_code == 202
    v2 = create_metric(redis, cms_spec(epsilon=1.5)).current
    data2, _ = make_batch(v2, 5, rng)
    assert client.post("/v1/reports", data=data2, content_type=OCTET, headers=headers).status_code == 202
    retire_metric(redis, "app.feature")
    import time

    time.sleep(0.35)
    before = snapshot(redis)
    data3, _ = make_batch(v2, 5, rng)
    response = client.post("/v1/reports", data=data3, content_type=OCTET, headers=headers)
    assert response.status_code == 409 and response.json["error"] == "metric_retired"
    assert snapshot(redis) == before
    app.extensions["ldptel"].close()


def test_readyz_is_503_while_redis_refuses_writes_at_maxmemory(rng, tmp_path, app_token, admin_token) -> None:  # type: ignore[no-untyped-def]
    from ldptel.storage.embedded import EmbeddedRedis

    with EmbeddedRedis(data_dir=tmp_path / "redis") as server:
        app = create_app(ServerConfig(app_tokens=frozenset({app_token}), admin_token=admin_token, redis_url=server.url, rate_limit=None))
        client = app.test_client()
        spec = cms_spec()
        assert client.post("/v1/metrics", json=spec.to_dict(), headers={"Authorization": f"Bearer {admin_token}"}).status_code == 201
        headers = {"Authorization": f"Bearer {app_token}"}
        assert client.get("/readyz").status_code == 200
        r = server.client()
        fill_to_maxmemory(r)
        data, _ = make_batch(spec, 10, rng)
        assert client.post("/v1/reports", data=data, content_type=OCTET, headers=headers).status_code == 503
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json["error"] == "redis_unavailable"
        check_response("GET", "/readyz", 503, ready.content_type, ready.get_data())
        assert client.get("/healthz").status_code == 200  # alive, not ready
        lift_maxmemory(r)
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json == {"status": "ready"}
        assert client.post("/v1/reports", data=data, content_type=OCTET, headers=headers).status_code == 202
        assert r.get(keys.ready_probe()) == b"1" and r.pttl(keys.ready_probe()) == -1  # a constant: no time kept
        r.close()
        app.extensions["ldptel"].close()
