"""Longitudinal protection: permanent randomized response (rr, grr) and daily memoization (sketches).

Why (ldp-math.md §8.1): a device that reports the same value T times with fresh noise leaks T·ε, and the
server can simply average the noise away. This module makes repeated reports of one value worthless to
average.

rr and grr: PRR + IRR, split so the server sees exactly the metric's mechanism
---------------------------------------------------------------------------------
As in RAPPOR (ldp-math.md §2.1), each value first goes through a *permanent* randomized response (PRR) that
is derived deterministically from a per-device secret, so every report of that value starts from the same
noisy answer; then fresh *instantaneous* noise (IRR, OS CSPRNG) is drawn on top of it for every report.

The split is chosen so that PRR followed by IRR is, for one report, *exactly* the metric's channel:

* rr: flip with probability f = T/2^B (the spec's ``flip_threshold``/``prob_bits``). Two flips compose as
  (1 − 2f) = (1 − 2f₁)(1 − 2f₂). The PRR flips with f₁ = T₁/2^B, T₁ = ⌈2^B·(1 − √(1 − 2f))/2⌉ (half of the
  "contrast" 1 − 2f on each stage, rounded towards more PRR noise), and the IRR flips with the rational
  probability f₂ = (T − T₁)/(2^B − 2T₁), drawn exactly (rejection sampling of a uniform integer). Then
  f₁ + f₂ − 2f₁f₂ = T/2^B exactly.
* grr over d labels: a GRR with keep probability p has contrast λ = (d·p − 1)/(d − 1), and two GRRs compose
  to a GRR with λ = λ₁λ₂. The PRR keeps with p₁ = K₁/2^B, K₁ = ⌊2^B·(1 + (d − 1)√λ)/d⌋ (at least K), and the
  IRR keeps with p₂ = (K₁ + (d − 1)K − 2^B)/(d·K₁ − 2^B); together P(report = true label) = K/2^B exactly
  and every other label has (1 − K/2^B)/(d − 1).

So the server-side estimators need no change: the distribution of one report is the spec's, and the
estimator debiases with the spec's effective probabilities. ``tests/client/test_memo.py`` proves the two
identities with exact rationals and checks them statistically over many simulated devices.

Guarantees, in the notation of ldp-math.md §2.2 with one bit (rr) or one symbol (grr) instead of 2h Bloom
bits (RAPPOR's f is 2f₁ here, its p is f₂ and its q is 1 − f₂, so q* = 1 − f and p* = f):

* one report: ε₁ = ln((1 − f)/f) for rr, ln(p(d − 1)/(1 − p)) for grr: the spec's ``effective_epsilon``.
* any number of reports of one value (same metric and version), ever: ε∞ = ln((1 − f₁)/f₁) for rr,
  ln(p₁(d − 1)/(1 − p₁)) for grr, because the IRR is post-processing of the PRR. With the even split,
  ε∞ ≈ 1.66·ε₁ at ε₁ = 1 and ≈ 1.34·ε₁ at ε₁ = 2 (see :func:`rr_split` / :func:`grr_split`).

Caveats (ldp-math.md §8.1): a device whose value changes leaks each distinct value's PRR (ε∞ each); a new
metric version or a new device secret starts fresh PRRs (the bound then restarts); the daily budget still
caps how many reports leave the device.

Sketches (cms, oue-cms, hcms): memoized per UTC day
---------------------------------------------------
The first report of a value on a budget day is privatized normally and stored (as its privatized payload,
keyed by HMAC-SHA256(secret, metric, version, day, value), never the value); later reports of that value
on the same day resend the same payload. Within a day, any number of reports of one value leak ε; over D
days a value reported daily leaks at most D·ε (the budget renews daily, as Apple's does; Tang et al.).
Memo rows of earlier days are deleted at the day change.

The device secret is 32 bytes from the OS CSPRNG, generated once per storage directory, stored beside the
queue with mode 0600 and never sent. Anyone who can read the storage directory can test guesses of a
value against the memo keys of the current day and recompute PRRs; the threat model is the server and the
network, not the device itself.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import struct
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import numpy as np

from ldptel.client.protocol.rng import uniform_below
from ldptel.client.errors import InvalidValueError, LdpError, UnknownValueError
from ldptel.client.protocol.specs import GrrParams, RrParams
from ldptel.client.protocol.wire import ReportBatch

SECRET_BYTES = 32
SECRET_FILE = "device_secret"
_PRR_LABEL = b"ldptel-prr-v1\x00"
_MEMO_LABEL = b"ldptel-memo-v1\x00"
_MASK64 = (1 << 64) - 1


class SecretError(LdpError, RuntimeError):
    """The device secret file exists but cannot be used (a silent reset would void ε∞)."""


# ----------------------------------------------------------------------------------------- device secret
def load_or_create_secret(storage_dir: Path) -> bytes:
    """The device secret in ``storage_dir`` (created atomically, mode 0600, on first use)."""
    path = storage_dir / SECRET_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        tmp = storage_dir / f".{SECRET_FILE}.{os.getpid()}.{os.urandom(4).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, os.urandom(SECRET_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # never replaces a secret another process created meanwhile
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        data = path.read_bytes()
    if len(data) != SECRET_BYTES:
        raise SecretError(
            f"{path} holds {len(data)} bytes, expected {SECRET_BYTES}; refusing to replace it because a new "
            "secret resets the longitudinal privacy bound. Delete the whole storage directory to start over."
        )
    return data


# ------------------------------------------------------------------------------------ keyed randomness
def _frame(metric: str, version: int, *parts: bytes) -> bytes:
    out = [metric.encode("utf-8"), b"\x00", struct.pack("<I", version)]
    for part in parts:
        out += [b"\x00", part]
    return b"".join(out)


class _HmacStream:
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


def prr_stream(secret: bytes, metric: str, version: int, mechanism: str, value: bytes) -> _HmacStream:
    key = hmac.digest(secret, _PRR_LABEL + _frame(metric, version, mechanism.encode(), value), hashlib.sha256)
    return _HmacStream(key)


def memo_key(secret: bytes, metric: str, version: int, day: int, value: bytes) -> bytes:
    """The memo table key of a sketch value: HMAC-SHA256 over (metric, version, day, value)."""
    return hmac.digest(secret, _MEMO_LABEL + _frame(metric, version, struct.pack("<q", day), value), hashlib.sha256)


# ------------------------------------------------------------------------------------------ the splits
@dataclass(frozen=True, slots=True)
class RrSplit:
    """rr: PRR flip T₁/2^B, then IRR flip (T − T₁)/(2^B − 2T₁); together exactly T/2^B."""

    bits: int
    threshold: int  # T: the spec's flip threshold
    prr_threshold: int  # T₁

    @property
    def irr_num(self) -> int:
        return self.threshold - self.prr_threshold

    @property
    def irr_den(self) -> int:
        return (1 << self.bits) - 2 * self.prr_threshold

    def composed_flip(self) -> Fraction:
        """P(report ≠ value) of PRR then IRR, as an exact rational."""
        f1 = Fraction(self.prr_threshold, 1 << self.bits)
        f2 = Fraction(self.irr_num, self.irr_den)
        return f1 + f2 - 2 * f1 * f2

    @property
    def epsilon_one(self) -> float:
        """ε of one report: ln((1 − f)/f), the spec's effective ε."""
        return math.log((1 << self.bits) - self.threshold) - math.log(self.threshold)

    @property
    def epsilon_inf(self) -> float:
        """ε of any number of reports of one value: ln((1 − f₁)/f₁)."""
        return math.log((1 << self.bits) - self.prr_threshold) - math.log(self.prr_threshold)


@dataclass(frozen=True, slots=True)
class GrrSplit:
    """grr: PRR keep K₁/2^B, then IRR keep N/D; together exactly K/2^B (see the module docstring)."""

    bits: int
    d: int
    threshold: int  # K: the spec's keep threshold
    prr_threshold: int  # K₁

    @property
    def irr_num(self) -> int:
        return self.prr_threshold + (self.d - 1) * self.threshold - (1 << self.bits)

    @property
    def irr_den(self) -> int:
        return self.d * self.prr_threshold - (1 << self.bits)

    def composed(self) -> tuple[Fraction, Fraction]:
        """(P(report = value), P(report = one given other label)) of PRR then IRR, exactly."""
        d = self.d
        p1 = Fraction(self.prr_threshold, 1 << self.bits)
        p2 = Fraction(self.irr_num, self.irr_den)
        q1, q2 = (1 - p1) / (d - 1), (1 - p2) / (d - 1)
        keep = p1 * p2 + (1 - p1) * q2  # PRR kept then IRR kept, or PRR moved and IRR moved back
        # to a given other label z: PRR kept and IRR moved to z; PRR moved to z and IRR kept it;
        # PRR moved elsewhere (d − 2 labels) and IRR moved to z.
        other = p1 * q2 + q1 * p2 + (d - 2) * q1 * q2
        return keep, other

    @property
    def epsilon_one(self) -> float:
        return math.log(self.threshold) + math.log(self.d - 1) - math.log((1 << self.bits) - self.threshold)

    @property
    def epsilon_inf(self) -> float:
        return math.log(self.prr_threshold) + math.log(self.d - 1) - math.log((1 << self.bits) - self.prr_threshold)


def rr_split(params: RrParams) -> RrSplit:
    bits, t = params.prob_bits, params.flip_threshold
    contrast = 1.0 - 2.0 * t / (1 << bits)
    f1 = (1.0 - math.sqrt(contrast)) / 2.0
    t1 = min(t, max(1, math.ceil(f1 * (1 << bits))))  # round towards more permanent noise; f₁ ≤ f
    return RrSplit(bits=bits, threshold=t, prr_threshold=t1)


def grr_split(params: GrrParams) -> GrrSplit:
    bits, k, d = params.prob_bits, params.keep_threshold, params.d
    full = 1 << bits
    contrast = (d * k - full) / ((d - 1) * full)
    p1 = (1.0 + (d - 1) * math.sqrt(contrast)) / d
    k1 = max(k, min(full - 1, math.floor(p1 * full)))  # round towards more permanent noise; p₁ ≥ p
    return GrrSplit(bits=bits, d=d, threshold=k, prr_threshold=k1)


# ------------------------------------------------------------------------------------- privatization
def _draw_below(rng: np.random.Generator | None, num: int, den: int) -> bool:
    """True with probability exactly num/den (a uniform integer in [0, den) below num)."""
    if num <= 0:
        return False
    if num >= den:
        return True
    return bool(uniform_below(rng, den, 1)[0] < num)


def rr_value_bytes(value: object) -> bytes:
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidValueError(f"rr values must be bool, got {type(value).__name__}")
    return b"\x01" if value else b"\x00"


def privatize_rr(
    value: object, params: RrParams, *, secret: bytes, metric: str, version: int, rng: np.random.Generator | None = None
) -> ReportBatch:
    """One rr report: the value's PRR bit (keyed by the device secret), then a fresh IRR flip."""
    raw = rr_value_bytes(value)
    split = rr_split(params)
    stream = prr_stream(secret, metric, version, "rr", raw)
    bit = raw == b"\x01"
    if stream.bits(split.bits) < split.prr_threshold:
        bit = not bit
    if _draw_below(rng, split.irr_num, split.irr_den):
        bit = not bit
    return ReportBatch(mechanism="rr", n=1, bits=np.array([0x80 if bit else 0], dtype=np.uint8))


@lru_cache(maxsize=32)
def _label_index(domain: tuple[str, ...]) -> dict[str, int]:
    return {label: i for i, label in enumerate(domain)}


def grr_code(value: object, params: GrrParams) -> int:
    if not isinstance(value, str):
        raise InvalidValueError(f"grr values are labels (str), got {type(value).__name__}")
    try:
        return _label_index(params.domain)[value]
    except KeyError:
        # The offending value is not echoed: error messages can end up in logs.
        raise UnknownValueError(f"a value is not in the metric's domain of {params.d} labels") from None


def privatize_grr(
    value: object, params: GrrParams, *, secret: bytes, metric: str, version: int, rng: np.random.Generator | None = None
) -> ReportBatch:
    """One grr report: the value's PRR label (keyed by the device secret), then a fresh IRR on top."""
    code = grr_code(value, params)
    split = grr_split(params)
    stream = prr_stream(secret, metric, version, "grr", struct.pack("<I", code))
    prr = code
    if stream.bits(split.bits) >= split.prr_threshold:
        other = stream.below(split.d - 1)
        prr = other + (other >= code)
    out = prr
    if not _draw_below(rng, split.irr_num, split.irr_den):
        other = int(uniform_below(rng, split.d - 1, 1)[0])
        out = other + (other >= prr)
    return ReportBatch(mechanism="grr", n=1, cols=np.array([out], dtype=np.int64))
