"""The central ε of real shuffled days: reports through the shuffle stage (ldptel.storage.shuffle), folded by a real
worker, estimated from a real Redis; a day whose block was released under n_min is "not applicable"."""

from __future__ import annotations

import json

import numpy as np
import pytest
import redis as redis_lib

from ldptel.aggregator.amplification import shuffle_epsilon
from ldptel.aggregator.query import estimate_by_day, estimate_metric
from ldptel.client import MetricSpec, RrParams
from tests.aggregator.agg_helpers import append_reports, create, drain, run_cli

shuffle = pytest.importorskip("ldptel.storage.shuffle")
if not hasattr(shuffle, "release_stats"):  # pragma: no cover - before the shuffle stage lands
    pytest.skip("the shuffle stage has no release statistics on this branch", allow_module_level=True)

BIG, SMALL = "2026-03-01", "2026-03-02"


@pytest.fixture
def shuffled(redis: redis_lib.Redis, rng: np.random.Generator, env_url: str) -> MetricSpec:
    """20,000 reports from 40 uploads on BIG, released as one block; 50 reports from 5 uploads on SMALL, released
    under n_min = 10 at the hold bound (0 s here)."""
    record = create(redis, MetricSpec(name="flag", params=RrParams(epsilon=2.0)), shards=1)
    append_reports(redis, record, [bool(i % 3) for i in range(20_000)], rng, day=BIG, batch_size=500)
    drain(redis, shuffle=shuffle.ShuffleConfig(n_min=10, max_block_uploads=0))
    append_reports(redis, record, [True] * 50, rng, day=SMALL, batch_size=10)
    drain(redis, shuffle=shuffle.ShuffleConfig(n_min=10, hold_seconds=0, max_block_uploads=0))  # held too long
    return record.current


def test_a_day_released_as_one_block_has_its_central_epsilon(redis: redis_lib.Redis, shuffled: MetricSpec) -> None:
    res = estimate_metric(redis, "flag", day_from=BIG, day_to=BIG)
    central = res.to_dict()["central"]
    assert res.n == 20_000 and central["applicable"] is True, central
    assert central["n"] == 20_000 and central["epsilon0"] == shuffled.report_charge  # rr: ε₀ is ε_irr
    assert central["epsilon"] == shuffle_epsilon(shuffled.report_charge, 20_000, 1e-6) < shuffled.report_charge
    code, out, _ = run_cli("estimate", "flag", "--day", BIG)
    assert code == 0 and f"central ε {central['epsilon']:.3f} at δ 1e-06" in out.splitlines()[-1]


def test_a_block_under_n_min_makes_its_day_and_the_range_not_applicable(redis: redis_lib.Redis,
                                                                        shuffled: MetricSpec) -> None:
    small = estimate_metric(redis, "flag", day_from=SMALL, day_to=SMALL).to_dict()["central"]
    assert small["applicable"] is False and small["condition"] == "not_shuffled" and "n_min" in small["reason"]
    whole = estimate_metric(redis, "flag").to_dict()["central"]
    assert whole["applicable"] is False and whole["reason"].startswith(f"day {SMALL}:")
    daily = estimate_by_day(redis, "flag").to_dict()
    assert [d["central"]["applicable"] for d in daily["daily"]] == [True, False]
    code, out, _ = run_cli("estimate", "flag", "--by-day", "--format", "json")
    assert code == 0 and json.loads(out)["central"]["applicable"] is False
