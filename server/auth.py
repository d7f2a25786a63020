"""Who may call an endpoint: bearer tokens (app, admin, metrics), the failed-authentication limit per source and
the per-token rate limit of the Flask routes (both in ``ratelimit.py``).

Roles: ``app`` (``LDPTEL_APP_TOKENS``: send reports, read specs), ``admin`` (``LDPTEL_ADMIN_TOKEN``: change the
registry, read ``/metrics``) and ``metrics`` (``LDPTEL_METRICS_TOKEN``, optional: read ``/metrics`` only).

Tokens are compared by their SHA-256 digest (:func:`ldptel.server.state.bearer_digest`), in constant time
(:func:`ldptel.server.state.digest_in`, ``hmac.compare_digest`` against every known digest); the WSGI fast path
(``fastpath.py``) accepts app tokens the same way and leaves its rate-limit result in the request environ, so
a request it hands over is not charged twice.
"""

from __future__ import annotations

from typing import Literal

from flask import request

from ldptel.server.errors import ApiError
from ldptel.server.state import RATE_WAIT_KEY, bearer_digest, current_state, digest_in

__all__ = ["Role", "authenticate"]

Role = Literal["app", "admin", "metrics"]
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def authenticate(*allowed: Role) -> Role:
    """Check the source's failed-authentication limit (429), the bearer token (401/403), then the per-token
    rate limit (429); return the caller's role. Every 401 counts against the source (``ratelimit.py``)."""
    state = current_state()
    source = request.environ.get("REMOTE_ADDR") or ""
    if state.failures is not None:
        blocked = state.failures.blocked(source)
        if blocked > 0:  # before the token is looked at: a right guess gets the same answer
            state.telemetry.rejected("", "rate_limited", 0)
            raise ApiError(429, "rate_limited", "too many failed authentications from this source",
                           headers={"Retry-After": str(max(1, int(blocked + 0.999)))})
    try:
        token_digest = _token_digest()
    except ApiError:
        if state.failures is not None:
            state.failures.failed(source)
        raise
    role: Role
    if digest_in(token_digest, (state.admin_digest,)):
        role = "admin"
    elif state.metrics_digest is not None and digest_in(token_digest, (state.metrics_digest,)):
        role = "metrics"
    elif digest_in(token_digest, state.app_digests):
        role = "app"
    else:
        if state.failures is not None:
            state.failures.failed(source)
        raise ApiError(
            401, "unauthorized", "unknown token", headers={"WWW-Authenticate": 'Bearer error="invalid_token"'}
        )
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


def _token_digest() -> bytes:
    """The digest of the request's bearer token (401 when there is none or it is malformed)."""
    header = request.headers.get("Authorization")
    if header is None:
        raise ApiError(401, "unauthorized", "missing bearer token", headers=_CHALLENGE)
    token_digest = bearer_digest(header)
    if token_digest is None:
        raise ApiError(401, "unauthorized", "Authorization must be 'Bearer <token>'", headers=_CHALLENGE)
    return token_digest
