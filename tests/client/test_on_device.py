"""Issue 29, on-device aggregation: ``Reporter.count()`` for event-count and unique-devices metrics.

* the tally is durable (a SIGKILLed app loses no committed count), bounded (a year of calls: one row per metric),
  holds nothing finer than the UTC day (counts at 00:00:01 and 23:59:59 leave identical rows) and is deleted when
  the server says the metric is retired;
* each period is reported once, during the next period, and the estimates through the real SDK path are within
  theory bands (fixed-seed values; the SDK's noise is the OS CSPRNG, so Z = 6 bands: see tests/stats.py);
* the longitudinal cost: a year of changing window bits (devices that toggle activity across periods) through the
  real Reporter: every release is charged ε_irr in the daily ledger and 2·ε∞ once in the lifetime ledger, and the
  real privacy loss between any two histories (``sequence_epsilon``) never exceeds what the ledgers charged; the
  empirical audit shows toggling costs more than the level bound 2·ε∞ (so per-release charging is needed).

Each metric name stands for one device where many devices are needed: the permanent randomized response and the
tally are keyed by the metric, so names are independent devices (as in test_longitudinal_adversarial).
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ldptel.client import CmsParams, MetricSpec, Reporter
from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms import mechanism_of
from ldptel.client.mechanisms.event_count import EventCountParams
from ldptel.client.mechanisms.event_histogram import EventHistogramParams
from ldptel.client.mechanisms.longitudinal import sequence_epsilon
from ldptel.client.mechanisms.rr import rr_split
from ldptel.client.mechanisms.state import SketchState
from ldptel.client.mechanisms.unique_devices import UniqueDevicesParams, releases_per_year
from ldptel.client.sdk import tally
from ldptel.client.sdk.ledger import lifetime_epsilon
from ldptel.client.sdk.memo import longitudinal_epsilon
from ldptel.client.sdk.store import DB_FILE
from ldptel.storage.registry import retire_metric
from tests.client.conftest import LiveServer
from tests.longitudinal_audit import History, audit
from tests.stats import assert_close_normal
from tests.wait import wait_until

DAY = 86_400
# A Thursday 00:00:01 UTC, day 20,000 = 2024-10-04 (a Friday); periods of 7 days start on day 20,006 (a multiple of 7)
DAY0 = 20_006  # the first day of a 7-day period (and of a 1-day one)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Path]:
    """A RAM-disk directory where there is one (thousands of sqlite commits), else tmp_path."""
    ram = Path("/dev/shm")
    if ram.is_dir() and os.access(ram, os.W_OK):
        base = Path(tempfile.mkdtemp(dir=ram))
        try:
            yield base
        finally:
            shutil.rmtree(base, ignore_errors=True)
    else:
        yield tmp_path


class Clock:
    def __init__(self, day: int, second: int = 1) -> None:
        self.t = float(day * DAY + second)

    def __call__(self) -> float:
        return self.t

    def next_day(self, days: int = 1) -> None:
        self.t += days * DAY


def _reporter(path: Path, specs: list[MetricSpec], clock: Clock) -> Reporter:
    return Reporter("http://127.0.0.1:9", "t", path, specs=specs, start=False, clock=clock, max_queue=10**6)


def _queued(path: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(path / DB_FILE) as conn:
        return [(str(m), int(d)) for m, d in conn.execute("SELECT metric, day FROM reports ORDER BY id")]


def _tallies(path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(path / DB_FILE) as conn:
        return [tuple(r) for r in conn.execute("SELECT * FROM tallies ORDER BY metric")]


def _estimate(params: object, reports: list[object]) -> tuple[np.ndarray, np.ndarray, int]:
    """Fold the privatized one-report batches with the mechanism's own server half and estimate."""
    mech = mechanism_of(params)
    shape, rows = mech.state_shape(params)
    state = SketchState(mech.name, np.zeros(shape, dtype=np.int64), np.zeros(rows, dtype=np.int64))
    mech.fold(params, reports, state)
    est = mech.estimate(params, state)
    return est.counts, est.stderr, est.n


# ------------------------------------------------------------------------------------------- the API
def test_count_and_report_each_refuse_the_other_kind_of_metric(storage: Path) -> None:
    ev = MetricSpec(name="ev", params=EventCountParams(epsilon=1, hi=10))
    plain = MetricSpec(name="plain", params=UniqueDevicesParams(epsilon=1, window_days=1).rr)
    rep = _reporter(storage, [ev, plain], Clock(DAY0))
    try:
        with pytest.raises(InvalidParameterError, match="count()"):
            rep.report("ev", 3)
        with pytest.raises(InvalidParameterError, match="report()"):
            rep.count("plain")
        for bad in (0, -1, 1 << 40, 1.5, True):
            with pytest.raises(InvalidParameterError):
                rep.count("ev", bad)  # type: ignore[arg-type]
        assert rep.count("unknown.metric").status == "no_spec"
        res = rep.count("ev", 3)
        assert res.status == "counted" and res.report is None  # nothing is privatized for the call itself
        assert _queued(storage) == []
    finally:
        rep.close(timeout=0)
    with pytest.raises(InvalidParameterError, match="reports_per_day"):
        MetricSpec(name="ev", params=EventCountParams(epsilon=1, hi=10), reports_per_day=2)


def test_each_period_is_reported_once_during_the_next_one(storage: Path) -> None:
    clock = Clock(DAY0)
    specs = [MetricSpec(name="ev", params=EventCountParams(epsilon=1, hi=10)),
             MetricSpec(name="u7", params=UniqueDevicesParams(epsilon=1, window_days=7))]
    rep = _reporter(storage, specs, clock)
    try:
        rep.count("ev", 2)
        rep.count("u7")
        rep.release_due()
        assert _queued(storage) == []  # the first day is not over
        clock.next_day()
        res = rep.count("ev")
        assert res.report is not None  # day DAY0's count, reported on the first call of the next day
        assert rep.count("ev").report is None and _queued(storage) == [("ev", DAY0 + 1)]
        for _ in range(6):  # the rest of the 7-day period: one event-count report a day, from the flush
            clock.next_day()
            rep.release_due()
        assert [d for m, d in _queued(storage) if m == "u7"] == [DAY0 + 7]  # the window, once, on its next period
        assert [d for m, d in _queued(storage) if m == "ev"] == list(range(DAY0 + 1, DAY0 + 8))
        clock.next_day(10)  # the app does not run for ten days: the skipped periods are never reported late
        rep.release_due()
        assert [d for m, d in _queued(storage) if m == "u7"] == [DAY0 + 7, DAY0 + 17]
        assert [d for m, d in _queued(storage) if m == "ev"] == [*range(DAY0 + 1, DAY0 + 8), DAY0 + 17]
    finally:
        rep.close(timeout=0)


def test_a_period_that_ended_while_the_app_was_closed_is_reported_by_the_next_reporter(storage: Path) -> None:
    clock = Clock(DAY0)
    spec = MetricSpec(name="ev", params=EventCountParams(epsilon=1, hi=10))
    rep = _reporter(storage, [spec], clock)
    rep.count("ev", 4)
    rep.close(timeout=0)
    clock.next_day()
    rep = _reporter(storage, [spec], clock)  # start-up reports the day that ended
    try:
        assert _queued(storage) == [("ev", DAY0 + 1)]
    finally:
        rep.close(timeout=0)


def test_the_upload_thread_reports_a_period_that_ended_without_a_count(storage: Path) -> None:
    clock = Clock(DAY0)
    rep = Reporter("http://127.0.0.1:9", "t", storage, clock=clock, flush_interval=0.05,
                   specs=[MetricSpec(name="u1", params=UniqueDevicesParams(epsilon=1, window_days=1))])
    try:
        rep.count("u1")
        clock.next_day()  # the app keeps running and never counts again
        wait_until(lambda: rep.stats().queued == 1, timeout=30, what="the background thread's release")
    finally:
        rep.close(timeout=0)


# -------------------------------------------------------------------------------- the local state
def test_the_tally_survives_a_sigkill_of_the_app(tmp_path: Path) -> None:
    script = f"""
import os, signal
from ldptel.client import MetricSpec, Reporter
from ldptel.client.mechanisms.unique_devices import UniqueDevicesParams
from ldptel.client.mechanisms.event_count import EventCountParams
from ldptel.client.mechanisms.event_histogram import EventHistogramParams
specs = [MetricSpec(name="ev", params=EventCountParams(epsilon=1, hi=100)),
         MetricSpec(name="u28", params=UniqueDevicesParams(epsilon=1, window_days=28))]
rep = Reporter("http://127.0.0.1:9", "t", {str(tmp_path)!r}, specs=specs, start=False,
               clock=lambda: {DAY0 * DAY + 100.0})
for _ in range(37):
    assert rep.count("ev").status == "counted"
assert rep.count("ev", 5).status == "counted" and rep.count("u28").status == "counted"
os.kill(os.getpid(), signal.SIGKILL)  # no close(), no checkpoint: the process dies here
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with sqlite3.connect(tmp_path / DB_FILE) as conn:
        assert tally.get(conn, "ev") == tally.Tally(day=DAY0, count=42, seen=1, released=DAY0 - 1)
        assert tally.get(conn, "u28") == tally.Tally(day=DAY0, count=1, seen=1, released=DAY0 // 28 - 1)
    clock = Clock(DAY0 + 1)  # restarted the next day: yesterday's count is reported from the durable tally
    rep = _reporter(tmp_path, [MetricSpec(name="ev", params=EventCountParams(epsilon=1, hi=100))], clock)
    try:
        assert _queued(tmp_path) == [("ev", DAY0 + 1)]
    finally:
        rep.close(timeout=0)


def test_a_year_of_calls_keeps_one_bounded_row_per_metric(storage: Path) -> None:
    clock = Clock(DAY0)
    windows = (1, 7, 28, 30)
    specs = [MetricSpec(name="ev", params=EventCountParams(epsilon=1, hi=50))]
    specs += [MetricSpec(name=f"u{w}", params=UniqueDevicesParams(epsilon=0.5, window_days=w)) for w in windows]
    rng = np.random.default_rng(29)
    rep = _reporter(storage, specs, clock)
    try:
        for _day in range(366):
            calls = int(rng.integers(0, 4))
            for _ in range(calls):
                for spec in specs:
                    rep.count(spec.name, int(rng.integers(1, 1000)))
            rep.release_due()
            rows = _tallies(storage)
            assert len(rows) <= len(specs)
            for row in rows:  # metric, day, count, seen, released: integers below fixed bounds
                assert 0 <= row[3] < 1 << tally.BITMAP_DAYS and 0 <= row[2] <= tally.MAX_COUNT
            clock.next_day()
        queued = _queued(storage)
    finally:
        rep.close(timeout=0)
    assert len(_tallies(storage)) == len(specs)
    for w in windows:  # one report per period, never more: at most the yearly figure the docs state
        days = [d for m, d in queued if m == f"u{w}"]
        assert len(days) == len({d // w for d in days}) <= releases_per_year(w)
    assert len([d for m, d in queued if m == "ev"]) <= 366


def test_nothing_finer_than_the_day_is_kept(tmp_path: Path) -> None:
    dumps = []
    for second in (1, DAY - 1):  # 00:00:01 and 23:59:59 of the same UTC day
        path = tmp_path / str(second)
        clock = Clock(DAY0 + 3, second)
        rep = _reporter(path, [MetricSpec(name="u7", params=UniqueDevicesParams(epsilon=1, window_days=7))], clock)
        for _ in range(3):
            rep.count("u7")
        rep.close(timeout=0)
        dumps.append(_tallies(path))
    assert dumps[0] == dumps[1] == [("u7", DAY0 + 3, 3, 1, DAY0 // 7 - 1)]
    with sqlite3.connect(tmp_path / "1" / DB_FILE) as conn:
        columns = [c[1] for c in conn.execute("PRAGMA table_info(tallies)")]
    assert columns == ["metric", "day", "count", "seen", "released"]


def test_a_clock_set_back_keeps_counting_into_the_latest_day(storage: Path) -> None:
    clock = Clock(DAY0 + 5)
    rep = _reporter(storage, [MetricSpec(name="u7", params=UniqueDevicesParams(epsilon=1, window_days=7))], clock)
    try:
        rep.count("u7")
        clock.t -= 3 * DAY
        rep.count("u7")
        assert _tallies(storage) == [("u7", DAY0 + 5, 2, 1, DAY0 // 7 - 1)]
    finally:
        rep.close(timeout=0)


def test_retirement_deletes_the_tally(live: LiveServer, app_token: str, tmp_path: Path) -> None:
    """A real ingest server retires the metric: the device's next spec refresh says so, and the tally row and the
    cached spec are gone (count() answers no_spec); another metric's tally stays."""
    live.create(MetricSpec(name="u7", params=UniqueDevicesParams(epsilon=1, window_days=7)))
    live.create(MetricSpec(name="ev", params=EventCountParams(epsilon=1, hi=10)))
    clock = Clock(int(time.time() // DAY))
    rep = Reporter(live.url, app_token, tmp_path, start=False, clock=clock, spec_ttl=60, metrics=["u7", "ev"])
    try:
        assert rep.wait_for_specs(10)
        assert rep.count("u7").status == "counted" and rep.count("ev").status == "counted"
        assert [r[0] for r in _tallies(tmp_path)] == ["ev", "u7"]
        retire_metric(live.redis, "u7")
        clock.t += 61  # past the spec TTL: the next call marks it for a refresh, the next cycle fetches it
        assert rep.count("u7").status == "counted"
        rep.flush(timeout=5)
        assert [r[0] for r in _tallies(tmp_path)] == ["ev"]
        assert rep.count("u7").status == "no_spec"
        assert [r[0] for r in _tallies(tmp_path)] == ["ev"]
    finally:
        rep.close(timeout=0)


# ------------------------------------------------------------------------------- estimates, theory bands
def test_event_count_estimates_events_per_device_and_the_total_within_theory(storage: Path) -> None:
    devices, hi = 600, 20
    params = EventCountParams(epsilon=2, hi=hi)
    counts = np.random.default_rng(5).poisson(4.0, devices)
    counts[:30] = 40  # some devices above the clip bound: reported as hi
    specs = [MetricSpec(name=f"d{i}", params=params) for i in range(devices)]
    clock = Clock(DAY0)
    rep = _reporter(storage, specs, clock)
    try:
        for spec, c in zip(specs, counts.tolist(), strict=True):
            if c:
                rep.count(spec.name, c)
            else:
                rep.count(spec.name)  # the device has the tally; its day has one event less below
        truth = np.clip(np.maximum(counts, 1), 0, hi)
        clock.next_day()
        reports = []
        for spec in specs:
            res = rep.count(spec.name)  # the first call of the next day reports yesterday's count
            assert res.report is not None
            reports.append(res.report)
    finally:
        rep.close(timeout=0)
    est, se, n = _estimate(params, reports)
    assert n == devices
    assert_close_normal(float(est[0]), float(truth.mean()), float(se[0]), n=n, what="events per device per day")
    assert_close_normal(float(est[1]), float(truth.sum()), float(se[1]), n=n, what="total events")


def test_event_histogram_buckets_a_days_count_within_theory(storage: Path) -> None:
    devices = 600
    params = EventHistogramParams(epsilon=2, edges=(0.0, 1.0, 2.0, 5.0, 10.0, 50.0))
    counts = np.random.default_rng(6).geometric(0.2, devices)  # ≥ 1; a few above 50: clipped into the last bucket
    specs = [MetricSpec(name=f"d{i}", params=params) for i in range(devices)]
    clock = Clock(DAY0)
    rep = _reporter(storage, specs, clock)
    try:
        for spec, c in zip(specs, counts.tolist(), strict=True):
            rep.count(spec.name, c)
        clock.next_day()
        reports = [rep.count(spec.name).report for spec in specs]
    finally:
        rep.close(timeout=0)
    assert all(r is not None for r in reports)
    est, se, n = _estimate(params, reports)
    truth = np.bincount(np.clip(np.searchsorted(params.edges, counts, side="right") - 1, 0, 4), minlength=5)
    assert n == devices
    for b in range(5):
        assert_close_normal(float(est[b]), float(truth[b]), float(se[b]), n=n, what=f"bucket {b}")


@pytest.mark.parametrize("window", [1, 7, 30])
def test_unique_devices_estimate_is_within_theory(storage: Path, window: int) -> None:
    devices = 800
    params = UniqueDevicesParams(epsilon=1, window_days=window)
    rng = np.random.default_rng(window)
    active = rng.random(devices) < 0.3
    active_day = rng.integers(0, window, devices)  # the one day of the window each active device saw the event
    specs = [MetricSpec(name=f"d{i}", params=params) for i in range(devices)]
    start = DAY0 // window * window + window  # the first day of a period
    clock = Clock(start - 1)
    rep = _reporter(storage, specs, clock)
    try:
        for spec in specs:
            rep.count(spec.name)  # the day before the period: every device has the tally (reports 0 if inactive)
        for day in range(window):
            clock.t = float((start + day) * DAY + 1)
            for i in np.flatnonzero(active & (active_day == day)).tolist():
                rep.count(specs[i].name, 3)
        clock.t = float((start + window) * DAY + 1)
        reports = []
        for spec in specs:
            res = rep.count(spec.name)
            assert res.report is not None
            reports.append(res.report)
    finally:
        rep.close(timeout=0)
    est, se, n = _estimate(params, reports)
    assert n == devices
    assert_close_normal(float(est[1]), float(active.sum()), float(se[1]), n=n, what=f"unique devices ({window}-day window)")


# ----------------------------------------------------------------------- the longitudinal cost, a year long
def _year(storage: Path, schedule: list[bool], params: UniqueDevicesParams) -> tuple[list[int], list[float], float]:
    """One device through a year: active on the days of ``schedule``. (release periods, ε charged on each release
    day by the daily ledger, lifetime ε∞ charged)."""
    clock = Clock(DAY0)
    rep = _reporter(storage, [MetricSpec(name="u", params=params)], clock)
    periods: list[int] = []
    charges: list[float] = []
    try:
        rep.count("u")  # day 0: the device starts its tally
        for day, active in enumerate(schedule):
            clock.t = float((DAY0 + 1 + day) * DAY + 1)
            before = len(_queued(storage))
            if active:
                rep.count("u")
            rep.release_due()
            with sqlite3.connect(storage / DB_FILE) as conn:
                row = conn.execute("SELECT epsilon FROM ledger WHERE metric = 'u' AND day = ?", (DAY0 + 1 + day,)).fetchone()
                lifetime = lifetime_epsilon(conn, "u")
            if len(_queued(storage)) > before:
                periods.append((DAY0 + 1 + day) // params.window_days - 1)
                charges.append(float(row[0]))
            else:
                assert row is None  # no release, no charge
    finally:
        rep.close(timeout=0)
    return periods, charges, lifetime


@pytest.mark.parametrize("window", [7, 28])
def test_a_year_of_toggling_activity_is_charged_what_it_can_leak(storage: Path, window: int) -> None:
    """Devices that toggle activity every period (and other changing schedules) through the real Reporter for a year:
    each release is charged ε_irr, the level 2·ε∞ once, and the claimed loss between any two histories of those
    releases is at most what the daily ledger charged in total (equal for histories that differ in every release)."""
    params = UniqueDevicesParams(epsilon=1, window_days=window)
    channel = mechanism_of(params).permanent_channel(params)
    assert channel is not None
    eps_irr, eps_inf = channel.epsilon_irr, rr_split(params.rr).epsilon_inf
    toggling = [((DAY0 + 1 + i) // window) % 2 == 0 for i in range(365)]  # active every other window period
    periods, charges, lifetime = _year(storage, toggling, params)
    assert periods == list(range(periods[0], periods[0] + len(periods)))  # every period once, in order
    assert len(periods) <= releases_per_year(window)
    assert charges == pytest.approx([eps_irr] * len(periods))
    assert lifetime == pytest.approx(2 * eps_inf)
    def active(day: int) -> bool:
        return day == DAY0 or (0 <= day - DAY0 - 1 < len(toggling) and toggling[day - DAY0 - 1])

    bits = [any(active(d) for d in range(p * window, p * window + window)) for p in periods]  # the true window bits
    assert True in bits and False in bits  # the bit changes over the year
    total = sum(charges)
    flipped = [not b for b in bits]
    for other in (flipped, [False] * len(bits), [True] * len(bits), bits[1:] + bits[:1]):
        assert sequence_epsilon(params, bits, other) <= total * (1 + 1e-9)
    # against an idle device, every active window is one release that differs: k·ε_irr, charged
    assert sequence_epsilon(params, bits, [False] * len(bits)) == pytest.approx(sum(bits) * eps_irr)
    # the same change times, every level swapped: the lifetime 2·ε∞ covers it (the lifetime ledger's charge)
    assert sequence_epsilon(params, bits, flipped) <= lifetime * (1 + 1e-9)


def test_the_privacy_note_states_the_releases_per_year() -> None:
    from ldptel.client.mechanisms.longitudinal import longitudinal_note

    note = longitudinal_note(UniqueDevicesParams(epsilon=1, window_days=7))
    assert "one report per 7-day period, at most 54 a year" in note and "ε ≤ 89.5" in note and "3.31" in note
    assert "one report per day, at most 366 a year" in longitudinal_note(EventCountParams(epsilon=1, hi=10))
    assert [releases_per_year(w) for w in (1, 7, 28, 30)] == [366, 54, 15, 14]


def test_toggling_leaks_more_than_the_level_bound_so_each_release_is_charged() -> None:
    """The empirical audit (20,000 simulated devices per history, 99.9% Clopper–Pearson) of a device active every
    other window against one never active: above 2·ε∞ (the level bound would under-charge it), below the claim."""
    params = UniqueDevicesParams(epsilon=1, window_days=7)
    releases = 12
    toggling, idle = [i % 2 == 0 for i in range(releases)], [False] * releases
    claim = sequence_epsilon(params, toggling, idle)
    found = audit(params, History.daily(toggling), History.daily(idle), lo=False, hi=True, n=20_000, seed=29)
    assert found.epsilon <= claim
    assert found.epsilon > 2 * rr_split(params.rr).epsilon_inf, found
    assert math.isclose(claim, (releases // 2) * mechanism_of(params).permanent_channel(params).epsilon_irr)  # type: ignore[union-attr]



# ------------------------------------------------- a release the sampling, the daily or the lifetime ledger refuses
def _ledger_rows(path: Path, metric: str) -> list[tuple[int, int]]:
    with sqlite3.connect(path / DB_FILE) as conn:
        return [(int(d), int(c)) for d, c in conn.execute(
            "SELECT day, count FROM ledger WHERE metric = ? ORDER BY day", (metric,))]


def _lifetime(path: Path, metric: str) -> float:
    with sqlite3.connect(path / DB_FILE) as conn:
        return lifetime_epsilon(conn, metric)


@pytest.mark.parametrize("rate", [1.0, 1 - 2**-52], ids=["every-day", "sampled"])
def test_a_release_past_the_lifetime_bound_is_refused_and_changes_nothing(
    live: LiveServer, app_token: str, tmp_path: Path, rate: float
) -> None:
    """Served unique-devices versions at ε = 1 then 2 (a new privatization: 2·ε∞ = 3.31, then 5.38 more, past the
    default policy's 8): the release under the second is refused as ``policy_refused`` in one rolled-back
    transaction: no lifetime or daily charge, nothing queued, the period still due and the call's count not
    recorded (the tally row unchanged); it stays refused on the next call. With β < 1 (a draw that takes part
    unless it is one of the top 2 of 2^53) the day's draw is all the refusal keeps, and the next call reads it
    (before: the rollback took it, and each call drew again)."""
    v1 = live.create(MetricSpec(name="u", params=UniqueDevicesParams(epsilon=1, window_days=1), sample_rate=rate))
    clock = Clock(int(time.time() // DAY) - 2)  # the days reported are within the server's retry horizon
    rep = Reporter(live.url, app_token, tmp_path, start=False, clock=clock, spec_ttl=60, metrics=["u"])
    try:
        assert rep.wait_for_specs(10)
        assert rep.count("u").status == "counted"
        clock.next_day()
        first = rep.count("u")
        assert first.report is not None and first.version == v1.version  # the first day's period, charged 2·ε∞
        charged = _lifetime(tmp_path, "u")
        assert charged == pytest.approx(longitudinal_epsilon(v1))
        v2 = live.create(MetricSpec(name="u", params=UniqueDevicesParams(epsilon=2, window_days=1), sample_rate=rate))
        assert charged + longitudinal_epsilon(v2) > 8.0 >= longitudinal_epsilon(v2)
        clock.t += 61  # past the spec TTL: the next call marks it for a refresh, the flush fetches v2
        assert rep.count("u").status == "counted"
        rep.flush(timeout=5)
        clock.next_day()
        before = (_tallies(tmp_path), _ledger_rows(tmp_path, "u"), rep.stats().queued)
        assert before[1] == [(clock.t // DAY - 1, 1)]
        draws = []
        for _ in range(2):
            res = rep.count("u", 5)
            assert res.status == "policy_refused" and res.version == v2.version and res.report is None
            assert res.reason is not None and res.reason.startswith("longitudinal_epsilon")
            assert _lifetime(tmp_path, "u") == charged
            assert (_tallies(tmp_path), _ledger_rows(tmp_path, "u"), rep.stats().queued) == before
            with sqlite3.connect(tmp_path / DB_FILE) as conn:  # the refused release's day
                draws.append(conn.execute("SELECT draw FROM sampling WHERE metric = 'u' AND day = ?",
                                          (clock.t // DAY,)).fetchall())
        assert draws[0] == draws[1] and len(draws[0]) == (0 if rate == 1 else 1)
    finally:
        rep.close(timeout=0)


def test_a_release_the_daily_budget_refuses_is_dropped_and_the_period_counts_as_reported(storage: Path) -> None:
    """The day's budget was spent by an earlier version of the metric (one reported with report()): the release of
    the day before is refused by the daily ledger, counted as ``refused_budget``; nothing is privatized, queued or
    charged (neither ledger: the unique-devices level 2·ε∞ is charged only with a report), the call's count is
    kept, and that period is never reported late; the next period is reported and charged."""
    clock = Clock(DAY0)
    ud = MetricSpec(name="m", params=UniqueDevicesParams(epsilon=1, window_days=1))
    rep = _reporter(storage, [ud], clock)
    assert rep.count("m", 2).status == "counted"
    rep.close(timeout=0)
    clock.next_day()
    plain = MetricSpec(name="m", params=CmsParams(epsilon=1, k=4, m=64), version=2)
    rep = _reporter(storage, [plain], clock)
    assert rep.report("m", "x").queued  # the day's one report: its budget is spent
    rep.close(timeout=0)
    assert _ledger_rows(storage, "m") == [(DAY0 + 1, 1)] and _lifetime(storage, "m") == 0.0
    rep = _reporter(storage, [replace(ud, version=3)], clock)  # start-up: the release of day DAY0 is refused
    try:
        assert (rep.stats().refused_budget, rep.stats().queued) == (1, 0)
        res = rep.count("m", 3)
        assert res.status == "counted" and res.report is None
        assert _ledger_rows(storage, "m") == [(DAY0 + 1, 1)] and _lifetime(storage, "m") == 0.0
        assert _tallies(storage) == [("m", DAY0 + 1, 3, 0b11, DAY0)]
        rep.release_due()
        assert (rep.stats().refused_budget, rep.stats().queued) == (1, 0)  # not tried again, never reported late
        clock.next_day()
        res = rep.count("m")
        assert res.report is not None and rep.stats().queued == 1  # the next period is reported and charged
        assert _ledger_rows(storage, "m") == [(DAY0 + 1, 1), (DAY0 + 2, 1)]
        assert _lifetime(storage, "m") == pytest.approx(longitudinal_epsilon(ud))
    finally:
        rep.close(timeout=0)


def test_a_release_on_a_day_the_device_is_not_sampled_is_dropped(storage: Path) -> None:
    """``sample_rate`` 1/2: on a day the device does not take part, the release is dropped (``not_sampled``, nothing
    queued or charged in either ledger, the day's draw kept) and that period is never reported late; on the other
    days it is queued and charged once (the lifetime 2·ε∞ with the first). Over 60 days both kinds of day occur,
    but with probability 2·2^-60."""
    clock = Clock(DAY0)
    spec = MetricSpec(name="ev", params=UniqueDevicesParams(epsilon=1, window_days=1), sample_rate=0.5)
    rep = _reporter(storage, [spec], clock)
    days = list(range(DAY0 + 1, DAY0 + 61))
    sampled: list[int] = []
    try:
        rep.count("ev")
        for day in days:
            clock.next_day()
            before = rep.stats()
            res = rep.count("ev")
            after = rep.stats()
            assert res.status == "counted"
            assert (after.queued - before.queued, after.not_sampled - before.not_sampled) in ((1, 0), (0, 1))
            assert (res.report is not None) == (after.queued > before.queued)
            if res.report is not None:
                sampled.append(day)
            rep.release_due()
            assert rep.stats() == after  # a dropped period is not tried again
            with sqlite3.connect(storage / DB_FILE) as conn:
                drawn = conn.execute("SELECT COUNT(*) FROM sampling WHERE metric = 'ev' AND day = ?", (day,)).fetchone()
            assert drawn[0] == 1  # the day's draw is kept either way
            assert [c for d, c in _ledger_rows(storage, "ev") if d == day] == ([1] if sampled[-1:] == [day] else [])
            assert _lifetime(storage, "ev") == pytest.approx(longitudinal_epsilon(spec) if sampled else 0.0)
        assert 0 < len(sampled) < len(days)
        assert [d for m, d in _queued(storage)] == sampled
    finally:
        rep.close(timeout=0)
