"""Dashboard login sessions: a random id per login, an expiry, revoked at logout; kept in this process's memory.

* :meth:`SessionStore.create` returns a fresh 256-bit random id (``secrets.token_urlsafe(32)``), the cookie's value.
  The store keeps only its SHA-256 (a memory dump lists no usable cookie) and the monotonic time it expires.
* :meth:`SessionStore.valid` accepts an id until it expires (``ttl`` seconds after the login, never extended)
  or is revoked (:meth:`SessionStore.revoke`, at ``/logout``); an expired id is forgotten when met.
* At most ``max_sessions`` are kept: the expired ones are pruned first, then the oldest logins are dropped.

What it reveals, in memory only: how many operators are logged in and when each login ends (so roughly when
it began). No address, no user agent, no token, nothing written to disk or Redis, nothing logged. One process:
``ldptel dashboard`` is one (threaded) process; under several worker processes each would have its own store
(a login would work on one worker only), so run it as one process. A restart logs everyone out.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable

__all__ = ["DEFAULT_SESSION_SECONDS", "MAX_SESSIONS", "SessionStore"]

DEFAULT_SESSION_SECONDS = 8 * 3600.0  # a working day; then log in again
MAX_SESSIONS = 10_000


def _key(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode("ascii", "replace")).digest()


class SessionStore:
    """Login sessions of one dashboard process (see the module docstring)."""

    def __init__(self, *, ttl: float = DEFAULT_SESSION_SECONDS, max_sessions: int = MAX_SESSIONS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.max_sessions, self._clock = ttl, max_sessions, clock
        self._expiry: dict[bytes, float] = {}  # SHA-256 of the id -> monotonic expiry (insertion order = login order)
        self._lock = threading.Lock()

    def create(self) -> str:
        """A new session id (the cookie's value), valid for ``ttl`` seconds."""
        session_id = secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            if len(self._expiry) >= self.max_sessions:
                for key in [k for k, end in self._expiry.items() if end <= now]:
                    del self._expiry[key]
                while len(self._expiry) >= self.max_sessions:
                    del self._expiry[next(iter(self._expiry))]  # the oldest login
            self._expiry[_key(session_id)] = now + self.ttl
        return session_id

    def valid(self, session_id: str) -> bool:
        if not session_id or len(session_id) > 128 or not session_id.isascii():
            return False
        key = _key(session_id)
        now = self._clock()
        with self._lock:
            end = self._expiry.get(key)
            if end is None:
                return False
            if end <= now:
                del self._expiry[key]
                return False
        return True

    def revoke(self, session_id: str) -> None:
        with self._lock:
            self._expiry.pop(_key(session_id), None)

    def __len__(self) -> int:
        return len(self._expiry)
