"""Issue 22 §3 over HTTP: ``POST /v1/metrics`` refuses a spec beyond the default device PrivacyPolicy (422, the
limit and the allowed value, nothing written) unless the body says ``"allow_above_default_policy": true``.
The same check as ``ldptel metrics create|plan|apply`` (tests/aggregator/test_cli_default_policy.py)."""

from __future__ import annotations

import pytest

from ldptel.client import MetricSpec, RrParams
from ldptel.client.mechanisms.daily_mean import DailyMeanParams
from ldptel.storage import keys


@pytest.mark.parametrize(("spec", "limit", "allowed"), [
    (MetricSpec(name="wide", params=RrParams(epsilon=6.0)), "report_epsilon", 4.0),
    (MetricSpec(name="wide", params=RrParams(epsilon=2.0), reports_per_day=4), "daily_epsilon", 8.0),
    (MetricSpec(name="wide", params=DailyMeanParams(epsilon=4.0, lo=0.0, hi=60.0)), "longitudinal_epsilon", 8.0),
])
def test_a_spec_beyond_the_default_policy_is_refused_and_nothing_is_written(api, redis, spec, limit, allowed) -> None:  # type: ignore[no-untyped-def]
    response = api.create(spec)
    assert response.status_code == 422
    body = response.get_json()
    assert body["error"] == "above_default_policy" and body["parameter"] == limit and "'wide'" in body["message"]
    assert body["allowed"] == f"at most {allowed:g}" and float(body["received"]) > allowed
    assert limit in body["message"] and "\n" not in body["message"]
    assert redis.hlen(keys.registry()) == 0
    assert api.admin("GET", "/v1/metrics").get_json()["metrics"] == []


def test_the_explicit_override_registers_it(api, redis) -> None:  # type: ignore[no-untyped-def]
    spec = MetricSpec(name="wide", params=RrParams(epsilon=6.0))
    assert api.create(spec, allow_above_default_policy=True).status_code == 201
    assert api.admin("GET", "/v1/metrics/wide").get_json()["current"]["params"]["epsilon"] == 6.0
    assert api.create(spec, allow_above_default_policy=False).status_code == 422  # a later write is checked too
    response = api.create(spec, allow_above_default_policy="yes")
    assert response.status_code == 400 and response.get_json()["parameter"] == "allow_above_default_policy"
    assert api.create(MetricSpec(name="fine", params=RrParams(epsilon=1.0))).status_code == 201


def test_a_new_version_past_the_lifetime_cap_of_earlier_versions_is_refused(api) -> None:  # type: ignore[no-untyped-def]
    for eps in (1.0, 2.0):
        assert api.create(MetricSpec(name="flag", params=RrParams(epsilon=eps))).status_code == 201
    response = api.create(MetricSpec(name="flag", params=RrParams(epsilon=3.0)))
    assert response.status_code == 422 and response.get_json()["parameter"] == "longitudinal_epsilon"
    assert api.admin("GET", "/v1/metrics/flag").get_json()["current_version"] == 2
