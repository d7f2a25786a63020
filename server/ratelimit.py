"""Per-token request rate limit: a token bucket per bearer token, in process memory.

Kept in-process on purpose: a Redis-backed limiter would add a round trip to every request and a write that a
rejected request must not make. The limit therefore applies per server process: with W gunicorn workers a
token may send up to W × rate requests/s in total. Buckets are keyed by a digest, never by the token itself,
and only authenticated tokens get one, so the table is bounded by the number of configured tokens.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from ldptel.client.protocol.validate import check_int, check_number

__all__ = ["MAX_BURST", "TokenBucketLimiter"]

MAX_BURST = 10**9  # the largest bucket (LDPTEL_RATE_LIMIT's burst)


class TokenBucketLimiter:
    """``rate`` requests/s with bursts of up to ``burst``, per key. Thread-safe (gthread workers)."""

    def __init__(self, *, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = check_number("rate", rate, 0.0, math.inf, open_interval=True)
        self._burst = float(check_int("burst", burst, 1, MAX_BURST))
        self._clock = clock
        self._buckets: dict[bytes, tuple[float, float]] = {}  # key -> (tokens, last refill time)
        self._lock = threading.Lock()

    def acquire(self, key: bytes) -> float:
        """Take one token for ``key``: 0.0 when allowed, else the seconds until one is available."""
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (self._burst, now))
            tokens = min(self._burst, tokens + (now - last) * self._rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self._rate
