"""The Reporter against the real ingest app on loopback (real Redis): delivery, retries, backoff, 409, memo."""

from __future__ import annotations

import os
import random
import sqlite3
import textwrap
import threading

import numpy as np
import pytest

from ldptel.client import CmsParams, GrrParams, HcmsParams, MetricSpec, OueCmsParams, RrParams, encode_batch, privatize
from ldptel.client.errors import InvalidParameterError, LdpError
from ldptel.client.sdk.reporter import MAX_BATCH_SIZE, Reporter, UploadError
from ldptel.client.sdk.store import DB_FILE
from ldptel.client.sdk.transport import Backoff, classify, parse_retry_after
from tests.client.conftest import OPEN_POLICY, FakeClock, LiveServer

DAY = 86_400


def cms(name: str = "app.page", **kw: object) -> MetricSpec:
    return MetricSpec(name=name, params=CmsParams(epsilon=4.0, k=16, m=1024), reports_per_day=kw.pop("rpd", 1000))  # type: ignore[arg-type]


def _sync(url: str, token: str, path, clock: FakeClock, **kw: object) -> Reporter:
    kw.setdefault("policy", OPEN_POLICY)
    return Reporter(url, token, path, start=False, clock=clock, sleep=clock.sleep, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- delivery
def test_reports_are_delivered_once_with_the_spec_fetched_from_the_server(live: LiveServer, app_token, tmp_path, clock) -> None:
    specs = [
        live.create(cms("a.cms")),
        live.create(MetricSpec(name="a.rr", params=RrParams(epsilon=1.0), reports_per_day=100)),
        live.create(MetricSpec(name="a.grr", params=GrrParams(epsilon=2.0, domain=("x", "y", "z")), reports_per_day=100)),
        live.create(MetricSpec(name="a.hcms", params=HcmsParams(epsilon=2.0, k=8, m=64), reports_per_day=100)),
        live.create(MetricSpec(name="a.oue", params=OueCmsParams(epsilon=2.0, k=8, m=64), reports_per_day=100)),
    ]
    values = {"a.cms": "p", "a.rr": True, "a.grr": "y", "a.hcms": "h", "a.oue": "o"}
    rep = _sync(live.url, app_token, tmp_path, clock, batch_size=7, metrics=[s.name for s in specs])
    assert rep.wait_for_specs(10)
    for spec in specs:
        for i in range(20):
            v = values[spec.name]
            assert rep.report(spec.name, v if not isinstance(v, str) or spec.mechanism == "grr" else f"{v}{i % 4}").queued
    assert rep.flush(timeout=10)
    st = rep.stats()
    assert (st.pending, st.delivered, st.retries) == (0, 100, 0)
    for spec in specs:
        got = live.delivered(spec.name)
        assert got["total"] == 20 and got["per_version"] == {1: 20} and got["entries"] == 3  # 7 + 7 + 6
        assert len(set(got["batch_ids"])) == 3
    rep.close()


def test_server_down_reports_queue_and_go_out_when_it_returns(live: LiveServer, app_token, tmp_path, clock) -> None:
    spec = live.create(cms())
    errors: list[UploadError] = []
    rep = _sync(live.url, app_token, tmp_path, clock, specs=[spec], on_error=errors.append, backoff_base=2.0)
    live.stop()
    for i in range(30):
        assert rep.report(spec.name, f"v{i % 5}").queued
    assert rep.flush(timeout=100) is False  # refused connections: exponential backoff with jitter
    assert rep.stats().pending == 30 and live.delivered(spec.name)["total"] == 0
    assert len(clock.sleeps) >= 4
    for i, delay in enumerate(clock.sleeps):  # equal jitter: d/2 ≤ delay ≤ d, d = base·2^i
        d = min(2.0 * 2**i, 300.0)
        assert d / 2 <= delay <= d
    assert errors and all(e.outcome == "retry" and e.status is None for e in errors)
    # issue 31 §3: the message names where it tried (scheme, host, port), never the token
    assert all(f"network error reaching {live.url.rstrip('/')}:" in str(e) and app_token not in str(e) for e in errors)
    live.start()  # same port
    assert rep.flush(timeout=1000)
    assert live.delivered(spec.name)["total"] == 30
    assert rep.stats().delivered == 30
    rep.close()


def test_429_and_503_retry_after_are_honoured_with_an_injected_clock(proxy, live: LiveServer, app_token, tmp_path, clock) -> None:
    url, ctl = proxy
    ctl.clock = clock
    spec = live.create(cms())
    ctl.inject = [
        (429, {"Retry-After": "7", "Content-Type": "application/json"}, b'{"error":"rate_limited"}'),
        (503, {"Retry-After": "30"}, b""),
        (500, {}, b""),
    ]
    rep = _sync(url, app_token, tmp_path, clock, specs=[spec], batch_size=50)
    for i in range(10):
        rep.report(spec.name, f"v{i}")
    t0 = clock.t
    assert rep.flush(timeout=1000)
    posts = ctl.posts()
    assert [p.status for p in posts] == [429, 503, 500, 202]
    assert len({p.batch_id for p in posts}) == 1  # every retry is the same batch
    gaps = [b.at - a.at for a, b in zip(posts, posts[1:], strict=False)]
    assert 7 <= gaps[0] <= 7.7 and 30 <= gaps[1] <= 33  # Retry-After + at most 10% jitter, never earlier
    assert 2.0 <= gaps[2] <= 4.0  # third failure, no header: d = 4, equal jitter
    assert clock.sleeps == pytest.approx(gaps) and posts[0].at == t0
    assert live.delivered(spec.name)["total"] == 10
    assert rep.stats().retries == 3
    rep.close()


def test_retried_batch_is_counted_once_when_the_ack_is_lost(proxy, live: LiveServer, app_token, tmp_path, clock) -> None:
    """The server counts the batch but the answer never arrives; the retry is acknowledged as a duplicate."""
    url, ctl = proxy
    spec = live.create(cms())
    ctl.inject = []
    rep = _sync(url, app_token, tmp_path, clock, specs=[spec], timeout=0.5)
    for i in range(12):
        rep.report(spec.name, f"v{i}")
    ctl.hold_next_post = True
    assert rep.flush(timeout=1000)
    ctl.release.set()
    posts = ctl.posts()
    assert len(posts) == 2 and posts[0].batch_id == posts[1].batch_id
    assert b'"duplicate":true' in posts[1].body and b'"duplicate":false' in posts[0].body
    got = live.delivered(spec.name)
    assert got["total"] == 12 and got["entries"] == 1
    rep.close()


def test_409_refreshes_the_spec_and_drops_the_stale_batch(live: LiveServer, app_token, tmp_path, clock) -> None:
    live.create(cms())
    errors: list[UploadError] = []
    rep = _sync(live.url, app_token, tmp_path, clock, on_error=errors.append, metrics=["app.page"])
    assert rep.wait_for_specs(10)
    assert rep.report("app.page", "a").version == 1
    assert rep.report("app.page", "b").queued
    v2 = live.create(MetricSpec(name="app.page", params=CmsParams(epsilon=2.0, k=16, m=1024), reports_per_day=1000))
    assert v2.version == 2
    assert rep.flush(timeout=10)
    st = rep.stats()
    assert (st.dropped_stale, st.delivered) == (2, 0)
    assert [e.status for e in errors] == [409] and errors[0].outcome == "stale" and errors[0].n == 2
    res = rep.report("app.page", "a")  # the refreshed spec (from the 409 body) is used at once
    assert res.version == 2
    assert rep.flush(timeout=10)
    assert live.delivered("app.page")["per_version"] == {2: 1}
    rep.close()
    rep = _sync(live.url, app_token, tmp_path, clock)  # the refreshed spec is cached on disk
    assert rep.report("app.page", "c").version == 2
    rep.close(timeout=0)


def test_permanent_4xx_drops_and_counts_auth_errors_keep_the_batch(live: LiveServer, app_token, tmp_path, clock) -> None:
    live.create(cms())
    wrong = MetricSpec(name="app.page", params=CmsParams(epsilon=4.0, k=16, m=512), reports_per_day=10)
    errors: list[UploadError] = []
    rep = _sync(live.url, app_token, tmp_path / "a", clock, specs=[wrong], on_error=errors.append)
    rep.report("app.page", "x")
    assert rep.flush(timeout=10)  # 400: the batch does not match the server's params: dropped for good
    assert rep.stats().dropped_rejected == 1 and errors[-1].status == 400 and errors[-1].outcome == "rejected"
    rep.close()

    spec = live.create(cms())
    rep = _sync(live.url, "not-the-token", tmp_path / "b", clock, specs=[spec], on_error=errors.append)
    rep.report("app.page", "x")
    assert rep.flush(timeout=50) is False
    assert rep.stats().pending == 1 and errors[-1].status == 401 and errors[-1].outcome == "auth"
    assert "rejected the token" in str(errors[-1])  # regression: read "HTTP 401; will retry"
    rep.close(timeout=0)
    rep = _sync(live.url, app_token, tmp_path / "b", clock, specs=[spec])  # token fixed: delivered
    assert rep.flush(timeout=10) and live.delivered("app.page")["total"] == 1
    rep.close()


def test_unknown_metric_and_unreachable_server_return_no_spec(live: LiveServer, app_token, tmp_path, clock) -> None:
    errors: list[UploadError] = []
    rep = _sync(live.url, app_token, tmp_path, clock, on_error=errors.append)
    assert rep.report("nope", "x").status == "no_spec"  # at once; the fetch is requested
    assert not rep.wait_for_specs(10)  # fetched: 404
    assert [(e.outcome, e.status) for e in errors] == [("no_spec", 404)]
    live.create(cms("nope"))
    assert rep.report("nope", "x").status == "no_spec"  # negative cache: no refetch for a minute
    assert not rep.wait_for_specs(10) and len(errors) == 1
    clock.t += 61
    assert rep.report("nope", "x").status == "no_spec"  # requested again
    assert rep.wait_for_specs(10)
    assert rep.report("nope", "x").queued
    assert rep.stats().no_spec == 3
    rep.close()


def test_no_spec_errors_say_retired_unregistered_or_token_rejected(live: LiveServer, app_token, tmp_path, clock) -> None:
    """Regression: every case read "no usable spec for 'x' (HTTP 200)" or "(HTTP 401)"."""
    from ldptel.storage.registry import retire_metric

    live.create(cms("old.metric"))
    retire_metric(live.redis, "old.metric")
    errors: list[UploadError] = []
    rep = _sync(live.url, app_token, tmp_path / "a", clock, on_error=errors.append, metrics=["old.metric", "never.made"])
    assert not rep.wait_for_specs(10)
    messages = {e.metric: str(e) for e in errors}
    assert "'old.metric' is retired" in messages["old.metric"]
    assert "'never.made' is not registered" in messages["never.made"] and "create it first" in messages["never.made"]
    rep.close()
    errors.clear()
    rep = _sync(live.url, "wrong-token", tmp_path / "b", clock, on_error=errors.append, metrics=["old.metric"])
    assert not rep.wait_for_specs(10)
    assert errors[0].status == 401 and "rejected the token" in str(errors[0])
    rep.close()
    # A batch queued before its metric was retired: dropped, and the message says why.
    spec = live.create(cms("soon.retired"))
    errors.clear()
    rep = _sync(live.url, app_token, tmp_path / "c", clock, on_error=errors.append, specs=[spec])
    rep.report("soon.retired", "x")
    retire_metric(live.redis, "soon.retired")
    assert rep.flush(timeout=10)
    assert errors[-1].status == 409 and "'soon.retired' is retired; 1 reports dropped" in str(errors[-1])
    rep.close()


def test_on_error_exceptions_never_reach_the_app(live: LiveServer, app_token, tmp_path, clock) -> None:
    spec = live.create(cms())

    def bad_callback(err: UploadError) -> None:
        raise RuntimeError("callback bug")

    rep = _sync(live.url, "wrong-token", tmp_path, clock, specs=[spec], on_error=bad_callback)
    rep.report("app.page", "x")
    assert rep.flush(timeout=5) is False
    rep.close(timeout=0)


# ------------------------------------------------------------------------------ older on-device databases
# Schema 1 as SDKs before the removal of the unused ``batches.attempts`` column created it.
SCHEMA_1_WITH_ATTEMPTS = textwrap.dedent(
    """
    CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
    CREATE TABLE reports(id INTEGER PRIMARY KEY, metric TEXT NOT NULL, version INTEGER NOT NULL,
                         payload BLOB NOT NULL);
    CREATE TABLE batches(id INTEGER PRIMARY KEY, batch_id BLOB NOT NULL UNIQUE, metric TEXT NOT NULL,
                         version INTEGER NOT NULL, n INTEGER NOT NULL, body BLOB NOT NULL,
                         attempts INTEGER NOT NULL DEFAULT 0);
    CREATE TABLE ledger(metric TEXT NOT NULL, day INTEGER NOT NULL, count INTEGER NOT NULL, epsilon REAL NOT NULL,
                        PRIMARY KEY(metric, day)) WITHOUT ROWID;
    CREATE TABLE memo(key BLOB PRIMARY KEY, day INTEGER NOT NULL, payload BLOB NOT NULL) WITHOUT ROWID;
    CREATE TABLE specs(metric TEXT NOT NULL, version INTEGER NOT NULL, json TEXT NOT NULL,
                       PRIMARY KEY(metric, version)) WITHOUT ROWID;
    CREATE TABLE current_spec(metric TEXT PRIMARY KEY, version INTEGER NOT NULL, fetched REAL NOT NULL) WITHOUT ROWID;
    INSERT INTO meta(key, value) VALUES ('schema', 1);
    """
)


def test_a_database_with_the_old_attempts_column_keeps_working(live: LiveServer, app_token, tmp_path, clock) -> None:
    """A device upgraded from an SDK whose batches table had ``attempts``: its leftover batch and new reports
    are delivered, and the column is left alone (no migration needed)."""
    spec = live.create(cms())
    conn = sqlite3.connect(tmp_path / DB_FILE, isolation_level=None)
    conn.executescript(SCHEMA_1_WITH_ATTEMPTS)
    leftover_id = os.urandom(16)
    body = encode_batch(metric=spec.name, version=spec.version, batch_id=leftover_id,
                        batch=privatize("old", spec.params), params=spec.params)
    conn.execute("INSERT INTO batches(batch_id, metric, version, n, body, attempts) VALUES (?, ?, ?, 1, ?, 3)",
                 (leftover_id, spec.name, spec.version, body))
    conn.close()

    rep = _sync(live.url, app_token, tmp_path, clock, specs=[spec], batch_size=3)
    assert rep.stats().pending == 1
    for i in range(4):
        assert rep.report(spec.name, f"new{i}").queued
    assert rep.flush(timeout=10)
    assert (rep.stats().pending, rep.stats().delivered) == (0, 5)
    rep.close()
    got = live.delivered(spec.name)
    assert got["total"] == 5 and got["entries"] == 3 and leftover_id in got["batch_ids"]
    conn = sqlite3.connect(tmp_path / DB_FILE)
    assert "attempts" in {row[1] for row in conn.execute("PRAGMA table_info(batches)")}
    conn.close()


def test_new_databases_have_no_attempts_column(tmp_path) -> None:
    Reporter("http://127.0.0.1:9", "t", tmp_path, start=False).close(timeout=0)
    conn = sqlite3.connect(tmp_path / DB_FILE)
    assert "attempts" not in {row[1] for row in conn.execute("PRAGMA table_info(batches)")}
    conn.close()


# ---------------------------------------------------------------------------------------- memoization
def test_sketch_reports_are_memoized_per_value_and_day(tmp_path) -> None:
    specs = [MetricSpec(name=f"m.{p.mechanism}", params=p, reports_per_day=100) for p in
             (CmsParams(epsilon=1.0, k=16, m=1024), OueCmsParams(epsilon=1.0, k=16, m=256), HcmsParams(epsilon=1.0, k=64, m=1024))]
    clock = FakeClock()
    rep = _sync("http://127.0.0.1:9", "t", tmp_path, clock, specs=specs)

    def key(res) -> bytes:
        b = res.report
        return b"".join(x.tobytes() for x in (b.rows, b.cols, b.bits) if x is not None)

    for spec in specs:
        first = rep.report(spec.name, "same")
        repeats = [rep.report(spec.name, "same") for _ in range(5)]
        assert not first.memoized and all(r.memoized for r in repeats)
        assert {key(r) for r in repeats} == {key(first)}
        other = rep.report(spec.name, "other")
        assert not other.memoized
        clock.t += DAY  # a new budget day: a fresh privatization
        nxt = rep.report(spec.name, "same")
        assert not nxt.memoized and key(nxt) != key(first)
        clock.t -= DAY  # (the clock going back keeps the later day; memo of that day is reused)
        assert rep.report(spec.name, "same").memoized
        clock.t += 2 * DAY  # past the latest day, for the next mechanism
    rep.close(timeout=0)
    conn = sqlite3.connect(tmp_path / DB_FILE)
    days = {d for (d,) in conn.execute("SELECT DISTINCT day FROM memo")}
    assert len(days) == 1  # earlier days' memo rows are deleted at the day change
    conn.close()


def test_rr_repeats_share_one_permanent_response(tmp_path) -> None:
    """Through the Reporter, the PRR of a value is fixed per device: the IRR is the only fresh noise."""
    rr = MetricSpec(name="m.rr", params=RrParams(epsilon=0.5), reports_per_day=10_000)
    clock = FakeClock()
    rep = _sync("http://127.0.0.1:9", "t", tmp_path, clock, specs=[rr], max_queue=100_000)
    ones = sum(int(rep.report("m.rr", True).report.bits[0]) >> 7 for _ in range(3000))
    rep.close(timeout=0)
    from ldptel.client.mechanisms.rr import rr_split
    from ldptel.client.protocol.keyed import privatization_fingerprint, prr_stream
    from ldptel.client.sdk.memo import load_or_create_secret

    split = rr_split(rr.params)  # type: ignore[arg-type]
    f2 = split.irr_num / split.irr_den
    prr_bit = prr_stream(load_or_create_secret(tmp_path), "m.rr", privatization_fingerprint(rr.params), "rr", b"\x01").bits(split.bits) >= split.prr_threshold
    target = 1 - f2 if prr_bit else f2
    se = (f2 * (1 - f2) / 3000) ** 0.5
    assert abs(ones / 3000 - target) <= 6 * se


# --------------------------------------------------------------------------------------------- thread
def test_background_thread_uploads_reports_from_many_threads(live: LiveServer, app_token, tmp_path) -> None:
    spec = live.create(cms(rpd=10_000))
    with Reporter(live.url, app_token, tmp_path, batch_size=25, flush_interval=3600.0, metrics=[spec.name],
                  policy=OPEN_POLICY) as rep:
        assert rep.wait_for_specs(10)

        def work(t: int) -> None:
            for i in range(50):
                assert rep.report(spec.name, f"t{t}-{i % 10}").queued

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert rep.flush(timeout=20)
        assert rep.stats().delivered == 200
    got = live.delivered(spec.name)
    assert got["total"] == 200 and len(set(got["batch_ids"])) == got["entries"]
    assert rep.report(spec.name, "late").status == "closed"


def test_no_random_module_or_numpy_random_in_the_runtime(live: LiveServer, app_token, tmp_path, clock, monkeypatch) -> None:
    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("client runtime used a non-CSPRNG source")

    for name in ("random", "randint", "randrange", "getrandbits", "choice", "uniform", "randbytes", "SystemRandom"):
        monkeypatch.setattr(random, name, boom)
    for name in ("rand", "random", "randint", "bytes", "default_rng", "integers", "uniform", "choice"):
        if hasattr(np.random, name):
            monkeypatch.setattr(np.random, name, boom)
    specs = [live.create(cms()), live.create(MetricSpec(name="a.rr", params=RrParams(epsilon=1.0), reports_per_day=9)),
             live.create(MetricSpec(name="a.grr", params=GrrParams(epsilon=1.0, domain=("a", "b", "c")), reports_per_day=9))]
    rep = _sync(live.url, app_token, tmp_path, clock, metrics=[s.name for s in specs])
    assert rep.wait_for_specs(10)
    for spec, v in zip(specs, ("x", True, "b"), strict=True):
        assert rep.report(spec.name, v).queued
    assert rep.flush(timeout=10)
    rep.close()


@pytest.mark.parametrize("bad", [
    {"batch_size": 0}, {"batch_size": MAX_BATCH_SIZE + 1}, {"batch_size": 2.0}, {"max_queue": 0},
    {"flush_interval": 0}, {"timeout": -1.0}, {"spec_ttl": float("nan")}, {"backoff_base": True},
    {"backoff_cap": float("inf")}, {"specs": ["not a spec"]}, {"metrics": "app.page"}, {"metrics": ["Bad Name"]},
    {"token": ""}, {"endpoint": "ftp://example.com"},
    {"endpoint": "http://127.0.0.1:port"},
], ids=lambda kw: next(iter(kw)))
def test_constructor_arguments_are_checked_before_anything_is_created(tmp_path, bad: dict[str, object]) -> None:
    kw: dict[str, object] = {"endpoint": "http://127.0.0.1:9", "token": "t", "start": False, **bad}
    with pytest.raises(InvalidParameterError) as err:
        Reporter(storage_dir=tmp_path / "dev", **kw)  # type: ignore[arg-type]
    assert isinstance(err.value, LdpError) and isinstance(err.value, ValueError)  # `except ValueError` still works
    assert err.value.parameter == next(iter(bad))
    assert not (tmp_path / "dev").exists()


# --------------------------------------------------------------------------------------------- pieces
def test_status_classification_and_retry_after_parsing() -> None:
    assert [classify(s) for s in (200, 202, 409, 401, 403, 429, 408, 500, 503, 400, 404, 413)] == [
        "ack", "ack", "stale", "auth", "auth", "retry", "retry", "retry", "retry", "rejected", "rejected", "rejected"]
    assert parse_retry_after("12", 0.0) == 12.0
    assert parse_retry_after("-3", 0.0) == 0.0
    assert parse_retry_after("999999", 0.0) == 3600.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412480.0 - 30) == pytest.approx(30.0)
    assert parse_retry_after("soon", 0.0) is None and parse_retry_after(None, 0.0) is None


def test_backoff_is_exponential_with_equal_jitter_and_a_cap() -> None:
    lo = Backoff(base=1.0, cap=10.0, uniform=lambda: 0.0)
    hi = Backoff(base=1.0, cap=10.0, uniform=lambda: 0.999999)
    assert [round(lo.next_delay(), 3) for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert [round(hi.next_delay(), 3) for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert lo.next_delay(retry_after=7.0) == 7.0 and hi.next_delay(retry_after=7.0) == pytest.approx(7.7, abs=1e-5)
    lo.reset()
    assert lo.next_delay() == 0.5


# ------------------------------------------------------------------------------------ retry horizon
def test_a_batch_older_than_the_retry_horizon_is_dropped_not_sent(live: LiveServer, app_token, tmp_path, clock) -> None:
    """Issue 12: a batch formed, then kept by an outage past the retry horizon, is dropped and counted on the
    device (the server may have forgotten its id): it is never sent, so it cannot be counted twice."""
    spec = live.create(cms())
    errors: list[UploadError] = []
    rep = _sync(live.url, app_token, tmp_path, clock, specs=[spec], on_error=errors.append, batch_size=5,
                retry_horizon_days=2)
    live.stop()
    for i in range(10):
        assert rep.report(spec.name, f"v{i}").queued
    assert rep.flush(timeout=60) is False  # two batches formed today, kept through the outage
    clock.t += 3 * DAY
    live.start()
    assert rep.flush(timeout=60)
    st = rep.stats()
    assert (st.pending, st.delivered, st.dropped_too_old, st.dropped_rejected) == (0, 0, 10, 0)
    assert live.delivered(spec.name)["total"] == 0
    assert [e.outcome for e in errors if e.outcome != "retry"] == ["too_old", "too_old"]
    rep.close()


def test_a_422_batch_too_old_is_final_and_counted(live: LiveServer, app_token, tmp_path, clock) -> None:
    """A device whose horizon is longer than the server's: the server refuses (422 batch_too_old) and the SDK
    drops the batch for good (no retry loop), counted as too old; a batch within both horizons goes through."""
    spec = live.create(cms())
    rep = _sync(live.url, app_token, tmp_path, clock, specs=[spec], batch_size=5, retry_horizon_days=10)
    live.stop()
    for i in range(5):
        assert rep.report(spec.name, f"v{i}").queued
    assert rep.flush(timeout=60) is False
    clock.t += 4 * DAY  # past the server's default horizon of 3 days
    live.start()
    assert rep.flush(timeout=60)
    for i in range(5):
        assert rep.report(spec.name, f"w{i}").queued
    assert rep.flush(timeout=60)
    st = rep.stats()
    assert (st.pending, st.delivered, st.dropped_too_old, st.dropped_rejected, st.retries > 0) == (0, 5, 5, 0, True)
    assert live.delivered(spec.name)["total"] == 5
    rep.close()


# ------------------------------------------------------------------------------- the cost of each spec
def test_each_spec_is_charged_its_own_cost_when_a_freed_spec_s_id_is_reused(tmp_path) -> None:
    """The Reporter keeps each spec's cost keyed by (name, version, id(spec)). A served spec that a refresh replaces
    by another of the same version (a hostile or broken server) is freed, and Python gives the next object made the
    freed one's id: the new spec was charged the old one's ε (most of these 200 specs, before the cache held its
    specs). Now every spec gets its own cost."""
    rep = Reporter("http://127.0.0.1:9", "t", tmp_path / "db", start=False, specs=[cms()])
    try:
        wrong = []
        for i in range(200):
            spec = MetricSpec(name="m", params=RrParams(epsilon=1.0 + i % 7))  # version 1 each time
            if rep._cost_of(spec).eps_one != spec.report_charge:
                wrong.append(i)
            del spec  # freed (unless the cache holds it): the next spec may take its id
        assert wrong == []
    finally:
        rep.close(timeout=0)
