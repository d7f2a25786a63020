"""The uploader combines stored batches of several metrics into one multi-part upload (real server, via a proxy)."""

from __future__ import annotations

import json
import sqlite3

from ldptel.client import CmsParams, GrrParams, MetricSpec, RrParams, privatize
from ldptel.client.sdk.queue import pack_report, plan_uploads
from ldptel.client.sdk.store import DB_FILE, connect, init_schema
from tests.client.conftest import FakeClock, LiveServer, ProxyControl
from tests.client.test_reporter import _sync

SPECS = [
    MetricSpec(name="u.cms", params=CmsParams(epsilon=4.0, k=16, m=64), reports_per_day=100),
    MetricSpec(name="u.rr", params=RrParams(epsilon=1.0), reports_per_day=100),
    MetricSpec(name="u.grr", params=GrrParams(epsilon=1.0, domain=("a", "b", "c")), reports_per_day=100),
]
VALUES = {"u.cms": "x", "u.rr": True, "u.grr": "b"}


def _report_all(rep, per_metric: int = 3) -> None:  # type: ignore[no-untyped-def]
    for spec in SPECS:
        for _ in range(per_metric):
            assert rep.report(spec.name, VALUES[spec.name]).queued


def test_batches_of_several_metrics_go_in_one_upload_and_are_stored_apart(
    live: LiveServer, proxy: tuple[str, ProxyControl], app_token, tmp_path, clock: FakeClock
) -> None:
    """On the one-batch-per-request code this took three POSTs, back to back on one connection."""
    url, ctl = proxy
    for spec in SPECS:
        live.create(spec)
    rep = _sync(url, app_token, tmp_path, clock, metrics=[s.name for s in SPECS])
    try:
        assert rep.wait_for_specs(10)
        _report_all(rep)
        assert rep.flush(timeout=10)
        assert rep.stats().delivered == 9
    finally:
        rep.close(timeout=0)
    posts = ctl.posts()
    assert len(posts) == 1 and posts[0].status == 200
    parts = json.loads(posts[0].body)["parts"]
    assert sorted(p["metric"] for p in parts) == sorted(s.name for s in SPECS)
    assert len({p["batch_id"] for p in parts}) == 3
    for spec in SPECS:
        got = live.delivered(spec.name)
        assert (got["total"], got["entries"]) == (3, 1)


def test_upload_parts_1_sends_one_batch_per_request(
    live: LiveServer, proxy: tuple[str, ProxyControl], app_token, tmp_path, clock: FakeClock
) -> None:
    url, ctl = proxy
    for spec in SPECS:
        live.create(spec)
    rep = _sync(url, app_token, tmp_path, clock, metrics=[s.name for s in SPECS], upload_parts=1)
    try:
        assert rep.wait_for_specs(10)
        _report_all(rep)
        assert rep.flush(timeout=10)
    finally:
        rep.close(timeout=0)
    assert [p.status for p in ctl.posts()] == [202, 202, 202]


def test_a_server_without_multi_part_uploads_gets_single_batches(
    live: LiveServer, proxy: tuple[str, ProxyControl], app_token, tmp_path, clock: FakeClock
) -> None:
    """An older server answers an upload 400 (bad magic): nothing is dropped, the batches go one by one."""
    url, ctl = proxy
    for spec in SPECS:
        live.create(spec)
    old_answer = json.dumps({"error": "invalid_batch", "message": "not an ldptel batch (bad magic)"}).encode()
    rep = _sync(url, app_token, tmp_path, clock, metrics=[s.name for s in SPECS])
    try:
        assert rep.wait_for_specs(10)
        _report_all(rep)
        ctl.inject.append((400, {"Content-Type": "application/json"}, old_answer))
        assert rep.flush(timeout=10)
        st = rep.stats()
        assert (st.delivered, st.dropped_rejected) == (9, 0)
    finally:
        rep.close(timeout=0)
    assert [p.status for p in ctl.posts()] == [400, 202, 202, 202]


def test_a_stale_part_is_dropped_and_its_spec_adopted_while_the_others_are_delivered(
    live: LiveServer, proxy: tuple[str, ProxyControl], app_token, tmp_path, clock: FakeClock
) -> None:
    url, ctl = proxy
    for spec in SPECS:
        live.create(spec)
    rep = _sync(url, app_token, tmp_path, clock, metrics=[s.name for s in SPECS])
    try:
        assert rep.wait_for_specs(10)
        _report_all(rep)
        live.create(MetricSpec(name="u.rr", params=RrParams(epsilon=0.5), reports_per_day=100))  # v2
        assert rep.flush(timeout=10)
        st = rep.stats()
        assert (st.delivered, st.dropped_stale) == (6, 3)
        clock.t += 86_400
        assert rep.report("u.rr", True).version == 2  # adopted from the part's 409
    finally:
        rep.close(timeout=0)
    first = json.loads(ctl.posts()[0].body)["parts"]
    assert sorted((p.get("metric") or p["current"]["name"], p["http_status"]) for p in first) == [("u.cms", 202), ("u.grr", 202), ("u.rr", 409)]


def test_plans_hold_distinct_metrics_within_the_part_and_byte_bounds(tmp_path) -> None:
    conn = connect(tmp_path, synchronous="NORMAL")
    init_schema(conn)
    rows = [("a", 100), ("a", 100), ("b", 100), ("c", 900), ("b", 100), ("d", 5000)]
    for i, (metric, size) in enumerate(rows):
        conn.execute("INSERT INTO batches(batch_id, metric, version, n, body) VALUES (?, ?, 1, 1, ?)",
                     (i.to_bytes(16, "little"), metric, b"LDPT" + bytes(size - 4)))
    plans = plan_uploads(conn, max_parts=3, max_bytes=1200)
    metrics = {row_id: m for row_id, m in conn.execute("SELECT id, metric FROM batches")}
    assert sorted(i for plan in plans for i in plan) == sorted(metrics)  # every batch, once
    for plan in plans:
        assert len(plan) <= 3 and len({metrics[i] for i in plan}) == len(plan)
        size = 8 + sum(4 + len(conn.execute("SELECT body FROM batches WHERE id = ?", (i,)).fetchone()[0]) for i in plan)
        assert size <= 1200 or len(plan) == 1  # a batch larger than the bound goes alone
    assert plans[0] == [1, 3, 4]  # the oldest batch of a, b and c (1120 bytes); d (5000 bytes) goes alone
    assert [6] in plans
    conn.close()


def test_an_offline_backlog_of_several_days_is_one_batch_per_day(
    live: LiveServer, app_token, tmp_path, clock: FakeClock
) -> None:
    """On the one-batch-per-metric code the 3 days' reports of one metric arrived as one entry linking them."""
    spec = live.create(SPECS[0])
    rep = _sync(live.url, app_token, tmp_path, clock, metrics=[spec.name])
    try:
        assert rep.wait_for_specs(10)
        for _day in range(3):
            for value in ("x", "y"):
                assert rep.report(spec.name, value).queued
            clock.t += 86_400
        assert rep.flush(timeout=10)
    finally:
        rep.close(timeout=0)
    got = live.delivered(spec.name)
    assert (got["total"], got["entries"]) == (6, 3)


def test_a_queue_from_before_the_day_column_still_uploads(live: LiveServer, app_token, tmp_path, clock: FakeClock) -> None:
    spec = live.create(SPECS[0])
    conn = sqlite3.connect(tmp_path / DB_FILE)
    conn.execute("CREATE TABLE reports(id INTEGER PRIMARY KEY, metric TEXT NOT NULL, version INTEGER NOT NULL, "
                 "payload BLOB NOT NULL)")
    conn.execute("INSERT INTO reports(metric, version, payload) VALUES (?, 1, ?)",
                 (spec.name, pack_report(privatize("x", spec.params), spec.params)))
    conn.commit()
    conn.close()
    rep = _sync(live.url, app_token, tmp_path, clock, metrics=[spec.name])
    try:
        assert rep.wait_for_specs(10)
        assert rep.report(spec.name, "y").queued
        assert rep.flush(timeout=10)
    finally:
        rep.close(timeout=0)
    got = live.delivered(spec.name)
    assert (got["total"], got["entries"]) == (2, 2)  # the old report (day 0) and today's, each its own batch


def test_a_part_whose_batch_id_was_taken_by_other_content_is_dropped_as_rejected(
    live: LiveServer, proxy: tuple[str, ProxyControl], app_token, tmp_path, clock: FakeClock
) -> None:
    """409 ``batch_id_conflict`` (issue 22 §5) carries no spec: the batch is dropped as rejected, not as stale,
    and the others of the upload are delivered."""
    import http.client

    import numpy as np

    from ldptel.client import encode_batch, privatize_batch

    url, ctl = proxy
    for spec in SPECS:
        live.create(spec)
    rep = _sync(url, app_token, tmp_path, clock, metrics=[s.name for s in SPECS])
    try:
        assert rep.wait_for_specs(10)
        _report_all(rep)
        ctl.inject.append((503, {"Content-Type": "application/json", "Retry-After": "0"},
                           b'{"error":"unavailable","message":"later"}'))
        rep.flush(timeout=0.5)  # the batches are formed and stored; their upload is answered 503
        db = sqlite3.connect(tmp_path / DB_FILE)
        (bid,) = db.execute("SELECT batch_id FROM batches WHERE metric = 'u.cms'").fetchone()
        db.close()
        # someone else's bytes under that id reach the server first
        spec = SPECS[0]
        other = encode_batch(metric=spec.name, version=1, batch_id=bytes(bid), params=spec.params,
                             batch=privatize_batch(["y"], spec.params, rng=np.random.default_rng(1)))
        conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=10)
        conn.request("POST", "/v1/reports", body=other,
                     headers={"Authorization": f"Bearer {app_token}", "Content-Type": "application/octet-stream"})
        assert conn.getresponse().status == 202
        conn.close()
        assert rep.flush(timeout=10)
        st = rep.stats()
        assert (st.delivered, st.dropped_rejected, st.dropped_stale) == (6, 3, 0)
    finally:
        rep.close(timeout=0)
    last = json.loads(ctl.posts()[-1].body)["parts"]
    assert sorted(p["http_status"] for p in last) == [202, 202, 409]
    assert [p["error"] for p in last if p["http_status"] == 409] == ["batch_id_conflict"]
