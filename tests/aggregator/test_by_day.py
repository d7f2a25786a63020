"""Per-day estimates: :func:`~ldptel.aggregator.query.estimate_by_day` and ``ldptel estimate --by-day``."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
import redis as redis_lib

from ldptel.aggregator.cli import RESULT_COLUMNS
from ldptel.aggregator.query import EmptyRangeError, estimate_by_day, estimate_metric
from ldptel.aggregator.render import PRIVACY_COLUMNS
from ldptel.client import CmsParams, MetricSpec, RrParams
from tests.aggregator.agg_helpers import append_reports, create, drain, run_cli

DAYS = ("2026-03-01", "2026-03-02", "2026-03-04")  # a gap: 03-03 has no reports


@pytest.fixture
def pages(redis: redis_lib.Redis, redis_url: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A cms metric over three days (1,500 / 1,000 / 500 reports), the rank of its values changing by day."""
    monkeypatch.setenv("LDPTEL_REDIS_URL", redis_url)
    record = create(redis, MetricSpec(name="pages", params=CmsParams(epsilon=4.0, k=16, m=256)), shards=2)
    for day, size, offset in zip(DAYS, (1500, 1000, 500), (0, 2, 4), strict=True):
        append_reports(redis, record, [f"/p/{(i * i + offset) % 6}" for i in range(size)], rng, day=day, batch_size=250)
    drain(redis)
    return [f"/p/{i}" for i in range(6)]


def test_each_day_is_the_one_day_estimate(redis: redis_lib.Redis, pages: list[str]) -> None:
    daily = estimate_by_day(redis, "pages", candidates=pages, postprocess="norm-sub", estimator="both")
    assert [res.days for res in daily.results] == [(d,) for d in DAYS]
    rows = daily.rows()
    assert len(rows) == len(DAYS) * len(pages) * 2  # plain and corrected row of each value, each day
    for day in DAYS:
        want = estimate_metric(redis, "pages", day_from=day, day_to=day, candidates=pages, postprocess="norm-sub", estimator="both")
        got = [{k: v for k, v in row.items() if k not in ("day", "n")} for row in rows if row["day"] == day]
        assert got == want.rows()
        assert {row["n"] for row in rows if row["day"] == day} == {want.n}


def test_plain_day_estimates_add_up_to_the_range_estimate(redis: redis_lib.Redis, pages: list[str]) -> None:
    # The plain estimators are linear in the sketch counts and n, so days add up (to rounding) to the whole range.
    daily = estimate_by_day(redis, "pages", candidates=pages)
    whole = estimate_metric(redis, "pages", candidates=pages)
    summed = {v: sum(r["estimate"] for r in daily.rows() if r["value"] == v) for v in pages}
    np.testing.assert_allclose([summed[v] for v in whole.labels], whole.estimate.counts, rtol=1e-9, atol=1e-6)
    assert daily.to_dict()["n"] == whole.n == 3000


def test_top_keeps_the_same_values_every_day_ranked_by_their_sum(redis: redis_lib.Redis, pages: list[str]) -> None:
    full = estimate_by_day(redis, "pages", candidates=pages).rows()
    totals = {v: sum(r["estimate"] for r in full if r["value"] == v) for v in pages}
    want = sorted(pages, key=lambda v: -totals[v])[:3]
    daily = estimate_by_day(redis, "pages", candidates=pages, top=3, day_from=DAYS[1])
    assert daily.values is not None and len(daily.values) == 3
    # ranked over the asked days only
    totals_late = {v: sum(r["estimate"] for r in full if r["value"] == v and r["day"] >= DAYS[1]) for v in pages}
    assert list(daily.values) == sorted(pages, key=lambda v: -totals_late[v])[:3]
    for day in DAYS[1:]:
        assert [r["value"] for r in daily.rows() if r["day"] == day] == list(daily.values)
    assert list(estimate_by_day(redis, "pages", candidates=pages, top=3).values or ()) == want


def test_rr_days_carry_their_proportion(redis: redis_lib.Redis, rng: np.random.Generator) -> None:
    record = create(redis, MetricSpec(name="flag", params=RrParams(epsilon=2.0)), shards=1)
    for day, share in zip(DAYS[:2], (0.2, 0.7), strict=True):
        append_reports(redis, record, list(rng.random(4000) < share), rng, day=day)
    drain(redis)
    doc = estimate_by_day(redis, "flag").to_dict()
    assert [d["day"] for d in doc["daily"]] == list(DAYS[:2]) and [d["n"] for d in doc["daily"]] == [4000, 4000]
    for entry in doc["daily"]:
        want = estimate_metric(redis, "flag", day_from=entry["day"], day_to=entry["day"])
        assert entry["proportion"] == want.to_dict()["proportion"]


def test_empty_range_and_unknown_version_raise_like_estimate_metric(redis: redis_lib.Redis, pages: list[str]) -> None:
    with pytest.raises(EmptyRangeError, match="it has days 2026-03-01 to 2026-03-04"):
        estimate_by_day(redis, "pages", candidates=pages, day_from="2026-03-03", day_to="2026-03-03")
    with pytest.raises(Exception, match="no version 9"):
        estimate_by_day(redis, "pages", candidates=pages, version=9)


def test_cli_by_day_json_csv_and_table(redis: redis_lib.Redis, pages: list[str]) -> None:
    base = ["estimate", "pages", "--by-day", "--top", "2", "--postprocess", "clip"]
    for value in pages:
        base += ["--candidate", value]
    want = estimate_by_day(redis, "pages", candidates=pages, top=2, postprocess="clip")

    code, out, err = run_cli(*base, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc.pop("schema_version") == 1  # docs/json-output.md
    assert doc == json.loads(json.dumps(want.to_dict()))
    assert doc["days"] == list(DAYS) and doc["by_day"] is True and len(doc["rows"]) == 6

    code, out, err = run_cli(*base, "--format", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert tuple(rows[0]) == ("day", "n", *RESULT_COLUMNS, *PRIVACY_COLUMNS, "significant")
    for got, exp in zip(rows, want.rows(), strict=True):
        assert got["day"] == exp["day"] and int(got["n"]) == exp["n"] and got["value"] == exp["value"]
        assert all(float(got[c]) == exp[c] for c in RESULT_COLUMNS[1:])

    code, out, err = run_cli(*base)
    assert code == 0, err
    lines = out.splitlines()
    assert "n = 3,000 reports · per day" in lines[0] and "(3 days)" in lines[0]
    assert lines[1].split()[:4] == ["day", "n", "value", "estimate"]
    assert [line.split()[0] for line in lines[3:-1]] == [d for d in DAYS for _ in range(2)]
    assert lines[-1].startswith("local ε ") and "central ε not applicable" in lines[-1]  # no shuffle stage here


def test_cli_by_day_with_plot_is_a_user_error(pages: list[str]) -> None:
    code, out, err = run_cli("estimate", "pages", "--by-day", "--candidate", "x", "--plot", "x.png")
    assert code == 2 and out == "" and "drop --by-day" in err and err.count("\n") == 1
