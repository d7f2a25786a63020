"""CORS for browsers: the report and spec routes answer pages of the origins the operator allows.

``LDPTEL_CORS_ORIGINS`` (comma-separated exact origins such as ``https://app.example.com``, or ``*``; default
empty: no browser page may call the service). Only the routes a browser SDK uses get CORS: ``POST /v1/reports``
and ``GET /v1/metrics/<name>``. The registry's writes, the admin and ops routes never answer a preflight
(a page can never carry the admin token to them).

* Preflight (``OPTIONS`` on those paths, with ``Origin`` and ``Access-Control-Request-Method``): an allowed
  origin and method get 204 with ``Access-Control-Allow-Origin`` (the origin itself, or ``*``),
  ``-Allow-Methods``, ``-Allow-Headers: Authorization, Content-Type, X-Ldptel-Batch-Age-Days`` (``*`` would not
  cover Authorization) and ``-Max-Age: 7200`` (Chromium's cap); anything else gets a 403 JSON error and no
  CORS header, so the browser sends nothing.
* Actual requests from an allowed origin get ``Access-Control-Allow-Origin`` and ``-Expose-Headers:
  Retry-After`` on every answer (errors included, so the SDK can read 409/422/429 bodies); ``Vary: Origin``
  whenever the answer depends on it. Credentials are never allowed: the SDK sends its bearer token itself
  (``credentials: "omit"``), no cookies.

The origin is a page's scheme, host and port (no path, no user): it is not logged or stored.
See docs/web-sdk.md for the threat model of the public app token.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["CorsMiddleware", "parse_origins"]

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

MAX_AGE = 7200
ALLOW_HEADERS = "Authorization, Content-Type, X-Ldptel-Batch-Age-Days"
_ORIGIN = re.compile(r"https?://[a-z0-9.-]+(:[0-9]{1,5})?")
_SPEC_PATH = re.compile(r"/v1/metrics/[^/]+")


def parse_origins(raw: str | Iterable[str]) -> tuple[str, ...]:
    """The allowed origins (lower-cased, no trailing slash), or ``("*",)``; ValueError names a bad entry."""
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    out: list[str] = []
    for item in items:
        origin = item.strip().rstrip("/").lower()
        if not origin:
            continue
        if origin != "*" and not _ORIGIN.fullmatch(origin):
            raise ValueError(f"{item.strip()!r} is not an origin (scheme://host[:port], http or https) or '*'")
        out.append(origin)
    if "*" in out and len(out) > 1:
        raise ValueError("'*' allows every origin: list it alone")
    return tuple(dict.fromkeys(out))


def _method_for(path: str) -> str | None:
    """The one method a browser may use on ``path`` (None: no CORS for it)."""
    if path == "/v1/reports":
        return "POST"
    if _SPEC_PATH.fullmatch(path):
        return "GET"
    return None


class CorsMiddleware:
    """WSGI middleware: ``app.wsgi_app = CorsMiddleware(app.wsgi_app, origins)``."""

    def __init__(self, app: WsgiApp, origins: tuple[str, ...]) -> None:
        self.app = app
        self.any = origins == ("*",)
        self.origins = frozenset(origins)

    def _allowed(self, origin: str) -> str | None:
        if self.any:
            return "*"
        return origin if origin.lower() in self.origins else None

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        method = _method_for(path)
        origin = environ.get("HTTP_ORIGIN")
        if method is None or origin is None or not self.origins:
            return self.app(environ, start_response)
        allow = self._allowed(origin)
        if environ.get("REQUEST_METHOD") == "OPTIONS":
            asked = environ.get("HTTP_ACCESS_CONTROL_REQUEST_METHOD", "")
            if allow is None or asked != method:
                why = "origin not allowed" if allow is None else f"this route takes {method}"
                body = json.dumps({"error": "cors_refused", "message": f"CORS preflight refused: {why}"}).encode()
                start_response("403 Forbidden", [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                                 ("Vary", "Origin")])
                return [body]
            headers = [
                ("Access-Control-Allow-Origin", allow),
                ("Access-Control-Allow-Methods", method),
                ("Access-Control-Allow-Headers", ALLOW_HEADERS),
                ("Access-Control-Max-Age", str(MAX_AGE)),
                ("Content-Length", "0"),
                ("Vary", "Origin"),
            ]
            start_response("204 No Content", headers)
            return [b""]
        if allow is None:
            return self.app(environ, start_response)

        def with_cors(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            headers = [*headers, ("Access-Control-Allow-Origin", allow), ("Access-Control-Expose-Headers", "Retry-After"),
                       ("Vary", "Origin")]
            return start_response(status, headers, exc_info) if exc_info is not None else start_response(status, headers)

        return self.app(environ, with_cors)
