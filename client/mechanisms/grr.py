"""k-ary (generalized) randomized response over a declared domain, and the grr-or-not recommendation.

Keep the true label with probability p (T/2^B exactly), else report one of the d − 1 others uniformly
(probability q each). ĉ(v) = (c(v) − n·q)/(p − q), Var = n·q(1−q)/(p−q)² + c(v)·(1−p−q)/(p−q)
(ldp-math.md §3.1); the estimates sum to n exactly because p + (d − 1)q = 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from ldptel.client.protocol.rng import below_threshold, bernoulli, check_rng, draw_bytes, int_below, uniform_below
from ldptel.client.errors import EmptyStateError, InvalidParameterError, InvalidValueError, UnknownValueError
from ldptel.client.protocol.specs import GrrParams
from ldptel.client.protocol.wire import ReportBatch
from ldptel.client.mechanisms.base import Estimate, SketchState


def recommend_mechanism(epsilon: float, d: int) -> str:
    """'grr' when d < 3e^ε + 2 (its variance is then the lower one, ldp-math.md §3.3), else 'oue-cms'."""
    if isinstance(d, bool) or not isinstance(d, int) or d < 2:
        raise InvalidParameterError("d", "an integer >= 2", d)
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not epsilon > 0:
        raise InvalidParameterError("epsilon", "a number > 0", epsilon)
    return "grr" if d < 3 * math.exp(epsilon) + 2 else "oue-cms"


@lru_cache(maxsize=32)
def _index(domain: tuple[str, ...]) -> dict[str, int]:
    return {label: i for i, label in enumerate(domain)}


def _codes(values: Sequence[object] | np.ndarray, params: GrrParams) -> np.ndarray:
    seq = values.tolist() if isinstance(values, np.ndarray) else values
    index = _index(params.domain)
    try:
        return np.fromiter(map(index.__getitem__, seq), dtype=np.int64, count=len(seq))
    except (KeyError, TypeError):
        # The offending value is not echoed: error messages can end up in logs.
        raise UnknownValueError(f"a value is not in the metric's domain of {params.d} labels") from None


def privatize_batch(values: Sequence[object] | np.ndarray, params: GrrParams, *, rng: np.random.Generator | None = None) -> ReportBatch:
    rng = check_rng(rng)
    codes = _codes(values, params)
    n = codes.size
    if n == 0:
        raise InvalidValueError("cannot privatize an empty batch")
    keep = bernoulli(rng, params.keep_threshold, params.prob_bits, n)
    other = uniform_below(rng, params.d - 1, n)
    other += other >= codes  # uniform over the d − 1 labels that are not the true one
    return ReportBatch(mechanism="grr", n=n, cols=np.where(keep, codes, other))


def privatize(value: object, params: GrrParams, *, rng: np.random.Generator | None = None) -> ReportBatch:
    """One report from one CSPRNG call; same distribution as :func:`privatize_batch`."""
    if not isinstance(value, str):
        raise InvalidValueError(f"grr values are labels (str), got {type(value).__name__}")
    rng = check_rng(rng)
    code = _index(params.domain).get(value)
    if code is None:
        raise UnknownValueError(f"a value is not in the metric's domain of {params.d} labels")
    raw = draw_bytes(rng, 16)
    if below_threshold(params.keep_threshold, params.prob_bits, int.from_bytes(raw[:8], "little")):
        out = code
    else:
        out = int_below(rng, params.d - 1, int.from_bytes(raw[8:], "little"))
        out += out >= code
    return ReportBatch(mechanism="grr", n=1, cols=np.array([out], dtype=np.int64))


def fold(params: GrrParams, batches: Sequence[ReportBatch], state: SketchState) -> SketchState:
    for batch in batches:
        assert batch.cols is not None
        state.counts[0] += np.bincount(batch.cols, minlength=params.d)
        state.row_counts[0] += batch.n
    return state


def estimate(params: GrrParams, state: SketchState, *, confidence: float = 0.95) -> Estimate:
    state.check(params)
    n = state.n
    if n == 0:
        raise EmptyStateError("no grr reports to estimate from")
    p, q = params.p, params.q
    c = state.counts[0].astype(np.float64)
    est = (c - n * q) / (p - q)
    clipped = np.clip(est, 0, n)
    var = n * q * (1 - q) / (p - q) ** 2 + clipped * (1 - p - q) / (p - q)
    return Estimate("grr", params.domain, est, np.sqrt(np.maximum(var, 0.0)), n, confidence)
