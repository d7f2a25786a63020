"""Hadamard count-mean sketch: one privatized bit per report.

A report is (j, l, y): j uniform in [k], l uniform in [m], y = 1 ↔ +1 for the bit
b·H_m[l, h_j(value)], where H_m[l, a] = (−1)^popcount(l & a) (Sylvester) and b = −1 with probability
f = 1/(e^ε + 1) (T/2^B exactly). Fold: S[j, l] = Σ of the ±1 bits reported at (j, l), exactly.
Estimate with c = 1/(1 − 2f) (= (e^ε+1)/(e^ε−1) nominally; never the cms ε/2 constant):
W = S·H_mᵀ row by row (fast Walsh–Hadamard transform, exact in int64), then

    f̂(d) = m/(m−1) · ( c·Σ_j W[j, h_j(d)] − n/m ),

with the randomization variance (privacy noise and row choice, averaged over hash families; Apple, "Learning
with Privacy at Scale", 2017)

    Var = (m/(m−1))² · [ n·c² − f − (n − f)(1/m² + (m−1)/(k·m²)) ]

(:func:`variance`), plus the hash-collision term (F2 − f²)/(k(m−1)) of a fixed family, which the stderr
includes (:func:`~ldptel.client.mechanisms._sketch.collision_variance`; F2 estimated from the cells).

Cells (:func:`cells`): y_ja = c·W[j, a]. A row-j report with column l, hashed index a₀ and sign b (E[b] = 1/c)
adds c·b·H[l, a₀]·H[l, a] = ±c to y_ja; over l (uniform) and b its mean is 1[a = a₀] (Σ_l H[l,a]H[l,a₀] = m·1[a = a₀])
and its second moment c². So E[y_ja | rows] = F_j(a) and Var(y_ja | rows) = n_j·c² − F_j(a): α = c², β = −1. For
a ≠ a' one report's two terms have covariance c²·(1/m)Σ_l H[l,a]H[l,a'] − 0 = 0, so cells are uncorrelated
(not independent), which is all the variance formulas need.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ldptel.client.errors import EmptyStateError
from ldptel.client.mechanisms._sketch import (
    Cells,
    SketchMechanism,
    SketchParams,
    candidate_sums,
    collision_variance,
    concat_rows,
    f2_from_sums,
    family_of,
    report_bases,
    square_sum,
)
from ldptel.client.mechanisms.base import Column, ReportBatch, Values
from ldptel.client.mechanisms.state import Estimate, SketchState, labels_of
from ldptel.client.protocol.params import SINGLE_DRAW_PROB_BITS, flip_epsilon, safe_flip_threshold
from ldptel.client.protocol.rng import below_threshold, bernoulli_bytes, check_rng, draw_bytes, int_below, uniform_below


@dataclass(frozen=True, slots=True, kw_only=True)
class HcmsParams(SketchParams):
    """Hadamard count-mean sketch: one privatized bit per report.

    A report picks j uniformly in [k] and l uniformly in [m], takes w = H_m[l, h_j(value)] ∈ {±1} and
    flips it with probability 1/(e^ε + 1): ε, not ε/2, because one coordinate is released. Debias with
    c_ε^H = (e^ε+1)/(e^ε−1) = 1/(1 − 2f_eff) — never the cms constant (two public
    implementations shipped that bug).
    """

    mechanism: ClassVar[str] = "hcms"

    def __post_init__(self) -> None:
        self._validate_sketch()
        self._resolve_prob_bits(None, SINGLE_DRAW_PROB_BITS)

    @property
    def flip_probability(self) -> float:
        return 1.0 / (math.exp(self.epsilon) + 1.0)

    @property
    def c_epsilon(self) -> float:
        """Nominal c_ε^H = (e^ε+1)/(e^ε−1)."""
        e = math.exp(self.epsilon)
        return (e + 1) / (e - 1)

    @property
    def flip_threshold(self) -> int:
        return safe_flip_threshold(self.flip_probability, self.bits, self.epsilon, 1.0)

    @property
    def effective_flip(self) -> float:
        return self.flip_threshold / (1 << self.bits)

    @property
    def effective_c(self) -> float:
        """The constant the estimator uses: 1/(1 − 2·f_eff)."""
        return 1.0 / (1.0 - 2.0 * self.effective_flip)

    @property
    def effective_epsilon(self) -> float:
        return flip_epsilon(self.flip_threshold, self.bits)


@dataclass(frozen=True, eq=False, kw_only=True)
class HcmsBatch(ReportBatch):
    """hcms reports: ``rows`` (j < k), ``cols`` (l < m), int64, and ``bits``: the n reported bits packed MSB
    first (1 ↔ +1)."""

    mechanism: str = "hcms"
    rows: np.ndarray
    cols: np.ndarray
    bits: np.ndarray


def hadamard_sign_bits(rows_l: np.ndarray, cols_a: np.ndarray) -> np.ndarray:
    """1 where H_m[l, a] = +1, i.e. popcount(l & a) is even."""
    out: np.ndarray = (np.bitwise_count(rows_l & cols_a) & 1 == 0).astype(np.uint8)
    return out


def privatize_batch(values: Values, params: HcmsParams, *, rng: np.random.Generator | None = None) -> HcmsBatch:
    rng = check_rng(rng)
    fam = family_of(params)
    bases = report_bases(values, fam)
    n = bases.size
    rows = uniform_below(rng, params.k, n)
    cols = uniform_below(rng, params.m, n)
    hot = fam.hash_rows(bases, rows)
    flips = bernoulli_bytes(rng, params.flip_threshold, params.bits, (n + 7) // 8)
    bits = np.packbits(hadamard_sign_bits(cols, hot)) ^ flips
    spare = (-n) % 8
    if spare:
        bits[-1] &= np.uint8((0xFF << spare) & 0xFF)
    return HcmsBatch(n=n, rows=rows, cols=cols, bits=bits)


def privatize(value: object, params: HcmsParams, *, rng: np.random.Generator | None = None) -> HcmsBatch:
    """One report from one CSPRNG call; same distribution as :func:`privatize_batch`."""
    rng = check_rng(rng)
    fam = family_of(params)
    x = fam.base(value)
    raw = draw_bytes(rng, 24)
    j = int_below(rng, params.k, int.from_bytes(raw[:8], "little"))
    col = int_below(rng, params.m, int.from_bytes(raw[8:16], "little"))
    flip = below_threshold(params.flip_threshold, params.bits, int.from_bytes(raw[16:], "little"))
    plus = (col & fam.hash_from_base(x, j)).bit_count() % 2 == 0
    bit = np.uint8(0x80 if plus != flip else 0)
    return HcmsBatch(n=1, rows=np.array([j], np.int64), cols=np.array([col], np.int64), bits=np.array([bit]))


def fold(params: HcmsParams, batches: Sequence[HcmsBatch], state: SketchState) -> SketchState:
    if not batches:
        return state
    k, m = params.k, params.m
    rows = concat_rows(batches)
    cols = np.concatenate([b.cols for b in batches])
    ones = np.concatenate([b.bit_values() for b in batches]).astype(bool)
    cell = rows * m + cols
    touched, inverse = np.unique(cell, return_inverse=True)  # only the cells these reports hit
    signed = np.where(ones, 1, -1)
    flat = state.counts.reshape(-1)
    flat[touched] += np.bincount(inverse, weights=signed, minlength=touched.size).astype(np.int64)
    state.row_counts += np.bincount(rows, minlength=k)
    return state


def fwht(matrix: np.ndarray) -> np.ndarray:
    """Walsh–Hadamard transform of every row (natural/Sylvester order), exact for integers."""
    a = np.array(matrix, dtype=np.int64, copy=True)
    k, m = a.shape
    h = 1
    while h < m:
        v = a.reshape(k, m // (2 * h), 2, h)
        x = v[:, :, 0, :].copy()
        y = v[:, :, 1, :]
        v[:, :, 0, :] += y
        v[:, :, 1, :] = x - y
        h *= 2
    return a


def estimate(params: HcmsParams, state: SketchState, *, candidates: Sequence[object], confidence: float = 0.95) -> Estimate:
    state.check(params)
    n = state.n
    if n == 0:
        raise EmptyStateError("no hcms reports to estimate from")
    m, c = params.m, params.effective_c
    w = fwht(state.counts)
    s = candidate_sums(w, family_of(params), candidates)
    est = m / (m - 1) * (c * s - n / m)
    # Σy², Σy of the cells y = c·W from exact integer sums (no float copy of them)
    f2 = f2_from_sums(params.k, m, float(n), c * c * float(square_sum(w)), c * float(int(w.sum(dtype=np.int64))), c * c, -1.0)
    var = variance(params, est, n) + collision_variance(params, f2=f2, counts=np.clip(est, 0, n))
    return Estimate("hcms", labels_of(candidates), est, np.sqrt(var), n, confidence)


def cells(params: HcmsParams, state: SketchState) -> Cells:
    """y_ja = c·W[j, a]; α = c², β = −1 (module docstring)."""
    return _cells(params, state, fwht(state.counts))


def _cells(params: HcmsParams, state: SketchState, w: np.ndarray) -> Cells:
    c = params.effective_c
    return Cells(c * w.astype(np.float64), state.row_counts, c * c, -1.0)


def variance(params: HcmsParams, counts: np.ndarray, n: int) -> np.ndarray:
    """The randomization variance (m/(m−1))² · [n·c² − f − (n − f)(1/m² + (m−1)/(k·m²))], f the estimate
    clipped to [0, n]; the collision term is separate."""
    k, m, c = params.k, params.m, params.effective_c
    f = np.clip(counts, 0, n)
    var = (m / (m - 1)) ** 2 * (n * c * c - f - (n - f) * (1 / m**2 + (m - 1) / (k * m**2)))
    out: np.ndarray = np.maximum(var, 0.0)
    return out


class Hcms(SketchMechanism[HcmsParams, HcmsBatch]):
    """Hadamard count-mean sketch: one privatized bit (and its row and column) per report."""

    name = "hcms"
    code = 4
    params_type = HcmsParams
    batch_type = HcmsBatch

    def columns(self, params: HcmsParams) -> tuple[Column, ...]:
        return (
            Column("rows", "row", "index", 2, params.k, "row index"),
            Column("cols", "col", "index", 2, params.m, "column index"),
            Column("bits", "bit", "bit"),
        )

    def privatize(self, value: object, params: HcmsParams, *, rng: np.random.Generator | None = None) -> HcmsBatch:
        return privatize(value, params, rng=rng)

    def privatize_batch(self, values: Values, params: HcmsParams, *, rng: np.random.Generator | None = None) -> HcmsBatch:
        return privatize_batch(values, params, rng=rng)

    def fold(self, params: HcmsParams, batches: Sequence[HcmsBatch], state: SketchState) -> SketchState:
        return fold(params, batches, state)

    def estimate_candidates(
        self, params: HcmsParams, state: SketchState, candidates: Sequence[object], confidence: float
    ) -> Estimate:
        return estimate(params, state, candidates=candidates, confidence=confidence)

    def variance(self, params: HcmsParams, counts: np.ndarray, n: int) -> np.ndarray:
        return variance(params, counts, n)

    def cells(self, params: HcmsParams, state: SketchState) -> Cells:
        state.check(params)
        return cells(params, state)


HCMS = Hcms()
