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


def test_typical_values_give_each_variants_own_variance_and_pick_the_variant() -> None:
    """Issue 24 §4: the automatic variant takes dhm by its worst case, but the variance of a mean is the
    average of each device's report variance (test_mean checks that closed form against simulation), and
    onebit's C² − t² is smallest at the ends. On data piled near lo (most values within 2% of the range)
    onebit wins at ε = 4 and ``plan`` must say so; on data around the centre dhm still wins."""
    import numpy as np

    z = 1.959963984540054
    skewed = np.random.default_rng(1).exponential(100.0, 5000)  # range [0, 10000]: t near −1
    rows = plan_mean(lo=0, hi=10_000, n=50_000, epsilons=(4,), typical=skewed)
    by = {r.shape.split()[-1]: r for r in rows if r.mechanism == "mean"}
    for variant, row in by.items():
        p = MeanParams(epsilon=4, lo=0, hi=10_000, variant=variant)
        per = float(np.mean(p.report_variance(p.t_of(np.quantile(skewed, np.linspace(0, 1, 1001))))))
        assert row.typical_var_t == pytest.approx(per, rel=1e-6)  # the variance takes t unquantized (2^-V apart)
        assert row.typical_mean_error == pytest.approx(z * 5000 * math.sqrt(per / 50_000), rel=1e-6)
    assert by["onebit"].typical_var_t < by["dhm"].typical_var_t and by["onebit"].worst_var_t > by["dhm"].worst_var_t
    assert by["onebit"].chosen and not by["dhm"].chosen
    centred = plan_mean(lo=0, hi=10_000, n=50_000, epsilons=(4,), typical=[5000.0])
    assert [r.shape.split()[-1] for r in centred if r.chosen] == ["dhm"]
    plain = plan_mean(lo=0, hi=10_000, n=50_000, epsilons=(4,))
    assert [r.shape.split()[-1] for r in plain if r.chosen] == ["dhm"] and all(r.typical_var_t is None for r in plain)


def test_cli_plan_takes_a_guessed_mean_or_a_pilot(tmp_path) -> None:
    pilot = tmp_path / "pilot.txt"
    pilot.write_text("# seconds\n10\n20\n15\n30\n")
    code, out, err = run_cli("plan", "--range", "0", "10000", "--reports", "50000", "--error", "1%", "--epsilon", "4",
                             "--pilot", str(pilot))
    assert code == 0, err
    assert "typical Var_t" in out and "* mean" in out and "4 pilot values" in out
    chosen = next(line for line in out.splitlines() if line.startswith("* mean"))
    assert "onebit" in chosen
    code, out, err = run_cli("plan", "--range", "0", "10000", "--reports", "50000", "--error", "1%", "--epsilon", "4",
                             "--mean-guess", "5000", "--format", "json")
    doc = json.loads(out)
    assert "guessed mean 5000" in doc["typical"]
    assert [r["shape"] for r in doc["rows"] if r["chosen"]] == ["[0, 10000] dhm"]
    pilot.write_text("10\nten\n")
    code, _, err = run_cli("plan", "--range", "0", "1", "--reports", "10", "--error", "1%", "--pilot", str(pilot))
    assert code == 2 and "one number" in err and "'ten'" in err
    code, _, err = run_cli("plan", "--range", "0", "1", "--reports", "10", "--error", "1%", "--pilot", str(tmp_path / "none"))
    assert code == 2 and "cannot read" in err
    code, _, err = run_cli("plan", "--domain-size", "10", "--reports", "10", "--error", "1%", "--mean-guess", "3")
    assert code == 2 and "--range" in err
