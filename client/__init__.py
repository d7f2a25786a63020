"""ldptel client: the LDP protocol (specs, mechanisms, hashing, wire format) and the SDK runtime.

Apps use :class:`Reporter`; everything else is the protocol it, the server and the aggregator share.

* :mod:`ldptel.client.protocol`: metric specs, the wire format, hashing and exact randomness;
* :mod:`ldptel.client.mechanisms`: one module per mechanism and their registry;
* :mod:`ldptel.client.sdk`: the runtime an app embeds (Reporter, queue, uploader, spec cache, ledger).

Depends on the standard library, numpy and mmh3 only. Names are imported on first use, so the server and
the aggregator can import the protocol without loading the SDK runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ldptel.client._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "BudgetExceededError": "ldptel.client.errors",
    "InvalidParameterError": "ldptel.client.errors",
    "InvalidTextError": "ldptel.client.errors",
    "InvalidValueError": "ldptel.client.errors",
    "LdpError": "ldptel.client.errors",
    "WireFormatError": "ldptel.client.errors",
    "Estimate": "ldptel.client.mechanisms",
    "SketchState": "ldptel.client.mechanisms",
    "estimate": "ldptel.client.mechanisms",
    "fold": "ldptel.client.mechanisms",
    "privatize": "ldptel.client.mechanisms",
    "privatize_batch": "ldptel.client.mechanisms",
    "recommend_mechanism": "ldptel.client.mechanisms",
    "CmsParams": "ldptel.client.mechanisms",
    "GrrParams": "ldptel.client.mechanisms",
    "HcmsParams": "ldptel.client.mechanisms",
    "MetricSpec": "ldptel.client.protocol.specs",
    "OueCmsParams": "ldptel.client.mechanisms",
    "PemParams": "ldptel.client.mechanisms",
    "RrParams": "ldptel.client.mechanisms",
    "ReportBatch": "ldptel.client.mechanisms",
    "decode_batch": "ldptel.client.protocol.wire",
    "encode_batch": "ldptel.client.protocol.wire",
    "PrivacyPolicy": "ldptel.client.sdk.policy",
    "Reporter": "ldptel.client.sdk.reporter",
    "ReportResult": "ldptel.client.sdk.reporter",
    "MeanParams": "ldptel.client.mechanisms",  # numeric metrics
    "HistogramParams": "ldptel.client.mechanisms",
    "bucket_edges": "ldptel.client.mechanisms",  # a histogram's edges from a range and a bucket count
    "DailyMeanParams": "ldptel.client.mechanisms",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:
    from ldptel.client.errors import (
        BudgetExceededError as BudgetExceededError,
    )
    from ldptel.client.errors import (
        InvalidParameterError as InvalidParameterError,
    )
    from ldptel.client.errors import (
        InvalidTextError as InvalidTextError,
    )
    from ldptel.client.errors import (
        InvalidValueError as InvalidValueError,
    )
    from ldptel.client.errors import (
        LdpError as LdpError,
    )
    from ldptel.client.errors import (
        WireFormatError as WireFormatError,
    )
    from ldptel.client.mechanisms import (
        CmsParams as CmsParams,
    )
    from ldptel.client.mechanisms import DailyMeanParams as DailyMeanParams
    from ldptel.client.mechanisms import (
        Estimate as Estimate,
    )
    from ldptel.client.mechanisms import (
        GrrParams as GrrParams,
    )
    from ldptel.client.mechanisms import (
        HcmsParams as HcmsParams,
    )
    from ldptel.client.mechanisms import HistogramParams as HistogramParams
    from ldptel.client.mechanisms import MeanParams as MeanParams
    from ldptel.client.mechanisms import (
        OueCmsParams as OueCmsParams,
    )
    from ldptel.client.mechanisms import (
        PemParams as PemParams,
    )
    from ldptel.client.mechanisms import (
        ReportBatch as ReportBatch,
    )
    from ldptel.client.mechanisms import (
        RrParams as RrParams,
    )
    from ldptel.client.mechanisms import (
        SketchState as SketchState,
    )
    from ldptel.client.mechanisms import bucket_edges as bucket_edges
    from ldptel.client.mechanisms import (
        estimate as estimate,
    )
    from ldptel.client.mechanisms import (
        fold as fold,
    )
    from ldptel.client.mechanisms import (
        privatize as privatize,
    )
    from ldptel.client.mechanisms import (
        privatize_batch as privatize_batch,
    )
    from ldptel.client.mechanisms import (
        recommend_mechanism as recommend_mechanism,
    )
    from ldptel.client.protocol.specs import MetricSpec as MetricSpec
    from ldptel.client.protocol.wire import decode_batch as decode_batch
    from ldptel.client.protocol.wire import encode_batch as encode_batch
    from ldptel.client.sdk.policy import PrivacyPolicy as PrivacyPolicy
    from ldptel.client.sdk.reporter import Reporter as Reporter
    from ldptel.client.sdk.reporter import ReportResult as ReportResult
