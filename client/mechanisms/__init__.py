"""The mechanisms: one module each (params, typed batch, privatize, fold, estimate), and their registry.

:mod:`~ldptel.client.mechanisms.rr`, :mod:`~ldptel.client.mechanisms.grr`, :mod:`~ldptel.client.mechanisms.cms`,
:mod:`~ldptel.client.mechanisms.oue_cms` and :mod:`~ldptel.client.mechanisms.hcms` each define one
:class:`~ldptel.client.mechanisms.base.Mechanism` object, a core plus the capability types it has
(:mod:`~ldptel.client.mechanisms.capabilities`); :mod:`~ldptel.client.mechanisms.registry` lists them. The functions here dispatch on the params object, so callers never name a mechanism.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms.base import Mechanism, ReportBatch, Values
from ldptel.client.mechanisms.capabilities import (
    Binary,
    Bucketed,
    Categorical,
    Discovering,
    Labelled,
    Mergeable,
    OnDevice,
    Permanent,
    Sketch,
    Summary,
)
from ldptel.client.mechanisms.cms import CmsParams
from ldptel.client.mechanisms.daily_mean import DailyMeanParams
from ldptel.client.mechanisms.discovery import PemParams
from ldptel.client.mechanisms.grr import GrrParams, recommend_mechanism
from ldptel.client.mechanisms.hcms import HcmsParams
from ldptel.client.mechanisms.histogram import HistogramParams, bucket_edges
from ldptel.client.mechanisms.mean import MeanParams
from ldptel.client.mechanisms.oue_cms import OueCmsParams
from ldptel.client.mechanisms.registry import (
    get_mechanism,
    mechanism_by_code,
    mechanism_names,
    mechanism_of,
    mechanisms,
)
from ldptel.client.mechanisms.rr import RrParams
from ldptel.client.mechanisms.state import Estimate, SketchState
from ldptel.client.protocol.params import ParamsBase


def privatize(value: object, params: ParamsBase, *, rng: np.random.Generator | None = None) -> ReportBatch:
    """Privatize one value now (OS CSPRNG unless ``rng`` is given); a batch of one report."""
    batch: ReportBatch = mechanism_of(params).privatize(value, params, rng=rng)
    return batch


def privatize_batch(values: Values, params: ParamsBase, *, rng: np.random.Generator | None = None) -> ReportBatch:
    """Privatize many values at once (vectorized; same distribution as :func:`privatize`)."""
    batch: ReportBatch = mechanism_of(params).privatize_batch(values, params, rng=rng)
    return batch


def fold(params: ParamsBase, batches: Sequence[ReportBatch], *, into: SketchState | None = None) -> SketchState:
    """Fold batches into an exact integer state: a new one, or ``into`` updated in place (and returned)."""
    mech = mechanism_of(params)
    for batch in batches:
        if batch.mechanism != mech.name:
            raise InvalidParameterError("batches", f"{mech.name} batches", batch.mechanism)
    if into is None:
        into = SketchState.empty(params)
    else:
        into.check(params)
    return mech.fold(params, batches, into)


def estimate(
    params: ParamsBase,
    state: SketchState,
    *,
    candidates: Sequence[object] | None = None,
    confidence: float = 0.95,
) -> Estimate:
    """Debiased counts, standard errors and intervals. Sketches need ``candidates``; the others ignore them."""
    return mechanism_of(params).estimate(params, state, candidates=candidates, confidence=confidence)


__all__ = [
    "Binary",
    "Bucketed",
    "Categorical",
    "CmsParams",
    "DailyMeanParams",
    "Discovering",
    "Estimate",
    "GrrParams",
    "HcmsParams",
    "HistogramParams",
    "Labelled",
    "MeanParams",
    "Mechanism",
    "Mergeable",
    "OnDevice",
    "OueCmsParams",
    "PemParams",
    "Permanent",
    "ReportBatch",
    "RrParams",
    "Sketch",
    "SketchState",
    "bucket_edges",
    "Summary",
    "estimate",
    "fold",
    "get_mechanism",
    "mechanism_by_code",
    "mechanism_names",
    "mechanism_of",
    "mechanisms",
    "privatize",
    "privatize_batch",
    "recommend_mechanism",
]
