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
from abc import abstractmethod
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
        n = float(self.row_counts.sum())
        y = self.y
        t = float(np.vdot(y, y)) - self.alpha * m * n - self.beta * float(y.sum())
        return float((t - n * (k - 1) / k - n * n / (k * m)) * k * m / (m - 1))


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


def candidate_sums(matrix: np.ndarray, fam: HashFamily, candidates: Sequence[object]) -> np.ndarray:
    """S(d) = Σ_j matrix[j, h_j(d)] for every candidate d, as float64.

    One mmh3 call per candidate, then k vectorized passes (hash a row for all candidates, gather from that
    row, accumulate): no C·k Python calls. ``mode="wrap"`` skips numpy's bounds check; every index is < m
    by construction.
    """
    if isinstance(candidates, (str, bytes)) or len(candidates) == 0:
        raise InvalidParameterError("candidates", "a non-empty list of str or bytes values", candidates)
    return base_sums(matrix, fam, fam.bases(candidates))


def base_sums(matrix: np.ndarray, fam: HashFamily, bases: np.ndarray) -> np.ndarray:
    """S = Σ_j matrix[j, h_j(x)] for every base hash x in ``bases`` (uint64), as float64 (:func:`candidate_sums`)."""
    rows = np.ascontiguousarray(matrix, dtype=np.int64)
    if bases.size * fam.k <= _ONE_SHOT_CELLS:  # few candidates: all C×k hashes in one expression
        h = fam.row_hashes_matrix(bases)
        flat = h + (np.arange(fam.k, dtype=np.int64) * fam.m)[None, :]
        few: np.ndarray = rows.reshape(-1)[flat].sum(axis=1).astype(np.float64)
        return few
    def sums(part: np.ndarray) -> np.ndarray:
        acc = np.zeros(part.size, dtype=np.int64)
        idx = np.empty(part.size, dtype=np.uint64)
        buf = np.empty(part.size, dtype=np.int64)
        for j in range(fam.k):
            fam.row_hash(part, j, out=idx)
            np.take(rows[j], idx.view(np.int64), mode="wrap", out=buf)
            acc += buf
        return acc

    if _THREADS == 1 or bases.size * fam.k < _THREADED_CELLS:
        return sums(bases).astype(np.float64)
    # Halves of the candidates in two threads: numpy releases the GIL in each vector operation.
    with ThreadPoolExecutor(_THREADS) as pool:
        parts = list(pool.map(sums, np.array_split(bases, _THREADS)))
    return np.concatenate(parts).astype(np.float64)


def concat_rows(batches: Sequence[ReportBatch]) -> np.ndarray:
    parts = [b.rows for b in batches if b.rows is not None]
    return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.zeros(0, np.int64)
