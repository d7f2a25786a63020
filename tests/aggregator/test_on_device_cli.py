"""Issue 29, on-device aggregation in the registry, the TOML file, the CLI and queries: event-count and unique-devices
metrics are ordinary mechanisms (their params fields are TOML keys and CLI flags), the default device policy is
checked at creation, and a query's days are the days the reports *describe* (period p is reported during p + 1)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import redis as redis_lib

from ldptel.aggregator.dashboard import DashboardConfig, create_dashboard
from ldptel.aggregator.dashboard.app import EXTENSION
from ldptel.aggregator.dashboard.overview import metric_summary
from ldptel.aggregator.query import estimate_by_day, estimate_metric
from ldptel.client import MetricSpec
from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms.event_count import EventCountParams
from ldptel.client.mechanisms.unique_devices import UniqueDevicesParams
from ldptel.storage import registry
from tests.aggregator.agg_helpers import append_reports, create, drain, run_cli

TOKEN = "dash-0123456789abcdef-ABCDEFGHIJ-xyz"
TOML = """
[metrics.opens]
mechanism = "event-count"
epsilon = 2
hi = 20
description = "app opens per device per day"

[metrics.weekly_users]
mechanism = "unique-devices"
epsilon = 1
window_days = 7
description = "devices that opened the app in the week"
"""


def test_toml_apply_and_cli_create_take_the_new_kinds(redis: redis_lib.Redis, env_url: str, tmp_path: Path) -> None:
    path = tmp_path / "metrics.toml"
    path.write_text(TOML)
    code, out, err = run_cli("metrics", "apply", str(path))
    assert code == 0, err
    opens = registry.get_metric(redis, "opens").current
    weekly = registry.get_metric(redis, "weekly_users").current
    assert isinstance(opens.params, EventCountParams) and opens.params.hi == 20
    assert isinstance(weekly.params, UniqueDevicesParams) and weekly.params.window_days == 7
    assert run_cli("metrics", "diff", str(path))[0] == 0
    code, _, err = run_cli("metrics", "create", "monthly", "--mechanism", "unique-devices", "--window-days", "30",
                           "--epsilon", "1")
    assert code == 0, err
    code, _, err = run_cli("metrics", "create", "bad", "--mechanism", "unique-devices", "--window-days", "14",
                           "--epsilon", "1")
    assert code != 0 and "window_days" in err and "[1, 7, 28, 30]" in err
    # the default-policy check: 2·ε∞ (the lifetime level of a bit that changes) is past 8 at ε = 4
    code, _, err = run_cli("metrics", "create", "strong", "--mechanism", "unique-devices", "--window-days", "7",
                           "--epsilon", "4")
    assert code != 0 and "longitudinal_epsilon 9.386" in err
    code, out, err = run_cli("metrics", "list")
    assert code == 0 and "7-day window" in out and "[0, 20]" in out


def test_a_query_reads_the_days_the_reports_arrive_on(redis: redis_lib.Redis, redis_url: str, rng: np.random.Generator) -> None:
    create(redis, MetricSpec(name="opens", params=EventCountParams(epsilon=4, hi=10)), shards=2)
    record = create(redis, MetricSpec(name="weekly", params=UniqueDevicesParams(epsilon=4, window_days=7)), shards=2)
    # 2024-10-10 is day 20006 (a multiple of 7): the window 2024-10-10..16 is reported 2024-10-17..23
    arrivals = {"2024-10-17": 300, "2024-10-20": 200, "2024-10-24": 100}
    for day, n in arrivals.items():
        append_reports(redis, record, [True] * (n // 2) + [False] * (n - n // 2), rng, day=day)
    drain(redis)
    res = estimate_metric(redis, "weekly", day_from="2024-10-12", day_to="2024-10-12")
    assert res.n == 500 and res.days == ("2024-10-17", "2024-10-20")
    assert "reports received 2024-10-17..2024-10-20 describe 2024-10-10..2024-10-16" in res.note
    assert [row["value"] for row in res.rows()] == ["inactive", "active"]
    assert res.to_dict()["proportion"]["estimate"] == pytest.approx(0.5, abs=6 * res.to_dict()["proportion"]["stderr"])
    by_day = estimate_by_day(redis, "weekly").to_dict()
    assert by_day["days"] == ["2024-10-10..2024-10-16", "2024-10-17..2024-10-23"]
    assert [d["n"] for d in by_day["daily"]] == [500, 100]
    assert estimate_metric(redis, "weekly", day_from="2024-10-17", day_to="2024-10-17").n == 100
    with pytest.raises(Exception, match="no sketches"):
        estimate_metric(redis, "weekly", day_from="2024-10-24", day_to="2024-10-24")  # not reported yet
    with pytest.raises(InvalidParameterError):
        estimate_metric(redis, "weekly", postprocess="bogus")  # type: ignore[arg-type]
    assert json.dumps(res.to_dict(), allow_nan=False)
    # the dashboard's range selector offers the days the reports describe, so its default range reads every report
    days = metric_summary(redis, registry.get_metric(redis, "weekly"), [])["days_by_version"]["1"]
    assert (days[0], days[-1]) == ("2024-10-10", "2024-10-23")
    whole = estimate_metric(redis, "weekly", day_from=days[0], day_to=days[-1])
    assert whole.n == 600
    # the dashboard API answers what the CLI answers (the typed result of the mechanism's kind)
    app = create_dashboard(DashboardConfig(token=TOKEN, redis_url=redis_url))
    try:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        got = app.test_client().get("/api/metrics/weekly/estimate?day=2024-10-12", headers=auth)
        assert got.status_code == 200, got.get_data(as_text=True)
        body = got.get_json()
        assert body["n"] == 500 and body["kind"] == "frequencies"
        assert [r["value"] for r in body["rows"]] == ["inactive", "active"]
        assert body["rows"][1]["estimate"] == pytest.approx(res.rows()[1]["estimate"])
        by_day = app.test_client().get("/api/metrics/weekly/by-day", headers=auth).get_json()
        assert by_day["days"] == ["2024-10-10..2024-10-16", "2024-10-17..2024-10-23"]
    finally:
        app.extensions[EXTENSION][1].close()
