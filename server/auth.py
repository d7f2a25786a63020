"""Who may call an endpoint: bearer tokens (app, admin, metrics), the failed-authentication limit per source and
the per-token rate limit of the Flask routes (both in ``ratelimit.py``).

Roles: ``app`` (``LDPTEL_APP_TOKENS``: send reports, read specs), ``admin`` (``LDPTEL_ADMIN_TOKEN``: change the
registry, read ``/metrics``) and ``metrics`` (``LDPTEL_METRICS_TOKEN``, optional: read ``/metrics`` only).

Tokens are compared by their SHA-256 digest (:func:`ldptel.server.state.bearer_digest`), in constant time
(:func:`ldptel.server.state.digest_in`, ``hmac.compare_digest`` against every known digest); the WSGI fast path
(``fastpath.py``) accepts app tokens the same way and leaves its rate-limit result in the request environ, so
a request it hands over is not charged twice.

The failed-authentication limit (issue 22 §2). The token is checked first, for every request, in the same
constant time; then:

* a valid **app** token is served whatever its source's failures: one client with wrong tokens must not stop
  ingest for the devices that share its address (carrier-grade NAT, one office) or, behind a proxy that is not
  declared, for everyone. App tokens ship inside every app, so serving them from a source that is guessing
  reveals nothing a guess could win;
* a missing, malformed or unknown token counts one failure against its source (401); over the budget it gets
  429 + ``Retry-After`` instead;
* a valid **admin** or **metrics** token from a source over its budget gets the same 429 as a wrong guess: those
  tokens are secrets, and a right guess must not look different from a wrong one, so guessing them stays
  bounded per source. Only the operator's own address can be in that state (the source is the real client,
  :mod:`ldptel.server.proxies`), and it ends when the budget refills.

Guessing resistance rests on the tokens themselves (at least 128 bits, ``config.token_problem``): at a million
guesses a second for a year, the chance of hitting one of N tokens is about N × 1e-25.
"""

from __future__ import annotations

from typing import Literal

from flask import request

from ldptel.server.errors import ApiError
from ldptel.server.state import RATE_WAIT_KEY, IngestState, bearer_digest, current_state, digest_in

__all__ = ["Role", "authenticate"]

Role = Literal["app", "admin", "metrics"]
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def authenticate(*allowed: Role) -> Role:
    """Check the bearer token (401/403, or 429 for a source over its failed-authentication budget: see the
    module docstring), then the per-token rate limit (429); return the caller's role."""
    state = current_state()
    try:
        token_digest = _token_digest()
    except ApiError as exc:
        raise _failed(state, exc) from None
    # Every known digest is compared, whatever matches (no early exit): the time does not depend on the token.
    is_admin = digest_in(token_digest, (state.admin_digest,))
    is_metrics = state.metrics_digest is not None and digest_in(token_digest, (state.metrics_digest,))
    is_app = digest_in(token_digest, state.app_digests)
    role: Role
    if is_app:
        role = "app"
    elif is_admin or is_metrics:
        role = "admin" if is_admin else "metrics"
        _refuse_if_blocked(state)
    else:
        raise _failed(state, ApiError(
            401, "unauthorized", "unknown token", headers={"WWW-Authenticate": 'Bearer error="invalid_token"'}))
    if role not in allowed:
        raise ApiError(403, "forbidden", f"this endpoint needs an {' or '.join(allowed)} token")
    if state.limiter is not None:
        # The fast path (fastpath.py) may have taken this request's token already; it leaves the result here.
        wait = request.environ.get(RATE_WAIT_KEY)
        if wait is None:
            wait = state.limiter.acquire(token_digest)
        if wait > 0:
            retry_after = str(max(1, int(wait + 0.999)))
            state.telemetry.rejected("", "rate_limited", 0)  # counted on every route
            raise ApiError(429, "rate_limited", "too many requests for this token", headers={"Retry-After": retry_after})
    return role


def _refuse_if_blocked(state: IngestState, source: str | None = None) -> None:
    """429 when the request's source (the real client behind a declared proxy, :mod:`ldptel.server.proxies`;
    never logged) is over its failed-authentication budget."""
    if state.failures is None:
        return
    blocked = state.failures.blocked(state.proxies.source(request.environ) if source is None else source)
    if blocked > 0:
        state.telemetry.rejected("", "rate_limited", 0)
        raise ApiError(429, "rate_limited", "too many failed authentications from this source",
                       headers={"Retry-After": str(max(1, int(blocked + 0.999)))})


def _failed(state: IngestState, error: ApiError) -> ApiError:
    """A failed authentication: 429 when the source is over its budget (charging nothing more), else charge one
    failure and return ``error`` (the 401) for the caller to raise."""
    if state.failures is not None:
        source = state.proxies.source(request.environ)
        _refuse_if_blocked(state, source)
        state.failures.failed(source)
    return error


def _token_digest() -> bytes:
    """The digest of the request's bearer token (401 when there is none or it is malformed)."""
    header = request.headers.get("Authorization")
    if header is None:
        raise ApiError(401, "unauthorized", "missing bearer token", headers=_CHALLENGE)
    token_digest = bearer_digest(header)
    if token_digest is None:
        raise ApiError(401, "unauthorized", "Authorization must be 'Bearer <token>'", headers=_CHALLENGE)
    return token_digest
