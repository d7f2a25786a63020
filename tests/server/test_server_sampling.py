"""A metric's sample_rate over HTTP: created, served to devices (schema-checked against the OpenAPI document),
validated with a 400 naming the field, and a change of it is a new version."""

from __future__ import annotations

from ldptel.client import MetricSpec, RrParams


def test_sample_rate_is_created_served_and_validated(api) -> None:  # type: ignore[no-untyped-def]
    spec = MetricSpec(name="s.rr", params=RrParams(epsilon=1.0), sample_rate=0.05)
    assert api.create(spec).status_code == 201
    served = api.app("GET", "/v1/metrics/s.rr").json["current"]
    assert served["sample_rate"] == 0.05 and MetricSpec.from_dict(served) == spec
    again = api.create(MetricSpec(name="s.rr", params=RrParams(epsilon=1.0), sample_rate=0.5))
    assert again.status_code in (200, 201) and again.json["current_version"] == 2
    for bad in (0, 1.5, "x", True):
        resp = api.create(MetricSpec(name="s.bad", params=RrParams(epsilon=1.0)), sample_rate=bad)
        assert resp.status_code == 400 and resp.json["parameter"] == "sample_rate", resp.json
    assert api.app("GET", "/v1/metrics/s.bad").status_code == 404
