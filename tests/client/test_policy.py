"""The device's PrivacyPolicy: a served spec beyond it is refused with nothing privatized, queued or spent."""

from __future__ import annotations

import dataclasses
import math
import sqlite3

import pytest

from ldptel.client import CmsParams, MetricSpec, RrParams
from ldptel.client.errors import InvalidParameterError, LdpError
from ldptel.client.sdk.policy import PolicyRefusal, PrivacyPolicy
from ldptel.client.sdk.reporter import Reporter, UploadError
from ldptel.client.sdk.store import DB_FILE
from tests.client.conftest import FakeClock, LiveServer


def _rows(path, table: str) -> int:
    conn = sqlite3.connect(path / DB_FILE)
    try:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def _served(live: LiveServer, app_token: str, tmp_path, clock: FakeClock, spec: MetricSpec, **kw: object) -> Reporter:
    live.create(spec)
    errors: list[UploadError] = kw.pop("errors", [])  # type: ignore[assignment]
    rep = Reporter(live.url, app_token, tmp_path, start=False, clock=clock, sleep=clock.sleep, metrics=[spec.name],
                   on_error=errors.append, **kw)  # type: ignore[arg-type]
    assert rep.wait_for_specs(10)
    return rep


def test_a_served_spec_with_eps_30_and_10000_reports_a_day_is_refused(live: LiveServer, app_token, tmp_path, clock) -> None:
    """The issue's attack: on today's code all 100 reports of True are queued at effective ε 22.2."""
    spec = MetricSpec(name="hostile.rr", params=RrParams(epsilon=30.0), reports_per_day=10_000)
    errors: list[UploadError] = []
    rep = _served(live, app_token, tmp_path, clock, spec, errors=errors)
    try:
        results = [rep.report("hostile.rr", True) for _ in range(100)]
        assert {r.status for r in results} == {"policy_refused"}
        assert all(r.report is None for r in results)
        assert results[0].reason is not None and "report_epsilon" in results[0].reason
        st = rep.stats()
        assert (st.queued, st.pending, st.refused_policy) == (0, 0, 100)
        refusals = [e for e in errors if isinstance(e, PolicyRefusal)]
        assert len(refusals) == 1 and refusals[0].outcome == "policy" and refusals[0].metric == "hostile.rr"
        assert rep.budget_remaining("hostile.rr") == 0  # nothing may be spent (and nothing was: see below)
    finally:
        rep.close(timeout=0)
    assert _rows(tmp_path, "reports") == _rows(tmp_path, "ledger") == _rows(tmp_path, "memo") == 0


def test_a_served_daily_budget_beyond_the_policy_is_refused(live: LiveServer, app_token, tmp_path, clock) -> None:
    spec = MetricSpec(name="chatty.cms", params=CmsParams(epsilon=1.0, k=4, m=64), reports_per_day=10_000)
    rep = _served(live, app_token, tmp_path, clock, spec)
    try:
        result = rep.report("chatty.cms", "x")
        assert result.status == "policy_refused" and result.reason is not None and "daily_epsilon" in result.reason
    finally:
        rep.close(timeout=0)


def test_a_spec_within_the_policy_is_used_and_the_app_may_widen_it(live: LiveServer, app_token, tmp_path, clock) -> None:
    fine = MetricSpec(name="fine.rr", params=RrParams(epsilon=1.0), reports_per_day=4)  # 4/day: daily 6.63, ε∞ 1.66
    wide = MetricSpec(name="wide.rr", params=RrParams(epsilon=1.0), reports_per_day=50)
    policy = PrivacyPolicy(max_daily_epsilon=100.0)  # 50 reports charged ε_irr 1.66 each (rr's permanent RR)
    rep = _served(live, app_token, tmp_path / "a", clock, fine)
    try:
        assert rep.report("fine.rr", True).queued
    finally:
        rep.close(timeout=0)
    rep = _served(live, app_token, tmp_path / "b", clock, wide, policy=policy)
    try:
        assert rep.report("wide.rr", True).queued
    finally:
        rep.close(timeout=0)


def test_pinned_specs_are_the_apps_own_and_not_checked(tmp_path, clock) -> None:
    spec = MetricSpec(name="pinned.rr", params=RrParams(epsilon=8.0), reports_per_day=100)
    rep = Reporter("http://127.0.0.1:9", "t", tmp_path, start=False, clock=clock, sleep=clock.sleep, specs=[spec])
    try:
        assert rep.report("pinned.rr", True).queued
    finally:
        rep.close(timeout=0)


def test_policy_is_keyword_only_frozen_and_validated() -> None:
    policy = PrivacyPolicy()
    assert (policy.max_report_epsilon, policy.max_daily_epsilon, policy.max_longitudinal_epsilon) == (4.0, 8.0, 8.0)
    with pytest.raises(TypeError):
        PrivacyPolicy(4.0)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.max_report_epsilon = 30.0  # type: ignore[misc]
    for bad in (0.0, -1.0, math.nan, "4"):
        with pytest.raises(InvalidParameterError) as err:
            PrivacyPolicy(max_report_epsilon=bad)  # type: ignore[arg-type]
        assert err.value.parameter == "max_report_epsilon" and isinstance(err.value, LdpError)
    assert PrivacyPolicy(max_report_epsilon=math.inf).refusal(report=30.0, daily=1.0, longitudinal=1.0) is None
    with pytest.raises(InvalidParameterError):
        Reporter("http://127.0.0.1:9", "t", "/nonexistent/x", start=False, policy={"max": 1})  # type: ignore[arg-type]
