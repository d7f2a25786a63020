"""Wire format: round trips, every validation path, and a decoder that only ever raises WireFormatError."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldptel.client import CmsParams, GrrParams, HcmsParams, OueCmsParams, RrParams, privatize_batch
from ldptel.client.errors import WireFormatError
from ldptel.client.protocol.wire import batch_from_json, batch_to_json, decode_batch, decode_header, encode_batch

BID = bytes(range(16))
PARAMS = {
    "rr": RrParams(epsilon=1),
    "grr": GrrParams(epsilon=1, domain=tuple(f"l{i}" for i in range(300))),  # > 256 labels: u16 indices
    "cms": CmsParams(epsilon=4, k=32, m=64),
    "oue-cms": OueCmsParams(epsilon=4, k=32, m=64),
    "hcms": HcmsParams(epsilon=4, k=32, m=64),
}


def _values(mech: str, n: int):
    if mech == "rr":
        return np.arange(n) % 3 == 0
    if mech == "grr":
        return [f"l{i % 300}" for i in range(n)]
    return [f"v{i % 7}" for i in range(n)]


def _encoded(mech: str, n: int = 13) -> bytes:
    params = PARAMS[mech]
    batch = privatize_batch(_values(mech, n), params, rng=np.random.default_rng(n))
    return encode_batch(metric="emoji", version=2, batch_id=BID, batch=batch, params=params)


def _same(a, b) -> bool:
    return all(
        (x is None and y is None) or np.array_equal(x, y)
        for x, y in ((a.rows, b.rows), (a.cols, b.cols), (a.bits, b.bits))
    ) and a.n == b.n and a.mechanism == b.mechanism


@pytest.mark.parametrize("mech", list(PARAMS))
@pytest.mark.parametrize("n", [1, 8, 13])
def test_binary_and_json_round_trip(mech: str, n: int) -> None:
    params = PARAMS[mech]
    batch = privatize_batch(_values(mech, n), params, rng=np.random.default_rng(1))
    data = encode_batch(metric="emoji", version=2, batch_id=BID, batch=batch, params=params)
    header, back = decode_batch(data, params)
    assert (header.metric, header.version, header.mechanism, header.n, header.batch_id) == ("emoji", 2, mech, n, BID)
    assert _same(batch, back)
    obj = batch_to_json(metric="emoji", version=2, batch_id=BID, batch=back)
    header2, back2 = batch_from_json(obj, params)
    assert header2 == header and _same(back, back2)


def test_packed_sizes_are_compact() -> None:
    # cms m=64: 2 bytes of row + 8 bytes of bits per report; hcms: 4 bytes of indices + 1 bit.
    head = len(_encoded("cms", 1)) - 10
    assert len(_encoded("cms", 1000)) - head == 1000 * 10
    assert len(_encoded("hcms", 1000)) - head == 1000 * 4 + 125
    assert len(_encoded("rr", 1000)) - head == 125


def _patch(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    return data[:offset] + struct.pack(fmt, value) + data[offset + struct.calcsize(fmt) :]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: b"XXXX" + d[4:], "magic"),
        (lambda d: _patch(d, 4, "<B", 9), "format"),
        (lambda d: _patch(d, 5, "<B", 77), "mechanism code"),
        (lambda d: _patch(d, 6, "<H", 2), "flags"),
        (lambda d: _patch(d, 8, "<I", 0), "version"),
        (lambda d: _patch(d, 12, "<I", 0), "at least 1"),
        (lambda d: _patch(d, 12, "<I", 14), "payload"),
        (lambda d: d[:-1], "payload"),
        (lambda d: d + b"\0", "payload"),
        (lambda d: d[:10], "too short"),
        (lambda d: _patch(d, 32, "<B", 0), "name length"),
        (lambda d: d[:33] + b"E" + d[34:], "metric name"),
    ],
)
def test_every_header_defect_is_a_wire_format_error(mutate, message: str) -> None:
    with pytest.raises(WireFormatError, match=message):
        decode_batch(mutate(_encoded("cms")), PARAMS["cms"])


def test_payload_defects_are_rejected() -> None:
    off = decode_header(_encoded("cms")).payload_offset
    data = _encoded("cms")
    with pytest.raises(WireFormatError, match="row index 40"):
        decode_batch(_patch(data, off, "<H", 40), PARAMS["cms"])
    hc = _encoded("hcms")
    with pytest.raises(WireFormatError, match="column index 64"):
        decode_batch(_patch(hc, off + 2 * 13, "<H", 64), PARAMS["hcms"])
    with pytest.raises(WireFormatError, match="padding"):
        decode_batch(hc[:-1] + bytes([hc[-1] | 1]), PARAMS["hcms"])
    g = _encoded("grr")
    with pytest.raises(WireFormatError, match="label index 300"):
        decode_batch(_patch(g, off, "<H", 300), PARAMS["grr"])
    with pytest.raises(WireFormatError, match="mechanism"):
        decode_batch(data, PARAMS["hcms"])
    with pytest.raises(WireFormatError, match="bytes"):
        decode_header("text")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "obj",
    [
        [],
        {"metric": "emoji"},
        {"metric": "emoji", "version": 1, "batch_id": "zz" * 16, "mechanism": "cms", "reports": [{"row": 0, "bits": "00" * 8}]},
        {"metric": "emoji", "version": 1, "batch_id": "00" * 16, "mechanism": "rr", "reports": [1]},
        {"metric": "emoji", "version": 1, "batch_id": "00" * 16, "mechanism": "cms", "reports": []},
        {"metric": "emoji", "version": 1, "batch_id": "00" * 16, "mechanism": "cms", "reports": [{"row": 32, "bits": "00" * 8}]},
        {"metric": "emoji", "version": 1, "batch_id": "00" * 16, "mechanism": "cms", "reports": [{"row": 0, "bits": "0" * 15}]},
        {"metric": "emoji", "version": True, "batch_id": "00" * 16, "mechanism": "cms", "reports": [{"row": 0, "bits": "00" * 8}]},
        {"metric": "Bad", "version": 1, "batch_id": "00" * 16, "mechanism": "cms", "reports": [{"row": 0, "bits": "00" * 8}]},
        {"metric": "emoji\n", "version": 1, "batch_id": "00" * 16, "mechanism": "cms", "reports": [{"row": 0, "bits": "00" * 8}]},
        {"metric": "emoji", "version": 1, "batch_id": "00" * 16, "mechanism": "cms", "reports": ["x"]},
    ],
)
def test_bad_json_batches_are_wire_format_errors(obj) -> None:
    with pytest.raises(WireFormatError):
        batch_from_json(obj, PARAMS["cms"] if not (isinstance(obj, dict) and obj.get("mechanism") == "rr") else PARAMS["cms"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=200), mech=st.sampled_from(list(PARAMS)))
def test_random_bytes_only_ever_raise_wire_format_error(data: bytes, mech: str) -> None:
    try:
        decode_batch(data, PARAMS[mech])
    except WireFormatError:
        pass


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mech=st.sampled_from(list(PARAMS)), pos=st.integers(min_value=0, max_value=10_000), byte=st.integers(0, 255), cut=st.integers(0, 3))
def test_mutated_valid_batches_decode_or_raise_wire_format_error(mech: str, pos: int, byte: int, cut: int) -> None:
    data = bytearray(_encoded(mech))
    data[pos % len(data)] = byte
    data = bytes(data[: len(data) - cut])
    try:
        header, batch = decode_batch(data, PARAMS[mech])
    except WireFormatError:
        return
    # Whatever decodes is in range for its params.
    params = PARAMS[mech]
    if batch.rows is not None:
        assert int(batch.rows.max()) < params.k
    if batch.cols is not None:
        assert int(batch.cols.max()) < (params.m if mech == "hcms" else params.d)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 70) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(obj=st.fixed_dictionaries(
    {"metric": st.just("emoji"), "version": st.integers(0, 3), "batch_id": st.just("00" * 16), "mechanism": st.sampled_from(list(PARAMS))},
    optional={"reports": json_values, "format": json_values},
), mech=st.sampled_from(list(PARAMS)))
def test_random_json_only_ever_raises_wire_format_error(obj, mech: str) -> None:
    try:
        batch_from_json(obj, PARAMS[mech])
    except WireFormatError:
        pass


@pytest.mark.parametrize("mech", ["cms", "hcms"])
def test_a_memoryview_decodes_without_a_copy_and_odd_views_are_wire_format_errors(mech: str) -> None:
    data = _encoded(mech)
    buf = bytearray(data)
    header, batch = decode_batch(memoryview(buf), PARAMS[mech])
    assert header == decode_header(data) and batch.n == header.n
    if mech == "cms":  # the bits are a view of the buffer (the aggregator's reader relies on it)
        assert batch.bits is not None and np.shares_memory(batch.bits, np.frombuffer(buf, np.uint8))
    for odd in (memoryview(buf)[::2], memoryview(buf).cast("B", (1, len(buf))), memoryview(np.zeros(8, np.uint16))):
        with pytest.raises(WireFormatError):
            decode_batch(odd, PARAMS[mech])
