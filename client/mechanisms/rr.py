"""Binary randomized response (Warner): privatize, fold and estimate over one :class:`RrParams`.

Report Y = X with probability ½ + γ and 1 − X with probability ½ − γ (the flip probability f = ½ − γ is
T/2^B exactly). E[Y] = f + (1 − 2f)·p, so p̂ = (Ȳ − f)/(1 − 2f) is unbiased with
Var[p̂] = P(1 − P)/((1 − 2f)²·n), P = E[Y], estimated by plugging in Ȳ (ldp-math.md §7).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ldptel.client.protocol.rng import below_threshold, bernoulli_bytes, check_rng, draw_bytes
from ldptel.client.errors import EmptyStateError, InvalidValueError
from ldptel.client.protocol.specs import RrParams
from ldptel.client.protocol.wire import ReportBatch
from ldptel.client.mechanisms.base import Estimate, SketchState


def _as_bool_array(values: Sequence[object] | np.ndarray) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.dtype != np.bool_:
        raise InvalidValueError("rr values must be booleans (a list of bool or a bool array)")
    return arr


def privatize_batch(values: Sequence[object] | np.ndarray, params: RrParams, *, rng: np.random.Generator | None = None) -> ReportBatch:
    rng = check_rng(rng)
    x = _as_bool_array(values)
    n = x.size
    if n == 0:
        raise InvalidValueError("cannot privatize an empty batch")
    packed = np.packbits(x)
    flips = bernoulli_bytes(rng, params.flip_threshold, params.prob_bits, packed.size)
    out = packed ^ flips
    spare = (-n) % 8
    if spare:
        out[-1] &= np.uint8((0xFF << spare) & 0xFF)  # padding bits stay 0
    return ReportBatch(mechanism="rr", n=n, bits=out)


def privatize(value: object, params: RrParams, *, rng: np.random.Generator | None = None) -> ReportBatch:
    """One report from one CSPRNG call; same distribution as :func:`privatize_batch`."""
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidValueError(f"rr values must be bool, got {type(value).__name__}")
    rng = check_rng(rng)
    flip = below_threshold(params.flip_threshold, params.prob_bits, int.from_bytes(draw_bytes(rng, 8), "little"))
    return ReportBatch(mechanism="rr", n=1, bits=np.array([0x80 if bool(value) != flip else 0], dtype=np.uint8))


def fold(params: RrParams, batches: Sequence[ReportBatch], state: SketchState) -> SketchState:
    for batch in batches:
        assert batch.bits is not None
        state.counts[0, 0] += int(np.bitwise_count(batch.bits).sum(dtype=np.int64))
        state.row_counts[0] += batch.n
    return state


def estimate(params: RrParams, state: SketchState, *, confidence: float = 0.95) -> Estimate:
    state.check(params)
    n = state.n
    if n == 0:
        raise EmptyStateError("no rr reports to estimate from")
    f = params.effective_flip
    y_bar = state.counts[0, 0] / n
    p_hat = (y_bar - f) / (1 - 2 * f)
    se = np.sqrt(y_bar * (1 - y_bar) / n) / (1 - 2 * f)
    counts = np.array([n * (1 - p_hat), n * p_hat])
    stderr = np.array([n * se, n * se])
    return Estimate("rr", ("false", "true"), counts, stderr, n, confidence)
