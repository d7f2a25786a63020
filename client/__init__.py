"""ldptel client: the LDP protocol (specs, mechanisms, hashing, wire format) and the SDK runtime.

Apps use :class:`Reporter`; everything else is the protocol it, the server and the aggregator share.

Depends on the standard library, numpy and mmh3 only.
"""

from __future__ import annotations

from .errors import (
    BudgetExceededError as BudgetExceededError,
    InvalidParameterError as InvalidParameterError,
    InvalidValueError as InvalidValueError,
    LdpError as LdpError,
    WireFormatError as WireFormatError,
)
from .mechanisms import (
    Estimate as Estimate,
    SketchState as SketchState,
    estimate as estimate,
    fold as fold,
    privatize as privatize,
    privatize_batch as privatize_batch,
    recommend_mechanism as recommend_mechanism,
)
from .specs import (
    CmsParams as CmsParams,
    GrrParams as GrrParams,
    HcmsParams as HcmsParams,
    MetricSpec as MetricSpec,
    OueCmsParams as OueCmsParams,
    RrParams as RrParams,
)
from .reporter import Reporter as Reporter, ReportResult as ReportResult
from .wire import ReportBatch as ReportBatch, decode_batch as decode_batch, encode_batch as encode_batch

__version__ = "0.1.0"

__all__ = [
    "BudgetExceededError",
    "CmsParams",
    "Estimate",
    "GrrParams",
    "HcmsParams",
    "InvalidParameterError",
    "InvalidValueError",
    "LdpError",
    "MetricSpec",
    "OueCmsParams",
    "ReportBatch",
    "ReportResult",
    "Reporter",
    "RrParams",
    "SketchState",
    "WireFormatError",
    "__version__",
    "decode_batch",
    "encode_batch",
    "estimate",
    "fold",
    "privatize",
    "privatize_batch",
    "recommend_mechanism",
]
