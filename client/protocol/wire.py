"""The one binary encoding of a batch of reports, used for the HTTP body and the Redis stream alike.

Layout, all integers little-endian::

    magic     4 bytes  b"LDPT"
    format    u8       FORMAT_VERSION (1)
    mechanism u8       1 rr, 2 grr, 3 cms, 4 hcms, 5 oue-cms
    flags     u16      0 (reserved; anything else is rejected)
    version   u32      metric version (>= 1)
    n         u32      number of reports (>= 1)
    batch_id  16 bytes random, chosen by the client; the server dedupes retries on it
    name_len  u8       then the metric name, UTF-8, 1..64 bytes
    payload            per mechanism:
      rr       ceil(n/8) bytes: the reported bits, packed MSB first, padding bits 0
      grr      n × u8 (d ≤ 256) or n × u16: the reported label index, < d
      cms      n × u16 rows j < k, then n × m/8 bytes: each report's m bits packed MSB first
      oue-cms  same as cms
      hcms     n × u16 rows j < k, n × u16 columns l < m, then ceil(n/8) bytes of bits (1 ↔ +1)

The total length must match exactly. :func:`decode_batch` checks every field against the metric's params
and raises :class:`~ldptel.client.errors.WireFormatError` for anything else; it never raises another
exception type on any input (fuzzed with hypothesis). A JSON form of the same content exists for debugging
(:func:`batch_to_json` / :func:`batch_from_json`), validated the same way.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldptel.client.errors import WireFormatError
from ldptel.client.protocol.specs import _NAME_RE, GrrParams, Params

MAGIC = b"LDPT"
FORMAT_VERSION = 1
MECHANISM_CODES: dict[str, int] = {"rr": 1, "grr": 2, "cms": 3, "hcms": 4, "oue-cms": 5}
CODE_MECHANISMS: dict[int, str] = {code: name for name, code in MECHANISM_CODES.items()}
MAX_REPORTS = (1 << 32) - 1
_HEADER = struct.Struct("<4sBBHII16sB")


@dataclass(frozen=True, eq=False, kw_only=True)
class ReportBatch:
    """Privatized reports of one mechanism, in columns.

    rows: sketch row j of each report (cms, oue-cms, hcms), int64.
    cols: hcms column l, or the grr label index, int64.
    bits: rr and hcms: the n reported bits packed MSB first, shape (ceil(n/8),);
          cms and oue-cms: shape (n, m/8), each report's m bits packed MSB first. uint8.
    """

    mechanism: str
    n: int
    rows: np.ndarray | None = None
    cols: np.ndarray | None = None
    bits: np.ndarray | None = None

    def bit_values(self) -> np.ndarray:
        """rr/hcms: the n reported bits as uint8 0/1."""
        assert self.bits is not None and self.bits.ndim == 1
        return np.unpackbits(self.bits, count=self.n)


@dataclass(frozen=True, kw_only=True)
class BatchHeader:
    metric: str
    version: int
    mechanism: str
    n: int
    batch_id: bytes
    payload_offset: int


def _payload_size(params: Params, n: int) -> int:
    mech = params.mechanism
    if mech == "rr":
        return (n + 7) // 8
    if mech == "grr":
        assert isinstance(params, GrrParams)
        return n * _grr_width(params.d)
    if mech in ("cms", "oue-cms"):
        return n * 2 + n * (params.m // 8)  # type: ignore[union-attr]
    return n * 4 + (n + 7) // 8  # hcms


def _grr_width(d: int) -> int:
    return 1 if d <= 256 else 2


# ----------------------------------------------------------------------------------------------- encode
def encode_batch(*, metric: str, version: int, batch_id: bytes, batch: ReportBatch, params: Params) -> bytes:
    """The binary form of ``batch`` for ``metric`` at ``version`` (validated like a decode)."""
    if batch.mechanism != params.mechanism:
        raise WireFormatError(f"batch is {batch.mechanism!r} but the metric's mechanism is {params.mechanism!r}")
    name = metric.encode("utf-8")
    if not _NAME_RE.fullmatch(metric):
        raise WireFormatError("metric name must be 1-64 characters of a-z, 0-9, '_', '.', '-'")
    if len(batch_id) != 16:
        raise WireFormatError(f"batch_id must be 16 bytes, got {len(batch_id)}")
    if not 1 <= batch.n <= MAX_REPORTS:
        raise WireFormatError(f"a batch holds 1 to {MAX_REPORTS} reports, got {batch.n}")
    if not 1 <= version < 1 << 31:
        raise WireFormatError(f"version must be in [1, 2**31 - 1], got {version}")
    parts = [
        _HEADER.pack(MAGIC, FORMAT_VERSION, MECHANISM_CODES[params.mechanism], 0, version, batch.n, batch_id, len(name)),
        name,
    ]
    mech = params.mechanism
    if mech == "rr":
        parts.append(_bits_1d(batch).tobytes())
    elif mech == "grr":
        assert isinstance(params, GrrParams) and batch.cols is not None
        parts.append(batch.cols.astype("<u1" if _grr_width(params.d) == 1 else "<u2").tobytes())
    elif mech in ("cms", "oue-cms"):
        assert batch.rows is not None and batch.bits is not None
        parts.append(batch.rows.astype("<u2").tobytes())
        parts.append(np.ascontiguousarray(batch.bits, dtype=np.uint8).tobytes())
    else:
        assert batch.rows is not None and batch.cols is not None
        parts.append(batch.rows.astype("<u2").tobytes())
        parts.append(batch.cols.astype("<u2").tobytes())
        parts.append(_bits_1d(batch).tobytes())
    data = b"".join(parts)
    decode_batch(data, params)  # never emit what the server would reject
    return data


def _bits_1d(batch: ReportBatch) -> np.ndarray:
    assert batch.bits is not None
    return np.ascontiguousarray(batch.bits, dtype=np.uint8)


# ----------------------------------------------------------------------------------------------- decode
def decode_header(data: bytes | bytearray | memoryview) -> BatchHeader:
    """Parse and check the fixed header (enough to find the metric before its params are known)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireFormatError(f"a batch is bytes, got {type(data).__name__}")
    if isinstance(data, memoryview):
        if data.ndim != 1 or data.itemsize != 1 or not data.c_contiguous:
            raise WireFormatError("a batch memoryview must be contiguous 1-dimensional bytes")
    elif not isinstance(data, bytes):
        data = bytes(data)
    if len(data) < _HEADER.size + 1:
        raise WireFormatError(f"batch too short: {len(data)} bytes, the header alone is {_HEADER.size + 1}+")
    magic, fmt, code, flags, version, n, batch_id, name_len = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise WireFormatError("not an ldptel batch (bad magic; expected b'LDPT')")
    if fmt != FORMAT_VERSION:
        raise WireFormatError(f"unsupported batch format {fmt}; this build reads format {FORMAT_VERSION}")
    if code not in CODE_MECHANISMS:
        raise WireFormatError(f"unknown mechanism code {code}; known: {sorted(CODE_MECHANISMS)}")
    if flags != 0:
        raise WireFormatError(f"reserved flags must be 0, got {flags}")
    if version < 1 or version >= 1 << 31:
        raise WireFormatError(f"version must be in [1, 2**31 - 1], got {version}")
    if n < 1:
        raise WireFormatError("a batch holds at least 1 report, got 0")
    if not 1 <= name_len <= 64 or len(data) < _HEADER.size + name_len:
        raise WireFormatError(f"bad metric name length {name_len}")
    raw_name = bytes(data[_HEADER.size : _HEADER.size + name_len])
    try:
        metric = raw_name.decode("utf-8")
    except UnicodeDecodeError:
        raise WireFormatError("metric name is not UTF-8") from None
    if not _NAME_RE.fullmatch(metric):
        raise WireFormatError("metric name must be 1-64 characters of a-z, 0-9, '_', '.', '-'")
    return BatchHeader(
        metric=metric,
        version=version,
        mechanism=CODE_MECHANISMS[code],
        n=n,
        batch_id=batch_id,
        payload_offset=_HEADER.size + name_len,
    )


def decode_batch(data: bytes | bytearray | memoryview, params: Params) -> tuple[BatchHeader, ReportBatch]:
    """Decode and fully validate a batch against the params of its metric version.

    ``bytes`` and a ``memoryview`` are used without a copy (the arrays of the result are views of them: the
    caller keeps a memoryview's bytes unchanged while it uses the batch); a ``bytearray`` is copied once.
    """
    if not isinstance(data, (bytes, memoryview)):
        data = bytes(data)
    header = decode_header(data)
    return header, decode_payload(data, header, params)


def decode_payload(data: bytes | memoryview, header: BatchHeader, params: Params) -> ReportBatch:
    """The reports of ``data``, whose header ``header = decode_header(data)`` the caller has read already (to
    find the metric's params): every field is checked against ``params`` as in :func:`decode_batch`."""
    if header.mechanism != params.mechanism:
        raise WireFormatError(f"batch is {header.mechanism!r} but the metric's mechanism is {params.mechanism!r}")
    n, off = header.n, header.payload_offset
    expected = _payload_size(params, n)
    if len(data) - off != expected:
        raise WireFormatError(
            f"payload is {len(data) - off} bytes; {n} {params.mechanism} reports need exactly {expected}"
        )
    buf = memoryview(data)[off:]
    mech = params.mechanism
    if mech == "rr":
        bits = np.frombuffer(buf, dtype=np.uint8)
        _check_padding(bits, n)
        return ReportBatch(mechanism=mech, n=n, bits=bits)
    if mech == "grr":
        assert isinstance(params, GrrParams)
        width = _grr_width(params.d)
        cols = np.frombuffer(buf, dtype="<u1" if width == 1 else "<u2").astype(np.int64)
        if cols.size and int(cols.max()) >= params.d:
            raise WireFormatError(f"grr label index {int(cols.max())} out of range [0, {params.d - 1}]")
        return ReportBatch(mechanism=mech, n=n, cols=cols)
    k, m = params.k, params.m  # type: ignore[union-attr]
    raw_rows = np.frombuffer(buf[: 2 * n], dtype="<u2")
    if int(raw_rows.max()) >= k:
        raise WireFormatError(f"row index {int(raw_rows.max())} out of range [0, {k - 1}]")
    rows = raw_rows.astype(np.int64)
    if mech in ("cms", "oue-cms"):
        bits = np.frombuffer(buf[2 * n :], dtype=np.uint8).reshape(n, m // 8)
        return ReportBatch(mechanism=mech, n=n, rows=rows, bits=bits)
    cols = np.frombuffer(buf[2 * n : 4 * n], dtype="<u2").astype(np.int64)
    if int(cols.max()) >= m:
        raise WireFormatError(f"column index {int(cols.max())} out of range [0, {m - 1}]")
    bits = np.frombuffer(buf[4 * n :], dtype=np.uint8)
    _check_padding(bits, n)
    return ReportBatch(mechanism=mech, n=n, rows=rows, cols=cols, bits=bits)


def _check_padding(bits: np.ndarray, n: int) -> None:
    spare = (-n) % 8
    if spare and int(bits[-1]) & ((1 << spare) - 1):
        raise WireFormatError("padding bits after the last report must be 0")


# ------------------------------------------------------------------------------------------------- JSON
def batch_to_json(*, metric: str, version: int, batch_id: bytes, batch: ReportBatch) -> dict[str, Any]:
    """A readable form of a batch (debugging; the binary form is the normal one)."""
    reports: list[Any]
    if batch.mechanism == "rr":
        reports = [int(b) for b in batch.bit_values()]
    elif batch.mechanism == "grr":
        assert batch.cols is not None
        reports = [int(c) for c in batch.cols]
    elif batch.mechanism in ("cms", "oue-cms"):
        assert batch.rows is not None and batch.bits is not None
        reports = [{"row": int(j), "bits": row.tobytes().hex()} for j, row in zip(batch.rows, batch.bits)]
    else:
        assert batch.rows is not None and batch.cols is not None
        reports = [
            {"row": int(j), "col": int(c), "bit": int(b)}
            for j, c, b in zip(batch.rows, batch.cols, batch.bit_values())
        ]
    return {
        "format": FORMAT_VERSION,
        "metric": metric,
        "version": version,
        "batch_id": batch_id.hex(),
        "mechanism": batch.mechanism,
        "reports": reports,
    }


def batch_from_json(obj: object, params: Params) -> tuple[BatchHeader, ReportBatch]:
    """Validate the JSON form against ``params`` and return the same result as :func:`decode_batch`."""
    if not isinstance(obj, dict):
        raise WireFormatError("a JSON batch is an object")
    try:
        metric, version, batch_hex = obj["metric"], obj["version"], obj["batch_id"]
        mechanism, reports = obj["mechanism"], obj["reports"]
    except KeyError as exc:
        raise WireFormatError(f"JSON batch is missing {exc.args[0]!r}") from None
    if obj.get("format", FORMAT_VERSION) != FORMAT_VERSION:
        raise WireFormatError(f"unsupported batch format {obj.get('format')!r}")
    if not isinstance(metric, str) or not isinstance(version, int) or isinstance(version, bool):
        raise WireFormatError("'metric' must be a string and 'version' an integer")
    if not isinstance(batch_hex, str) or len(batch_hex) != 32:
        raise WireFormatError("'batch_id' must be 32 hex characters")
    try:
        batch_id = bytes.fromhex(batch_hex)
    except ValueError:
        raise WireFormatError("'batch_id' must be 32 hex characters") from None
    if mechanism != params.mechanism:
        raise WireFormatError(f"batch is {mechanism!r} but the metric's mechanism is {params.mechanism!r}")
    if not isinstance(reports, list) or not reports:
        raise WireFormatError("'reports' must be a non-empty list")
    batch = _reports_from_json(reports, params)
    # Re-encode and decode: one validation path for both forms.
    try:
        data = encode_batch(metric=metric, version=version, batch_id=batch_id, batch=batch, params=params)
    except (OverflowError, ValueError) as exc:
        if isinstance(exc, WireFormatError):
            raise
        raise WireFormatError(f"invalid report values: {exc}") from None
    return decode_batch(data, params)


def _ints(values: Sequence[Any], what: str, hi: int) -> np.ndarray:
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < hi:
            raise WireFormatError(f"{what} must be integers in [0, {hi - 1}]")
    return np.asarray(values, dtype=np.int64)


def _reports_from_json(reports: list[Any], params: Params) -> ReportBatch:
    mech, n = params.mechanism, len(reports)
    if mech == "rr":
        return ReportBatch(mechanism=mech, n=n, bits=np.packbits(_ints(reports, "rr reports", 2).astype(np.uint8)))
    if mech == "grr":
        assert isinstance(params, GrrParams)
        return ReportBatch(mechanism=mech, n=n, cols=_ints(reports, "grr reports", params.d))
    k, m = params.k, params.m  # type: ignore[union-attr]
    if not all(isinstance(r, dict) for r in reports):
        raise WireFormatError(f"{mech} reports must be objects")
    rows = _ints([r.get("row") for r in reports], "'row' values", k)
    if mech in ("cms", "oue-cms"):
        bits = np.zeros((n, m // 8), dtype=np.uint8)
        for i, r in enumerate(reports):
            text = r.get("bits")
            if not isinstance(text, str) or len(text) != m // 4:
                raise WireFormatError(f"'bits' must be {m // 4} hex characters ({m} bits)")
            try:
                bits[i] = np.frombuffer(bytes.fromhex(text), dtype=np.uint8)
            except ValueError:
                raise WireFormatError(f"'bits' must be {m // 4} hex characters ({m} bits)") from None
        return ReportBatch(mechanism=mech, n=n, rows=rows, bits=bits)
    cols = _ints([r.get("col") for r in reports], "'col' values", m)
    bitv = _ints([r.get("bit") for r in reports], "'bit' values", 2)
    return ReportBatch(mechanism=mech, n=n, rows=rows, cols=cols, bits=np.packbits(bitv.astype(np.uint8)))
