"""Keyed randomness derived from the device secret: deterministic streams and digests (HMAC-SHA256).

A permanent randomized response must give the same noisy answer for the same value every time, and a
memoized report must be found again by its value without storing the value: both come from HMAC-SHA256
under the device secret (32 bytes from the OS CSPRNG, never sent), framed by metric and version so that no
two uses share a key.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

_PRR_LABEL = b"ldptel-prr-v1\x00"
_MEMO_LABEL = b"ldptel-memo-v1\x00"


def _frame(metric: str, version: int, *parts: bytes) -> bytes:
    out = [metric.encode("utf-8"), b"\x00", struct.pack("<I", version)]
    for part in parts:
        out += [b"\x00", part]
    return b"".join(out)


class HmacStream:
    """Deterministic 64-bit words: HMAC-SHA256(key, counter) blocks, 4 words per block (a simple PRF-DRBG)."""

    __slots__ = ("_key", "_counter", "_words")

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._counter = 0
        self._words: list[int] = []

    def word(self) -> int:
        if not self._words:
            block = hmac.digest(self._key, struct.pack("<Q", self._counter), hashlib.sha256)
            self._counter += 1
            self._words = list(struct.unpack("<4Q", block))[::-1]
        return self._words.pop()

    def below(self, high: int) -> int:
        """Exactly uniform in [0, high) by rejection (no modulo bias)."""
        limit = ((1 << 64) // high) * high
        while True:
            w = self.word()
            if w < limit:
                return w % high

    def bits(self, bits: int) -> int:
        """A uniform ``bits``-bit integer (the top bits of one word)."""
        return self.word() >> (64 - bits)


def prr_stream(secret: bytes, metric: str, version: int, mechanism: str, value: bytes) -> HmacStream:
    key = hmac.digest(secret, _PRR_LABEL + _frame(metric, version, mechanism.encode(), value), hashlib.sha256)
    return HmacStream(key)


def memo_key(secret: bytes, metric: str, version: int, day: int, value: bytes) -> bytes:
    """The memo table key of a value: HMAC-SHA256 over (metric, version, day, value)."""
    return hmac.digest(secret, _MEMO_LABEL + _frame(metric, version, struct.pack("<q", day), value), hashlib.sha256)
