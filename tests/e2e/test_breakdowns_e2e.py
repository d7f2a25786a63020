"""Issue 29, breakdowns end to end: ``ldptel metrics apply`` of a file with a [profile] and a breakdown (CLI) →
devices with several profiles, each its own ``Reporter(profile=...)`` → real gunicorn ingest (2 workers) → embedded
Redis → ``ldptel aggregate --once`` → ``ldptel estimate --by os`` / ``--where`` (JSON and table): each group within
its theory band, the groups adding up to the total, an undeclared OS counted as ``other`` (never sent in clear)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import redis as redis_lib

from ldptel.client.sdk.reporter import Reporter
from tests.e2e.test_on_device_e2e import _cli, stack  # noqa: F401  (the fixture: gunicorn + Redis)
from tests.server.test_server_http import APP_TOKEN
from tests.stats import assert_close_normal

pytestmark = pytest.mark.slow

METRICS = """
[profile]
os = ["android", "ios", "web"]
app_version = ["2.0", "2.1"]

[metrics.theme]
mechanism = "grr"
epsilon = 3
domain = ["light", "dark"]
reports_per_day = 1
breakdown = ["os", "app_version"]
"""
# (profile, devices, share choosing "dark")
FLEET = [({"os": "android", "app_version": "2.1"}, 24, 0.8), ({"os": "ios", "app_version": "2.0"}, 16, 0.3),
         ({"os": "web", "app_version": "2.1"}, 10, 0.5), ({"os": "beos", "app_version": "0.1-rare"}, 6, 0.5)]


def test_several_profiles_through_gunicorn_redis_and_the_cli(stack: tuple[str, str], tmp_path: Path) -> None:  # noqa: F811
    url, redis_url = stack
    (tmp_path / "m.toml").write_text(METRICS)
    plan = _cli("metrics", "plan", str(tmp_path / "m.toml"), redis_url=redis_url)
    assert "NOT privatized" in plan and "12 combinations" in plan
    _cli("metrics", "apply", str(tmp_path / "m.toml"), redis_url=redis_url)
    rng = np.random.default_rng(2929)
    truth: dict[str, list[int]] = {}
    device = 0
    for profile, devices, dark in FLEET:
        key = profile["os"] if profile["os"] in ("android", "ios", "web") else "other"
        for _ in range(devices):
            value = "dark" if rng.random() < dark else "light"
            truth.setdefault(key, [0, 0])[value == "dark"] += 1
            with Reporter(url, APP_TOKEN, tmp_path / f"d{device}", metrics=["theme"], start=False, profile=profile) as rep:
                assert rep.wait_for_specs(10)
                assert rep.report("theme", value).queued
                assert rep.flush(timeout=30) and rep.stats().delivered == 1
            device += 1
    r = redis_lib.Redis.from_url(redis_url)
    try:  # the rare values never left the devices
        for key in r.scan_iter(match=b"ldp:v1:{theme:*"):
            if r.type(key) == b"stream":
                for _, fields in r.xrange(key):
                    assert b"beos" not in fields[b"b"] and b"rare" not in fields[b"b"]
    finally:
        r.close()
    _cli("aggregate", "--once", redis_url=redis_url)
    doc = json.loads(_cli("estimate", "theme", "--by", "os", "--format", "json", redis_url=redis_url))
    assert [g["os"] for g in doc["groups"]] == ["android", "ios", "web", "other"]
    assert doc["n"] == sum(g["n"] for g in doc["groups"]) == device
    total_rows = {row["value"]: row for row in doc["total"]["rows"]}
    for label in ("light", "dark"):
        summed = sum(next(row["estimate"] for row in g["result"]["rows"] if row["value"] == label) for g in doc["groups"])
        assert summed == pytest.approx(total_rows[label]["estimate"], rel=1e-9, abs=1e-9)
    for g in doc["groups"]:
        assert g["n"] == sum(truth[g["os"]])
        row = next(row for row in g["result"]["rows"] if row["value"] == "dark")
        assert_close_normal(row["estimate"], float(truth[g["os"]][1]), row["stderr"], n=g["n"], what=f"os={g['os']}")
        assert row["ci_low"] < row["estimate"] < row["ci_high"]
    fine = json.loads(_cli("estimate", "theme", "--by", "os,app_version", "--format", "json", redis_url=redis_url))
    assert {(g["os"], g["app_version"]) for g in fine["groups"]} == {
        ("android", "2.1"), ("ios", "2.0"), ("web", "2.1"), ("other", "other")}
    android = json.loads(_cli("estimate", "theme", "--where", "os=android", "--format", "json", redis_url=redis_url))
    assert android["n"] == 24
    table = _cli("estimate", "theme", "--by", "os", redis_url=redis_url)
    assert "by os" in table and "not privatized" in table
