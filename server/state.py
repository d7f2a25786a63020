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

from ldptel.server.config import ServerConfig
from ldptel.server.prom import Telemetry
from ldptel.server.ratelimit import TokenBucketLimiter
from ldptel.storage import keys
from ldptel.storage.append import BatchAppender, utc_day
from ldptel.storage.registry import MetricRecord, UnknownMetricError, parse_record

__all__ = [
    "EXTENSION",
    "IngestState",
    "RATE_WAIT_KEY",
    "REDIS_UNAVAILABLE",
    "append_batch",
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
    limiter: TokenBucketLimiter | None
    telemetry: Telemetry
    app_digests: frozenset[bytes]
    admin_digest: bytes
    metrics_digest: bytes | None  # LDPTEL_METRICS_TOKEN's, when set
    records: dict[bytes | str, MetricRecord]  # parsed records by their exact registry JSON
    recent: dict[str, tuple[float, MetricRecord]]  # name -> (monotonic fetch time, record)
    records_lock: threading.Lock


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
    """
    ttl = state.config.registry_ttl
    now = time.monotonic()
    if not fresh and ttl > 0:
        hit = state.recent.get(name)
        if hit is not None and now - hit[0] < ttl:
            return hit[1]
    raw = state.redis.hget(keys.registry(), name)
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


def append_batch(
    state: IngestState, *, record: MetricRecord, batch_id: bytes, version: int, n: int, data: bytes
) -> dict[str, Any]:
    """Append a validated binary batch (once per batch id), count it, and return the body of the 202.

    The server assigns the UTC day; a retried batch is acknowledged again (``duplicate``) but not appended.
    """
    day = utc_day()
    result = state.appender.append(
        metric=record.name,
        shards=record.shards,
        batch_id=batch_id,
        version=version,
        n=n,
        data=data,
        day=day,
        dedupe_ttl=state.config.dedupe_ttl,
        earlier_shards=record.earlier_shards(state.config.dedupe_ttl),  # after a shard-count growth
    )
    state.telemetry.accepted(record.name, n, duplicate=result.duplicate)
    return {
        "accepted": n,
        "duplicate": result.duplicate,
        "metric": record.name,
        "version": version,
        "batch_id": batch_id.hex(),
        "day": day,
    }


def error_body(code: str, message: str, /, **extra: Any) -> dict[str, Any]:
    """The one shape of every error the service returns: ``{"error": code, "message": ..., **extra}``."""
    return {"error": code, "message": message, **extra}
