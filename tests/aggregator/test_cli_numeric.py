"""``ldptel metrics create`` and ``ldptel estimate`` for numeric metrics (mean/sum/count; buckets and
percentiles) in every output format, and the chart."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import redis as redis_lib

from ldptel.aggregator.query import estimate_metric
from ldptel.client.mechanisms.histogram import bucket_edges
from ldptel.storage import registry
from tests.aggregator.agg_helpers import append_reports, drain, run_cli


@pytest.fixture
def numeric(redis: redis_lib.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator) -> np.ndarray:
    monkeypatch.setenv("LDPTEL_REDIS_URL", redis_url)
    code, _, err = run_cli("metrics", "create", "load_ms", "--mechanism", "mean", "--epsilon", "4", "--range", "0", "10000")
    assert code == 0, err
    code, _, err = run_cli("metrics", "create", "load_hist", "--mechanism", "num-histogram", "--epsilon", "4",
                       "--range", "0", "10000", "--buckets", "32", "--scale", "log")
    assert code == 0, err
    values = rng.lognormal(math.log(300), 1.0, 4000)
    for name in ("load_ms", "load_hist"):
        append_reports(redis, registry.get_metric(redis, name), values.tolist(), rng, day="2026-03-01")
    drain(redis)
    return values


def test_metrics_create_takes_the_range_buckets_and_edges(redis: redis_lib.Redis, numeric: np.ndarray) -> None:
    mean = registry.get_metric(redis, "load_ms").current.params
    assert (mean.lo, mean.hi, mean.variant) == (0.0, 10000.0, "dhm")  # type: ignore[attr-defined]
    hist = registry.get_metric(redis, "load_hist").current.params
    assert hist.edges == bucket_edges(0, 10000, 32, scale="log")  # type: ignore[attr-defined]
    code, out, err = run_cli("metrics", "create", "explicit", "--mechanism", "num-histogram", "--epsilon", "2",
                         "--edges", "0,10,100,1000", "--format", "json")
    assert code == 0, err and json.loads(out)["versions"]
    assert registry.get_metric(redis, "explicit").current.params.edges == (0.0, 10.0, 100.0, 1000.0)  # type: ignore[attr-defined]
    code, _, err = run_cli("metrics", "create", "bad", "--mechanism", "num-histogram", "--epsilon", "2", "--buckets", "8")
    assert code == 2 and "--range" in err
    code, _, err = run_cli("metrics", "create", "bad", "--mechanism", "mean", "--epsilon", "2", "--range", "5", "1")
    assert code == 2 and "hi" in err


def test_estimate_prints_mean_sum_and_count_with_intervals(redis: redis_lib.Redis, numeric: np.ndarray) -> None:
    code, out, err = run_cli("estimate", "load_ms")
    assert code == 0, err
    assert "values clipped to [0, 10000] on the device" in out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.split()}
    assert {"mean", "sum", "count"} <= set(lines)
    want = estimate_metric(redis, "load_ms")
    code, out, err = run_cli("estimate", "load_ms", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert [r["value"] for r in doc["rows"]] == ["mean", "sum", "count"] and doc["rows"][0]["ci_low"] < doc["rows"][0]["ci_high"]
    assert doc["rows"][0]["estimate"] == want.rows()[0]["estimate"] and doc["rows"][2]["estimate"] == 4000
    code, out, err = run_cli("estimate", "load_ms", "--postprocess", "norm-sub")
    assert code == 2 and "postprocess" in err
    # Issue 24 §4: a mean's rows are not counts of the reports: no share column (it printed nan), in table or CSV
    code, out, err = run_cli("estimate", "load_ms")
    assert code == 0 and "frequency" not in out and "nan" not in out
    code, out, err = run_cli("estimate", "load_ms", "--format", "csv")
    assert code == 0 and "frequency" not in out.splitlines()[0] and "nan" not in out


def test_a_numeric_histogram_prints_its_summary_by_default(redis: redis_lib.Redis, numeric: np.ndarray) -> None:
    code, out, err = run_cli("estimate", "load_hist")
    assert code == 0, err
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.split()}
    assert ["count", "mean", "sum", "p50", "p90", "p99"] == [k for k in lines if k in ("count", "mean", "sum", "p50", "p90", "p99")]
    assert "[0, 10000)" not in out and "midpoint" in out  # no buckets; the within-bucket assumption is stated
    want = estimate_metric(redis, "load_hist", percentiles=[50, 90, 99])
    assert want.mean is not None and lines["count"][1] == "4000.00"
    code, out, err = run_cli("estimate", "load_hist", "--format", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["value"] for r in rows] == ["count", "mean", "sum", "p50", "p90", "p99"]
    assert float(rows[1]["estimate"]) == want.mean.estimate and rows[3]["stderr"] == ""
    assert float(rows[1]["ci_low"]) < float(rows[1]["estimate"]) < float(rows[1]["ci_high"])
    code, out, err = run_cli("estimate", "load_hist", "--format", "json")
    doc = json.loads(out)  # a superset of the bucket document: rows are still the buckets
    assert len(doc["rows"]) == 32 and {"value", "estimate", "ci_low", "ci_high", "adjusted"} <= set(doc["rows"][0])
    assert doc["mean"]["estimate"] == want.mean.estimate and doc["mean"]["ci_low"] < doc["mean"]["ci_high"]
    assert [p["percentile"] for p in doc["percentiles"]] == [50.0, 90.0, 99.0] and doc["postprocess"] == "norm-sub"
    assert sum(r["adjusted"] for r in doc["rows"]) == pytest.approx(4000)


def test_histogram_prints_the_buckets_with_the_consistent_column(numeric: np.ndarray) -> None:
    code, out, err = run_cli("estimate", "load_hist", "--histogram")
    assert code == 0, err
    assert "stderr" in out.splitlines()[2] and "norm-sub" in out.splitlines()[2]
    assert "p50" not in out and len([ln for ln in out.splitlines() if ln.startswith("[")]) == 32
    code, out, err = run_cli("estimate", "load_hist", "--histogram", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 32 and sum(float(r["adjusted"]) for r in rows) == pytest.approx(4000)
    code, out, err = run_cli("estimate", "load_hist", "--histogram", "--postprocess", "none", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert all(r["adjusted"] == r["estimate"] for r in rows)


def test_a_mean_metric_asked_for_buckets_says_to_create_a_histogram(numeric: np.ndarray) -> None:
    for flags in (["--histogram"], ["--percentiles", "50"]):
        code, out, err = run_cli("estimate", "load_ms", *flags)
        assert code == 2 and out == ""
        assert len(err.strip().splitlines()) == 1 and "--mechanism num-histogram --range LO HI --buckets" in err


def test_estimate_percentiles_in_table_json_and_csv(numeric: np.ndarray) -> None:
    code, out, err = run_cli("estimate", "load_hist", "--percentiles", "50,90,99", "--histogram")
    assert code == 0, err
    assert "percentile" in out and "p50" in out and "p99" in out
    code, out, err = run_cli("estimate", "load_hist", "--percentiles", "25")
    assert code == 0, err and "p25" in out and "p50" not in out
    code, out, err = run_cli("estimate", "load_hist", "--percentiles", "50,90,99", "--format", "json")
    doc = json.loads(out)
    assert [p["percentile"] for p in doc["percentiles"]] == [50.0, 90.0, 99.0]
    est = [p["estimate"] for p in doc["percentiles"]]
    assert est == sorted(est) and 0 <= est[0] and est[-1] <= 10000
    truth = float(np.quantile(numeric, 0.5))
    assert doc["percentiles"][0]["ci_low"] <= truth <= doc["percentiles"][0]["ci_high"]
    code, out, err = run_cli("estimate", "load_hist", "--percentiles", "50,90", "--format", "csv", "--histogram")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["value"] for r in rows[-2:]] == ["p50", "p90"] and len(rows) == 34
    for bad in ("0", "abc", "101"):
        code, _, err = run_cli("estimate", "load_hist", "--percentiles", bad)
        assert code == 2 and "percentile" in err
    code, _, err = run_cli("estimate", "load_ms", "--percentiles", "50")
    assert code == 2 and "histogram" in err


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="the plot extra is not installed")
def test_plot_draws_the_histogram_with_percentile_markers(numeric: np.ndarray, tmp_path: Path) -> None:
    path = tmp_path / "hist.png"
    code, _, err = run_cli("estimate", "load_hist", "--percentiles", "50,90,99", "--plot", str(path))
    assert code == 0, err
    assert path.stat().st_size > 10_000
    code, _, err = run_cli("estimate", "load_ms", "--plot", str(tmp_path / "mean.png"))
    assert code == 0, err


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="the plot extra is not installed")
def test_a_mean_plot_draws_mean_sum_and_count_on_their_own_axes_with_epsilon(numeric: np.ndarray, tmp_path: Path) -> None:
    """Issue 31 §3: mean, sum and count shared one axis, so only the sum (n × the mean) was visible. Each gets
    its panel (axes_1..3 of the SVG), whose axis reaches its own estimate; the title says ε (matplotlib's SVG keeps
    every text as a comment)."""
    import re

    path = tmp_path / "mean.svg"
    code, out, err = run_cli("estimate", "load_ms", "--format", "json")
    doc = json.loads(out)
    code, _, err = run_cli("estimate", "load_ms", "--plot", str(path))
    assert code == 0, err
    svg = path.read_text(encoding="utf-8")
    assert [f"axes_{i}" in svg for i in (1, 2, 3, 4)] == [True, True, True, False]
    texts = re.findall(r"<!-- (.*?) -->", svg)
    mean, total, count = (r["estimate"] for r in doc["rows"])
    assert any(t.startswith(f"mean: {mean:,.4g} ± ") for t in texts) and any(t.startswith(f"sum: {total:,.4g} ± ") for t in texts)
    assert f"count: {count:,.0f} (exact)" in texts and "count (reports)" in texts and "mean (value units)" in texts
    assert any("ε = 4 per report" in t for t in texts)
    code, out, err = run_cli("estimate", "load_ms")  # and the table says ε under its title
    assert code == 0 and out.startswith("load_ms v1 (mean, ε = 4 per report) · 2026-03-01 · n = 4,000 reports"), out


def test_a_percentile_the_data_cannot_resolve_is_shown_as_an_interval_without_a_point(
    redis: redis_lib.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    """Issue 24 §3: 200 reports at ε = 1 over 32 buckets cannot locate p99 (its interval spans nearly the
    whole range), so no output prints a number for it: the table and summary leave it blank and say why,
    JSON has ``estimate`` null with ``resolved`` false and a note, CSV leaves the cell empty."""
    monkeypatch.setenv("LDPTEL_REDIS_URL", redis_url)
    code, _, err = run_cli("metrics", "create", "tiny_hist", "--mechanism", "num-histogram", "--epsilon", "1",
                           "--range", "0", "10000", "--buckets", "32", "--scale", "log")
    assert code == 0, err
    append_reports(redis, registry.get_metric(redis, "tiny_hist"), rng.lognormal(math.log(300), 1.0, 200).tolist(), rng,
                   day="2026-03-01")
    drain(redis)
    code, out, err = run_cli("estimate", "tiny_hist", "--format", "json")
    assert code == 0, err
    p99 = json.loads(out)["percentiles"][-1]
    assert p99["estimate"] is None and p99["resolved"] is False and "unresolved" in p99["note"]
    assert p99["ci_high"] / max(p99["ci_low"], 10.0) > 10
    for flags in ([], ["--histogram", "--percentiles", "50,99"]):
        code, out, err = run_cli("estimate", "tiny_hist", *flags)
        assert code == 0, err
        assert "p99 unresolved: its interval spans more than 25% of the buckets" in out
        row = next(line.split() for line in out.splitlines() if line.startswith("p99"))
        assert len(row) == 3  # p99, ci_low, ci_high: no point between the label and the interval
    code, out, err = run_cli("estimate", "tiny_hist", "--format", "csv")
    assert next(r for r in csv.DictReader(io.StringIO(out)) if r["value"] == "p99")["estimate"] == ""
