"""HTTP to the ingest service (stdlib ``http.client``, one keep-alive connection) and the retry policy.

Classification of a ``POST /v1/reports`` answer (what the uploader does with the batch):

======================  =========  ==================================================================
status                  outcome    meaning
======================  =========  ==================================================================
200, 202                ack        counted (or a retry the server had already counted): forget the batch
409                     stale      its version is not current or is retired: refresh the spec, drop it
401, 403                auth       keep the batch, back off (a fixed token must still deliver it)
408, 425, 429, 5xx      retry      keep the batch, back off; honour ``Retry-After``
other 4xx (400, 413..)  rejected   the batch itself is bad and never will be accepted: drop and count it
network error           retry      connection refused/reset, timeout, malformed response
======================  =========  ==================================================================

A reused keep-alive connection the server has closed meanwhile (gunicorn closes idle ones after its
``keepalive`` seconds) fails on the next request with a reset, a broken pipe or no status line at all. Such
a request is sent once more on a fresh connection (:data:`PEER_CLOSED`): every request of the SDK is
idempotent (``GET`` of a spec; a batch ``POST`` carries its batch id, so the server counts it once). A
failure on a fresh connection, or a timeout, is a network error as above.

:data:`MAX_BATCH_SIZE` is the largest batch (in reports) the SDK forms: the wire format's
``DEFAULT_MAX_BATCH_REPORTS``, which is also the ingest service's default limit (a larger batch is refused
with 413).
"""

from __future__ import annotations

import email.utils
import http.client
import json
import math
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, urlsplit

from ldptel.client.errors import InvalidParameterError
from ldptel.client.protocol.wire import BATCH_AGE_HEADER, DEFAULT_MAX_BATCH_REPORTS

Outcome = Literal["ack", "stale", "auth", "retry", "rejected"]
MAX_BATCH_SIZE = DEFAULT_MAX_BATCH_REPORTS  # reports per batch; see the module docstring
# Bytes of one combined upload (several batches; one larger batch still goes alone): a quarter of the
# ingest service's default body limit (LDPTEL_MAX_BODY_BYTES, 4 MiB).
MAX_UPLOAD_BYTES = 1 << 20
DEFAULT_UPLOAD_PARTS = 16  # batches combined into one upload by default
USER_AGENT = "ldptel-client/0.1"
MAX_RETRY_AFTER = 3600.0
_MAX_RESPONSE = 1 << 20
_ENDPOINT = "an http:// or https:// URL"
# How a reused connection fails when the server closed it while idle (RemoteDisconnected is a
# ConnectionResetError): retried once on a fresh connection.
PEER_CLOSED: tuple[type[BaseException], ...] = (ConnectionError,)


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    retry_after: float | None  # seconds, parsed from Retry-After (delta-seconds or HTTP date)
    body: bytes

    def json(self) -> object:
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: "[[[[..." from a hostile server
            return None


def classify(status: int) -> Outcome:
    if status in (200, 202):
        return "ack"
    if status == 409:
        return "stale"
    if status in (401, 403):
        return "auth"
    if status in (408, 425, 429) or status >= 500:
        return "retry"
    return "rejected"


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (RFC 9110: delta-seconds or an HTTP date), clamped."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - now
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


class Transport:
    """One persistent HTTP(S) connection to the endpoint; reconnects after any error.

    Not thread-safe: its one owner serializes the calls (the uploader under its cycle lock, the spec cache
    under its fetch lock).
    """

    def __init__(self, endpoint: str, token: str, *, timeout: float, clock: Callable[[], float]) -> None:
        try:
            parts = urlsplit(endpoint)
            port = parts.port  # ValueError for a port that is not a number in [0, 65535]
        except ValueError:
            raise InvalidParameterError("endpoint", _ENDPOINT, endpoint) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidParameterError("endpoint", _ENDPOINT, endpoint)
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = port
        self._prefix = parts.path.rstrip("/")
        # what errors name: scheme, host, port and path only (never userinfo, a query or the token)
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        self.where = f"{parts.scheme}://{host}{'' if port is None else f':{port}'}{self._prefix}"
        self._token = token
        self._timeout = timeout
        self._clock = clock
        self._conn: http.client.HTTPConnection | None = None
        self._reused = False  # the connection has carried a complete exchange (the server may have closed it)

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._https:
                self._conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout, context=ssl.create_default_context()
                )
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        return self._conn

    def request(
        self, method: str, path: str, body: bytes | None = None, *, headers: dict[str, str] | None = None
    ) -> Response:
        """Send one (idempotent) request; raises :class:`OSError` / :class:`http.client.HTTPException` on
        network failure. A reused connection the peer closed is replaced once (see the module docs)."""
        headers = {"Authorization": f"Bearer {self._token}", "User-Agent": USER_AGENT, "Accept": "application/json",
                   **(headers or {})}
        if body is not None:
            headers["Content-Type"] = "application/octet-stream"
        reused = self._conn is not None and self._reused
        try:
            return self._exchange(method, path, body, headers)
        except PEER_CLOSED:
            if not reused:
                raise
        return self._exchange(method, path, body, headers)  # the stale connection is closed: a fresh one

    def _exchange(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Response:
        conn = self._connection()
        try:
            conn.request(method, self._prefix + path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read(_MAX_RESPONSE)
            retry_after = parse_retry_after(resp.getheader("Retry-After"), self._clock())
            if resp.will_close:
                self.close()
            else:
                self._reused = True
        except BaseException:
            self.close()
            raise
        return Response(status=resp.status, retry_after=retry_after, body=data)

    def post_batch(self, body: bytes, *, age_days: int | None = None) -> Response:
        """POST a batch, with its age in UTC days (``X-Ldptel-Batch-Age-Days``) when known."""
        extra = {} if age_days is None else {BATCH_AGE_HEADER: str(age_days)}
        return self.request("POST", "/v1/reports", body, headers=extra)

    def get_metric(self, name: str) -> Response:
        return self.request("GET", "/v1/metrics/" + quote(name, safe=""))

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except OSError:
                pass
            self._conn = None
            self._reused = False


NETWORK_ERRORS: tuple[type[BaseException], ...] = (OSError, http.client.HTTPException)  # timeouts are OSError


# ------------------------------------------------------------------------------------------------ backoff
def _uniform() -> float:
    """A uniform float in [0, 1) from the OS CSPRNG (the ``random`` module is banned in the client)."""
    return (int.from_bytes(os.urandom(7), "little") >> 3) / (1 << 53)


@dataclass
class Backoff:
    """Exponential backoff with "equal jitter": after the i-th consecutive failure wait
    d/2 + U(0, d/2) with d = min(cap, base·2^(i−1)); a server's Retry-After r is honoured as r + U(0, r/10)
    (never earlier than asked, spread so devices do not return in lockstep).
    """

    base: float = 1.0
    cap: float = 300.0
    failures: int = 0
    uniform: Callable[[], float] = _uniform

    def next_delay(self, retry_after: float | None = None) -> float:
        self.failures += 1
        if retry_after is not None:
            return retry_after + self.uniform() * min(retry_after / 10, self.cap)
        d = min(self.cap, self.base * 2.0 ** min(self.failures - 1, 62))
        return d / 2 + self.uniform() * d / 2

    def reset(self) -> None:
        self.failures = 0
