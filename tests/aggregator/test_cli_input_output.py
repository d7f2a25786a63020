"""What the CLI reads and prints at the edges: BOMs and stdin in value files, large numbers in tables, json and
csv for a metric with no data, ``--version``."""

from __future__ import annotations

import csv
import io
import json
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
import redis as redis_lib

from ldptel.aggregator.cli import RESULT_COLUMNS
from ldptel.aggregator.cli.output import fmt_num, table
from ldptel.aggregator.query import estimate_metric
from ldptel.client import CmsParams, MetricSpec
from tests.aggregator.agg_helpers import append_reports, create, drain, ldptel, run_cli

VALUES = [f"/p/{i}" for i in range(4)]


@pytest.fixture
def pages(redis: redis_lib.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator) -> None:
    monkeypatch.setenv("LDPTEL_REDIS_URL", redis_url)
    record = create(redis, MetricSpec(name="pages", params=CmsParams(epsilon=4.0, k=16, m=256)), shards=2)
    append_reports(redis, record, [VALUES[i % 3] for i in range(2000)], rng, day="2026-03-01", batch_size=500)
    drain(redis)


def _rows(out: str) -> dict[str, float]:
    return {row["value"]: row["estimate"] for row in json.loads(out)["rows"]}


def test_a_bom_in_a_candidates_file_is_not_part_of_the_first_value(redis: redis_lib.Redis, pages: None, tmp_path: Path) -> None:
    """Regression: the BOM stuck to the first value, which then got the estimate of an unseen value."""
    cand = tmp_path / "candidates.txt"
    cand.write_bytes("\n".join(VALUES).encode("utf-8-sig"))
    code, out, err = run_cli("estimate", "pages", "--candidates", str(cand), "--format", "json")
    assert code == 0, err
    want = {row["value"]: row["estimate"] for row in estimate_metric(redis, "pages", candidates=VALUES).rows()}
    assert _rows(out) == want
    assert want[VALUES[0]] > 400  # a third of the 2,000 reports (±~60): not the ~0 of a value nobody sent


def test_candidates_from_stdin(redis: redis_lib.Redis, pages: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("\ufeff/p/0\n/p/3\n".encode()), encoding="utf-8"))
    code, out, err = run_cli("estimate", "pages", "--candidates", "-", "--format", "json")
    assert code == 0, err
    assert sorted(_rows(out)) == ["/p/0", "/p/3"]


def test_json_and_csv_of_a_metric_without_data_are_valid_empty_documents(redis: redis_lib.Redis, redis_url: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDPTEL_REDIS_URL", redis_url)
    create(redis, MetricSpec(name="quiet", params=CmsParams(epsilon=4.0, k=16, m=256)))
    code, out, err = run_cli("estimate", "quiet", "--candidate", "x", "--format", "json")
    assert code == 0 and "no folded reports yet" in err
    doc = json.loads(out)
    assert doc["rows"] == [] and doc["n"] == 0 and (doc["metric"], doc["version"], doc["mechanism"]) == ("quiet", 1, "cms")
    code, out, _ = run_cli("estimate", "quiet", "--candidate", "x", "--format", "csv")
    assert code == 0 and list(csv.reader(io.StringIO(out))) == [list(RESULT_COLUMNS)]
    code, out, err = run_cli("estimate", "quiet", "--candidate", "x")  # a table: the one-line error, as before
    assert code == 2 and out == "" and err.count("\n") == 1


@pytest.mark.parametrize(("value", "shown"), [(287000.4, "287000.40"), (-1.5e7, "-15000000.00"), (13516.856, "13516.86"),
                                              (0.0676, "0.0676"), (0.0, "0.0000")])
def test_tables_never_use_scientific_notation_for_large_numbers(value: float, shown: str) -> None:
    assert fmt_num(value) == shown
    out = io.StringIO()
    table(["value", "estimate"], [["a", value]], out)
    assert shown in out.getvalue() and "e+" not in out.getvalue()


def test_version(redis_url: str) -> None:
    proc = ldptel("--version", redis_url=redis_url, check=True)
    assert proc.stdout == f"ldptel {metadata.version('ldp-telemetry')}\n"
