"""Percentiles of a numeric histogram: moved beside the ``Bucketed`` capability, to
:mod:`ldptel.client.mechanisms.bucketed` (this module re-exports its names for older imports)."""

from __future__ import annotations

from ldptel.client.mechanisms.bucketed import (
    DEFAULT_PERCENTILES,
    MAX_SPAN,
    UNRESOLVED_NOTE,
    Percentile,
    bucket_edges,
    bucketed,
    check_percentiles,
    invert_cdf,
    isotonic,
    log_spaced,
    percentiles,
)

__all__ = ["DEFAULT_PERCENTILES", "MAX_SPAN", "UNRESOLVED_NOTE", "Percentile", "bucket_edges", "bucketed",
           "check_percentiles", "invert_cdf", "isotonic", "log_spaced", "percentiles"]
