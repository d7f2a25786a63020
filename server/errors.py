"""Error answers and JSON responses of the Flask routes: every body they send is built here.

Every error has one shape, ``{"error": code, "message": ..., **extra}`` (:func:`ldptel.server.state.error_body`,
shared with the WSGI fast path), with a status from a fixed set and codes listed in the OpenAPI document
(``openapi.py``). A route raises :class:`ApiError` (usually through :func:`fail`); the handlers that
:func:`register_error_handlers` installs turn it, werkzeug's HTTP errors (404, 405, 413, ...), Redis being
unreachable (503 with ``Retry-After``) and anything unexpected (500, logged without the request) into
responses.
"""

from __future__ import annotations

import json
import logging
from typing import Any, NoReturn

import redis
from flask import Flask, Response
from redis.exceptions import RedisClusterException
from werkzeug.exceptions import HTTPException

from ldptel.client.errors import LdpError
from ldptel.server.state import REDIS_UNAVAILABLE, current_state, error_body

__all__ = ["ApiError", "error_response", "fail", "json_response", "register_error_handlers"]

log = logging.getLogger("ldptel.server")
# The error code of each werkzeug HTTP error status the service can answer with.
_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "registry_conflict",
    413: "too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
}


class ApiError(LdpError):
    """An error answered with ``{"error": code, "message": ...}`` (+ ``extra`` fields), ``status`` and ``headers``.

    ``metric`` and ``n`` are not sent: they are the labels an ingest rejection is counted under
    (``reports.py``): the registered metric the batch was for (``""`` until one is known) and its report count.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        metric: str = "",
        n: int = 0,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.extra = extra or {}
        self.headers = headers or {}
        self.metric, self.n = metric, n


def fail(
    status: int,
    code: str,
    message: str,
    /,
    *,
    metric: str = "",
    n: int = 0,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> NoReturn:
    """Raise :class:`ApiError`; ``extra`` becomes fields of the body."""
    raise ApiError(status, code, message, extra=extra, headers=headers, metric=metric, n=n)


def json_response(body: object, status: int, *, headers: dict[str, str] | None = None) -> Response:
    """``body`` as compact JSON (keys in the order given)."""
    return Response(
        json.dumps(body, separators=(",", ":")), status=status, mimetype="application/json", headers=headers
    )


def error_response(
    status: int, code: str, message: str, /, *, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    """The one shape of every error the service returns."""
    return json_response(error_body(code, message, **extra), status, headers=headers)


def register_error_handlers(app: Flask) -> None:
    """Answer every exception a request can raise with the JSON error shape."""
    app.register_error_handler(ApiError, _api_error)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(redis.RedisError, _redis_error)
    # redis-py's cluster client without a usable slot map (every node down, a slot served by none during a
    # failover): not a RedisError, the same 503
    app.register_error_handler(RedisClusterException, _redis_error)
    app.register_error_handler(Exception, _internal_error)


def _api_error(exc: ApiError) -> Response:
    return error_response(exc.status, exc.code, exc.message, headers=exc.headers, **exc.extra)


def _http_error(exc: HTTPException) -> Response:
    status = exc.code or 500
    code = _HTTP_CODES.get(status, "bad_request" if status < 500 else "internal")
    headers = {k: v for k, v in exc.get_headers() if k.lower() == "allow"}
    if status == 413:  # werkzeug's: a body over MAX_CONTENT_LENGTH, counted on any route
        current_state().telemetry.rejected("", "too_large", 0)
    return error_response(status, code, exc.description or exc.name, headers=headers)


def _redis_error(exc: redis.RedisError | RedisClusterException) -> Response:
    log.warning("redis unavailable: %s", type(exc).__name__)
    retry_after = str(current_state().config.retry_after)
    return error_response(503, *REDIS_UNAVAILABLE, headers={"Retry-After": retry_after})


def _internal_error(exc: Exception) -> Response:
    log.error("internal error: %s", type(exc).__name__, exc_info=exc)
    return error_response(500, "internal", "internal server error")
