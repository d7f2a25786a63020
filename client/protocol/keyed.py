"""Keyed randomness derived from the device secret: deterministic streams and digests (HMAC-SHA256).

A permanent randomized response must give the same noisy answer for the same value every time, and a
memoized report must be found again by its value without storing the value: both come from HMAC-SHA256
under the device secret (32 bytes from the OS CSPRNG, never sent), framed by metric and by the
**privatization fingerprint** (:func:`privatization_fingerprint`), not by the metric version: two versions
that privatize alike (a new description, owner or ``reports_per_day``) share the permanent responses and the
day's memo, so an observer gains nothing from a version bump (a fresh PRR per version would let it
intersect them: the ε∞ of RAPPOR holds per PRR, Erlingsson et al., CCS 2014). A change of the privatization
gets fresh ones, which the device's lifetime ledger charges (:mod:`ldptel.client.sdk.ledger`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct

from ldptel.client.protocol.params import ParamsBase

_PRR_LABEL = b"ldptel-prr-v2\x00"
_MEMO_LABEL = b"ldptel-memo-v2\x00"
_FINGERPRINT_LABEL = b"ldptel-privatization-v1\x00"
FINGERPRINT_BYTES = 32


def privatization_fingerprint(params: ParamsBase) -> bytes:
    """SHA-256 of the canonical JSON of ``params`` (the mechanism and every parameter of it): equal exactly
    when two specs privatize a value alike. The metric's name, version, description and ``reports_per_day``
    are not part of it."""
    text = json.dumps(params.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(_FINGERPRINT_LABEL + text.encode("utf-8")).digest()


def _frame(metric: str, fingerprint: bytes, *parts: bytes) -> bytes:
    if len(fingerprint) != FINGERPRINT_BYTES:
        raise ValueError(f"a privatization fingerprint is {FINGERPRINT_BYTES} bytes, got {len(fingerprint)}")
    out = [metric.encode("utf-8"), b"\x00", fingerprint]
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


def prr_stream(secret: bytes, metric: str, fingerprint: bytes, mechanism: str, value: bytes) -> HmacStream:
    """The keyed stream of a value's permanent randomized response under one privatization of ``metric``."""
    key = hmac.digest(secret, _PRR_LABEL + _frame(metric, fingerprint, mechanism.encode(), value), hashlib.sha256)
    return HmacStream(key)


def memo_key(secret: bytes, metric: str, fingerprint: bytes, day: int, value: bytes) -> bytes:
    """The memo table key of a value: HMAC-SHA256 over (metric, privatization fingerprint, day, value)."""
    return hmac.digest(secret, _MEMO_LABEL + _frame(metric, fingerprint, struct.pack("<q", day), value), hashlib.sha256)
