"""The WSGI fast path of POST /v1/reports (server/fastpath.py) against the Flask route it stands in for."""

from __future__ import annotations

import io
import json
from typing import Any

from flask import Flask

from ldptel.client.protocol.wire import decode_header
from ldptel.server import ServerConfig, create_app
from ldptel.server.fastpath import FastIngest
from tests.server.srv_helpers import OCTET, cms_spec, make_batch, make_json_batch, snapshot, stream_entries


def _app(redis_url: str, app_token: str, admin_token: str, **overrides: object) -> Flask:
    settings: dict[str, object] = {"rate_limit": None, **overrides}
    config = ServerConfig(app_tokens=frozenset({app_token}), admin_token=admin_token, redis_url=redis_url, **settings)  # type: ignore[arg-type]
    return create_app(config)


def _flask_requests(app: Flask) -> list[str]:
    """Paths of the requests that reached Flask (the fast path never creates a request context)."""
    seen: list[str] = []

    @app.before_request
    def _count() -> None:
        from flask import request

        seen.append(request.path)

    return seen


def _chain(app: Any) -> list[Any]:
    """The app's WSGI middlewares, outermost first (each keeps the next as ``wsgi_app``)."""
    layers, layer = [], app.wsgi_app
    while layer is not None and not hasattr(layer, "__self__"):  # down to Flask's own bound wsgi_app
        layers.append(layer)
        layer = getattr(layer, "wsgi_app", None)
    return layers


def _without_fast_path(app: Any) -> None:
    """Unlink FastIngest from the middleware chain: requests reach the Flask route alone."""
    layers = _chain(app)
    i = next(i for i, layer in enumerate(layers) if isinstance(layer, FastIngest))
    if i == 0:
        app.wsgi_app = layers[0].wsgi_app
    else:
        layers[i - 1].wsgi_app = layers[i].wsgi_app


def test_valid_binary_batches_skip_flask_and_everything_else_reaches_it(redis, rng, redis_url, app_token, admin_token) -> None:  # type: ignore[no-untyped-def]
    app = _app(redis_url, app_token, admin_token)
    assert any(isinstance(layer, FastIngest) for layer in _chain(app))
    reached = _flask_requests(app)
    client = app.test_client()
    spec = cms_spec()
    assert client.post("/v1/metrics", json=spec.to_dict(), headers={"Authorization": f"Bearer {admin_token}"}).status_code == 201
    assert reached == ["/v1/metrics"]
    reached.clear()
    headers = {"Authorization": f"Bearer {app_token}"}
    good, bid = make_batch(spec, 20, rng)
    response = client.post("/v1/reports", data=good, content_type=OCTET, headers=headers)
    assert response.status_code == 202 and response.json["batch_id"] == bid.hex()
    assert reached == []  # answered by the fast path
    assert client.post("/v1/reports", data=good, content_type=OCTET, headers=headers).json["duplicate"] is True
    assert reached == []
    # the JSON form, a bad batch, a wrong token and an admin token all go to the Flask routes
    assert client.post("/v1/reports", json=make_json_batch(spec, 3, rng), headers=headers).status_code == 202
    assert client.post("/v1/reports", data=good[:-1], content_type=OCTET, headers=headers).status_code == 400
    assert client.post("/v1/reports", data=good, content_type=OCTET, headers={"Authorization": "Bearer " + "x" * 20}).status_code == 401
    assert client.post("/v1/reports", data=good, content_type=OCTET, headers={"Authorization": f"Bearer {admin_token}"}).status_code == 403
    assert reached == ["/v1/reports"] * 4
    app.extensions["ldptel"].close()


def test_fast_path_and_flask_route_answer_and_store_the_same(redis, rng, redis_url, app_token, admin_token) -> None:  # type: ignore[no-untyped-def]
    fast = _app(redis_url, app_token, admin_token)
    plain = _app(redis_url, app_token, admin_token)
    _without_fast_path(plain)  # the Flask route alone
    assert not any(isinstance(layer, FastIngest) for layer in _chain(plain))
    spec = cms_spec()
    headers = {"Authorization": f"Bearer {app_token}"}
    assert fast.test_client().post("/v1/metrics", json=spec.to_dict(), headers={"Authorization": f"Bearer {admin_token}"}).status_code == 201
    answers = {}
    batches = {}
    for name, app in (("fast", fast), ("plain", plain)):
        data, bid = make_batch(spec, 50, rng)
        response = app.test_client().post("/v1/reports", data=data, content_type=OCTET, headers=headers)
        assert response.status_code == 202
        answers[name] = (response.status, response.content_type, response.json)
        batches[name] = (data, bid)
    for name in answers:
        status, content_type, body = answers[name]
        assert (status, content_type) == ("202 ACCEPTED", "application/json")
        assert body == {**answers["plain"][2], "batch_id": batches[name][1].hex()}
    stored = {decode_header(f[b"b"]).batch_id: f for _, _, f in stream_entries(redis, spec.name, 4)}
    for data, bid in batches.values():
        assert stored[bid][b"b"] == data and stored[bid][b"n"] == b"50" and stored[bid][b"v"] == b"1"
    # one dedupe for both paths: a retry on the other path is a duplicate and writes nothing
    before = snapshot(redis)
    for name, app in (("fast", plain), ("plain", fast)):
        data, _ = batches[name]
        retry = app.test_client().post("/v1/reports", data=data, content_type=OCTET, headers=headers)
        assert retry.status_code == 202 and retry.json["duplicate"] is True
    assert snapshot(redis) == before
    text = fast.test_client().get("/metrics", headers={"Authorization": f"Bearer {admin_token}"}).get_data(as_text=True)
    assert f'ldptel_reports_accepted_total{{metric="{spec.name}"}} 50' in text
    assert f'ldptel_batches_duplicate_total{{metric="{spec.name}"}} 1' in text
    assert 'ldptel_http_request_duration_seconds_count{endpoint="/v1/reports"} 2' in text
    for app in (fast, plain):
        app.extensions["ldptel"].close()


def test_a_request_takes_one_rate_limit_token_on_either_path(redis, rng, redis_url, app_token, admin_token) -> None:  # type: ignore[no-untyped-def]
    # The fast path takes the token; when it hands a request to Flask (here: a batch that does not decode),
    # Flask must reuse that result instead of taking a second token.
    app = _app(redis_url, app_token, admin_token, rate_limit=0.001, rate_burst=3)
    client = app.test_client()
    spec = cms_spec()
    assert client.post("/v1/metrics", json=spec.to_dict(), headers={"Authorization": f"Bearer {admin_token}"}).status_code == 201
    headers = {"Authorization": f"Bearer {app_token}"}
    good, _ = make_batch(spec, 5, rng)
    bad = good[:-1]
    statuses = [
        client.post("/v1/reports", data=body, content_type=OCTET, headers=headers).status_code
        for body in (bad, good, bad, good)
    ]
    assert statuses == [400, 202, 400, 429]
    limited = client.post("/v1/reports", data=make_batch(spec, 5, rng)[0], content_type=OCTET, headers=headers)
    assert limited.status_code == 429 and json.loads(limited.get_data())["error"] == "rate_limited"
    assert len(stream_entries(redis, spec.name, 4)) == 1
    app.extensions["ldptel"].close()


def test_odd_lengths_and_chunked_bodies_are_left_to_flask(redis, rng, redis_url, app_token, admin_token) -> None:  # type: ignore[no-untyped-def]
    """Found in review: a non-ASCII digit in Content-Length crashed the fast path (werkzeug passes it on),
    and with Transfer-Encoding the fast path read only Content-Length bytes of a longer body."""
    app = _app(redis_url, app_token, admin_token)
    reached = _flask_requests(app)
    client = app.test_client()
    spec = cms_spec()
    assert client.post("/v1/metrics", json=spec.to_dict(), headers={"Authorization": f"Bearer {admin_token}"}).status_code == 201
    reached.clear()
    good, _ = make_batch(spec, 5, rng)
    base = {"REQUEST_METHOD": "POST", "PATH_INFO": "/v1/reports", "CONTENT_TYPE": OCTET,
            "HTTP_AUTHORIZATION": f"Bearer {app_token}"}
    before = snapshot(redis)
    for extra in ({"CONTENT_LENGTH": "\u00b2"}, {"CONTENT_LENGTH": str(len(good) - 1), "HTTP_TRANSFER_ENCODING": "chunked"}):
        environ = {**base, **extra, "wsgi.input": io.BytesIO(good)}
        statuses: list[str] = []

        def start_response(status: str, headers: list, exc_info: object = None, statuses: list[str] = statuses) -> None:  # type: ignore[type-arg]
            statuses.append(status)

        body = b"".join(app.wsgi_app(_environ(environ), start_response))
        assert statuses and statuses[0].startswith("4"), (extra, statuses, body)
        assert json.loads(body)["error"]
    assert reached == ["/v1/reports"] * 2
    assert snapshot(redis) == before
    app.extensions["ldptel"].close()


def _environ(extra: dict[str, object]) -> dict[str, object]:
    from werkzeug.test import EnvironBuilder

    environ = EnvironBuilder(path="/v1/reports", method="POST").get_environ()
    environ.update(extra)
    return environ
