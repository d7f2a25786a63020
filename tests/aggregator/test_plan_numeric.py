"""The numeric planner (``plan_mean``, ``ldptel plan --range``) against ldp-math-2 §1.3's worked number and
the mechanisms' own variance."""

from __future__ import annotations

import json
import math

import pytest

from ldptel.aggregator.plan import plan_mean
from ldptel.client.mechanisms.mean import MeanParams
from tests.aggregator.agg_helpers import run_cli


def test_worst_case_half_widths_match_the_reference_worked_number() -> None:
    """Session length on [0, 600] s, n = 10⁵, ε = 4: 95% half-width of the mean 1.93 s (1BitMean) and 0.73 s (dHM)."""
    rows = {r.mechanism: r for r in plan_mean(lo=0, hi=600, n=100_000, epsilons=(4,), error=1.0)}
    assert rows["daily-mean"].mean_error == pytest.approx(1.93, abs=0.005)
    assert rows["mean"].mean_error == pytest.approx(0.73, abs=0.01)
    dhm = MeanParams(epsilon=4, lo=0, hi=600)
    assert rows["mean"].worst_var_t == pytest.approx(dhm.worst_case_variance(), rel=1e-9)
    z = 1.959963984540054
    assert rows["mean"].reports_needed == math.ceil(z * z * 300**2 * dhm.worst_case_variance())
    assert rows["daily-mean"].bits_per_report == 1


def test_cli_plan_range(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run_cli("plan", "--range", "0", "600", "--reports", "100000", "--error", "0.5%", "--epsilon", "4")
    assert code == 0, err
    assert "target ± 3" in out and "dhm" in out
    code, out, err = run_cli("plan", "--range", "0", "600", "--reports", "100000", "--error", "1%", "--format", "json")
    doc = json.loads(out)
    assert doc["error"] == 6.0 and {r["mechanism"] for r in doc["rows"]} == {"mean", "daily-mean"}
    code, _, err = run_cli("plan", "--reports", "10", "--error", "1%")
    assert code == 2 and "--domain-size" in err and "--range" in err
