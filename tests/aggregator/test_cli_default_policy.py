"""Issue 22 §3: a metric every default-policy device would refuse is refused by ``ldptel metrics create|plan|apply``
(one line naming the limit and the allowed value; nothing written) unless explicitly allowed, and marked in
``metrics list`` and the dashboard overview. The same check as ``POST /v1/metrics`` (tests/server/test_server_default_policy.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis as redis_lib

from ldptel.aggregator.dashboard.overview import metric_list
from ldptel.client import MetricSpec, RrParams
from ldptel.client.sdk.policy import PrivacyPolicy
from ldptel.storage import keys, registry
from tests.aggregator.agg_helpers import run_cli

RR6 = ("metrics", "create", "flag", "--mechanism", "rr", "--epsilon", "6")


@pytest.fixture(autouse=True)
def env_url(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LDPTEL_REDIS_URL", redis_url)
    return redis_url


def _error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err  # one line
    return lines[0]


@pytest.mark.parametrize(("args", "limit", "allowed"), [
    (RR6, "report_epsilon 6 ", "maximum 4"),
    (("metrics", "create", "flag", "--mechanism", "rr", "--epsilon", "2", "--reports-per-day", "4"), "daily_epsilon ", "maximum 8"),
    (("metrics", "create", "secs", "--mechanism", "daily-mean", "--epsilon", "4", "--range", "0", "60"), "longitudinal_epsilon 9.386", "maximum 8"),
])
def test_create_beyond_the_default_policy_is_refused_in_one_line_and_writes_nothing(
    redis: redis_lib.Redis, args: tuple[str, ...], limit: str, allowed: str
) -> None:
    """Regression: `metrics create x --mechanism rr --epsilon 6` printed "created" and exited 0."""
    code, out, err = run_cli(*args)
    assert code == 2 and out == ""
    line = _error_line(err)
    assert limit in line and allowed in line and "default device policy" in line and "--allow-above-default-policy" in line
    assert redis.hlen(keys.registry()) == 0


def test_the_refusal_matches_what_a_default_policy_device_does() -> None:
    for eps, per_day in ((6.0, 1), (2.0, 4), (4.0, 2), (1.0, 4), (4.0, 1)):
        spec = MetricSpec(name="m", params=RrParams(epsilon=eps), reports_per_day=per_day)
        device = PrivacyPolicy().spec_refusal(spec)
        assert (registry.default_policy_refusal(spec) is None) == (device is None)


def test_an_allowed_metric_is_created_and_marked(redis: redis_lib.Redis) -> None:
    code, _, err = run_cli(*RR6, "--allow-above-default-policy")
    assert code == 0, err
    assert registry.get_metric(redis, "flag").current.params.epsilon == 6
    assert run_cli("metrics", "create", "ok", "--mechanism", "rr", "--epsilon", "1")[0] == 0
    code, out, _ = run_cli("metrics", "list")
    lines = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert "above default policy" in lines["flag"] and "above default policy" not in lines["ok"]
    rows = {row["name"]: row for row in json.loads(run_cli("metrics", "list", "--format", "json")[1])["metrics"]}
    assert "report_epsilon 6" in rows["flag"]["above_default_policy"] and rows["ok"]["above_default_policy"] is None
    overview = {m["name"]: m for m in metric_list(redis)}
    assert "maximum 4" in overview["flag"]["above_default_policy"] and overview["ok"]["above_default_policy"] is None
    # editing the allowed metric's metadata needs the flag again: every write of it is checked
    assert run_cli(*RR6, "--description", "d")[0] == 2
    assert registry.get_metric(redis, "flag").current.description == ""


TOML = """
[metrics.fine]
mechanism = "rr"
epsilon = 1.0

[metrics.wide]
mechanism = "rr"
epsilon = 6.0
"""


@pytest.mark.parametrize("action", ["plan", "apply"])
def test_plan_and_apply_refuse_a_file_with_such_a_metric_whole(redis: redis_lib.Redis, tmp_path: Path, action: str) -> None:
    path = tmp_path / "metrics.toml"
    path.write_text(TOML)
    code, out, err = run_cli("metrics", action, str(path))
    assert code == 2 and out == ""
    line = _error_line(err)
    assert "'wide'" in line and "report_epsilon 6" in line and "maximum 4" in line
    assert redis.hlen(keys.registry()) == 0  # all or nothing: 'fine' is not written either


def test_a_file_allows_one_metric_or_the_flag_allows_all(redis: redis_lib.Redis, tmp_path: Path) -> None:
    path = tmp_path / "metrics.toml"
    path.write_text(TOML.replace('epsilon = 6.0', 'epsilon = 6.0\nallow_above_default_policy = true'))
    code, out, err = run_cli("metrics", "plan", str(path))
    assert code == 0 and redis.hlen(keys.registry()) == 0, err
    assert run_cli("metrics", "apply", str(path))[0] == 0
    assert registry.get_metric(redis, "wide").current.params.epsilon == 6
    assert run_cli("metrics", "diff", str(path))[0] == 0  # the key is not a field of the metric
    other = tmp_path / "other.toml"
    other.write_text(TOML.replace("wide", "wider").replace("fine", "fine2"))
    assert run_cli("metrics", "apply", str(other))[0] == 2
    assert run_cli("metrics", "apply", str(other), "--allow-above-default-policy")[0] == 0
    assert registry.get_metric(redis, "wider").current.params.epsilon == 6
    bad = tmp_path / "bad.toml"
    bad.write_text(TOML.replace('epsilon = 6.0', 'epsilon = 6.0\nallow_above_default_policy = "yes"'))
    code, _, err = run_cli("metrics", "apply", str(bad))
    assert code == 2 and "allow_above_default_policy" in err and "true or false" in err


def test_a_new_version_past_the_lifetime_cap_of_earlier_versions_is_refused(redis: redis_lib.Redis) -> None:
    """A device that reported under v1 and v2 charges ε∞ 1.66 + 2.69; a v3 at ε = 3 (ε∞ 3.69) takes the sum to
    8.04 > 8, so such devices would refuse v3: refused here too. A version back to an earlier privatization is
    charged nothing new (devices already hold its permanent answers) and is accepted."""
    rr = ("metrics", "create", "flag", "--mechanism", "rr", "--epsilon")
    assert run_cli(*rr, "1")[0] == 0 and run_cli(*rr, "2")[0] == 0
    code, out, err = run_cli(*rr, "3")
    line = _error_line(err)
    assert code == 2 and "longitudinal_epsilon 8.039" in line and "maximum 8" in line and "earlier versions" in line
    assert registry.get_metric(redis, "flag").current_version == 2
    assert run_cli(*rr, "1")[0] == 0 and registry.get_metric(redis, "flag").current_version == 3
    assert run_cli(*rr, "3", "--allow-above-default-policy")[0] == 0
