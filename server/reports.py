"""The ``reports`` blueprint: ``POST /v1/reports``, the ingest of one batch of privatized reports.

Request path (binary form), in order, each step answering with its own 4xx JSON error before anything is
written:

1. bearer token (401/403) and per-token rate limit (429) (``auth.py``), body size (413), content type (415)
   (``bodies.py``);
2. the fixed batch header (400), report count (413);
3. the metric's registry record (404 unknown, 409 retired or not the current version). A process reuses a
   record for ``registry_ttl`` seconds (default 1) instead of an ``HGET`` per request, which saves one of the two
   Redis round trips; a batch that does not match the cached record is checked against a fresh read before it
   is rejected, so a new metric or version is usable at once, and a retirement or a version change reaches every
   worker within ``registry_ttl`` (until then that worker still appends batches of the previous version, which
   the aggregator keeps in that version's sketches);
4. full vectorized validation of the payload against the current spec (400);
5. the batch's age (``X-Ldptel-Batch-Age-Days``, optional): 400 if invalid, 422 ``batch_too_old`` beyond the
   retry horizon (``state.check_batch_age``: a batch is either deduplicated or refused, never counted twice);
6. one Lua script on the batch's shard: dedupe on the batch id and ``XADD`` the batch bytes with the UTC day
   (202 only after Redis replied; :mod:`ldptel.storage.append`). A batch id seen before is answered 202
   ``duplicate: true`` when the bytes are the same (a retry) and 409 ``batch_id_conflict`` when they differ
   (nothing written; counted as a rejection), within one multi-part upload or across requests.

A **multi-part upload** (binary body starting with ``b"LDPU"``, :func:`ldptel.client.protocol.wire.split_upload`)
carries several batches (of different metrics, versions, days). After step 1 and a check of the envelope (400),
each part goes through steps 2 to 5 on its own, exactly as a single batch: its own batch id, dedupe key and
stream entry, nothing shared between parts at rest. The answer is 200 with ``{"parts": [...]}``, one result per
part in order: ``{"http_status": 202, **accepted}`` or ``{"http_status": <4xx>, "error": ..., ...}`` as
that batch alone would have been answered. Redis failing midway answers 503 for the whole upload; a retry is
deduped part by part.

The JSON form (for debugging) is checked the same way and re-encoded to the binary form before the append.
Every rejection after authentication is counted by metric and reason (Prometheus, ``prom.py``). The common
request, a valid binary batch, is answered before Flask by ``fastpath.py``, which hands everything else here.

Redis being unreachable turns into 503 with ``Retry-After`` (``errors.py``); the redis-py pool reconnects by
itself once it is back. Nothing about the sender (address, user agent, device, client time) is read, stored or
logged, and no request body or report ever reaches a log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from flask import Blueprint, Response, request

from ldptel.client.errors import WireFormatError
from ldptel.client.protocol.specs import MetricSpec
from ldptel.client.protocol.wire import (
    BATCH_AGE_HEADER,
    BatchHeader,
    batch_from_json,
    decode_header,
    encode_batch,
    is_upload,
    split_upload,
)
from ldptel.server.auth import authenticate
from ldptel.server.bodies import parse_json, read_body
from ldptel.server.errors import ApiError, fail, json_response
from ldptel.server.state import (
    BatchAgeError,
    BatchIdConflictError,
    IngestState,
    append_batch,
    batch_cell,
    cached_record,
    check_batch_age,
    current_state,
    error_body,
    validated_payload,
)
from ldptel.storage.registry import MetricRecord, UnknownMetricError

__all__ = ["bp"]

bp = Blueprint("reports", __name__)
_BINARY = "application/octet-stream"
_JSON = "application/json"


@dataclass(frozen=True)
class _Batch:
    """A validated batch, ready to append in its binary form."""

    record: MetricRecord
    batch_id: bytes
    version: int
    n: int
    data: bytes
    cell: str = ""  # the canonical breakdown cell ("" without breakdown)


@bp.post("/v1/reports")
def post_reports() -> Response:
    authenticate("app")
    state = current_state()
    try:
        mimetype, body = read_body(kinds=(_BINARY, _JSON))
        age = request.headers.get(BATCH_AGE_HEADER)
        if mimetype == _BINARY and is_upload(body):
            # One age for the whole upload (the client sends its oldest part's): too old refuses the request,
            # and the client then sends the parts alone.
            try:
                check_batch_age(age, state.config.retry_horizon_days)
            except BatchAgeError as exc:
                fail(exc.status, exc.code, str(exc))
            return json_response({"parts": [_part(state, part, age) for part in _parts(body)]}, 200)
        batch = _binary_batch(state, body) if mimetype == _BINARY else _json_batch(state, body)
        try:
            accepted = append_batch(state, record=batch.record, batch_id=batch.batch_id, version=batch.version,
                                    n=batch.n, data=batch.data, age=age, cell=batch.cell)
        except BatchAgeError as exc:
            fail(exc.status, exc.code, str(exc), metric=batch.record.name, n=batch.n)
        except BatchIdConflictError as exc:
            _conflict(batch, exc)
    except ApiError as exc:
        state.telemetry.rejected(exc.metric, exc.code, exc.n)
        raise
    return json_response(accepted, 202)


def _parts(body: bytes) -> list[bytes]:
    try:
        return [bytes(part) for part in split_upload(body)]
    except WireFormatError as exc:
        fail(400, "invalid_upload", str(exc))


def _part(state: IngestState, body: bytes, age: str | None) -> dict[str, object]:
    """One part of a multi-part upload, handled as a single batch of the upload's (checked) ``age``; its
    result (never raises an ApiError)."""
    try:
        batch = _binary_batch(state, body)
    except ApiError as exc:
        state.telemetry.rejected(exc.metric, exc.code, exc.n)
        return {"http_status": exc.status, **error_body(exc.code, exc.message, **exc.extra)}
    try:
        try:
            accepted = append_batch(
                state, record=batch.record, batch_id=batch.batch_id, version=batch.version, n=batch.n,
                data=batch.data, age=age, cell=batch.cell,
            )
        except BatchIdConflictError as exc:
            _conflict(batch, exc)
    except ApiError as exc:
        state.telemetry.rejected(exc.metric, exc.code, exc.n)
        return {"http_status": exc.status, **error_body(exc.code, exc.message, **exc.extra)}
    return {"http_status": 202, **accepted}


def _conflict(batch: _Batch, exc: BatchIdConflictError) -> NoReturn:
    fail(409, "batch_id_conflict", str(exc), metric=batch.record.name, n=batch.n, batch_id=batch.batch_id.hex())


def _binary_batch(state: IngestState, body: bytes) -> _Batch:
    try:
        header = decode_header(body)
    except WireFormatError as exc:
        fail(400, "invalid_batch", str(exc))
    record, spec = _target(state, header.metric, header.version, header.n)
    try:
        validated_payload(body, header, spec.params)
    except WireFormatError as exc:
        fail(400, "invalid_batch", str(exc), metric=header.metric, n=header.n)
    return _Batch(record=record, batch_id=header.batch_id, version=header.version, n=header.n, data=body,
                  cell=_cell(state, spec, header))


def _cell(state: IngestState, spec: MetricSpec, header: BatchHeader) -> str:
    """The batch's breakdown cell, or 400 ``invalid_profile`` naming the metric's dimensions."""
    try:
        return batch_cell(state, spec, header)
    except WireFormatError as exc:
        fail(400, "invalid_profile", str(exc), metric=header.metric, n=header.n, breakdown=list(spec.breakdown))


def _json_batch(state: IngestState, body: bytes) -> _Batch:
    obj = parse_json(body)
    if not isinstance(obj, dict):
        fail(400, "invalid_batch", "a JSON batch is an object")
    metric, version, reports = obj.get("metric"), obj.get("version"), obj.get("reports")
    if not isinstance(metric, str) or isinstance(version, bool) or not isinstance(version, int):
        fail(400, "invalid_batch", "'metric' must be a string and 'version' an integer")
    n = len(reports) if isinstance(reports, list) else 0
    record, spec = _target(state, metric, version, n)
    try:
        header, batch = batch_from_json(obj, spec.params)
        if header.metric != record.name:  # pragma: no cover - batch_from_json keeps the given name
            raise WireFormatError("metric name mismatch")
        data = encode_batch(
            metric=record.name, version=version, batch_id=header.batch_id, batch=batch, params=spec.params,
            profile=header.profile.encode("ascii"),
        )
        header = decode_header(data)
        validated_payload(data, header, spec.params)  # the same checks as the binary form
    except WireFormatError as exc:
        fail(400, "invalid_batch", str(exc), metric=record.name, n=n)
    return _Batch(record=record, batch_id=header.batch_id, version=version, n=header.n, data=data,
                  cell=_cell(state, spec, header))


def _target(state: IngestState, metric: str, version: int, n: int) -> tuple[MetricRecord, MetricSpec]:
    """The size limit, then the metric's record and the spec of the batch's version (413/404/409 otherwise)."""
    limit = state.config.max_batch_reports
    if n > limit:
        fail(413, "too_many_reports", f"{n} reports; at most {limit} per batch", n=n)
    record = _matching_record(state, metric, version, n)
    return record, _current_spec(record, version, n)


def _matching_record(state: IngestState, metric: str, version: int, n: int) -> MetricRecord:
    """The record to check a batch against; a cached record that would reject it is re-read first."""
    record = _record(state, metric, n, fresh=False)
    if record.active and version == record.current_version:
        return record
    return _record(state, metric, n, fresh=True)


def _record(state: IngestState, metric: str, n: int, *, fresh: bool) -> MetricRecord:
    try:
        return cached_record(state, metric, fresh=fresh)
    except UnknownMetricError as exc:
        fail(404, "unknown_metric", str(exc), n=n)  # an unknown name never becomes a metric label


def _current_spec(record: MetricRecord, version: int, n: int) -> MetricSpec:
    """The spec a batch must match: the current version of an active metric (else 409 with the current spec)."""
    current = record.current
    if not record.active:
        fail(
            409,
            "metric_retired",
            f"metric {record.name!r} is retired and accepts no reports",
            metric=record.name,
            n=n,
            status=record.status,
            current_version=record.current_version,
            current=current.to_dict(),
        )
    if version != record.current_version:
        known = "an old" if version in record.versions else "an unknown"
        fail(
            409,
            "version_conflict",
            f"batch is for {known} version {version} of {record.name!r}; the current version is {record.current_version}",
            metric=record.name,
            n=n,
            version=version,
            status=record.status,
            current_version=record.current_version,
            current=current.to_dict(),
        )
    return current
