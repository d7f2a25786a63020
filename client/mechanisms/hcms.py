"""Hadamard count-mean sketch: one privatized bit per report.

A report is (j, l, y): j uniform in [k], l uniform in [m], y = 1 ↔ +1 for the bit
b·H_m[l, h_j(value)], where H_m[l, a] = (−1)^popcount(l & a) (Sylvester) and b = −1 with probability
f = 1/(e^ε + 1) (T/2^B exactly). Fold: S[j, l] = Σ of the ±1 bits reported at (j, l), exactly.
Estimate with c = 1/(1 − 2f) (= (e^ε+1)/(e^ε−1) nominally; never the cms ε/2 constant):
W = S·H_mᵀ row by row (fast Walsh–Hadamard transform, exact in int64), then

    f̂(d) = m/(m−1) · ( c·Σ_j W[j, h_j(d)] − n/m ),

Var = (m/(m−1))² · [ n·c² − f − (n − f)(1/m² + (m−1)/(k·m²)) ] (+ the collision term), ldp-math.md §1.5.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ldptel.client.protocol.rng import below_threshold, bernoulli_bytes, check_rng, draw_bytes, int_below, uniform_below
from ldptel.client.protocol.specs import HcmsParams
from ldptel.client.errors import EmptyStateError
from ldptel.client.protocol.wire import ReportBatch
from ldptel.client.mechanisms._sketch import candidate_sums, concat_rows, family_of, report_bases
from ldptel.client.mechanisms.base import Estimate, SketchState, labels_of


def hadamard_sign_bits(rows_l: np.ndarray, cols_a: np.ndarray) -> np.ndarray:
    """1 where H_m[l, a] = +1, i.e. popcount(l & a) is even."""
    return (np.bitwise_count(rows_l & cols_a) & 1 == 0).astype(np.uint8)


def privatize_batch(values: Sequence[object] | np.ndarray, params: HcmsParams, *, rng: np.random.Generator | None = None) -> ReportBatch:
    rng = check_rng(rng)
    fam = family_of(params)
    bases = report_bases(values, fam)
    n = bases.size
    rows = uniform_below(rng, params.k, n)
    cols = uniform_below(rng, params.m, n)
    hot = fam.hash_rows(bases, rows)
    assert params.prob_bits is not None
    flips = bernoulli_bytes(rng, params.flip_threshold, params.prob_bits, (n + 7) // 8)
    bits = np.packbits(hadamard_sign_bits(cols, hot)) ^ flips
    spare = (-n) % 8
    if spare:
        bits[-1] &= np.uint8((0xFF << spare) & 0xFF)
    return ReportBatch(mechanism="hcms", n=n, rows=rows, cols=cols, bits=bits)


def privatize(value: object, params: HcmsParams, *, rng: np.random.Generator | None = None) -> ReportBatch:
    """One report from one CSPRNG call; same distribution as :func:`privatize_batch`."""
    rng = check_rng(rng)
    fam = family_of(params)
    x = fam.base(value)
    raw = draw_bytes(rng, 24)
    j = int_below(rng, params.k, int.from_bytes(raw[:8], "little"))
    col = int_below(rng, params.m, int.from_bytes(raw[8:16], "little"))
    assert params.prob_bits is not None
    flip = below_threshold(params.flip_threshold, params.prob_bits, int.from_bytes(raw[16:], "little"))
    plus = (col & fam.hash_from_base(x, j)).bit_count() % 2 == 0
    bit = np.uint8(0x80 if plus != flip else 0)
    return ReportBatch(
        mechanism="hcms", n=1, rows=np.array([j], np.int64), cols=np.array([col], np.int64), bits=np.array([bit])
    )


def fold(params: HcmsParams, batches: Sequence[ReportBatch], state: SketchState) -> SketchState:
    if not batches:
        return state
    k, m = params.k, params.m
    rows = concat_rows(batches)
    cols = np.concatenate([b.cols for b in batches if b.cols is not None])
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
    k, m, c = params.k, params.m, params.effective_c
    s = candidate_sums(fwht(state.counts), family_of(params), candidates)
    scale = m / (m - 1)
    est = scale * (c * s - n / m)
    f = np.clip(est, 0, n)
    var = scale**2 * (n * c * c - f - (n - f) * (1 / m**2 + (m - 1) / (k * m**2)))
    return Estimate("hcms", labels_of(candidates), est, np.sqrt(np.maximum(var, 0.0)), n, confidence)
