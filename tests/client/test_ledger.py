"""The privacy-budget ledger: refuses past the policy, across restarts and against a clock moved backwards."""

from __future__ import annotations

import sqlite3

import pytest

from ldptel.client import CmsParams, GrrParams, MetricSpec, RrParams
from ldptel.client.sdk.ledger import SECONDS_PER_DAY, allows, utc_day
from ldptel.client.sdk.reporter import Reporter
from ldptel.client.sdk.store import DB_FILE
from tests.client.conftest import FakeClock

DEAD = "http://127.0.0.1:9"
DAY = SECONDS_PER_DAY


def _reporter(tmp_path, clock: FakeClock, *specs: MetricSpec) -> Reporter:
    return Reporter(DEAD, "t", tmp_path, start=False, specs=list(specs), clock=clock, sleep=clock.sleep)


def test_budget_refuses_past_the_limit_without_privatizing(tmp_path) -> None:
    spec = MetricSpec(name="m", params=CmsParams(epsilon=2.0, k=4, m=64), reports_per_day=3)
    clock = FakeClock()
    rep = _reporter(tmp_path, clock, spec)
    results = [rep.report("m", f"v{i}") for i in range(5)]
    assert [r.status for r in results] == ["queued"] * 3 + ["budget_exceeded"] * 2
    assert results[3].report is None and not results[3].queued
    st = rep.stats()
    assert (st.queued, st.pending, st.refused_budget) == (3, 3, 2)
    assert rep.budget_remaining("m") == 0
    rep.close(timeout=0)


def test_budget_survives_restarts_and_a_backwards_clock(tmp_path) -> None:
    spec = MetricSpec(name="m", params=RrParams(epsilon=1.0), reports_per_day=2)
    clock = FakeClock(20_000 * DAY + 3600)
    rep = _reporter(tmp_path, clock, spec)
    assert [rep.report("m", True).status for _ in range(3)] == ["queued", "queued", "budget_exceeded"]
    rep.close(timeout=0)

    rep = _reporter(tmp_path, clock, spec)  # a restart: same day, still spent
    assert rep.report("m", True).status == "budget_exceeded"
    clock.t -= 3 * DAY  # the clock moves back three days: no earlier day reopens
    assert rep.report("m", False).status == "budget_exceeded"
    rep.close(timeout=0)
    rep = _reporter(tmp_path, clock, spec)  # ... not even after a restart with the wrong clock
    assert rep.report("m", False).status == "budget_exceeded"
    clock.t = 20_001 * DAY + 10  # the next real day: a fresh budget
    assert [rep.report("m", True).status for _ in range(3)] == ["queued", "queued", "budget_exceeded"]
    rep.close(timeout=0)

    conn = sqlite3.connect(tmp_path / DB_FILE)
    rows = dict(((d, c) for d, c in conn.execute("SELECT day, count FROM ledger WHERE metric = 'm'")))
    assert rows == {20_000: 2, 20_001: 2}
    conn.close()


def test_budget_is_per_metric_name_not_per_version(tmp_path) -> None:
    v1 = MetricSpec(name="m", params=RrParams(epsilon=1.0), reports_per_day=2, version=1)
    v2 = MetricSpec(name="m", params=RrParams(epsilon=1.0), reports_per_day=2, version=2)
    clock = FakeClock()
    rep = _reporter(tmp_path, clock, v1)
    assert rep.report("m", True).queued
    rep.close(timeout=0)
    rep = _reporter(tmp_path, clock, v2)
    assert [rep.report("m", True).status for _ in range(2)] == ["queued", "budget_exceeded"]
    rep.close(timeout=0)


def test_epsilon_cap_holds_when_the_spec_changes_within_a_day(tmp_path) -> None:
    """Spent ε counts against the current spec's daily ε: a spec with larger ε cannot overspend."""
    low = MetricSpec(name="m", params=RrParams(epsilon=1.0), reports_per_day=4)
    high = MetricSpec(name="m", params=RrParams(epsilon=3.0), reports_per_day=2, version=2)
    clock = FakeClock()
    rep = _reporter(tmp_path, clock, low)
    assert [rep.report("m", True).status for _ in range(3)] == ["queued"] * 3  # spent 3 charges of 4
    rep.close(timeout=0)
    rep = _reporter(tmp_path, clock, high)  # daily ε 2 charges, count limit 2 already passed
    assert rep.report("m", True).status == "budget_exceeded"
    rep.close(timeout=0)
    charge = high.report_charge  # rr: ε_irr of the permanent randomized response's fresh noise (> 3.0)
    assert high.daily_epsilon == pytest.approx(2 * charge) and charge > high.effective_epsilon
    assert allows(high, 1, charge - 1e-12) is True and allows(high, 1, charge + 0.5) is False


def test_invalid_values_raise_and_spend_nothing(tmp_path) -> None:
    rr = MetricSpec(name="r", params=RrParams(epsilon=1.0), reports_per_day=2)
    grr = MetricSpec(name="g", params=GrrParams(epsilon=1.0, domain=("a", "b")), reports_per_day=2)
    cms = MetricSpec(name="c", params=CmsParams(epsilon=1.0, k=4, m=64), reports_per_day=2)
    clock = FakeClock()
    rep = _reporter(tmp_path, clock, rr, grr, cms)
    from ldptel.client.errors import InvalidValueError, UnknownValueError

    with pytest.raises(InvalidValueError):
        rep.report("r", "true")
    with pytest.raises(UnknownValueError):
        rep.report("g", "zzz")
    with pytest.raises(InvalidValueError):
        rep.report("c", 42)
    assert [rep.budget_remaining(m) for m in ("r", "g", "c")] == [2, 2, 2]
    assert rep.stats().pending == 0
    rep.close(timeout=0)


def test_utc_day_boundaries() -> None:
    assert utc_day(0.0) == 0
    assert utc_day(DAY - 0.001) == 0
    assert utc_day(DAY) == 1
    assert utc_day(1_700_000_000.0) == 19_675
