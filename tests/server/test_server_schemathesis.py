"""Schemathesis against the running service: gunicorn (deploy/gunicorn.conf.py) on loopback, private Redis.

Schemathesis generates requests for every operation of the OpenAPI document (the one the server serves at
``/v1/openapi.json``: checked equal first) and sends them over HTTP to the live server; each response must
not be a 5xx and must conform to the document (status code, content type, headers and body schema). Each
operation is called with the token it needs (admin for registry changes, app otherwise); missing and wrong
tokens are covered by test_server_fuzz.py.

One check is off for two operations: "schema-valid data must be accepted". A batch's validity depends on
the registered spec it names (its m, k, version), and a new metric's on cross-field limits (k·m cells,
ε surviving probability rounding): JSON Schema cannot state either, so the document describes them and
the server answers 400/404/409 naming the problem; every other check runs on every operation. The schema is loaded from the same function the server uses
rather than with ``schemathesis.pytest.from_fixture``, whose lazy loader breaks on pytest 9.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import json
import urllib.request

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from ldptel.server.embedded import EmbeddedRedis
from ldptel.server.openapi import openapi_document
from test_server_http import ADMIN_TOKEN, APP_TOKEN, _free_port, _gunicorn, _stop, _wait_http

pytestmark = pytest.mark.slow


schema = schemathesis.openapi.from_dict(openapi_document())


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The root URL of a gunicorn ingest server that serves exactly the document the cases come from."""
    tmp = tmp_path_factory.mktemp("schemathesis")
    with EmbeddedRedis(data_dir=tmp / "redis") as server:
        port = _free_port()
        log = tmp / "gunicorn.log"
        proc = _gunicorn(port, server.url, log)
        try:
            _wait_http(port, proc, log)
            url = f"http://127.0.0.1:{port}"
            with urllib.request.urlopen(f"{url}/v1/openapi.json", timeout=10) as response:
                assert json.load(response) == json.loads(json.dumps(openapi_document()))
            yield url
        finally:
            _stop(proc)
        text = Path(log).read_text()
        assert "Traceback" not in text, text[-3000:]


@schema.parametrize()
@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_every_operation_conforms_and_never_5xx(case: schemathesis.Case, base_url: str) -> None:
    admin = case.method.upper() in ("POST", "PUT", "DELETE") and case.path.startswith("/v1/metrics")
    token = ADMIN_TOKEN if admin else APP_TOKEN
    cross_field = case.method.upper() == "POST" and case.path in ("/v1/metrics", "/v1/reports")
    case.call_and_validate(
        base_url=base_url,
        headers={"Authorization": f"Bearer {token}"},
        excluded_checks=[positive_data_acceptance] if cross_field else None,
        timeout=10,
    )
