"""Schemathesis against the running service: gunicorn (deploy/gunicorn.conf.py) on loopback, private Redis.

Run by ``tests/server/test_server_schemathesis.py`` in a pytest of its own (this file's name is not collected by the
suite): ``python -m pytest -p schemathesis tests/server/schemathesis_cases.py`` runs it by hand. Schemathesis builds
its cases when pytest collects them, so collected with the suite every xdist worker would load schemathesis and
build them, to run them in one; the suite loads no schemathesis (``-p no:schemathesis`` in pyproject.toml).

Schemathesis generates requests for every operation of the OpenAPI document (the one the server serves at
``/v1/openapi.json``: checked equal first) and sends them over HTTP to the live server; each response must
not be a 5xx and must conform to the document (status code, content type, headers and body schema). Each
operation is called with the token it needs (admin for registry changes, app otherwise); missing and wrong
tokens are covered by test_server_fuzz.py.

Schemathesis's "schema-valid data must be accepted" check is replaced by a precise one for two operations:
- POST /v1/metrics: a schema-valid spec may only be refused (400) for the cross-field limits the document
  describes but JSON Schema cannot state (k·m cells, prob_bits against ε, a GRR domain against ε).
- POST /v1/reports: a batch's validity depends on the registered spec it names (m, k, version), which no
  schema of the request can know; random bodies are never valid batches, so explicit cases below send real
  batches and their 202 bodies are validated against the document.

The schema is loaded from the same function the server uses rather than with
``schemathesis.pytest.from_fixture``, whose lazy loader breaks on pytest 9.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from ldptel.server.openapi import openapi_document
from ldptel.storage.embedded import EmbeddedRedis
from tests.server.schema_check import SchemaViolation, validate
from tests.server.srv_helpers import OCTET, cms_spec, grr_spec, make_batch, rr_spec
from tests.server.test_server_http import ADMIN_TOKEN, APP_TOKEN, _free_port, _gunicorn, _stop, _wait_http

pytestmark = pytest.mark.slow

schema = schemathesis.openapi.from_dict(openapi_document())
NEW_METRIC = {"$ref": "#/components/schemas/NewMetric"}
CROSS_FIELD = {"k*m", "k*max_bytes", "k*max_bytes*m", "prob_bits", "epsilon"}  # what a schema-valid spec may still be refused for
CROSS_FIELD |= {"hi", "hi - lo", "edges", "window"}  # numeric metrics: hi > lo (by 1e-12), increasing edges, a window ε survives
CROSS_FIELD |= {"breakdown"}  # breakdowns: dimensions the registry's profile schema declares (registry state)
# a metric aggregated on the device (event-count, ...) sends one report per period: reports_per_day 1 (a schema-valid
# body with reports_per_day 2 for it drew a 400 in a run of the session-3 tree; which bodies are drawn follows the schema)
CROSS_FIELD |= {"reports_per_day"}


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


def _auth(method: str, path: str) -> dict[str, str]:
    admin = method.upper() == "POST" and path.startswith("/v1/metrics")
    return {"Authorization": f"Bearer {ADMIN_TOKEN if admin else APP_TOKEN}"}


def _schema_valid(body: object) -> bool:
    try:
        validate(body, NEW_METRIC)
    except SchemaViolation:
        return False
    return True


@schema.parametrize()
@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_every_operation_conforms_and_never_5xx(case: schemathesis.Case, base_url: str) -> None:
    post = case.method.upper() == "POST"
    special = post and case.path in ("/v1/metrics", "/v1/reports")
    response = case.call_and_validate(
        base_url=base_url,
        headers=_auth(case.method, case.path),
        excluded_checks=[positive_data_acceptance] if special else None,
        timeout=10,
    )
    if post and case.path == "/v1/metrics" and response.status_code == 400 and _schema_valid(case.body):
        assert json.loads(response.content)["parameter"] in CROSS_FIELD, (case.body, response.content)


@pytest.mark.parametrize("make_spec", [cms_spec, rr_spec, grr_spec], ids=["cms", "rr", "grr"])
def test_valid_specs_and_batches_are_accepted_and_conform(make_spec, base_url: str) -> None:  # type: ignore[no-untyped-def]
    spec = make_spec()
    create = schema["/v1/metrics"]["POST"].Case(body=spec.to_dict(), media_type="application/json")
    created = create.call_and_validate(base_url=base_url, headers=_auth("POST", "/v1/metrics"), timeout=10)
    assert created.status_code in (200, 201)
    show = schema["/v1/metrics/{name}"]["GET"].Case(path_parameters={"name": spec.name})
    shown = show.call_and_validate(base_url=base_url, headers=_auth("GET", "/v1/metrics"), timeout=10)
    assert shown.status_code == 200 and json.loads(shown.content)["current"]["name"] == spec.name
    data, batch_id = make_batch(spec, 25, np.random.default_rng(7))
    post = schema["/v1/reports"]["POST"].Case(body=data, media_type=OCTET)
    for duplicate in (False, True):  # the retry is acknowledged again, as a duplicate
        accepted = post.call_and_validate(base_url=base_url, headers=_auth("POST", "/v1/reports"), timeout=10)
        assert accepted.status_code == 202
        body = json.loads(accepted.content)
        assert (body["accepted"], body["duplicate"], body["batch_id"]) == (25, duplicate, batch_id.hex())
