"""Request bodies of the POST routes: the size and content-type checks (413/415) and JSON parsing (400)."""

from __future__ import annotations

import json
import re
from typing import Any

from flask import request

from ldptel.server.errors import fail
from ldptel.server.state import current_state

__all__ = ["read_body", "parse_json"]

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]", re.ASCII)  # a \uD800-\uDFFF escape (maybe one of a pair)


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
    """The JSON value of ``body`` (400 ``malformed_body`` when it is not JSON).

    The body must be UTF-8 (RFC 8259 §8.1) and no string in it may hold a lone surrogate: ``json.loads``
    would accept both (``"\\ud800"``, or the bytes ``ED A0 80``), and such a string cannot be encoded to reach
    Redis, a log or a response, so it is refused here, where every JSON body enters."""
    try:
        text = body.decode("utf-8")
        value = json.loads(text)
        if _SURROGATE_ESCAPE.search(text):  # rare: only then look for an unpaired one in the decoded strings
            json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (ValueError, RecursionError):  # UnicodeError is a ValueError
        fail(400, "malformed_body", "body is not valid JSON (UTF-8, no lone surrogates)")
    return value
