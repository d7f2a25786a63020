"""``ldptel test``: one-sample, two-sample (day ranges, versions) and chi-square tests over real Redis sketches,
the uncertainty named in every output, and the errors a user can make."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import redis as redis_lib

from ldptel.aggregator import inference as inf
from ldptel.aggregator.query import estimate_metric
from ldptel.storage import registry
from tests.aggregator.agg_helpers import append_reports, drain, run_cli


@pytest.fixture
def data(redis: redis_lib.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator) -> None:
    monkeypatch.setenv("LDPTEL_REDIS_URL", redis_url)
    for args in (("dark", "--mechanism", "rr", "--epsilon", "2"),
                 ("os", "--mechanism", "grr", "--epsilon", "2", "--domain", "android,ios,web")):
        code, _, err = run_cli("metrics", "create", *args)
        assert code == 0, err
    dark = registry.get_metric(redis, "dark")
    append_reports(redis, dark, (rng.random(3000) < 0.3).tolist(), rng, day="2026-03-01")
    append_reports(redis, dark, (rng.random(3000) < 0.6).tolist(), rng, day="2026-03-02")
    os_metric = registry.get_metric(redis, "os")
    labels = np.array(["android", "ios", "web"], dtype=object)
    append_reports(redis, os_metric, labels[rng.choice(3, 3000, p=[0.5, 0.3, 0.2])].tolist(), rng, day="2026-03-01")
    append_reports(redis, os_metric, labels[rng.choice(3, 3000, p=[0.5, 0.3, 0.2])].tolist(), rng, day="2026-03-02")
    drain(redis)


def _json(*argv: str) -> dict[str, object]:
    code, out, err = run_cli("test", *argv, "--format", "json")
    assert code == 0, err
    doc: dict[str, object] = json.loads(out)
    return doc


def test_one_sample_is_the_library_test_and_names_its_uncertainty(redis: redis_lib.Redis, data: None) -> None:
    doc = _json("dark", "--day", "2026-03-01", "--above", "0.25")
    (t,) = doc["tests"]  # type: ignore[misc]
    res = estimate_metric(redis, "dark", day_from="2026-03-01", day_to="2026-03-01")
    g = inf.Group("g", registry.get_metric(redis, "dark").current.params, res.estimate)
    want = inf.one_sample(inf.share_of(g, "true"), 0.25, alternative="greater")
    assert t["p_value"] == pytest.approx(want.p_value) and t["statistic"] == pytest.approx(want.statistic)
    assert t["uncertainty"] == doc["uncertainty"] == "population"
    assert "sampling of the reporting devices" in t["uncertainty_meaning"]
    assert t["alternative"] == "greater" and "≤ 0.25" in t["hypothesis"]
    code, out, err = run_cli("test", "dark", "--day", "2026-03-01", "--equals", "0.3", "--uncertainty", "randomization",
                             "--effect", "0.05")
    assert code == 0, err
    assert "uncertainty: randomization only" in out and "z = " in out and "power: " in out and "effect: difference" in out


def test_two_day_ranges_differ_and_the_effect_interval_covers_it(data: None) -> None:
    doc = _json("dark", "--day", "2026-03-02", "--vs-day", "2026-03-01")
    (t,) = doc["tests"]  # type: ignore[misc]
    assert t["test"] == "two-sample" and t["reject"] and t["p_value"] < 1e-6
    eff = t["effect"]
    se = (eff["ci_high"] - eff["ci_low"]) / (2 * 1.959963984540054)
    assert abs(eff["estimate"] - 0.3) <= 6 * se  # truth: 0.6 − 0.3
    assert [g["days"] for g in doc["groups"]] == [["2026-03-02", "2026-03-02"], ["2026-03-01", "2026-03-01"]]  # type: ignore[index]


def test_several_values_are_one_corrected_family(data: None) -> None:
    doc = _json("os", "--day", "2026-03-01", "--vs-day", "2026-03-02", "--value", "android", "--value", "ios",
                "--value", "web", "--correction", "bonferroni")
    tests = doc["tests"]
    assert len(tests) == 3  # type: ignore[arg-type]
    for t in tests:  # type: ignore[attr-defined]
        assert "Bonferroni over the 3 tests" in t["correction"]
        assert t["p_adjusted"] == pytest.approx(min(1.0, 3 * t["p_value"]))


def test_chi_square_goodness_of_fit_and_independence(data: None) -> None:
    doc = _json("os", "--chi2", "--expect", "android=0.5,ios=0.3,web=0.2")
    (t,) = doc["tests"]  # type: ignore[misc]
    assert t["df"] == 2 and t["statistic_name"] == "chi2" and len(t["details"]) == 3
    doc = _json("os", "--chi2", "--expect", "uniform")
    assert doc["tests"][0]["reject"]  # type: ignore[index]
    doc = _json("os", "--chi2", "--day", "2026-03-01", "--vs-day", "2026-03-02")
    assert doc["tests"][0]["test"].startswith("chi-square independence")  # type: ignore[index]
    code, out, err = run_cli("test", "dark", "--chi2", "--day", "2026-03-01", "--vs-day", "2026-03-02")
    assert code == 0, err and "chi2 = " in out and "df = 1" in out


@pytest.mark.parametrize(("argv", "message"), [
    (("dark", "--equals", "0.3", "--vs-day", "2026-03-01"), "one-sample hypothesis"),
    (("dark",), "one-sample hypothesis"),
    (("dark", "--from", "2026-03-01", "--to", "2026-03-02", "--vs-day", "2026-03-02"), "share days"),
    (("os", "--chi2"), "--expect"),
    (("os", "--chi2", "--expect", "android=0.5,ios=0.5"), "missing"),
    (("os", "--chi2", "--expect", "android=0.5,ios=0.3,web"), "label=share"),
    (("os", "--equals", "0.3"), "--value"),
    (("os", "--equals", "0.3", "--value", "linux"), "one of"),
    (("dark", "--equals", "1.5"), "share in [0, 1]"),
    (("dark", "--mean", "--equals", "0.5"), "mean"),
    (("nope", "--equals", "0.5"), "nope"),
    (("dark", "--equals", "0.3", "--method", "monte-carlo", "--simulations", "5000"), "asymptotic at this n"),
])
def test_bad_requests_exit_2_with_a_clear_error(data: None, argv: tuple[str, ...], message: str) -> None:
    code, out, err = run_cli("test", *argv)
    assert code == 2 and out == "" and message in err, err


def test_estimate_prints_either_uncertainty_labelled(redis: redis_lib.Redis, data: None) -> None:
    """``estimate --uncertainty population`` widens every stderr and interval by the sampling of the reporting
    devices (the same variance as the tests' population kind), and says so in the title and the JSON."""
    base = _estimate_json("dark", "--day", "2026-03-01")
    pop = _estimate_json("dark", "--day", "2026-03-01", "--uncertainty", "population")
    assert base["uncertainty"] == "randomization" and pop["uncertainty"] == "population" and "population" not in pop
    assert pop["proportion"]["stderr"] == pytest.approx(base["population"]["proportion"]["stderr"])
    res = estimate_metric(redis, "dark", day_from="2026-03-01", day_to="2026-03-01")
    q = inf.share_of(inf.Group("g", registry.get_metric(redis, "dark").current.params, res.estimate), "true")
    assert pop["proportion"]["stderr"] == pytest.approx(q.stderr("population"))
    assert base["proportion"]["stderr"] == pytest.approx(q.stderr("randomization"))
    for row, want in zip(pop["rows"], base["population"]["rows"], strict=True):
        assert row["stderr"] == pytest.approx(want["stderr"]) and row["ci_low"] == pytest.approx(want["ci_low"])
    code, out, err = run_cli("estimate", "dark", "--uncertainty", "population", "--by-day")
    assert code == 0, err and "stderr: population" in out.splitlines()[0]
    code, out, err = run_cli("metrics", "create", "load", "--mechanism", "mean", "--epsilon", "1", "--range", "0", "1")
    assert code == 0, err
    rng = np.random.default_rng(3)
    append_reports(redis, registry.get_metric(redis, "load"), rng.random(100).tolist(), rng, day="2026-03-01")
    drain(redis)
    code, out, err = run_cli("estimate", "load", "--uncertainty", "population")
    assert code == 2 and "ldptel test --mean" in err


def _estimate_json(*argv: str) -> dict[str, Any]:
    code, out, err = run_cli("estimate", *argv, "--format", "json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_versions_sketch_candidates_and_a_histogram_mean(redis: redis_lib.Redis, data: None, rng: np.random.Generator) -> None:
    """Version 2 (another ε) against version 1 over the same day; a sketch's candidates as a corrected family;
    a numeric histogram's mean."""
    code, _, err = run_cli("metrics", "create", "dark", "--mechanism", "rr", "--epsilon", "1")
    assert code == 0, err
    dark = registry.get_metric(redis, "dark")
    assert dark.current_version == 2
    append_reports(redis, dark, (rng.random(3000) < 0.3).tolist(), rng, day="2026-03-01", version=2)
    for args in (("emoji", "--mechanism", "oue-cms", "--epsilon", "4", "--k", "16", "--m", "256"),
                 ("load", "--mechanism", "num-histogram", "--epsilon", "2", "--range", "0", "100", "--buckets", "8")):
        code, _, err = run_cli("metrics", "create", *args)
        assert code == 0, err
    emoji = np.array(["a", "b", "c", "d"], dtype=object)[rng.choice(4, 3000, p=[0.4, 0.3, 0.2, 0.1])]
    append_reports(redis, registry.get_metric(redis, "emoji"), emoji.tolist(), rng, day="2026-03-01")
    append_reports(redis, registry.get_metric(redis, "load"), rng.uniform(0, 100, 3000).tolist(), rng, day="2026-03-01")
    drain(redis)
    doc = _json("dark", "--version", "2", "--vs-version", "1", "--day", "2026-03-01")
    (t,) = doc["tests"]  # type: ignore[misc]
    assert [g["version"] for g in doc["groups"]] == [2, 1] and t["test"] == "two-sample"  # type: ignore[index]
    se = (t["effect"]["ci_high"] - t["effect"]["ci_low"]) / (2 * 1.959963984540054)
    assert abs(t["effect"]["estimate"]) <= 6 * se  # both versions: share 0.3
    doc = _json("emoji", "--day", "2026-03-01", "--value", "a", "--value", "d", "--equals", "0.25")
    tests = doc["tests"]
    assert [t["reject"] for t in tests] == [True, True] and "Holm" in tests[0]["correction"]  # type: ignore[index]
    doc = _json("load", "--mean", "--day", "2026-03-01", "--equals", "50", "--effect", "5")
    (t,) = doc["tests"]  # type: ignore[misc]
    assert t["hypothesis"].endswith("mean = 50") and 0 < t["power"]["power"] <= 1
    se = (t["effect"]["ci_high"] - t["effect"]["ci_low"]) / (2 * 1.959963984540054)
    assert abs(t["effect"]["estimate"]) <= 6 * se  # uniform on [0, 100]: midpoint mean 50
