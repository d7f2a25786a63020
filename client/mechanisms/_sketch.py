"""What the sketch mechanisms share: their params base (k rows × m columns over a hash family), hashing, and
the collision term of their standard errors.

A sketch report picks a row j in [k] and encodes h_j(value) in [m]; estimates are asked for candidate values.

Every sketch's state debiases to cells (:class:`Cells`, Apple's sketch matrix M divided by k): with F_j(a) the
number of row-j reports whose value hashes to a in row j, and n_j the reports in row j,

    E[y_ja | rows] = F_j(a),    Var(y_ja | rows) = α·n_j + β·F_j(a),    cells uncorrelated,

* cms, oue-cms: y_ja = (O[j, a] − n_j·q)/(p − q), α = q(1−q)/(p−q)², β = (1−p−q)/(p−q);
* hcms: y_ja = c·W[j, a] (W the Walsh–Hadamard transform of the signed sums), α = c², β = −1.

The plain estimate f̂(d) = m/(m−1)·(Σ_j y_{j,h_j(d)} − n/m) (Apple, "Learning with Privacy at Scale", 2017)
is unbiased over the draw of the hash family, but a *fixed* family (one per metric version) puts a fixed bias
on each value, from its collisions with the other values: Σ_{d'≠d} f(d')·(w_dd' − 1/m)·m/(m−1), with w_dd'
the share of rows where d' and d collide. Over hash families it has mean 0 and variance

    Var_coll(d) = (F2 − f(d)²)/(k(m−1)),    F2 = Σ_d' f(d')²,

which :func:`collision_variance` gives and every sketch's stderr includes. F2 needs no candidate list: with
T = Σ_{j,a} [y_ja² − α·n_j − β·y_ja] (unbiased for Σ_{j,a} F_j(a)² given the rows),

    F̂2 = (T − n(k−1)/k − n²/(k·m))·k·m/(m−1)

(:meth:`Cells.f2`), since E[Σ F_j(a)²] = F2(m−1)/(km) + n(k−1)/k + n²/(km) over rows and hashes. y is not
clipped: clipping biases F̂2 low.
"""

from __future__ import annotations

import os
import threading
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar, cast

import numpy as np

from ldptel.client.errors import InvalidParameterError, InvalidValueError
from ldptel.client.mechanisms.base import PlanCandidate, ReportBatch
from ldptel.client.mechanisms.capabilities import Sketch
from ldptel.client.mechanisms.state import Estimate, SketchState, codes_for
from ldptel.client.protocol.hashing import HashFamily
from ldptel.client.protocol.params import (
    AUTO_PROB_BITS_LOSS,
    AUTO_PROB_BITS_RANGE,
    HASH_VERSIONS,
    M_RANGE,
    MAX_CELLS,
    MAX_K,
    ParamsBase,
    check_epsilon,
    check_prob_bits,
)
from ldptel.client.protocol.validate import check_int

_ONE_SHOT_CELLS = 1 << 18
_THREADED_CELLS = 1 << 24
_THREADS = min(2, os.cpu_count() or 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class SketchParams(ParamsBase):
    """k hash rows × m columns (m a power of two) over the hash family fixed by (hash_seed, hash_version)."""

    k: int
    m: int
    hash_seed: int = 0
    hash_version: int = 1
    prob_bits: int | None = None  # None: chosen automatically and then stored explicitly

    def _validate_sketch(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        check_int("k", self.k, 1, MAX_K)
        lo, hi = M_RANGE
        check_int("m", self.m, lo, hi)
        if self.m & (self.m - 1):
            raise InvalidParameterError("m", f"a power of two in [{lo}, {hi}]", self.m)
        if self.k * self.m > MAX_CELLS:
            raise InvalidParameterError("k*m", f"at most {MAX_CELLS} cells", self.k * self.m)
        check_int("hash_seed", self.hash_seed, 0, (1 << 32) - 1)
        if self.hash_version not in HASH_VERSIONS:
            raise InvalidParameterError("hash_version", f"one of {list(HASH_VERSIONS)}", self.hash_version)

    def _resolve_prob_bits(self, eps_at: Callable[[int], float] | None, default: int = 0) -> None:
        """Check an explicit ``prob_bits``, or choose it: ``default``, else the fewest bits within 1% of ε."""
        if self.prob_bits is not None:
            check_prob_bits(self.prob_bits)
            return
        if eps_at is None:
            object.__setattr__(self, "prob_bits", default)
            return
        lo, hi = AUTO_PROB_BITS_RANGE
        bits = next((b for b in range(lo, hi + 1) if eps_at(b) >= (1.0 - AUTO_PROB_BITS_LOSS) * self.epsilon), hi)
        object.__setattr__(self, "prob_bits", bits)

    @property
    def bits(self) -> int:
        """``prob_bits`` after validation (never None)."""
        assert self.prob_bits is not None  # set in __post_init__
        return self.prob_bits



@dataclass(frozen=True, eq=False)
class Cells:
    """A sketch's debiased cells y (k × m, float64) and their noise model (see the module docstring).

    ``alpha``, ``beta``: Var(y_ja | rows) = alpha·n_j + beta·F_j(a); ``row_counts``: n_j.
    """

    y: np.ndarray
    row_counts: np.ndarray
    alpha: float
    beta: float

    @property
    def n(self) -> int:
        return int(self.row_counts.sum())

    def f2(self) -> float:
        """F̂2, the plug-in estimate of Σ_d f(d)² over every value reported (unclipped; may be negative)."""
        k, m = self.y.shape
        y = self.y
        return f2_from_sums(k, m, float(self.row_counts.sum()), float(np.vdot(y, y)), float(y.sum()), self.alpha, self.beta)


def f2_from_sums(k: int, m: int, n: float, sum_y2: float, sum_y: float, alpha: float, beta: float) -> float:
    """F̂2 (module docstring) from Σ y², Σ y over the cells and their noise model (:meth:`Cells.f2`); the
    estimators compute the sums exactly from integer states without a float copy of the cells."""
    t = sum_y2 - alpha * m * n - beta * sum_y
    return float((t - n * (k - 1) / k - n * n / (k * m)) * k * m / (m - 1))


def square_sum(z: np.ndarray) -> int | float:
    """Σ z² of an integer matrix: the exact integer sum while it fits in int64, else a float64 sum. Reads ``z``
    without a float copy (one 16 MB copy fewer per k = 2048, m = 1024 state)."""
    flat = z.reshape(-1)
    if flat.size == 0:
        return 0
    big = max(abs(int(flat.max())), abs(int(flat.min())))
    if big * big * flat.size < 1 << 63:
        return int(np.dot(flat, flat))
    f = flat.astype(np.float64)
    return float(np.dot(f, f))


def collision_variance(params: SketchParams, *, f2: float, counts: np.ndarray) -> np.ndarray:
    """Var_coll = (F2 − f²)⁺/(k(m−1)): the variance, over the draw of the hash family, of the collision bias
    of the plain estimate of a value with count f (``counts``, clipped at 0), when Σ f(d)² over all values is
    ``f2``. The same for cms, oue-cms and hcms."""
    f = np.clip(np.asarray(counts, dtype=np.float64), 0.0, None)
    out: np.ndarray = np.maximum(f2 - f * f, 0.0) / (params.k * (params.m - 1))
    return out


SP = TypeVar("SP", bound=SketchParams)
SB = TypeVar("SB", bound=ReportBatch)


class SketchMechanism(Sketch[SP, SB]):
    """What the sketch mechanisms share: a k×m integer state, estimates for candidate values, their params."""


    def state_shape(self, params: SP) -> tuple[tuple[int, int], int]:
        """counts: k × m (each mechanism says what a cell counts); row_counts[j]: reports in row j."""
        return (params.k, params.m), params.k

    def estimate(
        self, params: SP, state: SketchState, *, candidates: Sequence[object] | None = None, confidence: float = 0.95
    ) -> Estimate:
        """The plain estimate of each candidate; its stderr is √(:meth:`variance` + :func:`collision_variance`)."""
        if candidates is None:
            raise InvalidParameterError("candidates", "a non-empty list of values to estimate (sketch metrics)", None)
        return self.estimate_candidates(params, state, candidates, confidence)

    @abstractmethod
    def estimate_candidates(
        self, params: SP, state: SketchState, candidates: Sequence[object], confidence: float
    ) -> Estimate:
        """Plain counts of ``candidates`` with standard errors that include the collision term."""

    @abstractmethod
    def cells(self, params: SP, state: SketchState) -> Cells:
        """The debiased cells of ``state`` and their noise model (module docstring)."""

    def shape(self, params: SP) -> str:
        return f"k={params.k} m={params.m}"

    def plan_candidates(self, epsilon: float, d: int, *, ks: Sequence[int], ms: Sequence[int]) -> tuple[PlanCandidate, ...]:
        make = cast("Callable[..., SketchParams]", self.params_type)  # every sketch's params take epsilon, k and m
        return tuple(PlanCandidate(make(epsilon=epsilon, k=k, m=m), k, m) for k in ks for m in ms)

    def collision_variance(self, params: SP, *, f2: float, counts: np.ndarray) -> np.ndarray:
        return collision_variance(params, f2=f2, counts=counts)

    def params_schema(self) -> tuple[dict[str, Any], list[str]]:
        return sketch_params_schema()


def sketch_params_schema() -> tuple[dict[str, Any], list[str]]:
    """The JSON schema of a sketch's params (every sketch mechanism has the same fields)."""
    ms = [1 << b for b in range(M_RANGE[0].bit_length() - 1, M_RANGE[1].bit_length())]
    fields: dict[str, Any] = {
        "k": {"type": "integer", "minimum": 1, "maximum": MAX_K},
        "m": {"type": "integer", "enum": ms},
        "hash_seed": {"type": "integer", "minimum": 0, "maximum": (1 << 32) - 1},
        "hash_version": {"type": "integer", "enum": list(HASH_VERSIONS)},
        "prob_bits": {"type": ["integer", "null"], "minimum": 2, "maximum": 32, "description": "null: chosen by the registry"},
    }
    return fields, ["k", "m"]


@lru_cache(maxsize=64)
def family(k: int, m: int, seed: int, version: int) -> HashFamily:
    return HashFamily(k=k, m=m, seed=seed, version=version)


def family_of(params: SketchParams) -> HashFamily:
    return family(params.k, params.m, params.hash_seed, params.hash_version)


def report_bases(values: Sequence[object] | np.ndarray, fam: HashFamily) -> np.ndarray:
    """Base hash of every value, hashing each distinct value once."""
    codes, uniques = codes_for(values)
    if codes.size == 0:
        raise InvalidValueError("cannot privatize an empty batch")
    bases: np.ndarray = fam.bases(uniques)[codes]
    return bases


_CACHE_LOCK = threading.Lock()
_BASES: OrderedDict[tuple[int, tuple[object, ...]], np.ndarray] = OrderedDict()
_FLAT: OrderedDict[tuple[int, int, int, int, tuple[object, ...]], np.ndarray] = OrderedDict()
_BASES_CACHED = 8  # candidate lists whose base hashes are kept (8 bytes a candidate: 0.8 MB for 100,000)
_FLAT_CACHED = 8  # candidate lists whose k hashed cells are kept (8·k bytes a candidate, ≤ _FLAT_CELLS each)
_FLAT_CELLS = 1 << 21  # C·k at most this for the cell index to be kept (16 MB): a per-day series' few candidates


def _cached(cache: OrderedDict[Any, np.ndarray], key: Any, size: int, make: Callable[[], np.ndarray]) -> np.ndarray:
    """An LRU of read-only arrays shared by threads (a dashboard answers queries concurrently)."""
    with _CACHE_LOCK:
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
    value = make()
    value.setflags(write=False)
    with _CACHE_LOCK:
        cache[key] = value
        while len(cache) > size:
            cache.popitem(last=False)
    return value


def candidate_bases(fam: HashFamily, candidates: Sequence[object]) -> np.ndarray:
    """The base hashes of ``candidates`` (uint64), hashed once per (seed, candidate list): a dashboard or a
    per-day series asks the same list again and again, and hashing 100,000 values costs ~0.1 s of Python."""
    try:
        key = (fam.seed, tuple(candidates))  # the base hash depends on the seed only (version 1 is the only one)
        hash(key)
    except TypeError:  # an unhashable candidate: not a str or bytes, which hashing refuses with a clear error
        return fam.bases(candidates)
    return _cached(_BASES, key, _BASES_CACHED, lambda: fam.bases(candidates))


def candidate_cells(fam: HashFamily, candidates: Sequence[object]) -> np.ndarray | None:
    """The C × k flat cell indexes j·m + h_j(d) of ``candidates`` (int64), kept per (family, candidate list) when
    C·k ≤ :data:`_FLAT_CELLS`, else None (too large to keep: hashed row by row, see :func:`base_sums`)."""
    if len(candidates) * fam.k > _FLAT_CELLS:
        return None
    key = (fam.k, fam.m, fam.seed, fam.version, tuple(candidates))
    try:
        hash(key)
    except TypeError:
        return None

    def make() -> np.ndarray:
        flat: np.ndarray = fam.row_hashes_matrix(candidate_bases(fam, candidates))
        flat += (np.arange(fam.k, dtype=np.int64) * fam.m)[None, :]
        return flat

    return _cached(_FLAT, key, _FLAT_CACHED, make)


def candidate_sums(matrix: np.ndarray, fam: HashFamily, candidates: Sequence[object]) -> np.ndarray:
    """S(d) = Σ_j matrix[j, h_j(d)] for every candidate d, as float64 (the exact integer sum, rounded once).

    The candidates' hashes are kept per candidate list (:func:`candidate_bases`, :func:`candidate_cells`): a
    few candidates are one gather from their cached cell indexes; many are hashed row by row
    (:func:`base_sums`), k vectorized passes, never C·k Python calls.
    """
    if isinstance(candidates, (str, bytes)) or len(candidates) == 0:
        raise InvalidParameterError("candidates", "a non-empty list of str or bytes values", candidates)
    flat = candidate_cells(fam, candidates)
    if flat is not None:
        picked = np.take(np.ascontiguousarray(matrix).reshape(-1), flat)
        out: np.ndarray = picked.sum(axis=1, dtype=np.int64).astype(np.float64)
        return out
    return base_sums(matrix, fam, candidate_bases(fam, candidates))


def _centred(matrix: np.ndarray) -> tuple[np.ndarray, int]:
    """(matrix − c_j per row j, Σ c_j), c_j the integer midpoint of row j's range, in int32 when no sum of one cell
    per row can then leave int32 (Σ_j max_a |matrix[j, a] − c_j| < 2^31), else int64: the k gathers and running
    sums of int32 move half the bytes, and S = Σ_j (matrix[j, h_j] − c_j) + Σ c_j is exact either way."""
    if matrix.dtype.kind not in "iu":
        return np.ascontiguousarray(matrix), 0
    hi = matrix.max(axis=1).astype(np.int64)
    lo = matrix.min(axis=1).astype(np.int64)
    centre = (hi + lo) // 2
    if int(np.maximum(hi - centre, centre - lo).sum()) >= 1 << 31:
        return np.ascontiguousarray(matrix, dtype=np.int64), 0
    z = np.empty(matrix.shape, dtype=np.int32)
    np.subtract(matrix, centre[:, None], out=z, casting="unsafe")  # every value fits: checked above
    return z, int(centre.sum())


def base_sums(matrix: np.ndarray, fam: HashFamily, bases: np.ndarray) -> np.ndarray:
    """S = Σ_j matrix[j, h_j(x)] for every base hash x in ``bases`` (uint64), as float64 (:func:`candidate_sums`).

    Exact: integer sums of the row-centred matrix in int32 when they cannot overflow it (:func:`_centred`)."""
    if bases.size * fam.k <= _ONE_SHOT_CELLS:  # few candidates: all C×k hashes in one expression
        h = fam.row_hashes_matrix(bases)
        flat = h + (np.arange(fam.k, dtype=np.int64) * fam.m)[None, :]
        few: np.ndarray = np.ascontiguousarray(matrix).reshape(-1)[flat].sum(axis=1, dtype=np.int64).astype(np.float64)
        return few
    rows, offset = _centred(matrix)
    acc_type = rows.dtype

    def sums(part: np.ndarray) -> np.ndarray:
        acc = np.zeros(part.size, dtype=acc_type)
        idx = np.empty(part.size, dtype=np.uint64)
        buf = np.empty(part.size, dtype=acc_type)
        for j in range(fam.k):
            fam.row_hash(part, j, out=idx)
            np.take(rows[j], idx.view(np.int64), mode="wrap", out=buf)
            acc += buf
        return acc

    if _THREADS == 1 or bases.size * fam.k < _THREADED_CELLS:
        total = sums(bases).astype(np.int64)
    else:  # halves of the candidates in two threads: numpy releases the GIL in each vector operation
        with ThreadPoolExecutor(_THREADS) as pool:
            total = np.concatenate(list(pool.map(sums, np.array_split(bases, _THREADS)))).astype(np.int64)
    total += offset
    out: np.ndarray = total.astype(np.float64)
    return out


def concat_rows(batches: Sequence[ReportBatch]) -> np.ndarray:
    parts = [b.rows for b in batches if b.rows is not None]
    return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.zeros(0, np.int64)
