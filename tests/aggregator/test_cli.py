"""The ``ldptel`` CLI through ``main([...])`` with StringIO streams: formats round-trip, user errors exit 2."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
from pathlib import Path

import numpy as np
import pytest
import redis as redis_lib

from ldptel.aggregator.cli import RESULT_COLUMNS, main
from ldptel.aggregator.query import estimate_metric
from ldptel.aggregator.render import PRIVACY_COLUMNS
from ldptel.client import CmsParams, GrrParams, MetricSpec, RrParams
from ldptel.storage import registry
from tests.aggregator.agg_helpers import append_reports, create, drain, ldptel, run_cli


@pytest.fixture
def pages(redis: redis_lib.Redis, env_url: str, rng: np.random.Generator) -> list[str]:
    record = create(redis, MetricSpec(name="pages", params=CmsParams(epsilon=4.0, k=16, m=256)), shards=2)
    values = [f"/p/{i % 7}" for i in range(3000)]
    append_reports(redis, record, values, rng, day="2026-03-01", batch_size=500)
    append_reports(redis, record, values[:1000], rng, day="2026-03-02", batch_size=500)
    drain(redis)
    return sorted(set(values))


def test_json_and_csv_round_trip(redis: redis_lib.Redis, pages: list[str], tmp_path: Path) -> None:
    cand = tmp_path / "candidates.txt"
    cand.write_text("# pages\n" + "\n".join(pages[:5]) + "\n\n")
    base = ("estimate", "pages", "--candidates", str(cand), "--candidate", pages[6], "--postprocess", "norm-sub")
    want = estimate_metric(redis, "pages", candidates=pages[:5] + [pages[6]], postprocess="norm-sub")

    code, out, err = run_cli(*base, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["n"] == 4000 and doc["days"] == ["2026-03-01", "2026-03-02"] and doc["postprocess"] == "norm-sub"
    assert doc["rows"] == want.rows()

    code, out, err = run_cli(*base, "--format", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert tuple(rows[0]) == (*RESULT_COLUMNS, *PRIVACY_COLUMNS, "significant")  # rows of candidates: marked (issue 24)
    for got, exp in zip(rows, want.rows(), strict=True):
        assert got["value"] == exp["value"] and got["significant"] == str(exp["significant"])
        for col in RESULT_COLUMNS[1:]:
            assert float(got[col]) == exp[col]  # repr() floats: exact round trip

    adjusted = np.array([r["adjusted"] for r in doc["rows"]])
    assert (adjusted >= 0).all() and adjusted.sum() <= doc["n"] + 1e-9


def test_table_top_and_day_range(pages: list[str]) -> None:
    args = ["estimate", "pages", "--day", "2026-03-02", "--top", "3", "--postprocess", "clip"]
    for value in pages:
        args += ["--candidate", value]
    code, out, err = run_cli(*args)
    assert code == 0, err
    lines = out.splitlines()
    assert "n = 1,000 reports" in lines[0] and "2026-03-02" in lines[0]
    assert lines[1].startswith("rows selected from 7 candidates; * = distinguishable from zero")
    assert lines[2].split()[:2] == ["value", "estimate"] and "clip" in lines[2] and lines[2].split()[-1] == "sig"
    assert len(lines) == 4 + 3 + 1  # title, selection, header, rule, 3 rows, local and central ε


def test_rr_table_shows_the_proportion(redis: redis_lib.Redis, env_url: str, rng: np.random.Generator) -> None:
    record = create(redis, MetricSpec(name="flag", params=RrParams(epsilon=1.0)), shards=1)
    append_reports(redis, record, list(rng.random(2000) < 0.5), rng, day="2026-03-01")
    drain(redis)
    code, out, _ = run_cli("estimate", "flag")
    assert code == 0 and "proportion true:" in out
    code, out, _ = run_cli("estimate", "flag", "--format", "json")
    assert set(json.loads(out)["proportion"]) == {"estimate", "stderr", "ci_low", "ci_high", "adjusted"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("estimate", "nope"), "unknown metric 'nope'"),
        (("estimate", "pages", "--candidate", "x", "--from", "2027-01-01"), "no sketches of 'pages'"),
        (("estimate", "pages"), "candidates"),
        (("estimate", "pages", "--candidates", "/does/not/exist"), "cannot read candidates file"),
        (("estimate", "pages", "--candidate", "x", "--version", "7"), "no version 7"),
        (("metrics", "show", "nope"), "unknown metric"),
        (("metrics", "create", "bad", "--mechanism", "cms", "--epsilon", "4", "--k", "4", "--m", "100"), "m must be"),
        (("status", "--metric", "nope"), "unknown metric"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(pages: list[str], argv: tuple[str, ...], message: str) -> None:
    code, out, err = run_cli(*argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("ldptel: error: ") and message in err, err
    assert "Traceback" not in err


def test_unreachable_redis_is_a_user_error() -> None:
    code, _, err = run_cli("status", "--redis-url", "redis://127.0.0.1:1/0")
    assert code == 2 and "cannot reach Redis at redis://127.0.0.1:1/0" in err and err.count("\n") == 1


def test_metrics_create_list_show_retire(redis: redis_lib.Redis, env_url: str, tmp_path: Path) -> None:
    code, out, err = run_cli("metrics", "create", "color", "--mechanism", "grr", "--epsilon", "2", "--domain", "red,green,blue",
                         "--shards", "3")
    assert code == 0, err
    record = registry.get_metric(redis, "color")
    assert record.shards == 3 and record.current.params.domain == ("red", "green", "blue")  # type: ignore[union-attr]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"name": "pages", "params": {"mechanism": "cms", "epsilon": 4, "k": 64, "m": 1024}}))
    assert run_cli("metrics", "create", "--spec-file", str(spec))[0] == 0
    code, out, _ = run_cli("metrics", "list", "--format", "json")
    assert [m["name"] for m in json.loads(out)["metrics"]] == ["color", "pages"]
    code, out, _ = run_cli("metrics", "list")
    assert "color" in out and "k=64 m=1024" in out
    code, out, _ = run_cli("metrics", "show", "pages")
    assert json.loads(out)["current"]["params"]["k"] == 64
    assert run_cli("metrics", "retire", "color")[0] == 0
    assert registry.get_metric(redis, "color").status == "retired"


def test_status_reports_length_checkpoint_and_lag(redis: redis_lib.Redis, env_url: str, rng: np.random.Generator) -> None:
    record = create(redis, MetricSpec(name="color", params=GrrParams(epsilon=2.0, domain=("a", "b"))), shards=2)
    append_reports(redis, record, ["a"] * 100, rng, day="2026-03-01", batch_size=10)
    code, out, _ = run_cli("status", "--format", "json")
    rows = json.loads(out)["shards"]
    assert code == 0 and sum(r["length"] for r in rows) == 10 and all(r["checkpoint"] is None for r in rows)
    assert sum(r["lag"] or 0 for r in rows) == 10
    drain(redis)
    rows = json.loads(run_cli("status", "--format", "json")[1])["shards"]
    assert all(r["lag"] in (0, None) for r in rows) and any(r["lag"] == 0 for r in rows)
    assert all(r["checkpoint"] for r in rows if r["length"])
    assert "checkpoint" in run_cli("status")[1]


def test_plot_writes_a_png(pages: list[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "out.png"
    code, _, err = run_cli("estimate", "pages", "--candidate", pages[0], "--candidate", pages[1], "--plot", str(png),
                       "--postprocess", "norm-sub")
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("command", [(), ("aggregate",), ("estimate",), ("metrics",), ("metrics", "create"),
                                     ("metrics", "list"), ("status",), ("serve",)])
def test_help_everywhere(command: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*command, "--help"]) == 0
    assert "usage: ldptel" in capsys.readouterr().out


def test_demo_slot_and_console_script(redis_url: str) -> None:
    proc = ldptel("demo", "--help", redis_url=redis_url)
    if importlib.util.find_spec("ldptel.aggregator.demo") is None:
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "demo" in proc.stderr
    proc = ldptel("--help", redis_url=redis_url, check=True)
    assert "aggregate" in proc.stdout


def test_aggregate_once_prints_stats_and_progress(redis: redis_lib.Redis, env_url: str, rng: np.random.Generator) -> None:
    record = create(redis, MetricSpec(name="color", params=GrrParams(epsilon=2.0, domain=("a", "b"))), shards=2)
    sent = append_reports(redis, record, ["a", "b"] * 150, rng, day="2026-03-01", batch_size=30)
    code, out, err = run_cli("aggregate", "--once", "--progress", "--metric", "color")
    assert code == 0, err
    stats = json.loads(out)
    assert stats["reports"] == sent.n and stats["entries"] == 10 and stats["dead"] == 0
    assert run_cli("aggregate", "--once", "--metric", "nope")[2].startswith("ldptel: error: unknown metric")
    assert estimate_metric(redis, "color").n == sent.n
