"""The durable queue: stored payloads round-trip through the wire format, batch ids stick, nothing raw on disk."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from ldptel.client import CmsParams, GrrParams, HcmsParams, MetricSpec, OueCmsParams, RrParams, privatize
from ldptel.client.protocol.wire import decode_batch, encode_batch
from ldptel.client.sdk.queue import form_batches, next_batch, pack_report, payload_size, unpack_reports
from ldptel.client.sdk.reporter import Reporter
from ldptel.client.sdk.store import DB_FILE, connect, init_schema
from tests.client.conftest import FakeClock

PARAMS = [
    RrParams(epsilon=1.0),
    GrrParams(epsilon=2.0, domain=tuple(f"l{i}" for i in range(300))),  # > 256 labels: u16 on the wire
    CmsParams(epsilon=4.0, k=16, m=1024),
    OueCmsParams(epsilon=4.0, k=8, m=64),
    HcmsParams(epsilon=4.0, k=16, m=128),
]
DEAD = "http://127.0.0.1:9"  # discard port: nothing listens, every connection is refused


def _value(params: object, i: int) -> object:
    if isinstance(params, RrParams):
        return i % 3 == 0
    if isinstance(params, GrrParams):
        return params.domain[i % params.d]
    return f"value-{i}"


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: p.mechanism)
def test_stored_payloads_rebuild_the_exact_batch(params) -> None:
    rng = np.random.default_rng(11)
    singles = [privatize(_value(params, i), params, rng=rng) for i in range(37)]
    payloads = [pack_report(b, params) for b in singles]
    assert {len(p) for p in payloads} == {payload_size(params)}
    batch = unpack_reports(payloads, params)
    from ldptel.client.protocol.wire import encode_batch

    body = encode_batch(metric="m", version=3, batch_id=b"\x01" * 16, batch=batch, params=params)
    header, decoded = decode_batch(body, params)
    assert header.n == 37 and header.version == 3
    for i, single in enumerate(singles):
        for field in ("rows", "cols"):
            if getattr(single, field) is not None:
                assert int(getattr(decoded, field)[i]) == int(getattr(single, field)[0])
        if params.mechanism in ("cms", "oue-cms"):
            assert decoded.bits[i].tobytes() == single.bits[0].tobytes()
        elif params.mechanism in ("rr", "hcms"):
            assert decoded.bit_values()[i] == single.bit_values()[0]


def test_batch_formation_is_one_transaction_with_a_stored_id(tmp_path) -> None:
    spec = MetricSpec(name="m", params=CmsParams(epsilon=4.0, k=4, m=64))
    conn = connect(tmp_path, synchronous="FULL")
    init_schema(conn)
    rng = np.random.default_rng(1)
    for i in range(25):
        conn.execute("INSERT INTO reports(metric, version, payload) VALUES ('m', 1, ?)",
                     (pack_report(privatize(f"v{i}", spec.params, rng=rng), spec.params),))
    res = form_batches(conn, batch_size=10, partial=False, spec_of=lambda m, v: spec, day="2026-11-23")
    assert (res.formed, res.moved) == (2, 20)  # the 5 left wait for a partial flush
    res = form_batches(conn, batch_size=10, partial=True, spec_of=lambda m, v: spec, day="2026-11-23")
    assert (res.formed, res.moved) == (1, 5)
    assert conn.execute("SELECT COUNT(*) FROM reports").fetchone()[0] == 0
    first = next_batch(conn)
    assert first is not None and len(first.batch_id) == 16 and first.formed_day == "2026-11-23"
    header, _ = decode_batch(first.body, spec.params)
    assert header.batch_id == first.batch_id and header.n == 10
    ids = [r[0] for r in conn.execute("SELECT batch_id FROM batches")]
    assert len(set(ids)) == 3
    conn.close()
    reopened = connect(tmp_path, synchronous="NORMAL")  # the id survives a restart unchanged
    again = next_batch(reopened)
    assert again is not None and again.batch_id == first.batch_id and again.body == first.body
    reopened.close()


def test_database_is_in_wal_mode(tmp_path) -> None:
    Reporter(DEAD, "t", tmp_path, start=False).close(timeout=0)
    conn = sqlite3.connect(tmp_path / DB_FILE)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_queue_is_bounded_and_dropping_spends_nothing(tmp_path) -> None:
    spec = MetricSpec(name="m", params=CmsParams(epsilon=1.0, k=4, m=64), reports_per_day=100)
    clock = FakeClock()
    rep = Reporter(DEAD, "t", tmp_path, start=False, max_queue=5, specs=[spec], clock=clock, sleep=clock.sleep)
    statuses = [rep.report("m", f"v{i}").status for i in range(8)]
    assert statuses == ["queued"] * 5 + ["queue_full"] * 3
    st = rep.stats()
    assert (st.pending, st.queued, st.dropped_queue_full) == (5, 5, 3)
    assert rep.budget_remaining("m") == 95
    rep.close(timeout=0)


def test_no_raw_value_in_the_database_files(tmp_path) -> None:
    """Queue, memo, ledger, batches and WAL hold privatized data only: scan the bytes of every file."""
    secret_values = ["RAW-VALUE-homepage.example.org", "RAW-VALUE-second-secret"]
    specs = [
        MetricSpec(name="s.cms", params=CmsParams(epsilon=2.0, k=16, m=1024), reports_per_day=50),
        MetricSpec(name="s.hcms", params=HcmsParams(epsilon=2.0, k=16, m=1024), reports_per_day=50),
        MetricSpec(name="s.oue", params=OueCmsParams(epsilon=2.0, k=16, m=256), reports_per_day=50),
    ]
    clock = FakeClock()
    rep = Reporter(DEAD, "t", tmp_path, start=False, specs=specs, batch_size=4, clock=clock, sleep=clock.sleep)
    for spec in specs:
        for i in range(10):
            assert rep.report(spec.name, secret_values[i % 2]).queued
            assert rep.report(spec.name, secret_values[i % 2].encode()).queued
    rep.flush(timeout=0)  # forms batches (kept on disk: the server is unreachable)
    assert rep.stats().pending == 60
    rep.close(timeout=0)
    files = [p for p in tmp_path.iterdir() if p.name.startswith(DB_FILE)]
    assert {p.name for p in files} >= {DB_FILE}
    for path in files:
        data = path.read_bytes()
        for v in secret_values:
            for needle in (v.encode(), v.encode("utf-16-le"), v.encode().hex().encode(), v[10:].encode()):
                assert needle not in data, f"raw value found in {path.name}"
    conn = sqlite3.connect(tmp_path / DB_FILE)
    assert conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0] > 0
    conn.close()


def _record_of_sdk_0_1(batch, params) -> bytes:
    """How ldptel 0.1 stored one report on the device (before the mechanism codec existed)."""
    import struct

    if isinstance(params, RrParams):
        return bytes([int(batch.bits[0]) >> 7])
    if isinstance(params, GrrParams):
        return struct.pack("<H", int(batch.cols[0]))
    if isinstance(params, HcmsParams):
        return struct.pack("<HHB", int(batch.rows[0]), int(batch.cols[0]), int(batch.bits[0]) >> 7)
    return struct.pack("<H", int(batch.rows[0])) + batch.bits[0].tobytes()


@pytest.mark.parametrize("params", PARAMS + [GrrParams(epsilon=2.0, domain=("a", "b", "c"))], ids=lambda p: p.mechanism)
def test_the_device_record_format_is_the_one_queues_already_hold(params) -> None:
    # A device upgraded with reports still queued must batch them as they are (and a downgrade read ours).
    rng = np.random.default_rng(5)
    singles = [privatize(_value(params, i), params, rng=rng) for i in range(20)]
    old = [_record_of_sdk_0_1(b, params) for b in singles]
    assert [pack_report(b, params) for b in singles] == old
    batch = unpack_reports(old, params)
    body = encode_batch(metric="m", version=1, batch_id=b"\x02" * 16, batch=batch, params=params)
    _, decoded = decode_batch(body, params)
    for field in ("rows", "cols"):
        if getattr(singles[0], field) is not None:
            assert getattr(decoded, field).tolist() == [int(getattr(b, field)[0]) for b in singles]
    if decoded.bits is not None and decoded.bits.ndim == 1:
        assert decoded.bit_values().tolist() == [int(b.bit_values()[0]) for b in singles]
