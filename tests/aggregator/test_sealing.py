"""Sealing through the real pipeline (appender → fold worker → ``ldptel seal`` / ``aggregate --once --seal``): every
estimator of every mechanism kind returns identical results before and after sealing, roll-ups and retention."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import redis as redis_lib

from ldptel.aggregator.discover import discover_metric
from ldptel.aggregator.query import estimate_by_day, estimate_metric
from ldptel.client import CmsParams, GrrParams, MetricSpec, RrParams
from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms import Discovering, Sketch, mechanism_of
from ldptel.client.mechanisms.registry import mechanism_names
from ldptel.client.protocol.params import ParamsBase
from ldptel.storage import keys, registry, sealed
from ldptel.storage import sketches as store
from tests.aggregator.agg_helpers import append_reports, create, drain, run_cli


def _kinds() -> dict[str, tuple[ParamsBase, Callable[[int], Any]]]:
    from ldptel.client.mechanisms.daily_mean import DailyMeanParams
    from ldptel.client.mechanisms.discovery import PemParams
    from ldptel.client.mechanisms.event_count import EventCountParams
    from ldptel.client.mechanisms.event_histogram import EventHistogramParams
    from ldptel.client.mechanisms.hcms import HcmsParams
    from ldptel.client.mechanisms.histogram import HistogramParams
    from ldptel.client.mechanisms.mean import MeanParams
    from ldptel.client.mechanisms.oue_cms import OueCmsParams
    from ldptel.client.mechanisms.unique_devices import UniqueDevicesParams

    return {
        "rr": (RrParams(epsilon=2.0), lambda i: i % 3 == 0),
        "grr": (GrrParams(epsilon=2.0, domain=("a", "b", "c")), lambda i: "abc"[i % 3]),
        "cms": (CmsParams(epsilon=4.0, k=16, m=64), lambda i: f"/p/{i * i % 7}"),
        "hcms": (HcmsParams(epsilon=4.0, k=16, m=64), lambda i: f"/p/{i * i % 7}"),
        "oue-cms": (OueCmsParams(epsilon=4.0, k=16, m=64), lambda i: f"/p/{i * i % 7}"),
        "pem": (PemParams(epsilon=4.0, k=32, m=256, max_bytes=9, hash_seed=4), lambda i: f"w{i * i % 5}"),
        "mean": (MeanParams(epsilon=2.0, lo=0, hi=100), lambda i: float(i * 7 % 100)),
        "num-histogram": (HistogramParams(epsilon=4.0, edges=(0.0, 10.0, 50.0, 100.0)), lambda i: float(i * 7 % 100)),
        "daily-mean": (DailyMeanParams(epsilon=1.0, lo=0, hi=3600), lambda i: float(i * 37 % 3600)),
        "event-count": (EventCountParams(epsilon=2.0, hi=20), lambda i: i * 7 % 25),
        "event-histogram": (EventHistogramParams(epsilon=2.0, edges=(0.0, 1.0, 3.0, 10.0, 30.0)), lambda i: i * 7 % 40),
        "unique-devices": (UniqueDevicesParams(epsilon=2.0, window_days=1), lambda i: i % 3 == 0),  # asked days shift by one
    }


DAYS = ("2026-02-27", "2026-02-28", "2026-03-01", "2026-03-02", "2026-03-04")  # a gap, and a 2/4/8-day block edge
CANDIDATES = [f"/p/{i}" for i in range(7)]


def test_every_mechanism_kind_is_covered() -> None:
    assert set(_kinds()) == set(mechanism_names())


def _answers(r: redis_lib.Redis, name: str, params: ParamsBase) -> dict[str, Any]:
    """Every estimate the metric gives over a few ranges (as the JSON the CLI and dashboard serve)."""
    mechanism = mechanism_of(params)
    out: dict[str, Any] = {}
    ranges = [(None, None), (DAYS[1], DAYS[3]), (DAYS[2], DAYS[2])]
    for lo, hi in ranges:
        if isinstance(mechanism, Discovering):
            out[f"discover {lo} {hi}"] = discover_metric(r, name, day_from=lo, day_to=hi).to_dict()
        if isinstance(mechanism, Sketch):
            cands = CANDIDATES if not isinstance(mechanism, Discovering) else [f"w{i}" for i in range(5)]
            estimators = ("plain",) if isinstance(mechanism, Discovering) else ("plain", "both")  # pem: no corrected estimator
            for estimator in estimators:
                out[f"{estimator} {lo} {hi}"] = estimate_metric(
                    r, name, day_from=lo, day_to=hi, candidates=cands, estimator=estimator, postprocess="none").to_dict()
            out[f"by-day {lo} {hi}"] = estimate_by_day(r, name, day_from=lo, day_to=hi, candidates=cands,
                                                       estimator=estimators[-1]).to_dict()
        else:
            out[f"plain {lo} {hi}"] = estimate_metric(r, name, day_from=lo, day_to=hi).to_dict()
            out[f"by-day {lo} {hi}"] = estimate_by_day(r, name, day_from=lo, day_to=hi).to_dict()
    return out


@pytest.mark.parametrize("kind", sorted(_kinds()))
def test_estimates_are_identical_before_and_after_sealing(redis: redis_lib.Redis, rng: np.random.Generator, kind: str) -> None:
    params, value = _kinds()[kind]
    name = f"m-{kind}"
    record = create(redis, MetricSpec(name=name, params=params), shards=3)  # type: ignore[arg-type]
    for j, day in enumerate(DAYS):
        append_reports(redis, record, [value(i + 31 * j) for i in range(240 + 40 * j)], rng, day=day, batch_size=60)
    drain(redis)
    before = _answers(redis, name, params)
    report = sealed.seal_metric(redis, name, horizon_days=3)
    assert report.days_sealed == len(DAYS) and report.shard_states_merged > len(DAYS) and report.rollups_built > 0
    assert not any(store.sketch_index(redis, name, 3).values())  # read from sealed states only now
    assert json.dumps(_answers(redis, name, params), sort_keys=True) == json.dumps(before, sort_keys=True)


def test_ldptel_seal_and_aggregate_once_seal(redis: redis_lib.Redis, rng: np.random.Generator, env_url: str) -> None:
    a = create(redis, MetricSpec(name="a", params=GrrParams(epsilon=2.0, domain=("x", "y"))), shards=2)
    b = create(redis, MetricSpec(name="b", params=RrParams(epsilon=2.0)), shards=2)
    for day in DAYS[:3]:
        append_reports(redis, a, ["x", "y", "x"] * 30, rng, day=day)
        append_reports(redis, b, [True, False] * 40, rng, day=day)
    drain(redis)
    want = estimate_metric(redis, "a").to_dict()
    code, out, err = run_cli("seal", "--metric", "a")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(x["metric"], x["days_sealed"]) for x in lines] == [("a", 3)]
    assert estimate_metric(redis, "a").to_dict() == want
    assert any(store.sketch_index(redis, "b", 2).values())  # only the metric asked for
    code, out, err = run_cli("aggregate", "--once", "--seal")
    assert code == 0, err
    assert not any(store.sketch_index(redis, "b", 2).values())
    assert sealed.read_view(redis, "b").days and redis.exists(keys.sealed_index("b"))
    assert run_cli("aggregate", "--seal")[0] == 2  # --seal is for --once
    assert run_cli("seal", "--metric", "nope")[0] == 2


def test_retention_from_the_registry_and_by_day_says_when_a_period_is_coarser(
    redis: redis_lib.Redis, rng: np.random.Generator, env_url: str,
) -> None:
    record = create(redis, MetricSpec(name="old", params=GrrParams(epsilon=2.0, domain=("x", "y"))), shards=2)
    days = ["2026-01-05", "2026-01-06", "2026-01-20", "2026-02-10"]  # 01-05 … 01-20 in one 32-day block
    for day in days:
        append_reports(redis, record, ["x", "y", "y"] * 20, rng, day=day)
    drain(redis)
    whole = estimate_metric(redis, "old").to_dict()
    registry.set_retention(redis, "old", 30)
    assert registry.get_metric(redis, "old").retention_days == 30
    code, out, err = run_cli("seal")
    assert code == 0, err
    assert json.loads(out.splitlines()[0])["states_dropped"] > 0
    assert estimate_metric(redis, "old").to_dict()["n"] == whole["n"]
    one = estimate_metric(redis, "old", day_from="2026-01-06", day_to="2026-01-06")
    assert one.days == ("2026-01-05", "2026-01-06", "2026-01-20") and "Coarser than a day" in one.note
    daily = estimate_by_day(redis, "old")
    assert [res.days for res in daily.results][0] == ("2026-01-05", "2026-01-06", "2026-01-20")
    assert "Coarser than a day" in daily.results[0].note
    assert daily.to_dict()["days"] == ["2025-12-26..2026-01-26", "2026-01-27..2026-02-27"]  # the roll-ups' spans
    code, out, err = run_cli("estimate", "old", "--by-day", "--format", "csv")
    assert code == 0, err
    assert {row.split(",")[0] for row in out.splitlines()[1:]} == {"2025-12-26..2026-01-26", "2026-01-27..2026-02-27"}


def test_retention_in_the_metrics_file_and_the_cli(redis: redis_lib.Redis, env_url: str, tmp_path: Any) -> None:
    path = tmp_path / "metrics.toml"
    path.write_text('[metrics.a]\nmechanism = "rr"\nepsilon = 1\nretention_days = 45\n')
    code, out, err = run_cli("metrics", "plan", str(path))
    assert code == 0, err
    assert "~ a: retention_days forever → 45" in out and registry.list_metrics(redis) == []
    code, out, err = run_cli("metrics", "apply", str(path))
    assert code == 0, err
    assert registry.get_metric(redis, "a").retention_days == 45
    assert run_cli("metrics", "diff", str(path))[0] == 0  # applied: no difference left
    path.write_text('[metrics.a]\nmechanism = "rr"\nepsilon = 1\nretention_days = 10\n')
    code, out, _ = run_cli("metrics", "diff", str(path))
    assert code == 1 and "retention_days 45 → 10" in out
    path.write_text('[metrics.a]\nmechanism = "rr"\nepsilon = 1\nretention_days = -1\n')
    code, _, err = run_cli("metrics", "apply", str(path))
    assert code == 2 and "retention_days" in err
    assert registry.get_metric(redis, "a").retention_days == 45  # nothing written
    code, out, err = run_cli("metrics", "retention", "a", "--days", "7", "--format", "json")
    assert code == 0 and json.loads(out)["retention_days"] == 7, err
    code, out, err = run_cli("metrics", "retention", "a", "--forever")
    assert code == 0 and "retention_days: forever" in out, err
    assert registry.get_metric(redis, "a").retention_days is None
    assert run_cli("metrics", "retention", "a", "--days", "-3")[0] == 2
    assert run_cli("metrics", "retention", "nope", "--days", "3")[0] == 2


def test_a_following_worker_seals_in_its_loop(redis: redis_lib.Redis, rng: np.random.Generator) -> None:
    import threading

    from ldptel.aggregator.worker import Worker, WorkerConfig
    from tests.wait import wait_until

    record = create(redis, MetricSpec(name="live", params=GrrParams(epsilon=2.0, domain=("x", "y"))), shards=2)
    ingested = [append_reports(redis, record, ["x", "y"] * 30, rng, day=day) for day in DAYS[:2]]
    worker = Worker(redis, WorkerConfig(seal_seconds=0.2, checkpoint_seconds=0.05, block_seconds=0.1, rescan_seconds=0.2))
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        view = wait_until(lambda: (v := sealed.read_view(redis, "live")).days and len(v.days) == 2 and v,
                          what="the worker to seal both days")
    finally:
        worker.stop()
        thread.join(30)
    assert view and view.days == {(1, sealed.day_number(d)): ing.n for d, ing in zip(DAYS[:2], ingested, strict=True)}
    assert not any(store.sketch_index(redis, "live", 2).values())
    want = ingested[0].expected_state()
    want.add_inplace(ingested[1].expected_state())
    got = sealed.summed_state(redis, "live", params=record.current.params, version=1, shards=2)
    assert got.state.equals(want) and got.days == DAYS[:2]


def test_the_dashboard_list_shows_sealed_days_and_their_reports(redis: redis_lib.Redis, rng: np.random.Generator) -> None:
    from ldptel.aggregator.dashboard.overview import metric_list

    record = create(redis, MetricSpec(name="d", params=GrrParams(epsilon=2.0, domain=("x", "y"))), shards=3)
    for j, day in enumerate(DAYS):
        append_reports(redis, record, ["x", "y"] * (20 + j), rng, day=day, batch_size=10)
    drain(redis)
    before = metric_list(redis)[0]
    sealed.seal_metric(redis, "d", horizon_days=3, today=dt.date(2026, 3, 8))  # seals all but 03-04
    assert any(store.sketch_index(redis, "d", 3).values())  # one day still per shard: both kinds in the list
    after = metric_list(redis)[0]
    assert after["days_by_version"] == before["days_by_version"] == {"1": list(DAYS)}
    assert after["reports_by_day"] == before["reports_by_day"]


def test_an_entry_of_a_sealed_day_goes_to_the_dead_letters_whole_not_into_the_day(
    redis: redis_lib.Redis, rng: np.random.Generator,
) -> None:
    record = create(redis, MetricSpec(name="late", params=GrrParams(epsilon=2.0, domain=("x", "y"))), shards=2)
    for day in DAYS[:2]:
        append_reports(redis, record, ["x", "y"] * 30, rng, day=day)
    drain(redis)
    sealed.seal_metric(redis, "late", horizon_days=3)
    want = estimate_metric(redis, "late").to_dict()
    # an ingest whose clock is days behind would stamp a past day (nothing else can: append.lua, module docs)
    late = append_reports(redis, record, ["x"] * 40, rng, day=DAYS[0], batch_size=20)
    stats = drain(redis)
    assert stats.dead == len(late.batches) and stats.reports == 0
    letters = [fields for s in range(2) for _, fields in redis.xrange(keys.dead_letters("late", s))]
    assert len(letters) == len(late.batches)
    assert all(b"already sealed" in f[b"error"] and f[b"d"] == DAYS[0].encode() and f[b"b"] for f in letters)
    # the estimate is unchanged; its central ε may not be: the late uploads were released (a smaller block of the
    # day, at rest in the dead letters) before the fold refused them, and the bound counts every released block
    assert {k: v for k, v in estimate_metric(redis, "late").to_dict().items() if k != "central"} == {
        k: v for k, v in want.items() if k != "central"}
    assert sealed.seal_metric(redis, "late", horizon_days=3).late_states == []


def test_a_metric_that_cannot_be_sealed_does_not_stop_the_worker(redis: redis_lib.Redis, rng: np.random.Generator) -> None:
    import threading

    from ldptel.aggregator.worker import Worker, WorkerConfig
    from tests.wait import wait_until

    bad = create(redis, MetricSpec(name="bad", params=GrrParams(epsilon=2.0, domain=("x", "y"))), shards=1)
    good = create(redis, MetricSpec(name="good", params=GrrParams(epsilon=2.0, domain=("x", "y"))), shards=1)
    append_reports(redis, bad, ["x"] * 20, rng, day=DAYS[0])
    append_reports(redis, good, ["y"] * 20, rng, day=DAYS[0])
    drain(redis)
    redis.set(keys.sketch("bad", 0, 1, DAYS[0]), b"not a sketch state")  # unreadable: its day cannot be sealed
    worker = Worker(redis, WorkerConfig(seal_seconds=0.2, checkpoint_seconds=0.05, block_seconds=0.1, rescan_seconds=0.2))
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_until(lambda: worker.errors().get("seal", 0) >= 2 and sealed.read_view(redis, "good").days,
                   what="the bad metric to fail twice and the good one to be sealed")
        today = dt.datetime.now(dt.UTC).date().isoformat()  # a day that is not sealed
        append_reports(redis, good, ["x"] * 10, rng, day=today)
        wait_until(lambda: worker.stats().reports == 10, what="the worker to keep folding")
    finally:
        worker.stop()
        thread.join(30)
    assert redis.get(keys.sketch("bad", 0, 1, DAYS[0])) == b"not a sketch state"  # left as it was


def test_a_sealer_whose_clock_is_days_ahead_does_not_seal_a_day_that_can_still_receive_reports(
    redis: redis_lib.Redis, rng: np.random.Generator,
) -> None:
    """The aggregator host's clock 10 days ahead: Redis's own TIME bounds the sealable days, so today (and the
    retry horizon before it) stays open, and what ingest acknowledges today is folded, never dead-lettered."""
    now = int(redis.time()[0])
    today = dt.datetime.fromtimestamp(now, dt.UTC).date()
    old = (today - dt.timedelta(days=30)).isoformat()
    record = create(redis, MetricSpec(name="skew", params=GrrParams(epsilon=2.0, domain=("x", "y"))), shards=2)
    append_reports(redis, record, ["x", "y"] * 10, rng, day=old)
    first = append_reports(redis, record, ["x", "y"] * 20, rng, day=today.isoformat())
    drain(redis)
    sealed.seal_metric(redis, "skew", horizon_days=3, today=today + dt.timedelta(days=10))
    view = sealed.read_view(redis, "skew")
    sealed_days = {day for _, day in view.days}
    assert sealed.day_number(old) in sealed_days  # old days still seal
    assert max(sealed_days) <= sealed.day_number(today.isoformat()) - 3 - 2
    later = append_reports(redis, record, ["y"] * 40, rng, day=today.isoformat(), batch_size=20)
    stats = drain(redis)
    assert stats.dead == 0 and stats.reports == later.batches[0].n * len(later.batches)
    assert not any(redis.xlen(keys.dead_letters("skew", s)) for s in range(2))
    assert first.batches  # today's first reports were folded into an open (unsealed) day


def _execs(r: redis_lib.Redis) -> int:
    return int(r.info("commandstats").get("cmdstat_exec", {}).get("calls", 0))


def test_a_metrics_file_is_applied_in_one_transaction_with_its_retention(redis: redis_lib.Redis, env_url: str,
                                                                         tmp_path: Any) -> None:
    """A file's specs, retention_days and min_reports are written by ONE MULTI/EXEC (a crash between separate writes
    left the new specs without their retention: a half-applied file); a bad setting writes nothing at all; the
    list shows each metric's retention."""
    path = tmp_path / "metrics.toml"
    path.write_text('[metrics.a]\nmechanism = "rr"\nepsilon = 1\nretention_days = 45\nmin_reports = 5\n'
                    '[metrics.b]\nmechanism = "rr"\nepsilon = 1\n')
    before = _execs(redis)
    code, _out, err = run_cli("metrics", "apply", str(path))
    assert code == 0, err
    assert _execs(redis) - before == 1
    a = registry.get_metric(redis, "a")
    assert (a.retention_days, a.min_reports) == (45, 5)
    path.write_text('[metrics.a]\nmechanism = "rr"\nepsilon = 2\nretention_days = 9\nmin_reports = 6\n'
                    '[metrics.b]\nmechanism = "rr"\nepsilon = 1\nretention_days = 30\n')
    before = _execs(redis)
    code, _out, err = run_cli("metrics", "apply", str(path))
    assert code == 0, err
    assert _execs(redis) - before == 1  # a new version of a, and both retentions, together
    a, b = registry.get_metric(redis, "a"), registry.get_metric(redis, "b")
    assert (a.current_version, a.retention_days, a.min_reports, b.retention_days) == (2, 9, 6, 30)
    code, out, err = run_cli("metrics", "list")
    assert code == 0, err
    header, *rows = out.splitlines()
    assert "retention" in header.split()
    by_name = {row.split()[0]: row.split() for row in rows if row.split() and row.split()[0] in ("a", "b")}
    assert "9d" in by_name["a"] and "30d" in by_name["b"]
    # settings are checked before anything is written: nothing of the batch lands
    spec = registry.get_metric(redis, "b").current
    with pytest.raises(InvalidParameterError):
        registry.register_metrics(redis, [(dataclasses.replace(spec, name="c"), None), (spec, None)],
                                  settings={"b": {"retention_days": -1}})
    with pytest.raises(InvalidParameterError):
        registry.register_metrics(redis, [(dataclasses.replace(spec, name="c"), None)], settings={"zz": {"min_reports": 3}})
    assert [rec.name for rec in registry.list_metrics(redis)] == ["a", "b"]
