"""Secret sampling (``sample_rate`` β): each device decides once per metric and budget day with its CSPRNG, keeps the
decision durably, and a device that does not take part sends and spends nothing that day."""

from __future__ import annotations

import math
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from ldptel.client import MetricSpec, RrParams
from ldptel.client.errors import InvalidParameterError
from ldptel.client.protocol.specs import AMPLIFIED_EPSILON_NOTE, amplified_epsilon
from ldptel.client.sdk import sampling
from ldptel.client.sdk.reporter import Reporter
from ldptel.client.sdk.store import DB_FILE
from tests.client.conftest import OPEN_POLICY, FakeClock
from tests.stats import assert_close_normal

DAY = 86_400
NOWHERE = "http://127.0.0.1:9"


def spec(rate: float, rpd: int = 3) -> MetricSpec:
    return MetricSpec(name="s.rr", params=RrParams(epsilon=1.0), reports_per_day=rpd, sample_rate=rate)


def reporter(path: object, clock: FakeClock, rate: float) -> Reporter:
    return Reporter(NOWHERE, "t", path, start=False, clock=clock, sleep=clock.sleep, specs=[spec(rate)],  # type: ignore[arg-type]
                    policy=OPEN_POLICY)


@pytest.mark.parametrize("rate", [0.05, 0.5])
def test_a_device_takes_part_on_a_share_beta_of_days_and_keeps_each_days_decision(tmp_path, rate: float) -> None:
    clock = FakeClock()
    days, took_part = 1500, 0
    with reporter(tmp_path, clock, rate) as rep:
        for _ in range(days):
            statuses = {rep.report("s.rr", True).status for _ in range(3)}
            assert statuses in ({"queued"}, {"not_sampled"}), statuses  # one decision per day, all reports agree
            took_part += statuses == {"queued"}
            clock.t += DAY
        st = rep.stats()
    assert st.not_sampled == 3 * (days - took_part) and st.queued == 3 * took_part
    assert_close_normal(took_part / days, rate, math.sqrt(rate * (1 - rate) / days), n=days, what="share of days sampled")
    rows = sqlite3.connect(tmp_path / DB_FILE).execute("SELECT COUNT(*) FROM sampling").fetchone()[0]
    assert rows == 1  # earlier days' draws are forgotten


def test_not_sampled_sends_and_spends_nothing_and_survives_a_restart(tmp_path) -> None:
    clock = FakeClock()
    with reporter(tmp_path, clock, 0.5) as rep:
        while rep.report("s.rr", True).status != "not_sampled":
            clock.t += DAY
        assert rep.budget_remaining("s.rr") == 3
        pending = rep.stats().pending
    with reporter(tmp_path, clock, 0.5) as rep:  # the same device, restarted the same day
        assert {rep.report("s.rr", False).status for _ in range(5)} == {"not_sampled"}
        assert rep.budget_remaining("s.rr") == 3 and rep.stats().pending == pending


ALMOST_ALL = 1 - 2**-52  # β < 1, so a draw is made, that takes part unless the draw is one of the top 2 of 2^53


def _draws(path: Path) -> list[tuple[str, int, int]]:
    with sqlite3.connect(path / DB_FILE) as conn:
        return [(str(m), int(d), int(u)) for m, d, u in conn.execute("SELECT metric, day, draw FROM sampling")]


def test_a_refused_report_keeps_the_days_draw(tmp_path: Path) -> None:
    """One decision per metric and day even when the first report of the day is refused. Version 1 (β = 1: no
    draw) spends the day's one report; version 2 (β < 1, pinned by an app update the same day) then draws and is
    refused by the daily budget. Its draw stays (before: the refusal rolled it back, and each later report of the
    day drew again), and every later report of the day reads that same draw."""
    clock = FakeClock()
    v1 = MetricSpec(name="s.rr", params=RrParams(epsilon=1.0), reports_per_day=1)
    with Reporter(NOWHERE, "t", tmp_path, start=False, clock=clock, sleep=clock.sleep, specs=[v1],
                  policy=OPEN_POLICY) as rep:
        assert rep.report("s.rr", True).queued
    assert _draws(tmp_path) == []
    v2 = replace(v1, version=2, sample_rate=ALMOST_ALL)
    with Reporter(NOWHERE, "t", tmp_path, start=False, clock=clock, sleep=clock.sleep, specs=[v2],
                  policy=OPEN_POLICY) as rep:
        assert rep.report("s.rr", False).status == "budget_exceeded"
        kept = _draws(tmp_path)
        assert len(kept) == 1 and kept[0][0] == "s.rr"  # the refused report's draw, kept
        for value in (True, False, True):
            assert rep.report("s.rr", value).status == "budget_exceeded"
            assert _draws(tmp_path) == kept  # read, never drawn again
        assert rep.stats().refused_budget == 4 and rep.stats().not_sampled == 0


def test_the_rule_is_an_integer_threshold_on_53_csprng_bits() -> None:
    assert sampling.threshold(1.0) == 1 << 53 and sampling.threshold(0.5) == 1 << 52
    assert sampling.threshold(0.05) == math.floor(0.05 * 2**53)
    assert all(0 <= sampling.new_draw() < 1 << 53 for _ in range(1000))
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE sampling(metric TEXT, day INTEGER, draw INTEGER, PRIMARY KEY(metric, day))")
    conn.execute("INSERT INTO sampling VALUES ('m', 7, ?)", (sampling.threshold(0.3) - 1,))
    assert sampling.takes_part(conn, "m", 7, 0.3) and not sampling.takes_part(conn, "m", 7, 0.29)
    assert sampling.takes_part(conn, "never-drawn", 7, 1.0)
    assert conn.execute("SELECT COUNT(*) FROM sampling WHERE metric = 'never-drawn'").fetchone()[0] == 0


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, 1.5, float("nan"), float("inf"), True, "0.5", None])
def test_sample_rate_is_validated(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="sample_rate"):
        spec(bad)  # type: ignore[arg-type]


def test_sample_rate_round_trips_and_older_sdks_never_see_the_default() -> None:
    assert "sample_rate" not in spec(1.0).to_dict()
    s = spec(0.05)
    assert MetricSpec.from_json(s.to_json()) == s and s.to_dict()["sample_rate"] == 0.05
    assert not s.same_privatization(spec(0.5))  # changing β is a new version
    # one draw covers the day: the day's composition (report_charge × reports_per_day) is what is amplified
    assert s.amplified_epsilon == pytest.approx(math.log(1 + 0.05 * (math.exp(s.daily_epsilon) - 1)))
    assert s.daily_epsilon > s.effective_epsilon or s.reports_per_day == 1
    assert amplified_epsilon(2.0, 1.0) == pytest.approx(2.0)
    assert "ingest server" in AMPLIFIED_EPSILON_NOTE and "does not know" in AMPLIFIED_EPSILON_NOTE
    assert "one day" in AMPLIFIED_EPSILON_NOTE and "not amplified across days" in AMPLIFIED_EPSILON_NOTE
