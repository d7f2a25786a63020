"""The ``ops`` blueprint: liveness, readiness, Prometheus metrics, the OpenAPI document, and request timing.

``/healthz`` (the process is up), ``/readyz`` (a write to Redis would succeed now; 503 otherwise),
``/v1/openapi.json`` (``openapi.py``): no token needed. ``/metrics`` (the counters and latency histogram of
``prom.py``, live report counts per metric) is for operators only: it needs the admin token or
``LDPTEL_METRICS_TOKEN`` (401 without a token, 403 with an app token; see ``deploy/SCALING.md`` for the
Prometheus scrape config). Every request that reaches Flask is timed here, by its URL rule (the fast path
times its own).
"""

from __future__ import annotations

import time

from flask import Blueprint, Response, g, request

from ldptel.server.auth import authenticate
from ldptel.server.errors import json_response
from ldptel.server.openapi import openapi_document
from ldptel.server.state import current_state

__all__ = ["bp"]

bp = Blueprint("ops", __name__)


@bp.before_app_request
def _start_timer() -> None:
    g.ldptel_t0 = time.perf_counter()


@bp.after_app_request
def _observe(response: Response) -> Response:
    t0 = g.get("ldptel_t0")
    if t0 is not None:
        rule = request.url_rule
        endpoint = rule.rule if rule is not None else "unmatched"
        current_state().telemetry.observe(endpoint, response.status_code, time.perf_counter() - t0)
    return response


@bp.get("/healthz")
def healthz() -> Response:
    return json_response({"status": "ok"}, 200)


@bp.get("/readyz")
def readyz() -> Response:
    """Ready means "a write would succeed now": one small SET, refused by Redis exactly when it refuses the
    appends (maxmemory under ``noeviction``, a read-only replica, writes stopped after a failed save) as
    well as when it is unreachable (a script's write is refused the same way). RedisError -> 503 (``errors.py``).
    As cheap as a PING: one round trip (on a Redis Cluster one per primary: every node the appends go to,
    :meth:`BatchAppender.check_writable`). Nothing reaches the AOF or replicas and nothing expires."""
    current_state().appender.check_writable()
    return json_response({"status": "ready"}, 200)


@bp.get("/metrics")
def prometheus() -> Response:
    authenticate("admin", "metrics")
    return Response(
        current_state().telemetry.render(),
        mimetype="text/plain",
        content_type="text/plain; version=0.0.4; charset=utf-8",
    )


@bp.get("/v1/openapi.json")
def openapi() -> Response:
    return json_response(openapi_document(), 200)
