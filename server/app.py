"""The Flask app factory and the ``ingest`` blueprint.

Request path of ``POST /v1/reports`` (binary form), in order, each step answering with its own 4xx JSON error
before anything is written:

1. bearer token (401/403), per-token rate limit (429), body size (413), content type (415);
2. the fixed batch header (400), report count (413);
3. the metric's registry record (404 unknown, 409 retired or not the current version). A process reuses a
   record for ``registry_ttl`` seconds (default 1) instead of an ``HGET`` per request, which saves one of the two
   Redis round trips; a batch that does not match the cached record is checked against a fresh read before it
   is rejected, so a new metric or version is usable at once, and a retirement or a version change reaches every
   worker within ``registry_ttl`` (until then that worker still appends batches of the previous version, which
   the aggregator keeps in that version's sketches);
4. full vectorized validation of the payload against the current spec (400);
5. one Lua script on the batch's shard: dedupe on the batch id and ``XADD`` the batch bytes with the UTC day
   (202 only after Redis replied).

Redis being unreachable turns into 503 with ``Retry-After``; the redis-py pool reconnects by itself once it is
back. Nothing about the sender (address, user agent, device, client time) is read, stored or logged, and no
request body or report ever reaches a log.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any, Literal, NoReturn

import redis
from flask import Blueprint, Flask, Response, current_app, g, request
from redis.backoff import NoBackoff
from redis.retry import Retry
from werkzeug.exceptions import HTTPException

from ldptel.client.errors import InvalidParameterError, WireFormatError
from ldptel.client.protocol.specs import MetricSpec
from ldptel.client.protocol.wire import batch_from_json, decode_header, decode_payload, encode_batch

from ldptel.storage import keys
from ldptel.server.config import ServerConfig
from ldptel.storage.registry import MAX_SHARDS
from ldptel.storage.embedded import shared_embedded
from ldptel.server.fastpath import FastIngest
from ldptel.server.openapi import openapi_document
from ldptel.server.prom import Telemetry
from ldptel.server.ratelimit import TokenBucketLimiter
from ldptel.storage.registry import (
    MetricRecord,
    RegistryConflictError,
    UnknownMetricError,
    create_metric,
    list_metrics,
    parse_record,
    retire_metric,
)
from ldptel.server.state import (
    RATE_WAIT_KEY,
    REDIS_UNAVAILABLE,
    IngestState,
    append_batch,
    bearer_digest,
    cached_record,
    digest,
    error_body,
)
from ldptel.storage.append import BatchAppender

__all__ = ["create_app", "error_response", "ApiError"]

log = logging.getLogger("ldptel.server")
bp = Blueprint("ingest", __name__)
Role = Literal["app", "admin"]
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


class ApiError(Exception):
    """An error answered with ``{"error": code, "message": ...}`` (+ ``extra`` fields) and ``status``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.extra = extra or {}
        self.headers = headers or {}


def _json_response(body: object, status: int, headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(body, separators=(",", ":")), status=status, mimetype="application/json", headers=headers
    )


def error_response(
    status: int, code: str, message: str, /, *, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    """The one shape of every error the service returns."""
    return _json_response(error_body(code, message, **extra), status, headers)


def _state() -> IngestState:
    return current_app.extensions["ldptel"]  # type: ignore[no-any-return]


# --------------------------------------------------------------------------------------------- factory
def create_app(config: ServerConfig | None = None) -> Flask:
    """Build the ingest app. ``config=None`` reads :meth:`ServerConfig.from_env`.

    When ``config.redis_url`` is None, a private embedded Redis (AOF on) is started for this process and
    stopped at exit (under gunicorn, ``deploy/gunicorn.conf.py`` starts one in the master instead, so all
    workers share it).
    """
    cfg = ServerConfig.from_env() if config is None else config
    if cfg.redis_url is None:
        cfg = cfg.with_redis_url(shared_embedded(data_dir=cfg.data_dir).url)
    assert cfg.redis_url is not None
    client = redis.Redis.from_url(
        cfg.redis_url,
        socket_timeout=cfg.redis_timeout,
        socket_connect_timeout=min(1.0, cfg.redis_timeout),
        # One immediate retry heals a pooled connection that a Redis restart closed. Retrying the append
        # is safe: the script is idempotent per batch id.
        retry=Retry(NoBackoff(), 1),
    )
    # instance_path given explicitly: Flask cannot derive it for a module of the ``ldptel`` namespace package
    # (and the service keeps no instance files).
    here = os.path.dirname(os.path.abspath(__file__))
    app = Flask("ldptel.server", root_path=here, instance_path=os.path.join(here, "instance"))
    app.config["MAX_CONTENT_LENGTH"] = cfg.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    state = app.extensions["ldptel"] = IngestState(
        config=cfg,
        redis=client,
        appender=BatchAppender(client),
        limiter=None if cfg.rate_limit is None else TokenBucketLimiter(rate=cfg.rate_limit, burst=cfg.rate_burst),
        telemetry=Telemetry(),
        app_digests=frozenset(digest(t) for t in cfg.app_tokens),
        admin_digest=digest(cfg.admin_token),
        records={},
        recent={},
        records_lock=threading.Lock(),
    )
    app.extensions["redis"] = client
    app.register_blueprint(bp)
    # The common ingest request (a valid binary batch) skips Flask's per-request machinery; anything else,
    # including every error, is answered by the routes below. See fastpath.py.
    app.wsgi_app = FastIngest(app.wsgi_app, state)  # type: ignore[method-assign]
    return app


# -------------------------------------------------------------------------------------- request hooks
@bp.before_app_request
def _start_timer() -> None:
    g.ldptel_t0 = time.perf_counter()


@bp.after_app_request
def _observe(response: Response) -> Response:
    t0 = g.get("ldptel_t0")
    if t0 is not None:
        rule = request.url_rule
        endpoint = rule.rule if rule is not None else "unmatched"
        _state().telemetry.observe(endpoint, response.status_code, time.perf_counter() - t0)
    return response


@bp.app_errorhandler(ApiError)
def _api_error(exc: ApiError) -> Response:
    return error_response(exc.status, exc.code, exc.message, headers=exc.headers, **exc.extra)


@bp.app_errorhandler(HTTPException)
def _http_error(exc: HTTPException) -> Response:
    status = exc.code or 500
    code = _HTTP_CODES.get(status, "bad_request" if status < 500 else "internal")
    headers = {k: v for k, v in exc.get_headers() if k.lower() == "allow"}
    if status == 413:
        _reject("", "too_large", 0)
    return error_response(status, code, exc.description or exc.name, headers=headers)


@bp.app_errorhandler(redis.RedisError)
def _redis_error(exc: redis.RedisError) -> Response:
    log.warning("redis unavailable: %s", type(exc).__name__)
    retry_after = str(_state().config.retry_after)
    return error_response(503, *REDIS_UNAVAILABLE, headers={"Retry-After": retry_after})


@bp.app_errorhandler(Exception)
def _internal_error(exc: Exception) -> Response:
    log.error("internal error: %s", type(exc).__name__, exc_info=exc)
    return error_response(500, "internal", "internal server error")


# ----------------------------------------------------------------------------------------------- helpers
def _authenticate(*allowed: Role) -> Role:
    """Check the bearer token, then the per-token rate limit; return the caller's role."""
    header = request.headers.get("Authorization")
    if header is None:
        raise ApiError(401, "unauthorized", "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    token_digest = bearer_digest(header)
    if token_digest is None:
        raise ApiError(401, "unauthorized", "Authorization must be 'Bearer <token>'", headers={"WWW-Authenticate": "Bearer"})
    state = _state()
    role: Role
    if token_digest == state.admin_digest:
        role = "admin"
    elif token_digest in state.app_digests:
        role = "app"
    else:
        raise ApiError(
            401, "unauthorized", "unknown token", headers={"WWW-Authenticate": 'Bearer error="invalid_token"'}
        )
    if role not in allowed:
        raise ApiError(403, "forbidden", f"this endpoint needs an {' or '.join(allowed)} token")
    if state.limiter is not None:
        # The fast path (fastpath.py) may have taken this request's token already; it leaves the result here.
        wait = request.environ.get(RATE_WAIT_KEY)
        if wait is None:
            wait = state.limiter.acquire(token_digest)
        if wait > 0:
            retry_after = str(max(1, int(wait + 0.999)))
            _reject("", "rate_limited", 0)
            raise ApiError(429, "rate_limited", "too many requests for this token", headers={"Retry-After": retry_after})
    return role


def _reject(metric: str, reason: str, n: int) -> None:
    _state().telemetry.rejected(metric, reason, n)


def _fail(http_status: int, code: str, message: str, /, *, metric: str = "", n: int = 0, **extra: Any) -> NoReturn:
    """Raise the error response; ingest rejections are also counted by metric and reason."""
    if request.endpoint == "ingest.post_reports":
        _reject(metric, code, n)
    raise ApiError(http_status, code, message, extra=extra)


def _read_body(*, kinds: tuple[str, ...]) -> tuple[str, bytes]:
    """Size and content-type checks, then the body; returns (mimetype, bytes)."""
    cfg = _state().config
    length = request.content_length
    if length is not None and length > cfg.max_body_bytes:
        _fail(413, "too_large", f"body is {length} bytes; the limit is {cfg.max_body_bytes}")
    mimetype = request.mimetype
    if mimetype not in kinds:
        _fail(415, "unsupported_media_type", f"Content-Type must be one of {list(kinds)}, got {mimetype or 'none'!r}")
    return mimetype, request.get_data(cache=False)


def _parse_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        _fail(400, "malformed_body", "body is not valid JSON")


def _record_or_404(name: str, *, n: int = 0, fresh: bool = False) -> MetricRecord:
    try:
        return cached_record(_state(), name, fresh=fresh)
    except UnknownMetricError:
        _fail(404, "unknown_metric", f"unknown metric {name!r}", n=n)


def _invalid_spec(exc: InvalidParameterError) -> NoReturn:
    raise ApiError(
        400,
        "invalid_spec",
        str(exc),
        extra={"parameter": exc.parameter, "allowed": exc.allowed, "received": repr(exc.received)[:200]},
    )


# ------------------------------------------------------------------------------------------------ routes
@bp.get("/healthz")
def healthz() -> Response:
    return _json_response({"status": "ok"}, 200)


@bp.get("/readyz")
def readyz() -> Response:
    _state().redis.ping()  # RedisError -> 503
    return _json_response({"status": "ready"}, 200)


@bp.get("/metrics")
def prometheus() -> Response:
    return Response(_state().telemetry.render(), mimetype="text/plain", content_type="text/plain; version=0.0.4; charset=utf-8")


@bp.get("/v1/openapi.json")
def openapi() -> Response:
    return _json_response(openapi_document(), 200)


@bp.get("/v1/metrics")
def get_metrics() -> Response:
    _authenticate("app", "admin")
    return _json_response({"metrics": [rec.to_dict() for rec in list_metrics(_state().redis)]}, 200)


@bp.get("/v1/metrics/<name>")
def get_metric_route(name: str) -> Response:
    _authenticate("app", "admin")
    return _json_response(_record_or_404(name, fresh=True).to_dict(), 200)


@bp.post("/v1/metrics")
def post_metric() -> Response:
    _authenticate("admin")
    _, body = _read_body(kinds=("application/json",))
    data = _parse_json(body)
    if not isinstance(data, dict):
        _fail(400, "invalid_spec", "a metric is a JSON object with at least 'name' and 'params'")
    null_shards = "shards" in data and data["shards"] is None  # absent means the default; null is an error
    shards = data.pop("shards", None)
    data.pop("version", None)  # assigned by the registry
    data.pop("effective_epsilon", None)  # derived
    try:
        if null_shards:
            raise InvalidParameterError("shards", f"an integer in [1, {MAX_SHARDS}]", None)
        spec = MetricSpec.from_dict(data)
        state = _state()
        before = state.redis.hget(keys.registry(), spec.name)
        record = create_metric(state.redis, spec, shards=shards, default_shards=state.config.shards)
        state.recent.pop(spec.name, None)
    except InvalidParameterError as exc:
        _invalid_spec(exc)
    except RegistryConflictError as exc:
        raise ApiError(409, "registry_conflict", str(exc)) from None
    unchanged = before is not None and parse_record(before) == record  # type: ignore[arg-type]
    log.info("metric %s: version %d (%s)", record.name, record.current_version, "unchanged" if unchanged else "changed")
    return _json_response(record.to_dict(), 200 if unchanged else 201)


@bp.post("/v1/metrics/<name>/retire")
def post_retire(name: str) -> Response:
    _authenticate("admin")
    try:
        record = retire_metric(_state().redis, name)
        _state().recent.pop(name, None)
    except UnknownMetricError:
        _fail(404, "unknown_metric", f"unknown metric {name!r}")
    log.info("metric %s retired", record.name)
    return _json_response(record.to_dict(), 200)


@bp.post("/v1/reports")
def post_reports() -> Response:
    _authenticate("app")
    state = _state()
    cfg = state.config
    mimetype, body = _read_body(kinds=("application/octet-stream", "application/json"))

    if mimetype == "application/octet-stream":
        try:
            header = decode_header(body)
        except WireFormatError as exc:
            _fail(400, "invalid_batch", str(exc))
        metric, version, n = header.metric, header.version, header.n
        record, spec = _target(cfg, metric, version, n)
        try:
            decode_payload(body, header, spec.params)
        except WireFormatError as exc:
            _fail(400, "invalid_batch", str(exc), metric=metric, n=n)
        data = body
    else:
        obj = _parse_json(body)
        if not isinstance(obj, dict):
            _fail(400, "invalid_batch", "a JSON batch is an object")
        metric, version, reports = obj.get("metric"), obj.get("version"), obj.get("reports")
        if not isinstance(metric, str) or isinstance(version, bool) or not isinstance(version, int):
            _fail(400, "invalid_batch", "'metric' must be a string and 'version' an integer")
        n = len(reports) if isinstance(reports, list) else 0
        record, spec = _target(cfg, metric, version, n)
        try:
            header, batch = batch_from_json(obj, spec.params)
            if header.metric != record.name:  # pragma: no cover - batch_from_json keeps the given name
                raise WireFormatError("metric name mismatch")
            data = encode_batch(
                metric=record.name, version=version, batch_id=header.batch_id, batch=batch, params=spec.params
            )
        except WireFormatError as exc:
            _fail(400, "invalid_batch", str(exc), metric=record.name, n=n)
        n = header.n

    body = append_batch(state, record=record, batch_id=header.batch_id, version=version, n=n, data=data)
    return _json_response(body, 202)


def _target(cfg: ServerConfig, metric: str, version: int, n: int) -> tuple[MetricRecord, MetricSpec]:
    """The size limit, then the metric's record and the spec of the batch's version (413/404/409 otherwise)."""
    if n > cfg.max_batch_reports:
        _fail(413, "too_many_reports", f"{n} reports; at most {cfg.max_batch_reports} per batch", n=n)
    record = _matching_record(metric, version, n)
    return record, _current_spec(record, version, n)


def _matching_record(metric: str, version: int, n: int) -> MetricRecord:
    """The record to check a batch against; a cached record that would reject it is re-read first."""
    record = _record_or_404(metric, n=n)
    if record.active and version == record.current_version:
        return record
    return _record_or_404(metric, n=n, fresh=True)


def _current_spec(record: MetricRecord, version: int, n: int) -> MetricSpec:
    """The spec a batch must match: the current version of an active metric (else 409 with the current spec)."""
    current = record.current
    if not record.active:
        _fail(
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
        _fail(
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
