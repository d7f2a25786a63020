"""The one binary encoding of a batch of reports, used for the HTTP body and the Redis stream alike.

Layout, all integers little-endian::

    magic     4 bytes  b"LDPT"
    format    u8       FORMAT_VERSION (1)
    mechanism u8       the mechanism's wire code (Mechanism.code)
    flags     u16      0, or FLAG_PROFILE (0x0001): the batch carries a system profile (any other bit is rejected)
    version   u32      metric version (>= 1)
    n         u32      number of reports (>= 1)
    batch_id  16 bytes random, chosen by the client; the server dedupes retries on it
    name_len  u8       then the metric name, UTF-8, 1..64 bytes
    [profile_len u8    only with FLAG_PROFILE: 1..255, then that many ASCII bytes, ``dim=value`` pairs joined
                       by ``,`` (the device's profile values of the metric's breakdown dimensions, in clear:
                       :mod:`ldptel.client.protocol.breakdown`)]
    payload            the mechanism's columns, each holding all n reports (Mechanism.columns in
                       ldptel.client.mechanisms.base): e.g. cms is n × u16 rows j < k, then n × m/8
                       bytes of each report's m bits packed MSB first; rr is ceil(n/8) bytes of bits

The total length must match exactly.

A **multi-part upload** carries several such batches (of different metrics, versions and days) in one
request body, each with its own batch id, so the server stores each part as a separate entry with nothing in
common (:func:`encode_upload`, :func:`split_upload`)::

    magic     4 bytes  b"LDPU"
    format    u8       FORMAT_VERSION (1)
    flags     u8       0 (reserved)
    parts     u16      number of parts, 1..MAX_UPLOAD_PARTS
    then per part: length u32, then that many bytes: one batch as above

 :func:`decode_batch` checks every field against the metric's params
and raises :class:`~ldptel.client.errors.WireFormatError` for anything else; it never raises another
exception type on any input (fuzzed with hypothesis). A JSON form of the same content exists for debugging
(:func:`batch_to_json` / :func:`batch_from_json`), validated the same way.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from ldptel.client.errors import WireFormatError
from ldptel.client.mechanisms.base import ReportBatch, reports_to_json
from ldptel.client.mechanisms.registry import mechanism_by_code, mechanism_codes, mechanism_of
from ldptel.client.protocol.breakdown import MAX_PROFILE_BYTES, parse_profile
from ldptel.client.protocol.specs import NAME_RE, NAME_RULE, Params

MAGIC = b"LDPT"
UPLOAD_MAGIC = b"LDPU"
MAX_UPLOAD_PARTS = 256
FORMAT_VERSION = 1
FLAG_PROFILE = 0x0001
MAX_REPORTS = (1 << 32) - 1
# Reports per uploaded batch: the SDK's largest batch and the ingest service's default limit (LDPTEL_MAX_BATCH_REPORTS).
DEFAULT_MAX_BATCH_REPORTS = 10_000
# Late retries (issue 12): a batch is sent with its age, the UTC days since the device formed it by the device's
# own clock (HTTP header BATCH_AGE_HEADER; an age, not a date, so a device clock that is off by a constant does
# not matter). The server refuses a batch older than the horizon (422 batch_too_old) and remembers batch ids
# until the end of their arrival day + the horizon + 1 (the 1 covers day boundaries falling at other instants
# on a skewed clock), so a retry is either deduplicated or refused, never counted twice. The SDK drops
# batches older than the horizon itself. One setting: LDPTEL_RETRY_HORIZON_DAYS (server) and the Reporter's
# retry_horizon_days (the SDK's default is the server's).
DEFAULT_RETRY_HORIZON_DAYS = 3
MAX_RETRY_HORIZON_DAYS = 30
BATCH_AGE_HEADER = "X-Ldptel-Batch-Age-Days"
_HEADER = struct.Struct("<4sBBHII16sB")
_UPLOAD_HEADER = struct.Struct("<4sBBH")
_PART_LENGTH = struct.Struct("<I")

__all__ = [
    "BATCH_AGE_HEADER",
    "BatchHeader",
    "DEFAULT_MAX_BATCH_REPORTS",
    "DEFAULT_RETRY_HORIZON_DAYS",
    "FLAG_PROFILE",
    "MAX_RETRY_HORIZON_DAYS",
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_REPORTS",
    "MAX_UPLOAD_PARTS",
    "UPLOAD_MAGIC",
    "ReportBatch",
    "batch_from_json",
    "batch_to_json",
    "decode_batch",
    "decode_header",
    "decode_payload",
    "encode_batch",
    "encode_upload",
    "is_upload",
    "split_upload",
    "upload_size",
]


@dataclass(frozen=True, kw_only=True)
class BatchHeader:
    metric: str
    version: int
    mechanism: str
    n: int
    batch_id: bytes
    payload_offset: int
    profile: str = ""  # the batch's profile as sent (``dim=value,...``; "" without FLAG_PROFILE)


# ----------------------------------------------------------------------------------------------- encode
def encode_batch(
    *, metric: str, version: int, batch_id: bytes, batch: ReportBatch, params: Params, profile: bytes = b""
) -> bytes:
    """The binary form of ``batch`` for ``metric`` at ``version`` (validated like a decode); ``profile``: the
    wire profile (:func:`ldptel.client.protocol.breakdown.encode_profile`), b"" for none."""
    mech = mechanism_of(params)
    if batch.mechanism != mech.name:
        raise WireFormatError(f"batch is {batch.mechanism!r} but the metric's mechanism is {mech.name!r}")
    name = metric.encode("utf-8")
    if not NAME_RE.fullmatch(metric):
        raise WireFormatError(f"metric name must be {NAME_RULE}")
    if len(batch_id) != 16:
        raise WireFormatError(f"batch_id must be 16 bytes, got {len(batch_id)}")
    if not 1 <= batch.n <= MAX_REPORTS:
        raise WireFormatError(f"a batch holds 1 to {MAX_REPORTS} reports, got {batch.n}")
    if not 1 <= version < 1 << 31:
        raise WireFormatError(f"version must be in [1, 2**31 - 1], got {version}")
    if len(profile) > MAX_PROFILE_BYTES:
        raise WireFormatError(f"profile is {len(profile)} bytes; at most {MAX_PROFILE_BYTES}")
    flags = FLAG_PROFILE if profile else 0
    head = _HEADER.pack(MAGIC, FORMAT_VERSION, mech.code, flags, version, batch.n, batch_id, len(name))
    extra = [bytes([len(profile)]), profile] if profile else []
    data = b"".join([head, name, *extra, *mech.encode_payload(batch, params)])
    decode_batch(data, params)  # never emit what the server would reject
    return data


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
    mech = mechanism_by_code(code)
    if mech is None:
        raise WireFormatError(f"unknown mechanism code {code}; known: {mechanism_codes()}")
    if flags & ~FLAG_PROFILE:
        raise WireFormatError(f"reserved flags must be 0, got {flags} (only {FLAG_PROFILE}, a profile, is defined)")
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
    if not NAME_RE.fullmatch(metric):
        raise WireFormatError(f"metric name must be {NAME_RULE}")
    offset, profile = _HEADER.size + name_len, ""
    if flags & FLAG_PROFILE:
        if len(data) <= offset or not 1 <= data[offset] <= len(data) - offset - 1:
            raise WireFormatError("bad profile length (a batch with the profile flag has 1..255 profile bytes)")
        raw = bytes(data[offset + 1 : offset + 1 + data[offset]])
        offset += 1 + len(raw)
        parse_profile(raw)  # well-formed dim=value pairs (WireFormatError otherwise)
        profile = raw.decode("ascii")
    return BatchHeader(
        metric=metric,
        version=version,
        mechanism=mech.name,
        n=n,
        batch_id=batch_id,
        payload_offset=offset,
        profile=profile,
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
    mech = mechanism_of(params)
    if header.mechanism != mech.name:
        raise WireFormatError(f"batch is {header.mechanism!r} but the metric's mechanism is {mech.name!r}")
    batch: ReportBatch = mech.decode_payload(memoryview(data)[header.payload_offset :], header.n, params)
    return batch


# ---------------------------------------------------------------------------------------- multi-part uploads
def upload_size(part_sizes: list[int]) -> int:
    """Bytes of the upload of parts of these sizes."""
    return _UPLOAD_HEADER.size + sum(_PART_LENGTH.size + size for size in part_sizes)


def encode_upload(parts: list[bytes]) -> bytes:
    """One request body carrying ``parts`` (each an encoded batch: :func:`encode_batch`), in order."""
    if not 1 <= len(parts) <= MAX_UPLOAD_PARTS:
        raise WireFormatError(f"an upload holds 1 to {MAX_UPLOAD_PARTS} parts, got {len(parts)}")
    out = [_UPLOAD_HEADER.pack(UPLOAD_MAGIC, FORMAT_VERSION, 0, len(parts))]
    for part in parts:
        if part[:4] != MAGIC:
            raise WireFormatError("every part of an upload is a batch (magic b'LDPT')")
        out += [_PART_LENGTH.pack(len(part)), part]
    return b"".join(out)


def is_upload(data: bytes | memoryview) -> bool:
    """``data`` starts like a multi-part upload (not a single batch)."""
    return bytes(data[:4]) == UPLOAD_MAGIC


def split_upload(data: bytes | memoryview) -> list[memoryview]:
    """The parts of a multi-part upload, as views of ``data`` (each to decode as a batch); checks the
    envelope only (magic, format, flags, part count, lengths that add up exactly)."""
    view = memoryview(data)
    if len(view) < _UPLOAD_HEADER.size:
        raise WireFormatError(f"upload too short: {len(view)} bytes, the header alone is {_UPLOAD_HEADER.size}")
    magic, fmt, flags, count = _UPLOAD_HEADER.unpack_from(view)
    if magic != UPLOAD_MAGIC:
        raise WireFormatError("not an ldptel upload (bad magic; expected b'LDPU')")
    if fmt != FORMAT_VERSION:
        raise WireFormatError(f"unsupported upload format {fmt}; this build reads format {FORMAT_VERSION}")
    if flags != 0:
        raise WireFormatError(f"reserved upload flags must be 0, got {flags}")
    if not 1 <= count <= MAX_UPLOAD_PARTS:
        raise WireFormatError(f"an upload holds 1 to {MAX_UPLOAD_PARTS} parts, got {count}")
    parts, at = [], _UPLOAD_HEADER.size
    for i in range(count):
        if len(view) < at + _PART_LENGTH.size:
            raise WireFormatError(f"upload truncated before the length of part {i}")
        (length,) = _PART_LENGTH.unpack_from(view, at)
        at += _PART_LENGTH.size
        if length < 1 or len(view) < at + length:
            raise WireFormatError(f"part {i} claims {length} bytes; {len(view) - at} are left")
        parts.append(view[at : at + length])
        at += length
    if at != len(view):
        raise WireFormatError(f"{len(view) - at} bytes after the last of the {count} parts")
    return parts


# ------------------------------------------------------------------------------------------------- JSON
def batch_to_json(
    *, metric: str, version: int, batch_id: bytes, batch: ReportBatch, profile: str = ""
) -> dict[str, Any]:
    """A readable form of a batch (debugging; the binary form is the normal one)."""
    return {
        "format": FORMAT_VERSION,
        "metric": metric,
        "version": version,
        "batch_id": batch_id.hex(),
        "mechanism": batch.mechanism,
        "reports": reports_to_json(batch),
        **({"profile": dict(parse_profile(profile))} if profile else {}),
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
    mech = mechanism_of(params)
    if mechanism != mech.name:
        raise WireFormatError(f"batch is {mechanism!r} but the metric's mechanism is {mech.name!r}")
    if not isinstance(reports, list) or not reports:
        raise WireFormatError("'reports' must be a non-empty list")
    batch = mech.reports_from_json(reports, params)
    profile = _json_profile(obj.get("profile"))
    # Re-encode and decode: one validation path for both forms.
    try:
        data = encode_batch(
            metric=metric, version=version, batch_id=batch_id, batch=batch, params=params, profile=profile
        )
    except (OverflowError, ValueError) as exc:
        if isinstance(exc, WireFormatError):
            raise
        raise WireFormatError(f"invalid report values: {exc}") from None
    return decode_batch(data, params)


def _json_profile(value: object) -> bytes:
    """The wire profile of a JSON batch's ``"profile"`` (an object of dimension → value; absent: none)."""
    if value is None:
        return b""
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise WireFormatError("'profile' must be an object of dimension → value strings")
    if not value:
        return b""
    text = ",".join(f"{k}={v}" for k, v in value.items())
    parse_profile(text)
    return text.encode("ascii")
