"""The WSGI fast path of ``POST /v1/reports``: a valid binary batch from an app token, without Flask's machinery.

Almost every request an ingest service sees is the same one: an app token, a binary batch for the current
version of an active metric, and a 202. For that request Flask's per-request machinery (request context,
URL routing, before/after hooks, ``Request`` and ``Response`` objects) cost about as much CPU as the work
itself (validation and the Redis append), measured with ``tests/bench/bench_ingest.py``. :class:`FastIngest`
wraps ``app.wsgi_app`` (the way Flask documents for middleware) and answers that one request directly.

It only ever answers **202** (or **503** when Redis is unreachable). At the first thing that is not the common
case — another path, method or content type, a missing length or a chunked body, a body over the limit, no or
not an app token, the rate limit, a multi-part upload or a batch that does not decode, too many reports, an unknown metric, a retired
metric or another version, a batch id seen before with other content (the script wrote nothing), or anything
unexpected before the append — it hands the request, with the body it
read, to the Flask app, which checks everything again and answers with the documented error. So every error
comes from one place (the Flask app: ``reports.py``, ``auth.py``, ``errors.py``), and both paths share the
helpers in ``state.py``: the token digest, the registry cache, the validation (:func:`decode_payload`), the
append and the 202 body. The tests run every request through this wrapper (the Flask test client calls
``app.wsgi_app``) and compare it with the Flask route alone.
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import redis

from ldptel.client.protocol.wire import BATCH_AGE_HEADER, decode_header
from ldptel.server.state import (
    RATE_WAIT_KEY,
    REDIS_UNAVAILABLE,
    BatchAgeError,
    BatchIdConflictError,
    IngestState,
    append_batch,
    batch_cell,
    bearer_digest,
    cached_record,
    check_batch_age,
    digest_in,
    error_body,
    validated_payload,
)

__all__ = ["FastIngest"]

log = logging.getLogger("ldptel.server")
ENDPOINT = "/v1/reports"
_BATCH_AGE = "HTTP_" + BATCH_AGE_HEADER.upper().replace("-", "_")
_JSON = ("Content-Type", "application/json")
StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class FastIngest:
    """WSGI middleware: ``app.wsgi_app = FastIngest(app.wsgi_app, state)``."""

    def __init__(self, wsgi_app: WsgiApp, state: IngestState) -> None:
        self.wsgi_app = wsgi_app
        self.state = state

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if (
            environ.get("PATH_INFO") != ENDPOINT
            or environ.get("REQUEST_METHOD") != "POST"
            or environ.get("CONTENT_TYPE") != "application/octet-stream"
        ):
            return self.wsgi_app(environ, start_response)
        t0 = time.perf_counter()
        length_text = environ.get("CONTENT_LENGTH") or ""
        if (
            "HTTP_TRANSFER_ENCODING" in environ  # a chunked body: Flask reads the whole stream
            or not (length_text.isascii() and length_text.isdigit())
            or not 0 < int(length_text) <= self.state.config.max_body_bytes
        ):
            return self.wsgi_app(environ, start_response)  # nothing read yet: Flask answers 400/411/413
        length = int(length_text)
        body = environ["wsgi.input"].read(length)
        try:
            accepted = None if len(body) != length else self._ingest(environ, body)  # short: the client went away
        except redis.RedisError as exc:
            log.warning("redis unavailable: %s", type(exc).__name__)
            return self._respond(start_response, t0, 503, error_body(*REDIS_UNAVAILABLE), retry_after=True)
        if accepted is None:
            environ["wsgi.input"] = io.BytesIO(body)
            return self.wsgi_app(environ, start_response)
        return self._respond(start_response, t0, 202, accepted)

    def _ingest(self, environ: dict[str, Any], body: bytes) -> dict[str, Any] | None:
        """Append the batch and return the 202 body; None when this is not the common case."""
        state = self.state
        header_text = environ.get("HTTP_AUTHORIZATION")
        token_digest = None if header_text is None else bearer_digest(header_text)
        if token_digest is None or not digest_in(token_digest, state.app_digests):
            return None
        # A valid app token is never refused for its source's failed authentications (auth.py): no check here.
        if state.limiter is not None:
            wait = environ[RATE_WAIT_KEY] = state.limiter.acquire(token_digest)
            if wait > 0:
                return None
        try:
            header = decode_header(body)
            if header.n > state.config.max_batch_reports:
                return None
            record = cached_record(state, header.metric)
            if not record.active or header.version != record.current_version:
                return None  # Flask re-reads the registry before it answers 409
            validated_payload(body, header, record.current.params)  # full validation against the current spec
            cell = batch_cell(state, record.current, header)  # Flask answers 400 invalid_profile
        except redis.RedisError:
            raise
        except Exception:
            return None
        age = environ.get(_BATCH_AGE)
        try:
            check_batch_age(age, state.config.retry_horizon_days)
        except BatchAgeError:
            return None  # Flask answers 400/422
        try:
            return append_batch(
                state, record=record, batch_id=header.batch_id, version=header.version, n=header.n, data=body, age=age,
                cell=cell,
            )
        except BatchIdConflictError:
            return None  # nothing was written: Flask runs it again and answers 409 batch_id_conflict

    def _respond(
        self, start_response: StartResponse, t0: float, status: int, body: dict[str, Any], *, retry_after: bool = False
    ) -> list[bytes]:
        payload = json.dumps(body, separators=(",", ":")).encode()
        headers = [_JSON, ("Content-Length", str(len(payload)))]
        if retry_after:
            headers.append(("Retry-After", str(self.state.config.retry_after)))
        start_response("202 ACCEPTED" if status == 202 else "503 SERVICE UNAVAILABLE", headers)
        self.state.telemetry.observe(ENDPOINT, status, time.perf_counter() - t0)
        return [payload]
