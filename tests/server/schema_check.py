"""A small checker of real responses against the app's OpenAPI document (no schemathesis/jsonschema needed).

Supports the JSON Schema subset the document uses: ``$ref`` (local), ``type`` (a name or a list), ``enum``,
``const``, ``oneOf``, ``required``, ``properties``, ``additionalProperties`` (bool or schema), ``items``,
``minItems``, ``maxItems``, ``uniqueItems``, ``minimum``, ``maximum``, ``minLength``, ``maxLength``, ``pattern``, ``format: date``;
any other keyword is an error here, so the checker cannot silently skip a rule the document adds.
"""

from __future__ import annotations

import datetime
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
    "null": type(None),
}
_KNOWN = {
    "$ref", "type", "enum", "const", "oneOf", "required", "properties", "additionalProperties", "items",
    "minItems", "maxItems", "uniqueItems", "minimum", "exclusiveMinimum", "maximum", "minLength", "maxLength", "pattern",
    "description", "format",
}  # fmt: skip


def _is_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[kind])


def _is_date(text: str) -> bool:
    """RFC 3339 full-date, the JSON Schema ``date`` format."""
    try:
        return len(text) == 10 and datetime.date.fromisoformat(text) is not None
    except ValueError:
        return False


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
    unknown = set(schema) - _KNOWN
    if unknown:
        raise AssertionError(f"schema_check does not implement {sorted(unknown)} (at {where})")
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is_type(value, k) for k in kinds):
            raise SchemaViolation(f"{where}: expected {' or '.join(kinds)}, got {type(value).__name__} {value!r:.60}")
    if "oneOf" in schema:
        matches = 0
        for option in schema["oneOf"]:
            try:
                validate(value, option, where)
            except SchemaViolation:
                continue
            matches += 1
        if matches != 1:
            raise SchemaViolation(f"{where}: matches {matches} of the oneOf schemas, not exactly 1")
    if "const" in schema and value != schema["const"]:
        raise SchemaViolation(f"{where}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaViolation(f"{where}: {value!r} not in {schema['enum']}")
    numeric = _is_type(value, "number")
    if numeric and "minimum" in schema and value < schema["minimum"]:
        raise SchemaViolation(f"{where}: {value!r} < {schema['minimum']}")
    if numeric and "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        raise SchemaViolation(f"{where}: {value!r} <= {schema['exclusiveMinimum']} (exclusive minimum)")
    if numeric and "maximum" in schema and value > schema["maximum"]:
        raise SchemaViolation(f"{where}: {value!r} > {schema['maximum']}")
    if isinstance(value, str):
        if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
            raise SchemaViolation(f"{where}: length {len(value)} outside the allowed lengths")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            raise SchemaViolation(f"{where}: {value!r} does not match {schema['pattern']}")
        if schema.get("format") == "date" and not _is_date(value):
            raise SchemaViolation(f"{where}: {value!r} is not a full-date (YYYY-MM-DD)")
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
        if len(value) > schema.get("maxItems", len(value)):
            raise SchemaViolation(f"{where}: more than {schema['maxItems']} items")
        if schema.get("uniqueItems") and len({json.dumps(x, sort_keys=True) for x in value}) != len(value):
            raise SchemaViolation(f"{where}: items are not unique")
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
