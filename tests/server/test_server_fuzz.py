"""Property-based fuzzing of paths, methods, headers and bodies: the app never answers 5xx, and every
response matches the OpenAPI document."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldptel.client.protocol.wire import decode_header
from tests.server.schema_check import check_response
from tests.server.srv_helpers import AUTH_JSON, OCTET, cms_spec, grr_spec, make_batch, make_json_batch, rr_spec

pytestmark = pytest.mark.slow

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
header_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=60)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20,
)


@pytest.fixture
def registered(api):  # type: ignore[no-untyped-def]
    specs = [cms_spec(m=64, k=4), rr_spec(), grr_spec()]
    for spec in specs:
        assert api.create(spec).status_code == 201
    rng = np.random.default_rng(0)
    return {spec.name: (spec, make_batch(spec, 16, rng)[0], make_json_batch(spec, 3, rng)) for spec in specs}


def _send(api, method: str, path: str, **kwargs):  # type: ignore[no-untyped-def]
    response = api.client.open(path, method=method, **kwargs)
    assert response.status_code < 500, (method, path, response.get_data()[:300])
    check_response(method, path, response.status_code, response.content_type, response.get_data())
    return response


@FUZZ
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]),
    path=st.one_of(
        st.sampled_from(["/v1/reports", "/v1/metrics", "/v1/metrics/app.flag", "/v1/metrics/app.flag/retire",
                         "/healthz", "/readyz", "/metrics", "/v1/openapi.json"]),
        st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="?#%"), max_size=40).map(lambda s: "/" + s),
    ),
    token=st.sampled_from([None, "app", "admin", "bogus"]),
    content_type=st.one_of(st.none(), st.sampled_from([OCTET, AUTH_JSON, "text/plain", "multipart/form-data"]), header_text),
    extra=st.dictionaries(st.sampled_from(["X-Forwarded-For", "User-Agent", "Accept", "Authorization", "Content-Encoding"]), header_text, max_size=3),
    body=st.binary(max_size=400),
)
def test_random_requests_never_5xx(api, registered, method, path, token, content_type, extra, body) -> None:  # type: ignore[no-untyped-def]
    headers = dict(extra)
    if token == "app":
        headers["Authorization"] = f"Bearer {api.app_token}"
    elif token == "admin":
        headers["Authorization"] = f"Bearer {api.admin_token}"
    elif token == "bogus":
        headers["Authorization"] = "Bearer " + "z" * 32
    kwargs = {"headers": headers, "data": body}
    if content_type is not None:
        kwargs["content_type"] = content_type
    if method in ("HEAD", "OPTIONS"):
        response = api.client.open(path, method=method, **kwargs)
        assert response.status_code < 500
        return
    _send(api, method, path, **kwargs)


@FUZZ
@given(data=st.data())
def test_mutated_binary_batches_never_5xx(api, registered, data) -> None:  # type: ignore[no-untyped-def]
    name = data.draw(st.sampled_from(sorted(registered)))
    good = bytearray(registered[name][1])
    ops = data.draw(st.lists(st.tuples(st.sampled_from(["set", "cut", "add"]), st.integers(0, len(good) + 8), st.integers(0, 255)), min_size=1, max_size=4))
    for op, pos, byte in ops:
        if op == "set" and pos < len(good):
            good[pos] = byte
        elif op == "cut":
            del good[pos:]
        else:
            good[pos:pos] = bytes([byte])
    response = _send(api, "POST", "/v1/reports", data=bytes(good), content_type=OCTET,
                     headers={"Authorization": f"Bearer {api.app_token}"})
    assert response.status_code in (202, 400, 404, 409, 413)
    if response.status_code == 202:  # a mutation inside the privatized bits is still a valid batch
        assert response.json["batch_id"] == decode_header(bytes(good)).batch_id.hex()


@FUZZ
@given(data=st.data())
def test_fuzzed_json_batches_and_specs_never_5xx(api, registered, data) -> None:  # type: ignore[no-untyped-def]
    name = data.draw(st.sampled_from(sorted(registered)))
    obj = dict(registered[name][2])
    for key in data.draw(st.lists(st.sampled_from(["metric", "version", "batch_id", "mechanism", "reports", "format", "extra"]), max_size=3)):
        obj[key] = data.draw(json_values)
    response = _send(api, "POST", "/v1/reports", data=json.dumps(obj).encode(), content_type=AUTH_JSON,
                     headers={"Authorization": f"Bearer {api.app_token}"})
    assert response.status_code in (202, 400, 404, 409, 413)
    spec = data.draw(st.dictionaries(st.sampled_from(["name", "params", "reports_per_day", "description", "shards", "version"]), json_values, max_size=5))
    if data.draw(st.booleans()):
        spec["params"] = data.draw(st.dictionaries(st.sampled_from(["mechanism", "epsilon", "k", "m", "domain", "prob_bits", "hash_seed"]),
                                                   json_values | st.sampled_from(["cms", "rr", "grr", "hcms", "oue-cms"]), max_size=6))
    response = _send(api, "POST", "/v1/metrics", data=json.dumps(spec).encode(), content_type=AUTH_JSON,
                     headers={"Authorization": f"Bearer {api.admin_token}"})
    assert response.status_code in (200, 201, 400, 409)
