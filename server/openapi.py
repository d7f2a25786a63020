"""The OpenAPI 3.1 document of the ingest API, served at ``GET /v1/openapi.json``.

The tests validate every response they receive against the schemas below (``tests/server/schema_check.py``),
and schemathesis generates requests from this document and checks a live gunicorn server's answers against
it (``tests/server/test_server_schemathesis.py``), so the document cannot drift from the app.
"""

from __future__ import annotations

import copy
from typing import Any, get_args

from ldptel.client.mechanisms import mechanisms
from ldptel.client.protocol.params import EPSILON_RANGE, MAX_CELLS, MAX_K
from ldptel.client.protocol.specs import (
    MAX_DESCRIPTION_CHARS,
    MAX_NOTES_CHARS,
    MAX_OWNER_CHARS,
    MAX_REPORTS_PER_DAY,
    NAME_RE,
)
from ldptel.storage.registry import MAX_SHARDS, Status

__all__ = ["openapi_document"]

_ERROR_CODES = [
    "bad_request",
    "malformed_body",
    "invalid_batch",
    "invalid_profile",
    "invalid_upload",
    "invalid_spec",
    "unauthorized",
    "forbidden",
    "not_found",
    "unknown_metric",
    "method_not_allowed",
    "version_conflict",
    "metric_retired",
    "batch_id_conflict",
    "registry_conflict",
    "too_large",
    "too_many_reports",
    "invalid_batch_age",
    "batch_too_old",
    "above_default_policy",
    "unsupported_media_type",
    "rate_limited",
    "redis_unavailable",
    "unavailable",
    "internal",
]

# Per-field limits of a new metric, as the registry enforces them (ldptel.client.protocol.specs,
# ldptel.storage.registry).
# Cross-field ones cannot be written in JSON Schema and are only described: k·m cells, probability bits
# large enough for ε to survive rounding, a GRR domain that ε can separate.
_NAME = {"type": "string", "pattern": f"^{NAME_RE.pattern}$"}
_REPORTS_PER_DAY = {"type": "integer", "minimum": 1, "maximum": MAX_REPORTS_PER_DAY}
_DESCRIPTION = {"type": "string", "maxLength": MAX_DESCRIPTION_CHARS}
_SAMPLE_RATE = {
    "type": "number", "exclusiveMinimum": 0, "maximum": 1,
    "description": "secret sampling, in (0, 1] (0 is refused): each device takes part on a UTC day with this probability, "
    "decided on the device "
    "(absent: 1, every device); a change makes a new version",
}
# Metadata: edited in place, never a new version (only params and reports_per_day make one).
_METADATA = {
    "description": _DESCRIPTION,
    "owner": {"type": "string", "maxLength": MAX_OWNER_CHARS},
    "expires": {"type": ["string", "null"], "format": "date", "description": "UTC day after which the metric is listed as expired"},
    "notes": {"type": "string", "maxLength": MAX_NOTES_CHARS},
}
_STATUS = {"type": "string", "enum": list(get_args(Status))}
# Breakdowns (docs/breakdowns.md): the profile dimensions a metric is broken down by (a change makes a new version)
# and, as served, their declared values (the registry's profile schema; not privatized, sent in clear by devices).
_BREAKDOWN: dict[str, dict[str, Any]] = {
    "breakdown": {"type": "array", "maxItems": 4, "items": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,31}$"},
                  "description": "profile dimensions (declared with ldptel metrics profile); values travel in clear"},
    "profile": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}},
                "description": "declared values of each breakdown dimension (set by the registry; 'other' implicit)"},
}


def _params(mechanism: str, fields: dict[str, Any], required: list[str]) -> dict[str, Any]:
    epsilon = {"type": "number", "minimum": EPSILON_RANGE[0], "maximum": EPSILON_RANGE[1]}
    return {
        "type": "object",
        "required": ["mechanism", "epsilon", *required],
        "properties": {"mechanism": {"const": mechanism}, "epsilon": epsilon, **fields},
        "additionalProperties": False,
    }


_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error", "message"],
        "properties": {
            "error": {"type": "string", "enum": _ERROR_CODES},
            "message": {"type": "string"},
            "parameter": {"type": "string"},
            "allowed": {"type": "string"},
            "received": {"type": "string"},
            "metric": {"type": "string"},
            "batch_id": {"type": "string", "pattern": "^[0-9a-f]{32}$", "description": "of a batch_id_conflict"},
            "version": {"type": "integer"},
            "current_version": {"type": "integer"},
            "status": _STATUS,
            "current": {"$ref": "#/components/schemas/MetricSpec"},
            "breakdown": {"type": "array", "items": {"type": "string"},
                          "description": "invalid_profile: the dimensions the metric is broken down by"},
        },
        "additionalProperties": False,
    },
    "Params": {
        "description": (
            "The mechanism's parameters, one object per mechanism. Limits JSON Schema cannot state "
            f"are checked by the registry, which answers 400 naming the parameter: k*m at most {MAX_CELLS} "
            f"cells (where a value takes max_bytes rows per hash, k*max_bytes at most {MAX_K} rows and "
            f"k*max_bytes*m at most {MAX_CELLS} cells), prob_bits large enough for epsilon to survive rounding, "
            "and for grr an epsilon large enough that the true label stays the most likely report."
        ),
        "oneOf": [
            *(_params(mech.name, *mech.params_schema()) for mech in mechanisms()),
        ],
    },
    "MetricSpec": {
        "type": "object",
        "required": ["name", "version", "params", "reports_per_day", *_METADATA, "effective_epsilon"],
        "properties": {
            "name": {"type": "string"},
            "version": {"type": "integer", "minimum": 1},
            "params": {"$ref": "#/components/schemas/Params"},
            "reports_per_day": {"type": "integer", "minimum": 1},
            "sample_rate": _SAMPLE_RATE,
            **_METADATA,
            "effective_epsilon": {"type": "number"},
            **_BREAKDOWN,
        },
        "additionalProperties": False,
    },
    "NewMetric": {
        "type": "object",
        "required": ["name", "params"],
        "properties": {
            "name": _NAME,
            "params": {"$ref": "#/components/schemas/Params"},
            "reports_per_day": _REPORTS_PER_DAY,
            "sample_rate": _SAMPLE_RATE,
            **_METADATA,
            "breakdown": {**_BREAKDOWN["breakdown"], "description": "profile dimensions, each declared in the registry's "
                          "profile schema (else 400 invalid_spec, parameter breakdown); values travel in clear"},
            "profile": {"description": "ignored: the registry sets the declared values from its profile schema"},
            "shards": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_SHARDS,
                "description": "only when the metric is created (default: the service's LDPTEL_SHARDS); "
                "grow it later with ldptel metrics grow",
            },
            "version": {"description": "ignored: the registry assigns versions (so a fetched spec can be posted back)"},
            "effective_epsilon": {"description": "ignored: derived from params"},
            "allow_above_default_policy": {
                "type": "boolean",
                "description": "register a spec beyond the default device PrivacyPolicy (else 422 above_default_policy)",
            },
        },
        "additionalProperties": False,
    },
    "MetricRecord": {
        "type": "object",
        "required": ["name", "status", "current_version", "shards", "current", "versions"],
        "properties": {
            "name": {"type": "string"},
            "status": _STATUS,
            "current_version": {"type": "integer", "minimum": 1},
            "shards": {"type": "integer", "minimum": 1},
            "current": {"$ref": "#/components/schemas/MetricSpec"},
            "versions": {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/MetricSpec"}},
            "resharded": {
                "type": "array",
                "description": "earlier shard counts: [count, start of the UTC day it was replaced, unix s] (ldptel metrics grow)",
                "items": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
            },
            "retention_days": {
                "type": "integer",
                "minimum": 0,
                "description": "days each sealed day keeps its own state before only 32-day roll-ups hold it "
                "(absent: every day is kept; ldptel metrics retention)",
            },
            "min_reports": {
                "type": "integer",
                "minimum": 0,
                "description": "reporting threshold: estimates of a day or breakdown combination with fewer reports are "
                "withheld (absent: 0, no threshold; ldptel metrics create --min-reports, min_reports in a metrics file)",
            },
            "shuffle_n_min": {
                "type": "integer",
                "minimum": 1,
                "description": "distinct uploads each shuffled block of the metric holds (absent: the shuffle stage's own "
                "n_min; ldptel metrics shuffle-n-min, shuffle_n_min in a metrics file; docs/shuffle.md)",
            },
        },
        "additionalProperties": False,
    },
    "MetricList": {
        "type": "object",
        "required": ["metrics"],
        "properties": {"metrics": {"type": "array", "items": {"$ref": "#/components/schemas/MetricRecord"}}},
        "additionalProperties": False,
    },
    "Accepted": {
        "type": "object",
        "required": ["accepted", "duplicate", "metric", "version", "batch_id", "day"],
        "properties": {
            "accepted": {"type": "integer", "minimum": 1},
            "duplicate": {"type": "boolean"},
            "metric": {"type": "string"},
            "version": {"type": "integer", "minimum": 1},
            "batch_id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
            "day": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
        },
        "additionalProperties": False,
    },
    "UploadResults": {
        "type": "object",
        "required": ["parts"],
        "properties": {
            "parts": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["http_status"],
                    "properties": {"http_status": {"type": "integer", "enum": [202, 400, 404, 409, 413]}},
                },
            }
        },
        "additionalProperties": False,
    },
    "JsonBatch": {
        "type": "object",
        "required": ["metric", "version", "batch_id", "mechanism", "reports"],
        "properties": {
            "format": {"type": "integer", "enum": [1]},
            "metric": {"type": "string"},
            "version": {"type": "integer"},
            "batch_id": {"type": "string"},
            "mechanism": {"type": "string"},
            "reports": {"type": "array", "minItems": 1},
            "profile": {"type": "object", "additionalProperties": {"type": "string"},
                        "description": "breakdowns: the device's profile values of the metric's dimensions (in clear)"},
        },
    },
    "Status": {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"type": "string", "enum": ["ok", "ready"]}},
        "additionalProperties": False,
    },
}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _json(description: str, schema: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


_AUTH_ERRORS = {
    "401": _error("missing or unknown bearer token"),
    "403": _error("the token may not use this endpoint"),
    "429": _error("over the per-token rate limit, or (wrong, admin or metrics tokens) the source over its failed-authentication limit; see Retry-After"),
    "503": _error("Redis unreachable (see Retry-After)"),
}
_NAME_PARAM = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}

_PATHS: dict[str, Any] = {
    "/healthz": {
        "get": {"summary": "The process is up", "security": [], "responses": {"200": _json("up", "Status")}}
    },
    "/readyz": {
        "get": {
            "summary": "A write to Redis would succeed now",
            "security": [],
            "responses": {"200": _json("ready", "Status"), "503": _error("Redis unreachable or refusing writes")},
        }
    },
    "/metrics": {
        "get": {
            "summary": "Prometheus metrics (text format 0.0.4; admin or metrics token)",
            "responses": {
                "200": {"description": "metrics", "content": {"text/plain": {"schema": {"type": "string"}}}},
                **{code: _AUTH_ERRORS[code] for code in ("401", "403", "429")},
            },
        }
    },
    "/v1/openapi.json": {
        "get": {
            "summary": "This document",
            "security": [],
            "responses": {"200": {"description": "OpenAPI 3.1", "content": {"application/json": {"schema": {"type": "object"}}}}},
        }
    },
    "/v1/metrics": {
        "get": {
            "summary": "List metrics (app or admin token)",
            "responses": {"200": _json("all metrics", "MetricList"), **_AUTH_ERRORS},
        },
        "post": {
            "summary": "Create a metric, a new version of it (params or reports_per_day changed) or edit its metadata (admin token)",
            "requestBody": {"required": True, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NewMetric"}}}},
            "responses": {
                "200": _json("same privatization as the current version: metadata updated in place, reactivated, or unchanged", "MetricRecord"),
                "201": _json("created, or a new version became current (the privatization changed)", "MetricRecord"),
                "400": _error("malformed JSON or invalid spec"),
                "409": _error("the change conflicts with the existing metric (e.g. its shard count)"),
                "422": _error("above_default_policy: devices with the default PrivacyPolicy would refuse the spec "
                              "(parameter: the limit, allowed, received); set allow_above_default_policy to register it anyway"),
                "413": _error("body too large"),
                "415": _error("not application/json"),
                **_AUTH_ERRORS,
            },
        },
    },
    "/v1/metrics/{name}": {
        "get": {
            "summary": "One metric: current spec and every version (app or admin token)",
            "parameters": [_NAME_PARAM],
            "responses": {"200": _json("the metric", "MetricRecord"), "404": _error("unknown metric"), **_AUTH_ERRORS},
        }
    },
    "/v1/metrics/{name}/retire": {
        "post": {
            "summary": "Stop accepting reports for a metric (admin token)",
            "parameters": [_NAME_PARAM],
            "responses": {"200": _json("the retired metric", "MetricRecord"), "404": _error("unknown metric"), **_AUTH_ERRORS},
        }
    },
    "/v1/reports": {
        "post": {
            "summary": "Ingest one batch of privatized reports (app token)",
            "description": (
                "The body is one batch in the binary wire format (application/octet-stream) or its JSON form "
                "(application/json, for debugging), or a multi-part upload of several batches (binary, magic "
                "LDPU): each part is validated, deduped and stored on its own and answered in 200 {parts: [...]} "
                "with the status and body a single batch would get. A retried batch (same batch id) is "
                "acknowledged again but appended once. The server assigns the UTC day and stores nothing about "
                "the sender. The optional header X-Ldptel-Batch-Age-Days is the number of UTC days since the "
                "client formed the batch (of a multi-part upload: its oldest part), by its own clock: an older "
                "batch than LDPTEL_RETRY_HORIZON_DAYS is refused (422 batch_too_old) rather than risk counting "
                "it twice, since its batch id may be forgotten by then."
            ),
            "parameters": [
                {
                    "name": "X-Ldptel-Batch-Age-Days",
                    "in": "header",
                    "required": False,
                    "description": "whole UTC days since the client formed the batch (default 0)",
                    "schema": {"type": "string", "pattern": "^[0-9]{1,6}$"},
                }
            ],
            "requestBody": {
                "required": True,
                "content": {
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                    "application/json": {"schema": {"$ref": "#/components/schemas/JsonBatch"}},
                },
            },
            "responses": {
                "202": _json("appended (or a duplicate of an appended batch)", "Accepted"),
                "200": _json("a multi-part upload: one result per part, in order", "UploadResults"),
                "400": _error("malformed body, wrong sizes, indices or bits, an invalid X-Ldptel-Batch-Age-Days, or "
                              "invalid_profile: a profile dimension the metric does not declare (docs/breakdowns.md)"),
                "404": _error("unknown metric"),
                "409": _error("retired metric or not the current version (the body carries the current spec), or "
                              "batch_id_conflict: the batch id was accepted before with different bytes (nothing "
                              "stored; a retry resends the same bytes, a new batch takes a new id)"),
                "413": _error("too many reports or bytes"),
                "415": _error("unsupported content type"),
                "422": _error("batch_too_old: formed longer ago than the retry horizon; drop it, do not retry"),
                **_AUTH_ERRORS,
            },
        }
    },
}

_DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "ldptel ingest",
        "version": "1",
        "description": "Local-differential-privacy telemetry ingest: metric registry and privatized report batches.",
    },
    "servers": [{"url": "/"}],
    "security": [{"bearer": []}],
    "paths": _PATHS,
    "components": {
        "schemas": _SCHEMAS,
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    },
}


def openapi_document() -> dict[str, Any]:
    """A fresh copy of the document (callers may modify it)."""
    return copy.deepcopy(_DOCUMENT)
