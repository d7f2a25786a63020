"""A small checker of real responses against the app's OpenAPI document (no schemathesis/jsonschema needed).

Supports the JSON Schema subset the document uses: ``$ref`` (local), ``type``, ``enum``, ``required``,
``properties``, ``additionalProperties`` (bool or schema), ``items``, ``minItems``, ``minimum``, ``pattern``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ldptel.server.openapi import openapi_document

DOC = openapi_document()
_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
}


class SchemaViolation(AssertionError):
    pass


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = DOC
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def validate(value: Any, schema: dict[str, Any], where: str = "$") -> None:
    schema = _resolve(schema)
    kind = schema.get("type")
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaViolation(f"{where}: expected integer, got {value!r}")
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SchemaViolation(f"{where}: expected number, got {value!r}")
    elif kind is not None and not isinstance(value, _TYPES[kind]):
        raise SchemaViolation(f"{where}: expected {kind}, got {type(value).__name__}")
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaViolation(f"{where}: {value!r} not in {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"]:
        raise SchemaViolation(f"{where}: {value!r} < {schema['minimum']}")
    if "pattern" in schema and not re.search(schema["pattern"], value):
        raise SchemaViolation(f"{where}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                raise SchemaViolation(f"{where}: missing required {key!r}")
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                validate(item, props[key], f"{where}.{key}")
            elif extra is False:
                raise SchemaViolation(f"{where}: unexpected property {key!r}")
            elif isinstance(extra, dict):
                validate(item, extra, f"{where}.{key}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            raise SchemaViolation(f"{where}: fewer than {schema['minItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                validate(item, schema["items"], f"{where}[{i}]")


def _match_path(path: str) -> tuple[str, dict[str, Any]] | None:
    for template, item in DOC["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path):
            return template, item
    return None


def check_response(method: str, path: str, status: int, content_type: str | None, body: bytes) -> None:
    """Raise :class:`SchemaViolation` unless the response is one the document describes."""
    if status >= 500 and status != 503:
        raise SchemaViolation(f"{method} {path}: server error {status}")
    matched = _match_path(path.split("?", 1)[0])
    error_schema = {"$ref": "#/components/schemas/Error"}
    if matched is None or method.lower() not in matched[1]:
        # unknown route or method: the generic JSON errors of the app
        if status not in (404, 405, 413):
            raise SchemaViolation(f"{method} {path}: undocumented route answered {status}")
        schema: dict[str, Any] = error_schema
        mimetype = "application/json"
    else:
        op = matched[1][method.lower()]
        responses = op["responses"]
        if str(status) not in responses:
            raise SchemaViolation(f"{method} {path}: status {status} not documented ({sorted(responses)})")
        content = responses[str(status)]["content"]
        mimetype = (content_type or "").split(";")[0].strip()
        if mimetype not in content:
            raise SchemaViolation(f"{method} {path} {status}: content type {content_type!r} not in {list(content)}")
        schema = content[mimetype]["schema"]
    if mimetype == "application/json":
        try:
            value = json.loads(body)
        except ValueError as exc:
            raise SchemaViolation(f"{method} {path} {status}: body is not JSON ({exc})") from None
        validate(value, schema)
