"""The one entry point for randomness in the client.

Every randomized function takes ``rng: numpy.random.Generator | None``. ``None`` (the default, and what the
SDK always uses) draws from the operating system's CSPRNG through :func:`os.urandom`; a seeded Generator is
for simulations and tests only. Nothing here calls the :mod:`random` module or ``numpy.random`` module
functions, and a test makes them raise to prove it.

Bernoulli draws are exact: a probability is realised as an integer threshold ``T / 2**B`` (B "probability
bits"), and the bits are built with the binary-expansion recurrence

    P ← (t_b + P) / 2   for the bits t_b of T, least significant first,

which, on 64 lanes of a uint64 word at once, is ``x = r | x`` for a 1 bit and ``x = r & x`` for a 0 bit,
with ``r`` a word of fair coins. So a draw costs B random bits, never a float, and its probability is exactly
``T / 2**B``: the effective ε that a mechanism reports is computed from that same T.
"""

from __future__ import annotations

import os

import numpy as np

from ldptel.client.errors import InvalidParameterError

_U64_MAX = (1 << 64) - 1


def check_rng(rng: object) -> np.random.Generator | None:
    """Validate an injected generator; ``None`` means the OS CSPRNG."""
    if rng is None or isinstance(rng, np.random.Generator):
        return rng
    raise InvalidParameterError("rng", "None (OS CSPRNG) or a numpy.random.Generator", type(rng).__name__)


_RAW64 = (np.random.PCG64, np.random.PCG64DXSM, np.random.SFC64, np.random.Philox)


def random_words(rng: np.random.Generator | None, n: int) -> np.ndarray:
    """``n`` uniformly random, writable uint64 words."""
    if n <= 0:
        return np.zeros(0, dtype=np.uint64)
    if rng is None:
        return np.frombuffer(bytearray(os.urandom(8 * n)), dtype="<u8").astype(np.uint64, copy=False)
    if isinstance(rng.bit_generator, _RAW64):  # full 64-bit outputs: take them as they come
        raw: np.ndarray = rng.bit_generator.random_raw(n)
        return raw
    return rng.integers(0, _U64_MAX, size=n, dtype=np.uint64, endpoint=True)


_ONE_DRAW_WORDS = 4096  # small requests fetch every plane in one draw (one os.urandom call per report)


def bernoulli_words(
    rng: np.random.Generator | None, threshold: int, bits: int, n_words: int, *, out: np.ndarray | None = None
) -> np.ndarray:
    """``n_words`` uint64 words whose 64·n_words bits are i.i.d. Bernoulli(threshold / 2**bits).

    Written into ``out`` (uint64, length n_words) when given.
    """
    if not 0 <= threshold <= (1 << bits):
        raise InvalidParameterError("threshold", f"an integer in [0, 2**{bits}]", threshold)
    x = np.empty(n_words, dtype=np.uint64) if out is None else out
    if threshold == 0 or threshold == 1 << bits:
        x[...] = 0 if threshold == 0 else _U64_MAX
        return x
    # Drop trailing zero bits of T: T/2^B == (T >> z)/2^(B-z), and the recurrence starts at its lowest 1.
    while threshold % 2 == 0:
        threshold //= 2
        bits -= 1
    planes = random_words(rng, n_words * bits).reshape(bits, n_words) if n_words * bits <= _ONE_DRAW_WORDS else None
    x[...] = planes[0] if planes is not None else random_words(rng, n_words)  # lowest set bit: P = 1/2
    for b in range(1, bits):  # then the higher bits, least significant first
        r = planes[b] if planes is not None else random_words(rng, n_words)
        if (threshold >> b) & 1:
            np.bitwise_or(x, r, out=x)
        else:
            np.bitwise_and(x, r, out=x)
    return x


def bernoulli_bytes(rng: np.random.Generator | None, threshold: int, bits: int, n_bytes: int) -> np.ndarray:
    """``n_bytes`` uint8 values whose bits are i.i.d. Bernoulli(threshold / 2**bits)."""
    words = bernoulli_words(rng, threshold, bits, (n_bytes + 7) // 8)
    return words.view(np.uint8)[:n_bytes]


def bernoulli(rng: np.random.Generator | None, threshold: int, bits: int, n: int) -> np.ndarray:
    """``n`` booleans, each True with probability exactly threshold / 2**bits."""
    packed = bernoulli_bytes(rng, threshold, bits, (n + 7) // 8)
    return np.unpackbits(packed, count=n).astype(bool)


def uniform_below(rng: np.random.Generator | None, high: int, n: int) -> np.ndarray:
    """``n`` exactly uniform integers in ``[0, high)`` as int64 (rejection sampling, no modulo bias)."""
    if high < 1:
        raise InvalidParameterError("high", "an integer >= 1", high)
    if rng is not None:
        return rng.integers(0, high, size=n, dtype=np.int64)
    if high == 1:
        return np.zeros(n, dtype=np.int64)
    if high & (high - 1) == 0:  # power of two: mask, no rejection
        return (random_words(rng, n) & np.uint64(high - 1)).astype(np.int64)
    if high < 1 << 16:  # 32-bit words: half the random bytes, and uint32 division is several times faster
        limit32 = np.uint32(((1 << 32) // high) * high)
        r32 = random_words(rng, (n + 1) // 2).view(np.uint32)[:n]
        out = (r32 % np.uint32(high)).astype(np.int64)
        bad = np.flatnonzero(r32 >= limit32)  # rejected (probability < high/2^32 each): redrawn below
        if bad.size:
            out[bad] = uniform_below(rng, high, bad.size)
        return out
    limit = np.uint64(((1 << 64) // high) * high)  # accept r < limit: every residue equally often
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        r = random_words(rng, todo.size)
        ok = r < limit
        out[todo[ok]] = (r[ok] % np.uint64(high)).astype(np.int64)
        todo = todo[~ok]
    return out


def secure_token(n_bytes: int = 16) -> bytes:
    """Random bytes from the OS CSPRNG (batch ids, device secrets)."""
    return os.urandom(n_bytes)


# ------------------------------------------------------------------------------ scalar path (one report)
def draw_bytes(rng: np.random.Generator | None, n: int) -> bytes:
    """``n`` random bytes: one os.urandom call, or the injected generator's bytes."""
    return os.urandom(n) if rng is None else rng.bytes(n)


def int_below(rng: np.random.Generator | None, high: int, word: int) -> int:
    """Exactly uniform integer in [0, high) from a random 64-bit ``word`` (redraws on the rare rejection)."""
    limit = ((1 << 64) // high) * high
    while word >= limit:
        word = int.from_bytes(draw_bytes(rng, 8), "little")
    return word % high


def bernoulli_int(threshold: int, bits: int, planes: bytes, width: int) -> int:
    """A ``width``-bit Python int whose bits are i.i.d. Bernoulli(threshold / 2**bits).

    ``planes`` holds ``bits`` random planes of width/8 bytes each; the recurrence is the one of
    :func:`bernoulli_words` (same distribution), on Python integers for one report.
    """
    if threshold == 0:
        return 0
    if threshold == 1 << bits:
        return (1 << width) - 1
    while threshold % 2 == 0:
        threshold //= 2
        bits -= 1
    size = width // 8
    x = int.from_bytes(planes[:size], "big")
    for b in range(1, bits):
        r = int.from_bytes(planes[b * size : (b + 1) * size], "big")
        x = (x | r) if (threshold >> b) & 1 else (x & r)
    return x


def below_threshold(threshold: int, bits: int, word: int) -> bool:
    """True with probability threshold / 2**bits, from a random 64-bit ``word`` (bits <= 64)."""
    return (word >> (64 - bits)) < threshold


def _os_word() -> int:
    """One uniform 64-bit word from the OS CSPRNG, read as :func:`random_words` reads it (little-endian)."""
    return int.from_bytes(os.urandom(8), "little")


def _os_uniform_below(high: int) -> int:
    """``uniform_below(None, high, 1)[0]`` on Python ints: the same branches, the same OS bytes drawn in the same
    order, the same result (one report's path, without building arrays)."""
    if high == 1:
        return 0
    if high & (high - 1) == 0:
        return _os_word() & (high - 1)
    if high < 1 << 16:
        r32 = _os_word() & 0xFFFFFFFF  # the first uint32 of the word's little-endian bytes
        return _os_uniform_below(high) if r32 >= ((1 << 32) // high) * high else r32 % high
    limit = ((1 << 64) // high) * high
    while True:
        r = _os_word()
        if r < limit:
            return r % high


def draw_below(rng: np.random.Generator | None, num: int, den: int) -> bool:
    """True with probability exactly num/den (a uniform integer in [0, den) below num)."""
    if num <= 0:
        return False
    if num >= den:
        return True
    if rng is None and den < 1 << 63:  # beyond, uniform_below's int64 result overflows: keep exactly what it does
        return _os_uniform_below(den) < num
    return bool(uniform_below(rng, den, 1)[0] < num)
