"""Rate limits: per bearer token across every process and replica (Redis), and per source for failed
authentication (process memory only).

* :class:`TokenRateLimiter`: ``rate`` requests/s with bursts of ``burst`` per token, shared by every gunicorn
  worker and ingest replica through one Redis key per token (GCRA, the token bucket as one "theoretical
  arrival time": a request at ``now`` is allowed when ``tat + 1/rate − burst/rate ≤ now``). The key is
  ``ldp:v1:rate:<16 hex digits of the token's SHA-256>`` (:func:`ldptel.storage.keys.rate`). It holds one
  number, that time in ms, and has no expiry (one key per configured token: only valid tokens reach the
  limiter; an expiry firing would be logged to the AOF as a DEL at that moment). What it reveals, in memory
  only: when the token's bucket is full again, i.e. roughly when the token last sent requests and how busy
  it was. A token is an app's, shared by all its devices, so this is an app-level
  request rate, never a device's. The script runs with ``redis.set_repl(REPL_NONE)``: the counter is neither
  written to the AOF nor sent to replicas (one write per request would timestamp the batch appends in the
  AOF); after a restart or failover the buckets start full. A refused request writes nothing. One round
  trip per authenticated request.
* :class:`SourceFailureLimiter`: failed authentications (401) per source, a token bucket in this process's
  memory only, keyed by a keyed hash of the source (a random key per process, so not even a memory dump
  lists addresses). Never stored, logged or sent anywhere; with W processes a source may fail W × the
  limit. The source is the real client: the TCP peer, or behind a proxy declared in ``LDPTEL_TRUSTED_PROXIES``
  the address that proxy wrote in ``X-Forwarded-For`` (:mod:`ldptel.server.proxies`; IPv6 by its /64). While a
  source is over its limit its wrong tokens, and its admin/metrics tokens, get 429 (a right guess of a secret
  token gets the same answer); a valid app token is always served (``auth.py``), so no client, valid or not,
  can stop another's ingest.
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
import time
from collections.abc import Callable

import redis as redis_lib

from ldptel.client.protocol.validate import check_int, check_number
from ldptel.storage import keys

__all__ = ["MAX_BURST", "MAX_SOURCES", "SourceFailureLimiter", "TokenRateLimiter"]

MAX_BURST = 10**9  # the largest bucket (LDPTEL_RATE_LIMIT's burst)
MAX_SOURCES = 100_000  # sources tracked per process; beyond, the table is pruned of full buckets (then cleared)

# KEYS[1] = rate key; ARGV = ms per request (1/rate), burst tolerance in ms (burst/rate).
# Returns 0 (allowed, recorded) or the ms to wait (refused, nothing written). Not propagated: see above.
_GCRA_LUA = """
redis.set_repl(redis.REPL_NONE)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local step, tolerance = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local new_tat = tat + step
local wait = new_tat - tolerance - now
if wait > 0 then return tostring(wait) end
redis.call('SET', KEYS[1], string.format('%.3f', new_tat))
return 0
"""


class TokenRateLimiter:
    """``rate`` requests/s with bursts of up to ``burst`` per token digest, across processes (Redis)."""

    def __init__(self, r: redis_lib.Redis, *, rate: float, burst: int) -> None:
        rate = check_number("rate", rate, 0.0, math.inf, open_interval=True)
        burst = check_int("burst", burst, 1, MAX_BURST)
        self._step_ms = 1000.0 / rate
        self._tolerance_ms = self._step_ms * burst
        self._script = r.register_script(_GCRA_LUA)

    def acquire(self, token_digest: bytes) -> float:
        """Take one request for the token: 0.0 when allowed, else the seconds until one is available."""
        wait = self._script(keys=[keys.rate(token_digest.hex()[:16])], args=[self._step_ms, self._tolerance_ms])
        return float(wait) / 1000.0


class SourceFailureLimiter:
    """Failed authentications per source: ``rate``/s with bursts of ``burst``, in this process only."""

    def __init__(self, *, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = check_number("rate", rate, 0.0, math.inf, open_interval=True)
        self._burst = float(check_int("burst", burst, 1, MAX_BURST))
        self._clock = clock
        self._key = os.urandom(16)
        self._buckets: dict[bytes, tuple[float, float]] = {}  # hashed source -> (tokens, last refill time)
        self._lock = threading.Lock()

    def _source(self, address: str) -> bytes:
        return hashlib.blake2b(address.encode("utf-8", "surrogateescape"), key=self._key, digest_size=16).digest()

    def _tokens(self, key: bytes, now: float) -> float:
        tokens, last = self._buckets.get(key, (self._burst, now))
        return min(self._burst, tokens + (now - last) * self._rate)

    def blocked(self, address: str) -> float:
        """Seconds until ``address`` may fail again (0.0: not blocked). Takes nothing."""
        if not self._buckets:  # the common case: no failures at all
            return 0.0
        now = self._clock()
        with self._lock:
            key = self._source(address)
            if key not in self._buckets:
                return 0.0
            tokens = self._tokens(key, now)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self._rate

    def failed(self, address: str) -> None:
        """Record one failed authentication from ``address``."""
        now = self._clock()
        with self._lock:
            key = self._source(address)
            tokens = self._tokens(key, now)
            if len(self._buckets) >= MAX_SOURCES and key not in self._buckets:
                self._prune(now)
            self._buckets[key] = (max(0.0, tokens - 1.0), now)

    def _prune(self, now: float) -> None:
        full = [k for k, (tokens, last) in self._buckets.items() if tokens + (now - last) * self._rate >= self._burst]
        for k in full:
            del self._buckets[k]
        if len(self._buckets) >= MAX_SOURCES:  # under a flood of sources: forget them all rather than grow
            self._buckets.clear()
