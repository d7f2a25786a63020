"""The midpoint mean of a numeric histogram: moved beside the ``Bucketed`` capability, to
:mod:`ldptel.client.mechanisms.bucketed` (this module re-exports its names for older imports)."""

from __future__ import annotations

from ldptel.client.mechanisms.bucketed import HistogramMean, histogram_mean

__all__ = ["HistogramMean", "histogram_mean"]
