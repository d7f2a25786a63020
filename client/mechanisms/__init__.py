"""Mechanism dispatch: one module per mechanism, each holding privatize, fold and estimate.

The functions here pick the module from ``params.mechanism`` (an explicit dict, no reflection).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import numpy as np

from ldptel.client.errors import InvalidParameterError
from ldptel.client.protocol.specs import Params
from ldptel.client.protocol.wire import ReportBatch
from ldptel.client.mechanisms import cms, grr, hcms, rr
from ldptel.client.mechanisms.base import Estimate, SketchState
from ldptel.client.mechanisms.grr import recommend_mechanism

_MODULES: dict[str, ModuleType] = {"rr": rr, "grr": grr, "cms": cms, "oue-cms": cms, "hcms": hcms}


def _module(params: Params) -> ModuleType:
    try:
        return _MODULES[params.mechanism]
    except (KeyError, AttributeError):
        raise InvalidParameterError("params", "mechanism params (RrParams, GrrParams, CmsParams, ...)", params) from None


def privatize(value: object, params: Params, *, rng: np.random.Generator | None = None) -> ReportBatch:
    """Privatize one value now (OS CSPRNG unless ``rng`` is given); a batch of one report."""
    return _module(params).privatize(value, params, rng=rng)  # type: ignore[no-any-return]


def privatize_batch(values: Sequence[object] | np.ndarray, params: Params, *, rng: np.random.Generator | None = None) -> ReportBatch:
    """Privatize many values at once (vectorized; same distribution as :func:`privatize`)."""
    return _module(params).privatize_batch(values, params, rng=rng)  # type: ignore[no-any-return]


def fold(params: Params, batches: Sequence[ReportBatch], *, into: SketchState | None = None) -> SketchState:
    """Fold batches into an exact integer state: a new one, or ``into`` updated in place (and returned)."""
    for batch in batches:
        if batch.mechanism != params.mechanism:
            raise InvalidParameterError("batches", f"{params.mechanism} batches", batch.mechanism)
    if into is None:
        into = SketchState.empty(params)
    else:
        into.check(params)
    return _module(params).fold(params, batches, into)  # type: ignore[no-any-return]


def estimate(
    params: Params,
    state: SketchState,
    *,
    candidates: Sequence[object] | None = None,
    confidence: float = 0.95,
) -> Estimate:
    """Debiased counts, standard errors and intervals. Sketches need ``candidates``; rr/grr ignore them."""
    mod = _module(params)
    if params.mechanism in ("rr", "grr"):
        return mod.estimate(params, state, confidence=confidence)  # type: ignore[no-any-return]
    if candidates is None:
        raise InvalidParameterError("candidates", "a non-empty list of values to estimate (sketch metrics)", None)
    return mod.estimate(params, state, candidates=candidates, confidence=confidence)  # type: ignore[no-any-return]


def mechanism_names(*, candidates: bool | None = None) -> tuple[str, ...]:
    """Registered mechanism names; ``candidates=True``: those whose estimate needs candidate values (sketches)."""
    names = tuple(_MODULES)
    if candidates is None:
        return names
    return tuple(n for n in names if (n not in ("rr", "grr")) == candidates)


__all__ = [
    "Estimate",
    "SketchState",
    "mechanism_names",
    "estimate",
    "fold",
    "privatize",
    "privatize_batch",
    "recommend_mechanism",
]
