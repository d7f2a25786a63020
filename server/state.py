"""Per-process state of the ingest app and the helpers that need no Flask request context.

Both the Flask routes (``reports.py``, ``metrics.py``, ``auth.py``, ``ops.py``) and the WSGI fast path of
``POST /v1/reports`` (``fastpath.py``) use these, so a token, a registry record or an accepted batch is handled
the same way on either path. The Flask routes find the state with :func:`current_state`.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis
from flask import current_app
from redis.exceptions import RedisClusterException

from ldptel.client.errors import LdpError
from ldptel.client.mechanisms import mechanism_of
from ldptel.client.protocol.breakdown import ProfileSchema, cell_for, cell_of
from ldptel.client.protocol.specs import MetricSpec, Params
from ldptel.client.protocol.wire import BATCH_AGE_HEADER, BatchHeader, ReportBatch, decode_payload
from ldptel.server.config import ServerConfig
from ldptel.server.prom import Telemetry
from ldptel.server.proxies import TrustedProxies
from ldptel.server.ratelimit import SourceFailureLimiter, TokenRateLimiter
from ldptel.storage import keys
from ldptel.storage.append import BatchAppender, utc_day
from ldptel.storage.registry import MetricRecord, UnknownMetricError, parse_record

__all__ = [
    "EXTENSION",
    "IngestState",
    "RATE_WAIT_KEY",
    "REDIS_UNAVAILABLE",
    "BatchAgeError",
    "BatchIdConflictError",
    "append_batch",
    "batch_cell",
    "check_batch_age",
    "validated_payload",
    "bearer_digest",
    "digest_in",
    "cached_record",
    "current_state",
    "digest",
    "error_body",
]

# Key of the IngestState in ``app.extensions``.
EXTENSION = "ldptel"
# WSGI environ key: the rate-limit wait (seconds, 0.0 = allowed) the fast path already took for this request,
# so the Flask route it falls back to does not take a second token.
RATE_WAIT_KEY = "ldptel.rate_wait"
_MAX_CACHED_RECORDS = 4096
# (code, message) of the 503 answered while Redis is unreachable (with Retry-After: config.retry_after)
REDIS_UNAVAILABLE = ("redis_unavailable", "storage is unavailable; retry later")


@dataclass(frozen=True, eq=False)
class IngestState:
    config: ServerConfig
    redis: redis.Redis
    appender: BatchAppender
    limiter: TokenRateLimiter | None
    failures: SourceFailureLimiter | None
    proxies: TrustedProxies  # LDPTEL_TRUSTED_PROXIES: whose X-Forwarded-For names the source of a failure
    telemetry: Telemetry
    app_digests: frozenset[bytes]
    admin_digest: bytes
    metrics_digest: bytes | None  # LDPTEL_METRICS_TOKEN's, when set
    records: dict[bytes | str, MetricRecord]  # parsed records by their exact registry JSON
    recent: dict[str, tuple[float, MetricRecord]]  # name -> (monotonic fetch time, record)
    records_lock: threading.Lock

    def close(self) -> None:
        """Disconnect this app's Redis connections: the appender's raw ones and the client's pool. A server
        process serves until it exits and need not; whatever makes and drops apps (tests) must, or the
        connections are left to the garbage collector (redis-py's are in reference cycles, whose collection
        may warn "unclosed socket")."""
        self.appender.close()
        self.redis.close()


def current_state() -> IngestState:
    """The state of the app handling the current request (Flask routes only; the fast path holds its own)."""
    state = current_app.extensions[EXTENSION]
    assert isinstance(state, IngestState)
    return state


def digest(token: str | bytes) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape") if isinstance(token, str) else token).digest()


def digest_in(token_digest: bytes, digests: Iterable[bytes]) -> bool:
    """Whether ``token_digest`` is one of ``digests``: :func:`hmac.compare_digest` against every one, no early exit."""
    found = False
    for candidate in digests:
        found |= hmac.compare_digest(token_digest, candidate)
    return found


def bearer_digest(header: str) -> bytes | None:
    """The digest of the token in an ``Authorization: Bearer <token>`` header, or None if it is not one (or
    not ASCII: every configured token is printable ASCII, and a lone surrogate could not even be hashed)."""
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or not token.isascii():
        return None
    return digest(token)


def cached_record(state: IngestState, name: str, *, fresh: bool = False) -> MetricRecord:
    """The registry record of ``name``: reused for ``registry_ttl`` seconds unless ``fresh``, else one HGET.

    Unknown names are never cached (so a metric is usable as soon as it is created), and the cache only
    holds registered names, so it is bounded by the registry's size. Raises :class:`UnknownMetricError`.
    While Redis cannot answer, a record seen before serves on (not with ``fresh``); else the Redis error.
    """
    ttl = state.config.registry_ttl
    now = time.monotonic()
    hit = state.recent.get(name)
    if not fresh and ttl > 0 and hit is not None and now - hit[0] < ttl:
        return hit[1]
    try:
        raw = state.redis.hget(keys.registry(), name)
    except (redis.RedisError, RedisClusterException):
        # The registry's node is unreachable (a failover of its primary, a restart): a record this process
        # already knew serves on, whatever its age, so metrics whose shards live on healthy nodes keep being
        # ingested; it is kept for another ``registry_ttl`` before the registry is asked again. No record: 503.
        if hit is None or fresh:
            raise
        state.recent[name] = (now, hit[1])
        return hit[1]
    if raw is None:
        state.recent.pop(name, None)
        raise UnknownMetricError(name)
    record = state.records.get(raw)
    if record is None:
        record = parse_record(raw)
        with state.records_lock:
            if len(state.records) >= _MAX_CACHED_RECORDS:
                state.records.clear()
            state.records[raw] = record
    state.recent[name] = (now, record)
    return record


def batch_cell(state: IngestState, spec: MetricSpec, header: BatchHeader) -> str:
    """The canonical breakdown cell of a batch (:func:`~ldptel.client.protocol.breakdown.cell_of`) by the values the
    spec declares (the registry keeps them current in the record: no extra read): "" for a metric without
    breakdown; raises WireFormatError for a profile the metric does not declare."""
    if not spec.breakdown:
        if header.profile:
            cell_of(header.profile, (), ProfileSchema({}))  # raises: names dimensions the metric does not declare
        return ""
    return cell_for(header.profile, spec.breakdown, spec.profile)


class BatchAgeError(LdpError):
    """The batch's age (``X-Ldptel-Batch-Age-Days``) is invalid (400) or beyond the retry horizon (422)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def check_batch_age(age: str | None, horizon: int) -> None:
    """Refuse a batch whose age (``X-Ldptel-Batch-Age-Days``: whole UTC days since the device formed it, by the
    device's clock) is not a non-negative integer (400) or exceeds ``horizon`` (422 ``batch_too_old``).

    Never counted twice: the first arrival's dedupe key lives until the end of (arrival day + horizon + 1).
    A retry on day R that is accepted has age ≤ horizon; the device's day count and the server's differ by
    at most one (a constant clock offset moves each day boundary by the same amount), so R ≤ arrival + horizon
    + 1 and the key is still there. No header (an older client): age 0.
    """
    if age is None:
        return
    if not (age.isascii() and age.isdigit() and len(age) <= 6):
        raise BatchAgeError(400, "invalid_batch_age", f"{BATCH_AGE_HEADER} must be a whole number of days >= 0")
    if int(age) > horizon:
        raise BatchAgeError(
            422, "batch_too_old",
            f"batch formed {int(age)} days ago, beyond the retry horizon of {horizon} day(s): it may have been "
            "counted already and its id forgotten; drop it",
        )


class BatchIdConflictError(LdpError):
    """The batch id was accepted before with other content (409 ``batch_id_conflict``); nothing was written."""

    def __init__(self, batch_id: bytes) -> None:
        super().__init__(
            f"batch id {batch_id.hex()} was accepted before with different content; a retry must resend the same "
            "bytes, and a new batch needs a new random id (this batch was not stored)")


def append_batch(
    state: IngestState, *, record: MetricRecord, batch_id: bytes, version: int, n: int, data: bytes,
    age: str | None = None, cell: str = "",
) -> dict[str, Any]:
    """Append a validated binary batch (once per batch id), count it, and return the body of the 202.

    The server assigns the UTC day; a retried batch is acknowledged again (``duplicate``) but not appended; a
    seen batch id with other content raises :class:`BatchIdConflictError` (nothing appended, nothing counted).
    ``age``: the client's ``X-Ldptel-Batch-Age-Days`` (:func:`check_batch_age` raises :class:`BatchAgeError`).
    """
    check_batch_age(age, state.config.retry_horizon_days)
    day = utc_day()
    result = state.appender.append(
        metric=record.name,
        shards=record.shards,
        batch_id=batch_id,
        version=version,
        n=n,
        data=data,
        day=day,
        dedupe_days=state.config.retry_horizon_days + 1,  # see check_batch_age
        earlier_shards=record.earlier_shards(state.config.retry_horizon_days + 1),  # after a shard-count growth
        cell=cell,
    )
    if result.conflict:
        raise BatchIdConflictError(batch_id)
    state.telemetry.accepted(record.name, n, duplicate=result.duplicate)
    return {
        "accepted": n,
        "duplicate": result.duplicate,
        "metric": record.name,
        "version": version,
        "batch_id": batch_id.hex(),
        "day": day,
    }


def validated_payload(body: bytes, header: BatchHeader, params: Params) -> ReportBatch:
    """The ingest's full validation of a batch: every column (:func:`decode_payload`), then the mechanism's
    plausibility check (reports no honest client produces, ldp-math §8.2). Raises WireFormatError."""
    batch = decode_payload(body, header, params)
    mechanism_of(params).check_plausible(batch, params)
    return batch


def error_body(code: str, message: str, /, **extra: Any) -> dict[str, Any]:
    """The one shape of every error the service returns: ``{"error": code, "message": ..., **extra}``."""
    return {"error": code, "message": message, **extra}
