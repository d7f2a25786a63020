"""Multi-part uploads (POST /v1/reports, magic b"LDPU"): several batches in one request, each stored on its own."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldptel.client.errors import WireFormatError
from ldptel.client.protocol.wire import MAX_UPLOAD_PARTS, decode_header, encode_upload, split_upload
from ldptel.storage import keys
from ldptel.storage.append import utc_day
from tests.server.srv_helpers import cms_spec, grr_spec, make_batch, rr_spec, snapshot, stream_entries


def test_one_upload_carries_batches_of_several_metrics_stored_as_unrelated_entries(api, redis, rng) -> None:  # type: ignore[no-untyped-def]
    specs = [cms_spec(), rr_spec(), grr_spec()]
    for spec in specs:
        assert api.create(spec).status_code == 201
    parts = [make_batch(spec, 20 + i, rng) for i, spec in enumerate(specs)]
    response = api.post_batch(encode_upload([data for data, _ in parts]))
    assert response.status_code == 200
    results = response.json["parts"]
    assert [r["http_status"] for r in results] == [202, 202, 202]
    assert [(r["metric"], r["accepted"], r["batch_id"], r["duplicate"]) for r in results] == [
        (spec.name, 20 + i, bid.hex(), False) for i, (spec, (_, bid)) in enumerate(zip(specs, parts, strict=True))]
    for i, (spec, (data, bid)) in enumerate(zip(specs, parts, strict=True)):
        entries = stream_entries(redis, spec.name, 4)
        assert len(entries) == 1
        shard, _, fields = entries[0]
        # the part's own bytes, batch id and dedupe key: nothing of the envelope or the other parts
        assert fields == {b"d": utc_day().encode(), b"v": b"1", b"n": str(20 + i).encode(), b"b": data}
        assert redis.exists(keys.seen(spec.name, shard, bid.hex())) == 1
    before = snapshot(redis)
    again = api.post_batch(encode_upload([data for data, _ in parts]))  # a retry of the whole upload
    assert [r["duplicate"] for r in again.json["parts"]] == [True, True, True]
    assert snapshot(redis) == before


def test_each_part_is_answered_as_a_single_batch_would_be(api, redis, rng) -> None:  # type: ignore[no-untyped-def]
    good, stale = cms_spec(), rr_spec()
    assert api.create(good).status_code == 201 and api.create(stale).status_code == 201
    ok, _ = make_batch(good, 10, rng)
    old, _ = make_batch(stale, 10, rng, version=7)
    unknown, _ = make_batch(cms_spec("no.such"), 5, rng)
    bad = make_batch(good, 5, rng)[0][:-1]  # a batch header, a payload one byte short
    response = api.post_batch(encode_upload([ok, old, unknown, bad]))
    assert response.status_code == 200
    results = response.json["parts"]
    assert [r["http_status"] for r in results] == [202, 409, 404, 400]
    assert [r.get("error") for r in results] == [None, "version_conflict", "unknown_metric", "invalid_batch"]
    assert results[1]["current"]["version"] == 1  # the current spec, as a single batch's 409 carries it
    assert len(stream_entries(redis, good.name, 4)) == 1
    assert stream_entries(redis, stale.name, 4) == []


def test_single_batches_still_work_beside_uploads(api, rng) -> None:  # type: ignore[no-untyped-def]
    spec = cms_spec()
    assert api.create(spec).status_code == 201
    data, bid = make_batch(spec, 3, rng)
    response = api.post_batch(data)
    assert response.status_code == 202 and response.json["batch_id"] == bid.hex()


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (b"LDPU", "too short"),
        (b"LDPU\x02\x00\x01\x00", "format"),
        (b"LDPU\x01\x01\x01\x00", "flags"),
        (b"LDPU\x01\x00\x00\x00", "parts"),
        (b"LDPU\x01\x00\x01\x00\x05\x00\x00\x00LDPT", "claims"),
        (b"LDPU\x01\x00\x01\x00\x04\x00\x00\x00LDPTxx", "after the last"),
    ],
)
def test_a_malformed_envelope_is_400_with_nothing_stored(api, redis, body: bytes, what: str) -> None:  # type: ignore[no-untyped-def]
    before = snapshot(redis)
    response = api.post_batch(body)
    assert response.status_code == 400 and response.json["error"] == "invalid_upload"
    assert what in response.json["message"]
    assert snapshot(redis) == before


def test_encode_upload_checks_its_parts() -> None:
    with pytest.raises(WireFormatError):
        encode_upload([])
    with pytest.raises(WireFormatError):
        encode_upload([b"not a batch"])
    with pytest.raises(WireFormatError):
        encode_upload([b"LDPT"] * (MAX_UPLOAD_PARTS + 1))


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=5), cut=st.integers(0, 400))
def test_split_upload_round_trips_and_only_raises_wire_format_errors(parts: list[bytes], cut: int) -> None:
    parts = [b"LDPT" + p for p in parts]
    body = encode_upload(parts)
    assert [bytes(p) for p in split_upload(body)] == parts
    try:
        split_upload(body[:cut])
    except WireFormatError:
        pass
    header = struct.pack("<4sBBH", b"LDPU", 1, 0, 1)
    with pytest.raises(WireFormatError):
        split_upload(header + struct.pack("<I", 0))


def test_parts_of_an_upload_decode_as_batches(rng) -> None:  # type: ignore[no-untyped-def]
    spec = cms_spec()
    data, bid = make_batch(spec, 4, rng, batch_id=os.urandom(16))
    (part,) = split_upload(encode_upload([data]))
    assert decode_header(part).batch_id == bid
