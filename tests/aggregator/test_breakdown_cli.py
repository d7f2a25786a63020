"""``ldptel metrics profile|create --breakdown|show|plan|apply`` for breakdowns: the schema, caps, and what a plan says
a breakdown reveals."""

from __future__ import annotations

import json
from typing import Any

import redis as redis_lib

from ldptel.storage import registry
from tests.aggregator.agg_helpers import run_cli

TOML = """
[profile]
os = ["android", "ios", "web"]
app_version = ["2.0", "2.1"]

[metrics.screens]
mechanism = "grr"
epsilon = 2
domain = ["home", "search", "settings"]
breakdown = ["os", "app_version"]
"""


def test_profile_create_show(redis: redis_lib.Redis, env_url: str) -> None:
    code, out, err = run_cli("metrics", "profile")
    assert code == 0 and "no profile dimensions declared" in out
    code, out, err = run_cli("metrics", "create", "m", "--mechanism", "grr", "--epsilon", "2", "--domain", "a,b",
                             "--breakdown", "os")
    assert code == 2 and "dimensions of the profile schema" in err and "metrics profile" in err
    code, out, err = run_cli("metrics", "profile", "--set", "os=android,ios,web", "--set", "channel=stable,beta")
    assert code == 0, err
    assert "android, ios, web, other" in out
    code, out, err = run_cli("metrics", "create", "m", "--mechanism", "grr", "--epsilon", "2", "--domain", "a,b",
                             "--breakdown", "os,channel")
    assert code == 0, err
    code, out, err = run_cli("metrics", "show", "m")
    doc = json.loads(out)
    assert doc["breakdown"]["combinations"] == 4 * 3 and "not privatized" in doc["breakdown"]["reveals"]
    assert doc["current"]["profile"] == {"os": ["android", "ios", "web"], "channel": ["stable", "beta"]}
    # growing a dimension edits the spec in place; removing one an active metric uses is refused
    code, out, err = run_cli("metrics", "profile", "--set", "os=android,ios,web,linux", "--format", "json")
    assert code == 0 and json.loads(out)["dimensions"]["os"][-1] == "linux"
    rec = registry.get_metric(redis, "m")
    assert rec.current_version == 1 and dict(rec.current.profile)["os"][-1] == "linux"
    code, out, err = run_cli("metrics", "profile", "--remove", "channel")
    assert code == 2 and "dimensions of the profile schema" in err
    code, out, err = run_cli("metrics", "profile", "--set", "os=android,not valid")
    assert code == 2 and "profile.os value" in err


def test_plan_and_apply_a_file_with_a_profile_and_a_breakdown(redis: redis_lib.Redis, env_url: str, tmp_path: Any) -> None:
    path = tmp_path / "m.toml"
    path.write_text(TOML)
    code, out, err = run_cli("metrics", "plan", str(path))
    assert code == 0, err
    assert "~ profile:" in out and "breakdown by os, app_version: 12 combinations" in out
    assert "NOT privatized" in out and "hides among the reports of its combination" in out
    assert registry.get_profile(redis).dimensions == {}  # a plan writes nothing
    code, out, err = run_cli("metrics", "apply", str(path), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["metrics"][0]["breakdown"]["worst_case_bytes_per_shard_day"] == 12 * (3 + 1) * 4
    assert registry.get_metric(redis, "screens").current.breakdown == ("os", "app_version")
    code, out, err = run_cli("metrics", "diff", str(path))
    assert code == 0, out  # applied: no differences
    # a new release: the file grows app_version; the plan is an in-place edit, not a new version
    path.write_text(TOML.replace('["2.0", "2.1"]', '["2.0", "2.1", "2.2"]'))
    code, out, err = run_cli("metrics", "plan", str(path))
    assert code == 0 and "~ screens: edit v1 in place" in out and "profile.app_version" in out and "0 NEW VERSION(S)" in out
    # past the cap: 255 app versions × 4 os = 1024 is the most; 256 values are refused per dimension, and 3 dims multiply
    path.write_text(TOML.replace('["2.0", "2.1"]', json.dumps([f"v{i}" for i in range(300)])))
    code, out, err = run_cli("metrics", "plan", str(path))
    assert code == 2 and "at most 255 values" in err and "nothing was changed" in err
    path.write_text(TOML.replace('["2.0", "2.1"]', json.dumps([f"v{i}" for i in range(255)])).replace(
        'breakdown = ["os", "app_version"]', 'breakdown = ["os", "app_version", "channel"]').replace(
        "[metrics.screens]", 'channel = ["stable"]\n\n[metrics.screens]'))
    code, out, err = run_cli("metrics", "plan", str(path))
    assert code == 2 and "at most 1024 combinations" in err and "2048" in err and "nothing was changed" in err
