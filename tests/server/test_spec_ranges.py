"""The registry refuses specs the device could not privatize with (issue 22 §5): a mean or daily-mean range too
narrow for float64 scaling, numbers beyond float64. 400 naming the parameter, never 500, nothing written."""

from __future__ import annotations

import pytest

from tests.server.srv_helpers import snapshot

BAD = [
    ({"mechanism": "mean", "epsilon": 1.0, "lo": 0.0, "hi": 5e-324}, "hi - lo"),
    ({"mechanism": "mean", "epsilon": 1.0, "lo": 1.0, "hi": 1.0000000000000002}, "hi - lo"),
    ({"mechanism": "daily-mean", "epsilon": 1.0, "lo": 0.0, "hi": 1e-300}, "hi - lo"),
    ({"mechanism": "rr", "epsilon": 10**400}, "epsilon"),
    ({"mechanism": "mean", "epsilon": 1.0, "lo": -(10**400), "hi": 1.0}, "lo"),
]


@pytest.mark.parametrize(("params", "parameter"), BAD, ids=[p[1] + "-" + p[0]["mechanism"] for p in BAD])
def test_a_spec_the_device_could_not_use_is_a_400_naming_the_parameter(api, redis, params, parameter) -> None:  # type: ignore[no-untyped-def]
    before = snapshot(redis)
    resp = api.admin("POST", "/v1/metrics", json={"name": "absurd", "params": params, "reports_per_day": 1})
    assert resp.status_code == 400, resp.get_data()
    assert resp.json["error"] == "invalid_spec" and resp.json["parameter"] == parameter
    assert snapshot(redis) == before


def test_the_narrowest_allowed_range_is_accepted(api) -> None:  # type: ignore[no-untyped-def]
    resp = api.admin("POST", "/v1/metrics", json={"name": "narrow", "reports_per_day": 1,
                                                  "params": {"mechanism": "mean", "epsilon": 1.0, "lo": 0.0, "hi": 1e-12}})
    assert resp.status_code == 201, resp.get_data()


@pytest.mark.parametrize("rate", [10**400, 0, 1.5, "0.5"], ids=["beyond-float64", "zero", "above-one", "string"])
def test_a_bad_sample_rate_is_a_400_naming_it(api, redis, rate) -> None:  # type: ignore[no-untyped-def]
    """An integer beyond float64 made check_sample_rate raise OverflowError: a 500 with a traceback (review)."""
    before = snapshot(redis)
    resp = api.admin("POST", "/v1/metrics", json={"name": "sampled", "reports_per_day": 1, "sample_rate": rate,
                                                  "params": {"mechanism": "rr", "epsilon": 1.0}})
    assert resp.status_code == 400, resp.get_data()
    assert resp.json["parameter"] == "sample_rate"
    assert snapshot(redis) == before
