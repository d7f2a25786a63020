"""gunicorn's gthread worker whose own HTTP-level rejections answer JSON: ``worker_class`` of deploy/gunicorn.conf.py.

gunicorn answers a request it cannot parse (malformed request line or header, request line or header too
large, too many headers) itself, before the app sees it, with an HTML page. :class:`JsonErrorThreadWorker`
keeps gunicorn's decision (status, logging, access log) and only replaces the bytes it sends with the
service's error shape, ``{"error": code, "message": ...}`` (``ldptel.server.state.error_body``): gunicorn's
``handle_error`` gets a socket whose ``sendall`` rewrites the HTML answer's status line into a JSON answer.
Behind nginx (deploy/nginx.conf) most of these never reach gunicorn: nginx answers them in JSON itself.
"""

from __future__ import annotations

import json
import re
import socket
from typing import Any

from gunicorn.workers.gthread import ThreadWorker  # type: ignore[import-untyped]

__all__ = ["JsonErrorThreadWorker", "json_rejection"]

_STATUS_LINE = re.compile(rb"^HTTP/1\.[01] (\d{3}) ([^\r\n]*)\r\n")
# gunicorn's status -> (error code, message); any other status keeps gunicorn's reason phrase
_REJECTIONS: dict[int, tuple[str, str]] = {
    400: ("bad_request", "malformed HTTP request (request line or header)"),
    403: ("forbidden", "request forbidden"),
    414: ("bad_request", "request line too long (at most 4094 bytes)"),
    431: ("bad_request", "request headers too large (at most 50 headers of 8190 bytes)"),
    500: ("internal", "internal error"),
}


def json_rejection(raw: bytes) -> bytes:
    """gunicorn's HTML error answer ``raw`` as the same status with a JSON body (``raw`` if it is not one)."""
    match = _STATUS_LINE.match(raw)
    if match is None:
        return raw
    # Imported here, in the worker: gunicorn's master imports this module before ``on_starting`` prepares
    # Prometheus's multiprocess mode, which must precede the first import of prometheus_client (prom.py).
    from ldptel.server.state import error_body

    status, reason = int(match.group(1)), match.group(2).decode("latin-1")
    code, message = _REJECTIONS.get(status, ("bad_request" if status < 500 else "internal", reason))
    body = json.dumps(error_body(code, message), separators=(",", ":")).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


class _JsonErrorSocket:
    """The client socket as gunicorn's ``util.write_error`` uses it (gettimeout, setblocking, sendall)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def gettimeout(self) -> float | None:
        return self._sock.gettimeout()

    def setblocking(self, flag: bool) -> None:
        self._sock.setblocking(flag)

    def sendall(self, data: bytes) -> None:
        self._sock.sendall(json_rejection(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class JsonErrorThreadWorker(ThreadWorker):  # type: ignore[misc]
    def handle_error(self, req: Any, client: socket.socket, addr: Any, exc: BaseException) -> None:
        super().handle_error(req, _JsonErrorSocket(client), addr, exc)
