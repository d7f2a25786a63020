"""Request bodies of the POST routes: the size and content-type checks (413/415) and JSON parsing (400)."""

from __future__ import annotations

import json
from typing import Any

from flask import request

from ldptel.server.errors import fail
from ldptel.server.state import current_state

__all__ = ["read_body", "parse_json"]


def read_body(*, kinds: tuple[str, ...]) -> tuple[str, bytes]:
    """Size and content-type checks, then the body; returns (mimetype, bytes)."""
    limit = current_state().config.max_body_bytes
    length = request.content_length
    if length is not None and length > limit:
        fail(413, "too_large", f"body is {length} bytes; the limit is {limit}")
    mimetype = request.mimetype
    if mimetype not in kinds:
        fail(415, "unsupported_media_type", f"Content-Type must be one of {list(kinds)}, got {mimetype or 'none'!r}")
    return mimetype, request.get_data(cache=False)


def parse_json(body: bytes) -> Any:
    """The JSON value of ``body`` (400 ``malformed_body`` when it is not JSON)."""
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        fail(400, "malformed_body", "body is not valid JSON")
