"""Secret sampling on the aggregator side: fleet counts ĉ/β are unbiased and their intervals (which add the sampling
by β) cover the fleet's count; the amplified ε appears only with the sentence saying whom it holds against."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import redis as redis_lib

from ldptel.aggregator.fleet import fleet_estimate
from ldptel.client.mechanisms import mechanism_of
from ldptel.client.mechanisms.rr import RrParams
from ldptel.client.mechanisms.state import SketchState
from ldptel.client.protocol.specs import AMPLIFIED_EPSILON_NOTE
from ldptel.storage import registry
from tests.aggregator.agg_helpers import append_reports, drain, run_cli
from tests.stats import assert_close_normal, assert_coverage

FLEET, TRUE = 20_000, 6_000  # devices; devices whose value is true
R = 5000  # datasets per β: the coverage band ±0.02 is ≥ 6 standard errors wide


@pytest.mark.slow
@pytest.mark.parametrize("beta", [0.05, 0.5])
def test_fleet_counts_are_unbiased_and_their_intervals_cover(beta: float) -> None:
    """Each dataset: every device of the fleet takes part with probability β (as the SDK decides), the
    reporting devices privatize (rr, ε = 2), the reports are folded and estimated, and scaled by 1/β."""
    params = RrParams(epsilon=2.0)
    mech = mechanism_of(params)
    values = np.zeros(FLEET, bool)
    values[:TRUE] = True
    rng = np.random.default_rng(int(beta * 100))
    est, covered, covered_without_sampling = [], [], []
    for _ in range(R):
        took_part = values[rng.random(FLEET) < beta]
        state = mech.fold(params, [mech.privatize_batch(took_part, params, rng=rng)], SketchState.empty(params))
        e = mech.estimate(params, state)
        fleet = fleet_estimate(e, beta, epsilon=params.effective_epsilon)
        c, se = float(fleet.counts[1]), float(fleet.stderr[1])
        est.append(c)
        covered.append(abs(c - TRUE) <= fleet.z * se)
        covered_without_sampling.append(abs(c - TRUE) <= fleet.z * float(e.stderr[1]) / beta)
    arr = np.array(est)
    assert_close_normal(float(arr.mean()), TRUE, float(arr.std(ddof=1)) / np.sqrt(R), n=R, what=f"fleet count β={beta}")
    assert_coverage(np.array(covered), nominal=0.95, band=(0.93, 0.97), what=f"fleet interval β={beta}")
    if beta == 0.05:  # the sampling by β is most of the variance: leaving it out under-covers badly
        assert np.mean(covered_without_sampling) < 0.85


@pytest.fixture
def sampled(redis: redis_lib.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator) -> None:
    monkeypatch.setenv("LDPTEL_REDIS_URL", redis_url)
    code, _, err = run_cli("metrics", "create", "dark", "--mechanism", "rr", "--epsilon", "2", "--sample-rate", "0.05")
    assert code == 0, err
    append_reports(redis, registry.get_metric(redis, "dark"), (rng.random(2000) < 0.3).tolist(), rng, day="2026-03-01")
    drain(redis)


def test_estimate_shows_the_fleet_and_the_amplified_epsilon_with_whom_it_holds_against(sampled: None, redis: redis_lib.Redis) -> None:
    code, out, err = run_cli("estimate", "dark")
    assert code == 0, err
    assert "stderr: randomization" in out.splitlines()[0]
    assert "fleet (sample_rate 0.05" in out and "population uncertainty" in out
    amplified = [ln for ln in out.splitlines() if "amplified ε" in ln]
    assert len(amplified) == 1 and AMPLIFIED_EPSILON_NOTE in amplified[0]
    code, out, err = run_cli("estimate", "dark", "--format", "json")
    doc = json.loads(out)
    assert doc["uncertainty"] == "randomization" and "population" in doc["population"]["meaning"]
    fleet = doc["fleet"]
    assert fleet["sample_rate"] == 0.05 and fleet["amplified_epsilon_note"] == AMPLIFIED_EPSILON_NOTE
    # rr at ε = 2, one report a day: the day costs ε_irr (the report's charge beside its permanent response), and
    # that day's composition is what the secret sample amplifies, not the one-shot ε = 2 (ln(1 + 0.05(e² − 1)) = 0.277)
    spec = registry.get_metric(redis, "dark").current
    assert fleet["epsilon"] == pytest.approx(spec.daily_epsilon) and spec.daily_epsilon > 2.0
    assert fleet["amplified_epsilon"] == pytest.approx(math.log1p(0.05 * math.expm1(spec.daily_epsilon)))
    assert fleet["amplified_epsilon"] > 0.3
    by_value = {r["value"]: r for r in doc["rows"]}
    assert fleet["rows"][1]["estimate"] == pytest.approx(by_value["true"]["estimate"] / 0.05)
    assert fleet["devices"] == pytest.approx(2000 / 0.05)
    pop = {r["value"]: r for r in doc["population"]["rows"]}
    assert pop["true"]["stderr"] > by_value["true"]["stderr"]


def test_metrics_show_carries_the_note_and_bad_rates_are_refused(sampled: None) -> None:
    code, out, err = run_cli("metrics", "show", "dark")
    assert code == 0, err
    current = json.loads(out)["current"]
    assert current["sample_rate"] == 0.05 and current["amplified_epsilon_note"] == AMPLIFIED_EPSILON_NOTE
    for bad in ("0", "1.5", "nan"):
        code, out, err = run_cli("metrics", "create", "bad", "--mechanism", "rr", "--epsilon", "1", "--sample-rate", bad)
        assert code == 2 and "sample_rate" in err, err


def test_a_metrics_file_sets_the_sample_rate_and_changing_it_is_a_new_version(sampled: None, tmp_path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('[metrics.dark]\nmechanism = "rr"\nepsilon = 2\nsample_rate = 0.5\n')
    code, out, err = run_cli("metrics", "plan", str(path), "--format", "json")
    assert code == 0, err
    assert "sample_rate" in out and "version" in out
    path.write_text('[metrics.dark]\nmechanism = "rr"\nepsilon = 2\nsample_rate = 2\n')
    code, out, err = run_cli("metrics", "plan", str(path))
    assert code == 2 and "sample_rate" in err, err
