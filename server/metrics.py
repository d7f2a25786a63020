"""The ``metrics`` blueprint: the metric registry API (not Prometheus metrics, which are in ``ops.py``).

``GET /v1/metrics`` and ``GET /v1/metrics/<name>`` (app or admin token) list and read registry records;
``POST /v1/metrics`` (admin) creates a metric or a new version of it when the privatization changes (201), or
else updates the current version's metadata in place, reactivates it, or leaves it unchanged (200), and ``POST /v1/metrics/<name>/retire`` (admin) stops a metric's ingest. A spec beyond the default device
``PrivacyPolicy`` is refused (422 ``above_default_policy``, naming the limit and the allowed value; nothing
written) unless the body says ``"allow_above_default_policy": true``. The registry itself
(versions, shard counts, concurrent changes) is :mod:`ldptel.storage.registry`.
"""

from __future__ import annotations

import logging
from typing import NoReturn

from flask import Blueprint, Response

from ldptel.client.errors import InvalidParameterError
from ldptel.client.protocol.specs import MetricSpec
from ldptel.client.protocol.validate import check_int
from ldptel.server.auth import authenticate
from ldptel.server.bodies import parse_json, read_body
from ldptel.server.errors import ApiError, fail, json_response
from ldptel.server.state import cached_record, current_state
from ldptel.storage.registry import (
    MAX_SHARDS,
    AboveDefaultPolicyError,
    RegistryConflictError,
    UnknownMetricError,
    check_default_policy,
    list_metrics,
    register_metric,
    retire_metric,
)

__all__ = ["bp"]

log = logging.getLogger("ldptel.server")
bp = Blueprint("metrics", __name__)


@bp.get("/v1/metrics")
def get_metrics() -> Response:
    authenticate("app", "admin")
    return json_response({"metrics": [rec.to_dict() for rec in list_metrics(current_state().redis)]}, 200)


@bp.get("/v1/metrics/<name>")
def get_metric(name: str) -> Response:
    authenticate("app", "admin")
    try:
        record = cached_record(current_state(), name, fresh=True)
    except UnknownMetricError as exc:
        fail(404, "unknown_metric", str(exc))
    return json_response(record.to_dict(), 200)


@bp.post("/v1/metrics")
def post_metric() -> Response:
    authenticate("admin")
    _, body = read_body(kinds=("application/json",))
    data = parse_json(body)
    if not isinstance(data, dict):
        fail(400, "invalid_spec", "a metric is a JSON object with at least 'name' and 'params'")
    null_shards = "shards" in data and data["shards"] is None  # absent means the default; null is an error
    shards = data.pop("shards", None)
    data.pop("version", None)  # assigned by the registry
    data.pop("effective_epsilon", None)  # derived
    data.pop("profile", None)  # the breakdown's declared values: set by the registry from its profile schema
    allow = data.pop("allow_above_default_policy", False)
    state = current_state()
    try:
        if null_shards:
            check_int("shards", None, 1, MAX_SHARDS)
        if not isinstance(allow, bool):
            raise InvalidParameterError("allow_above_default_policy", "true or false", allow)
        spec = MetricSpec.from_dict(data)
        check_default_policy(state.redis, [spec], allow=allow)
        record, change = register_metric(state.redis, spec, shards=shards, default_shards=state.config.shards)
        state.recent.pop(spec.name, None)
    except InvalidParameterError as exc:
        _invalid_spec(exc)
    except AboveDefaultPolicyError as exc:
        fail(422, "above_default_policy", str(exc), metric=exc.metric, parameter=exc.limit,
             allowed=f"at most {exc.allowed:.4g}", received=f"{exc.value:.4g}")
    except RegistryConflictError as exc:
        raise ApiError(409, "registry_conflict", str(exc)) from None
    log.info("metric %s: version %d (%s)", record.name, record.current_version, change.kind)
    return json_response(record.to_dict(), 201 if change.new_version else 200)


@bp.post("/v1/metrics/<name>/retire")
def post_retire(name: str) -> Response:
    authenticate("admin")
    state = current_state()
    try:
        record = retire_metric(state.redis, name)
    except UnknownMetricError as exc:
        fail(404, "unknown_metric", str(exc))
    state.recent.pop(name, None)
    log.info("metric %s retired", record.name)
    return json_response(record.to_dict(), 200)


def _invalid_spec(exc: InvalidParameterError) -> NoReturn:
    fail(400, "invalid_spec", str(exc), parameter=exc.parameter, allowed=exc.allowed, received=repr(exc.received)[:200])
