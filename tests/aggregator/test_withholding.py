"""Reporting thresholds (``min_reports``): a day with fewer reports shows nothing derived from them, anywhere, and no
pair of ranges differs by it (differencing)."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
import redis as redis_lib
from flask.testing import FlaskClient

from ldptel.aggregator.dashboard import DashboardConfig, create_dashboard
from ldptel.aggregator.dashboard.app import EXTENSION
from ldptel.aggregator.dashboard.overview import metric_list
from ldptel.aggregator.query import WithheldRangeError, estimate_by_day, estimate_metric
from ldptel.aggregator.withholding import withheld
from ldptel.client import CmsParams, GrrParams, MetricSpec
from ldptel.client.errors import InvalidParameterError
from ldptel.client.protocol.specs import params_from_dict
from ldptel.storage import registry
from tests.aggregator.agg_helpers import append_reports, create, drain, run_cli

MIN = 10
DAYS = {"2026-03-01": 300, "2026-03-02": MIN - 1, "2026-03-03": 300, "2026-03-04": MIN}  # 03-02: one under
SMALL = "2026-03-02"
VALUES = [f"/p/{i}" for i in range(4)]
TOKEN = "dash-0123456789abcdef-ABCDEFGHIJ-xyz"


@pytest.fixture
def pages(redis: redis_lib.Redis, redis_url: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LDPTEL_REDIS_URL", redis_url)
    record = create(redis, MetricSpec(name="pages", params=CmsParams(epsilon=4.0, k=8, m=64)), shards=2)
    for day, size in DAYS.items():
        # the small day's values are all /p/3, the others never: anything derived from it would show
        values = ["/p/3"] * size if day == SMALL else [VALUES[i % 3] for i in range(size)]
        append_reports(redis, record, values, rng, day=day, batch_size=5)
    drain(redis)
    registry.set_min_reports(redis, "pages", MIN)
    return "pages"


def _doc(redis: redis_lib.Redis, **kw: object) -> dict[str, object]:
    res = estimate_metric(redis, "pages", candidates=VALUES, **kw)
    out: dict[str, object] = res.to_dict()
    return out


def _same_numbers(a: dict[str, object], b: dict[str, object]) -> None:
    for key in ("n", "rows", "population"):
        assert a[key] == b[key], key


def test_the_threshold_test_is_on_raw_counts() -> None:
    assert withheld(MIN - 1, MIN, what="d") is not None and withheld(MIN, MIN) is None
    assert withheld(0, 0) is None  # 0: off
    w = withheld(3, MIN, what="2026-03-02")
    assert w is not None and "3" not in w.reason and "\n" not in w.reason  # the reason never carries the count


def test_a_withheld_day_alone_shows_nothing(redis: redis_lib.Redis, pages: str) -> None:
    with pytest.raises(WithheldRangeError) as exc:
        estimate_metric(redis, pages, day_from=SMALL, day_to=SMALL, candidates=VALUES)
    assert "min_reports" in str(exc.value) and str(MIN - 1) not in str(exc.value)
    code, out, err = run_cli("estimate", pages, "--day", SMALL, "--candidate", "/p/3", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["rows"] == [] and doc["n"] == 0 and doc["withheld"][0]["what"] == SMALL
    assert str(MIN - 1) not in out  # no count, no estimate of the day anywhere in the document
    code, out, err = run_cli("estimate", pages, "--day", SMALL, "--candidate", "/p/3")
    assert code != 0 and "min_reports" in err
    code, out, _ = run_cli("estimate", pages, "--day", SMALL, "--candidate", "/p/3", "--format", "csv")
    assert code == 0 and len(list(csv.reader(io.StringIO(out)))) == 1  # the header only


def test_the_day_at_the_threshold_is_shown(redis: redis_lib.Redis, pages: str) -> None:
    doc = _doc(redis, day_from="2026-03-04", day_to="2026-03-04")
    assert doc["n"] == MIN and "withheld" not in doc


def test_no_pair_of_ranges_differs_by_the_withheld_day(redis: redis_lib.Redis, pages: str) -> None:
    """Differencing: the range with the small day and the range without it give the same numbers, so their
    difference is 0, not the day; and a range's total is the sum of its released days only."""
    _same_numbers(_doc(redis, day_from=SMALL, day_to="2026-03-03"), _doc(redis, day_from="2026-03-03", day_to="2026-03-03"))
    _same_numbers(_doc(redis, day_from="2026-03-01", day_to=SMALL), _doc(redis, day_from="2026-03-01", day_to="2026-03-01"))
    whole = estimate_metric(redis, pages, candidates=VALUES)
    assert whole.n == sum(n for d, n in DAYS.items() if d != SMALL)
    assert [w.what for w in whole.withheld] == [SMALL] and SMALL not in whole.days
    parts = [estimate_metric(redis, pages, candidates=VALUES, day_from=d, day_to=d) for d in DAYS if d != SMALL]
    np.testing.assert_allclose(whole.estimate.counts, sum(p.estimate.counts for p in parts), rtol=1e-9, atol=1e-9)
    # the /p/3 count of the whole range is the other days' noise only: the 9 /p/3 reports of the small day are in no sum
    doc = whole.to_dict()
    assert doc["withheld"] == [{"what": SMALL, "reason": f"withheld: fewer than {MIN} reports (the metric's min_reports)"}]


def test_by_day_lists_the_day_as_withheld_in_every_format(redis: redis_lib.Redis, pages: str) -> None:
    daily = estimate_by_day(redis, pages, candidates=VALUES)
    assert [res.days[0] for res in daily.results] == [d for d in DAYS if d != SMALL]
    doc = daily.to_dict()
    assert SMALL not in doc["days"] and all(row["day"] != SMALL for row in doc["rows"])
    assert all(entry["day"] != SMALL for entry in doc["daily"]) and doc["withheld"][0]["what"] == SMALL
    assert doc["n"] == sum(n for d, n in DAYS.items() if d != SMALL)
    code, out, _ = run_cli("estimate", pages, "--by-day", *[a for v in VALUES for a in ("--candidate", v)], "--format", "json")
    assert code == 0 and json.loads(out)["withheld"][0]["what"] == SMALL
    code, out, _ = run_cli("estimate", pages, "--by-day", "--candidate", "/p/3", "--format", "csv")
    rows = [row for row in csv.DictReader(io.StringIO(out)) if row["day"] == SMALL]
    assert code == 0 and len(rows) == 1 and rows[0]["value"].startswith("withheld:")
    assert all(v in ("", None) for k, v in rows[0].items() if k not in ("day", "value"))
    code, out, _ = run_cli("estimate", pages, "--by-day", "--candidate", "/p/3")
    assert code == 0 and f"{SMALL}: withheld: fewer than {MIN} reports" in out
    assert not [line for line in out.splitlines() if line.startswith(SMALL) and "withheld" not in line]


def test_dashboard_shows_no_count_for_the_day(redis: redis_lib.Redis, redis_url: str, pages: str) -> None:
    summary = metric_list(redis, ["pages"])[0]
    shown = {d["day"]: d for d in summary["reports_by_day"]}
    assert shown[SMALL]["n"] is None and "min_reports" in shown[SMALL]["withheld"] and summary["min_reports"] == MIN
    assert shown["2026-03-04"]["n"] == MIN
    app = create_dashboard(DashboardConfig(token=TOKEN, redis_url=redis_url))
    dash: FlaskClient = app.test_client()
    try:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        resp = dash.get(f"/api/metrics/pages/estimate?day={SMALL}&candidate=/p/3", headers=auth)
        assert resp.status_code == 404 and "min_reports" in resp.get_json()["message"]
        resp = dash.get("/api/metrics/pages/by-day?candidate=/p/3", headers=auth)
        body = resp.get_data(as_text=True)
        assert resp.status_code == 200 and resp.get_json()["withheld"][0]["what"] == SMALL
        assert all(row["day"] != SMALL for row in resp.get_json()["rows"])
        assert f'"day": "{SMALL}"' not in body.replace('"what"', "")
    finally:
        app.extensions[EXTENSION][1].close()


def test_min_reports_validation_and_cli(redis: redis_lib.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: object) -> None:
    monkeypatch.setenv("LDPTEL_REDIS_URL", redis_url)
    for bad in (-1, 1.5, True, "10", 10**10):
        with pytest.raises(InvalidParameterError, match="min_reports"):
            registry.check_min_reports(bad)
    code, out, err = run_cli("metrics", "create", "m1", "--mechanism", "rr", "--epsilon", "1", "--min-reports", "-3")
    assert code != 0 and "min_reports" in err and registry.list_metrics(redis) == []  # nothing written
    code, out, err = run_cli("metrics", "create", "m1", "--mechanism", "rr", "--epsilon", "1", "--min-reports", "25")
    assert code == 0, err
    assert registry.get_metric(redis, "m1").min_reports == 25
    code, out, _ = run_cli("metrics", "show", "m1")
    assert json.loads(out)["min_reports"] == 25
    code, out, _ = run_cli("metrics", "list")
    assert "min reports" in out.splitlines()[0] and "25" in out.splitlines()[2].split()
    # metadata edit without --min-reports leaves it as it is
    assert run_cli("metrics", "create", "m1", "--mechanism", "rr", "--epsilon", "1", "--owner", "x")[0] == 0
    assert registry.get_metric(redis, "m1").min_reports == 25
    path = f"{tmp_path}/metrics.toml"
    with open(path, "w") as fh:
        fh.write('[metrics.m1]\nmechanism = "rr"\nepsilon = 1\nmin_reports = 40\n'
                 '[metrics.m2]\nmechanism = "rr"\nepsilon = 1\nmin_reports = 7\n')
    code, out, _ = run_cli("metrics", "plan", path)
    assert code == 0 and "~ m1: min_reports 25 → 40" in out and "~ m2: min_reports off → 7" in out
    # a created metric's central ε per shuffled block (ldptel.aggregator.amplification.planned_line)
    assert "central ε after shuffling (ε₀ " in out and "by devices per released block: 10,000: " in out
    code, out, _ = run_cli("metrics", "plan", path, "--format", "json")
    m2 = next(m for m in json.loads(out)["metrics"] if m["name"] == "m2")
    assert [c["devices_per_block"] for c in m2["central"]] == [10_000, 100_000, 1_000_000]
    assert all(c["applicable"] for c in m2["central"]) and m2["central"][1]["epsilon"] < m2["central"][0]["epsilon"]
    assert registry.get_metric(redis, "m1").min_reports == 25  # plan writes nothing
    code, out, err = run_cli("metrics", "apply", path, "--format", "json")
    assert code == 0, err
    assert {d["name"]: d["after"] for d in json.loads(out)["min_reports"]} == {"m1": 40, "m2": 7}
    assert registry.get_metric(redis, "m1").min_reports == 40 and registry.get_metric(redis, "m2").min_reports == 7
    with open(path, "w") as fh:
        fh.write('[metrics.m1]\nmechanism = "rr"\nepsilon = 1\nmin_reports = "many"\n')
    code, out, err = run_cli("metrics", "apply", path)
    assert code != 0 and "'min_reports'" in err and registry.get_metric(redis, "m1").min_reports == 40



def test_a_roll_up_holding_a_small_day_is_withheld_whole(redis: redis_lib.Redis, rng: np.random.Generator,
                                                         env_url: str) -> None:
    """Past retention only 32-day roll-ups remain; their days were readable one by one before, so a roll-up minus
    those days would be the small day: the roll-up holding it is withheld whole, the others are shown."""
    record = create(redis, MetricSpec(name="old", params=GrrParams(epsilon=2.0, domain=("x", "y"))), shards=2)
    sizes = {"2026-01-05": 60, "2026-01-06": MIN - 1, "2026-01-20": 60, "2026-02-10": 60}  # 01-05 … 01-20: one block
    for day, size in sizes.items():
        append_reports(redis, record, (["x", "y", "y"] * size)[:size], rng, day=day)
    drain(redis)
    registry.set_min_reports(redis, "old", MIN)
    before = estimate_metric(redis, "old")
    assert before.n == 180 and [w.what for w in before.withheld] == ["2026-01-06"]
    registry.set_retention(redis, "old", 30)
    code, out, err = run_cli("seal")
    assert code == 0 and json.loads(out.splitlines()[0])["states_dropped"] > 0, err
    after = estimate_metric(redis, "old")
    assert after.n == 60 and [w.what for w in after.withheld] == ["2025-12-26..2026-01-26"]
    with pytest.raises(WithheldRangeError):
        estimate_metric(redis, "old", day_from="2026-01-05", day_to="2026-01-05")
    daily = estimate_by_day(redis, "old").to_dict()
    assert daily["days"] == ["2026-01-27..2026-02-27"] and daily["withheld"][0]["what"] == "2025-12-26..2026-01-26"
    shown = {d["day"]: d["n"] for d in metric_list(redis, ["old"])[0]["reports_by_day"]}
    assert shown.get("2026-01-06", None) is None and shown.get("2026-01-05") == 60


def test_discovery_leaves_the_day_out(redis: redis_lib.Redis, rng: np.random.Generator, env_url: str) -> None:
    spec = MetricSpec(name="words", params=params_from_dict({"mechanism": "pem", "epsilon": 4.0, "k": 8, "m": 256,
                                                             "max_bytes": 2}))
    record = create(redis, spec, shards=1)
    append_reports(redis, record, ["ok"] * 400, rng, day="2026-03-01", batch_size=100)
    append_reports(redis, record, ["zz"] * (MIN - 1), rng, day=SMALL, batch_size=100)
    drain(redis)
    registry.set_min_reports(redis, "words", MIN)
    code, out, err = run_cli("discover", "words", "--format", "json")
    doc = json.loads(out)
    assert code == 0, err
    assert doc["n"] == 400 and doc["withheld"][0]["what"] == SMALL and SMALL not in doc["days"]
    assert all(row["value"] != "zz" for row in doc["rows"])
    code, out, err = run_cli("discover", "words")
    assert code == 0 and f"{SMALL}: withheld" in out


def test_estimates_carry_the_local_and_central_epsilon(redis: redis_lib.Redis, pages: str) -> None:
    """Uploads of 5 reports, each its own block (or no shuffle stage at all): the central ε is not applicable, with
    the reason, in every format (tests/aggregator/test_central_e2e.py has days where it applies)."""
    res = estimate_metric(redis, pages, candidates=VALUES, day_from="2026-03-01", day_to="2026-03-01")
    doc = res.to_dict()
    assert doc["local_epsilon"] == registry.get_metric(redis, pages).current.effective_epsilon
    assert doc["central"]["applicable"] is False and doc["central"]["condition"] in ("not_shuffled", "too_few_reports")
    assert doc["central"]["reason"]
    code, out, _ = run_cli("estimate", pages, "--day", "2026-03-01", "--candidate", "/p/1", "--format", "csv")
    row = next(csv.DictReader(io.StringIO(out)))
    assert code == 0 and float(row["local_epsilon"]) == doc["local_epsilon"] and row["central_epsilon"] == ""
    code, out, _ = run_cli("estimate", pages, "--candidate", "/p/1")
    assert code == 0 and out.splitlines()[-1].startswith("local ε 3.964 per report · central ε not applicable: day ")
    daily = estimate_by_day(redis, pages, candidates=VALUES).to_dict()
    assert all(entry["central"]["applicable"] is False for entry in daily["daily"])
    assert daily["central"]["applicable"] is False
