"""Property-based fuzzing of paths, methods, headers and bodies: the app never answers 5xx, and every
response matches the OpenAPI document. Every string a client controls (JSON keys and values, headers, the
metric name in a path) may hold lone surrogates: escaped (``"\\ud800"``), raw (``ED A0 80``) or
percent-encoded."""

from __future__ import annotations

import json
from urllib.parse import quote

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
lone_surrogate = st.characters(categories=["Cs"])  # U+D800..U+DFFF, which st.text() never draws


def with_surrogates(chars: st.SearchStrategy[str], max_size: int) -> st.SearchStrategy[str]:
    """Strings of ``chars`` with at least one lone surrogate somewhere."""
    part = st.text(chars, max_size=max_size // 2)
    return st.tuples(part, lone_surrogate, part).map("".join)


def hostile_text(max_size: int) -> st.SearchStrategy[str]:
    return st.text(max_size=max_size) | with_surrogates(st.characters(), max_size)


_header_chars = st.characters(min_codepoint=32, max_codepoint=126)
header_text = st.text(_header_chars, max_size=60) | with_surrogates(_header_chars, 60)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | hostile_text(20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(hostile_text(10), inner, max_size=5),
    max_leaves=20,
)


def json_body(obj: object, raw: bool) -> bytes:
    """``obj`` as JSON with surrogates escaped (``\\ud800``), or written as raw (invalid) UTF-8 bytes."""
    if raw:
        return json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return json.dumps(obj).encode()


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
        st.tuples(st.sampled_from(["/v1/metrics/", "/v1/metrics/app.flag"]), hostile_text(20), st.sampled_from(["", "/retire"]))
        .map(lambda t: t[0] + quote(t[1].encode("utf-8", "surrogatepass"), safe="") + t[2]),
    ),
    token=st.sampled_from([None, "app", "admin", "bogus", "surrogate"]),
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
    elif token == "surrogate":
        headers["Authorization"] = "Bearer " + "z" * 31 + "\ud800"
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
    if data.draw(st.booleans()):  # the registered name with a lone surrogate in it
        cut = data.draw(st.integers(0, len(name)))
        obj["metric"] = name[:cut] + data.draw(lone_surrogate) + name[cut:]
    raw = data.draw(st.booleans())
    response = _send(api, "POST", "/v1/reports", data=json_body(obj, raw), content_type=AUTH_JSON,
                     headers={"Authorization": f"Bearer {api.app_token}"})
    assert response.status_code in (202, 400, 404, 409, 413)
    spec = data.draw(st.dictionaries(st.sampled_from(["name", "params", "reports_per_day", "description", "shards", "version"]), json_values, max_size=5))
    if data.draw(st.booleans()):
        spec["params"] = data.draw(st.dictionaries(st.sampled_from(["mechanism", "epsilon", "k", "m", "domain", "prob_bits", "hash_seed"]),
                                                   json_values | st.sampled_from(["cms", "rr", "grr", "hcms", "oue-cms"]), max_size=6))
    response = _send(api, "POST", "/v1/metrics", data=json_body(spec, raw), content_type=AUTH_JSON,
                     headers={"Authorization": f"Bearer {api.admin_token}"})
    assert response.status_code in (200, 201, 400, 409)


@pytest.mark.parametrize("body", [
    b'{"metric": "\\ud800", "version": 1, "reports": []}',  # the escaped lone surrogate of issue 13
    b'{"metric": "app.flag\\udfff", "version": 1, "reports": []}',
    b'{"metric": "app.flag", "version": 1, "reports": [], "\\ud800": 1}',
    '{"metric": "\ud800", "version": 1, "reports": []}'.encode("utf-8", "surrogatepass"),  # raw ED A0 80
])
def test_lone_surrogates_in_a_json_batch_are_a_400(api, registered, body: bytes) -> None:  # type: ignore[no-untyped-def]
    response = _send(api, "POST", "/v1/reports", data=body, content_type=AUTH_JSON,
                     headers={"Authorization": f"Bearer {api.app_token}"})
    assert response.status_code == 400 and response.json["error"] == "malformed_body"
    paired = '{"metric": "app.flag", "version": 1, "reports": [], "note": "\\ud83d\\ude00"}'  # a valid pair is fine
    response = _send(api, "POST", "/v1/reports", data=paired.encode(), content_type=AUTH_JSON,
                     headers={"Authorization": f"Bearer {api.app_token}"})
    assert response.status_code != 500 and response.json["error"] != "malformed_body"


def test_a_lone_surrogate_in_the_bearer_token_is_a_401(api) -> None:  # type: ignore[no-untyped-def]
    response = _send(api, "POST", "/v1/reports", data=b"{}", content_type=AUTH_JSON,
                     headers={"Authorization": "Bearer " + "z" * 31 + "\ud800"})
    assert response.status_code == 401
