"""The sketch hash family h_j : values → [m], for rows j ∈ [k], fixed by (seed, version).

Version 1, the only one so far:

* A value is bytes: ``str`` is encoded as UTF-8, ``bytes`` is taken as is; anything else is rejected. A
  ``str`` with a lone surrogate has no UTF-8 encoding and is refused with
  :class:`~ldptel.client.errors.InvalidTextError`, never repaired (the rule:
  :func:`ldptel.client.protocol.validate.lone_surrogate_at`). mmh3 is only ever given these bytes, never a
  ``str`` (mmh3 5.3.1 crashes the interpreter on a ``str`` holding a lone surrogate).
* Its 64-bit base hash is ``x = mmh3.hash64(value, seed)[0]`` (unsigned, x64 variant).
* Row j has a multiplier ``a_j`` (odd) and an offset ``b_j``, two consecutive outputs of SplitMix64 seeded
  with ``seed ⊕ (version << 32)`` (``a_j`` = output 2j with the low bit set, ``b_j`` = output 2j+1).
* ``h_j(value) = ((a_j·x + b_j) mod 2^64) >> (64 − log2 m)``: multiply-add-shift, a universal family
  (collision probability ≤ 2/m for two distinct base hashes), independent across rows.

A client evaluates one (value, j) with one mmh3 call and Python integers. An estimator hashes each of C
candidates once with mmh3 and evaluates all C × k row hashes with numpy, one row at a time (k vector
operations, never C·k Python calls). Golden vectors in ``tests/client/test_hashing.py`` pin the family.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

import mmh3
import numpy as np

from ldptel.client.errors import InvalidParameterError, InvalidTextError, InvalidValueError
from ldptel.client.protocol.validate import check_int, lone_surrogate_at

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def value_bytes(value: object) -> bytes:
    """The bytes a sketch value hashes as: UTF-8 for ``str``, as is for ``bytes``. A ``str`` with a lone
    surrogate raises :class:`InvalidTextError` (its message holds the index, never the value)."""
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidTextError(
                f"a str value must be valid Unicode text; this one has a lone surrogate code point (U+D800-U+DFFF) "
                f"at index {exc.start}: refused, not repaired") from None
    if isinstance(value, bytes):
        return value
    raise InvalidValueError(f"sketch values must be str or bytes, got {type(value).__name__}")


def _splitmix64(state: int, count: int) -> list[int]:
    out = []
    for _ in range(count):
        state = (state + _GOLDEN) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        out.append(z ^ (z >> 31))
    return out


@lru_cache(maxsize=64)
def _row_constants(seed: int, version: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    stream = _splitmix64(seed ^ (version << 32), 2 * k)
    a = np.array([stream[2 * j] | 1 for j in range(k)], dtype=np.uint64)
    b = np.array([stream[2 * j + 1] for j in range(k)], dtype=np.uint64)
    a.setflags(write=False)
    b.setflags(write=False)
    return a, b


class HashFamily:
    """k row hashes into [m] (m a power of two), fixed by (seed, version)."""

    __slots__ = ("k", "m", "seed", "version", "_shift", "_a", "_b")

    def __init__(self, *, k: int, m: int, seed: int = 0, version: int = 1) -> None:
        if version != 1:
            raise InvalidParameterError("hash_version", "1", version)
        if m < 2 or m & (m - 1):
            raise InvalidParameterError("m", "a power of two >= 2", m)
        check_int("k", k, 1, 1 << 16)
        check_int("hash_seed", seed, 0, (1 << 32) - 1)
        self.k, self.m, self.seed, self.version = k, m, seed, version
        self._shift = 64 - (m.bit_length() - 1)
        self._a, self._b = _row_constants(seed, version, k)

    def base(self, value: object) -> int:
        """The 64-bit base hash of one value."""
        return int(mmh3.hash64(value_bytes(value), self.seed, signed=False)[0])

    def bases(self, values: Iterable[object]) -> np.ndarray:
        """Base hashes of many values (one mmh3 call each), as uint64. A ``str`` with a lone surrogate raises
        :class:`InvalidTextError` naming its position in ``values`` (from 1)."""
        seed = self.seed
        values = values if isinstance(values, Sequence) else list(values)
        try:
            return np.fromiter(
                (mmh3.hash64(value_bytes(v), seed, signed=False)[0] for v in values), dtype=np.uint64
            )
        except InvalidTextError as exc:
            position = next(i for i, v in enumerate(values, 1) if isinstance(v, str) and lone_surrogate_at(v) is not None)
            raise InvalidTextError(f"value {position} of {len(values)}: {exc}") from None

    def hash_one(self, value: object, row: int) -> int:
        """h_row(value), with Python integers only (the client's path)."""
        if not 0 <= row < self.k:
            raise InvalidParameterError("row", f"an integer in [0, {self.k - 1}]", row)
        return self.hash_from_base(self.base(value), row)

    def hash_from_base(self, base: int, row: int) -> int:
        """h_row for a value whose base hash is known (Python integers)."""
        return ((int(self._a[row]) * base + int(self._b[row])) & _MASK64) >> self._shift

    def hash_rows(self, bases: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """h_{rows[i]}(value_i) for per-report base hashes and rows (vectorized), as int64."""
        h = self._a[rows] * bases.astype(np.uint64, copy=False)
        h += self._b[rows]
        h >>= np.uint64(self._shift)
        out: np.ndarray = h.astype(np.int64)
        return out

    def row_hash(self, bases: np.ndarray, row: int, out: np.ndarray | None = None) -> np.ndarray:
        """h_row for many base hashes; writes into ``out`` (uint64) when given. Used by estimators."""
        if out is None:
            out = np.empty(bases.shape, dtype=np.uint64)
        np.multiply(bases, self._a[row], out=out)
        np.add(out, self._b[row], out=out)
        np.right_shift(out, np.uint64(self._shift), out=out)
        return out

    def row_hashes_matrix(self, bases: np.ndarray) -> np.ndarray:
        """The C × k matrix of h_j for C base hashes, in one expression (memory C·k·8 bytes: small C only)."""
        h = bases.astype(np.uint64, copy=False)[:, None] * self._a[None, :]
        h += self._b[None, :]
        h >>= np.uint64(self._shift)
        out: np.ndarray = h.astype(np.int64)
        return out

    def matrix(self, values: Sequence[object]) -> np.ndarray:
        """The C × k matrix of h_j(value) (small C: tests, debugging)."""
        return self.row_hashes_matrix(self.bases(values))
