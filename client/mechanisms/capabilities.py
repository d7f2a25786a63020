"""Capability types: what some mechanisms can do beyond the core :class:`~ldptel.client.mechanisms.base.Mechanism`.

A mechanism is the core plus the capabilities it subclasses; each capability holds its own methods (abstract where
a mechanism must supply them) and the math that goes with them. Code outside this package asks a capability with
``isinstance`` where it must (few places: the SDK's permanent response, the fold's merge, a query's candidates) and
otherwise reads :attr:`Mechanism.kind`, which the capability sets and which picks the result type and renderer.

=================  ====================================================================================  ============
capability         what it adds                                                                          kind
=================  ====================================================================================  ============
:class:`Permanent` repeated values go through a permanent randomized response (:meth:`privatize_permanent`)
:class:`Mergeable` the aggregator merges a read's batches (:meth:`merge`) before folding
:class:`Sketch`    estimates are asked for candidate values; hash collisions (the corrected estimator)
:class:`Labelled`  a declared domain: a query's candidates select its labels
:class:`Categorical` every label of a declared domain is estimated, with their covariance (:meth:`bucket_covariance`)
:class:`Binary`    one label's share is the answer (:attr:`proportion_of`, rr's ``true``)
:class:`Summary`   rows are numeric summaries (mean, sum, count), not counts of the reports                    summary
:class:`Bucketed`  rows count declared buckets of a number (:meth:`bucket_edges`, prefix sums, covariance)    histogram
:class:`Discovering` finds frequent values without candidates (:meth:`discover`)                          discovery
:class:`OnDevice`  the device aggregates ``Reporter.count()`` calls and reports once per period (:meth:`period_days`)
=================  ====================================================================================  ============

Invariant: a mechanism's :attr:`~Mechanism.kind` is the one its capabilities set ("frequencies" when none does), and
no code outside this package decides anything from a mechanism's name or params fields.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np

from ldptel.client.mechanisms.base import B, Kind, Mechanism, P
from ldptel.client.mechanisms.state import DEFAULT_ALPHA, DEFAULT_KEEP, Discovery, SketchState


class Permanent(Mechanism[P, B]):
    """Repeated values go through a permanent randomized response (RAPPOR's PRR) before each fresh report."""

    @abstractmethod
    def privatize_permanent(
        self, value: object, params: P, *, secret: bytes, metric: str, fingerprint: bytes,
        rng: np.random.Generator | None = None,
    ) -> B:
        """One report through the value's permanent randomized response, keyed by the device ``secret``, the
        ``metric`` and its privatization ``fingerprint``
        (:func:`~ldptel.client.protocol.keyed.privatization_fingerprint`)."""

    def privatize_repeated(self, value: object, params: P, *, secret: bytes, metric: str, fingerprint: bytes) -> B | None:
        return self.privatize_permanent(value, params, secret=secret, metric=metric, fingerprint=fingerprint)


class Mergeable(Mechanism[P, B]):
    """The aggregator merges a read's batches into one laid out for a faster :meth:`fold`."""

    @abstractmethod
    def merge(self, batches: Sequence[B], *, out: np.ndarray | None = None) -> B:
        """All reports of ``batches`` as one batch; ``out``: a 1-D uint8 buffer of at least :meth:`merge_bytes`
        bytes that the merged bits are written into (a caller reuses one across reads)."""

    @abstractmethod
    def merge_bytes(self, batches: Sequence[B]) -> int:
        """Bytes of ``out`` that :meth:`merge` needs for ``batches``."""


class Sketch(Mechanism[P, B]):
    """A sketch: it keeps no list of its values, so estimates are asked for candidate values, and hash collisions
    add to each (the corrected estimator of :mod:`ldptel.aggregator.corrected` removes them)."""


class Labelled(Mechanism[P, B]):
    """A declared domain of labels: a query's candidates select labels of it (every label by default)."""


class Binary(Mechanism[P, B]):
    """Two labels; the share of :attr:`proportion_of` is the answer a query reports beside the counts."""

    proportion_of: ClassVar[str]


SUMMARY_LABELS = ("mean", "sum", "count")  # the rows of a Summary mechanism's estimate, in order


class Summary(Mechanism[P, B]):
    """Numeric summaries: estimate rows are a mean, a sum and a count (:data:`SUMMARY_LABELS`), not counts of the
    n reports (so no shares, no post-processing)."""

    kind: ClassVar[Kind] = "summary"


class Categorical(Mechanism[P, B]):
    """The estimate covers every label of a declared domain (rr's two, grr's labels, a histogram's buckets), so
    its rows have a joint covariance (χ² tests over the whole domain use it)."""

    @abstractmethod
    def bucket_covariance(self, params: P, counts: np.ndarray, n: int) -> np.ndarray:
        """The d × d covariance of the raw estimates of every label, with ``counts`` as the true counts."""


class Bucketed(Categorical[P, B]):
    """A numeric histogram: rows count the reports in declared buckets, in order (percentiles and a midpoint mean
    apply: :mod:`ldptel.client.mechanisms.bucketed`)."""

    kind: ClassVar[Kind] = "histogram"

    @abstractmethod
    def bucket_edges(self, params: P) -> np.ndarray:
        """The d + 1 edges of the buckets its estimate counts."""

    @abstractmethod
    def prefix_sums(self, params: P, counts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(S_J, Var S_J), J = 0..d, the estimated count below edge J from raw ``counts``."""



class Discovering(Mechanism[P, B]):
    """Finds frequent values without a candidate list."""

    kind: ClassVar[Kind] = "discovery"

    @abstractmethod
    def discover(
        self,
        params: P,
        state: SketchState,
        *,
        keep: int = DEFAULT_KEEP,
        threshold: float | None = None,
        alpha: float = DEFAULT_ALPHA,
        confidence: float = 0.95,
        progress: Callable[[int, int], None] | None = None,
    ) -> Discovery:
        """Frequent values found without candidates, with estimates: ``keep`` candidates per round, reported above
        ``threshold`` standard errors (default: from ``alpha``)."""


class OnDevice(Mechanism[P, B]):
    """On-device aggregation: the app calls ``Reporter.count(metric)``; the device keeps per-UTC-day counts locally
    (:mod:`ldptel.client.sdk.tally`) and, once a period of :meth:`period_days` days has ended, reports one value
    for it (:meth:`period_value`) during the next period. Reports received on the days of period p + 1 describe
    period p: :meth:`reported_days` maps asked days to the days their reports arrive on, :meth:`described_days`
    back."""

    @abstractmethod
    def period_days(self, params: P) -> int:
        """Days per reporting period (periods are aligned on day 0 = 1970-01-01 UTC: period p is days
        [p·W, p·W + W − 1])."""

    @abstractmethod
    def period_value(self, params: P, counts: Sequence[int]) -> object:
        """The value reported for one period from the count of each of its days (oldest first)."""

    def reported_days(self, params: P, first: int, last: int) -> tuple[int, int]:
        """The days (UTC day numbers) on which the reports of the periods covering days [first, last] arrive."""
        w = self.period_days(params)
        return (first // w + 1) * w, (last // w + 2) * w - 1

    def described_days(self, params: P, first: int, last: int) -> tuple[int, int]:
        """The days whose periods the reports received on days [first, last] describe."""
        w = self.period_days(params)
        return (first // w - 1) * w, (last // w) * w - 1


# ------------------------------------------------------------------------ what a query asks of a capability
CandidateRole = Literal["required", "labels", "none"]
C = TypeVar("C", bound=Mechanism[Any, Any])


def candidate_role(mechanism: Mechanism[Any, Any]) -> CandidateRole:
    """What a query's candidates are to a mechanism: required values (a :class:`Sketch` keeps no list of its
    values), labels to show (:class:`Labelled`; default all), or nothing (ignored)."""
    return "required" if isinstance(mechanism, Sketch) else "labels" if isinstance(mechanism, Labelled) else "none"


def proportion_label(mechanism: Mechanism[Any, Any]) -> str | None:
    """The label whose share a query reports as the answer (:class:`Binary`), or None."""
    return mechanism.proportion_of if isinstance(mechanism, Binary) else None


def on_device(mechanism: Mechanism[Any, Any]) -> OnDevice[Any, Any] | None:
    """The mechanism as :class:`OnDevice` when the device aggregates it (``Reporter.count()``), else None."""
    return mechanism if isinstance(mechanism, OnDevice) else None


def require(mechanism: Mechanism[Any, Any], capability: type[C], what: str) -> C:
    """``mechanism`` as a ``capability`` (InvalidParameterError naming ``what`` is needed and the mechanisms
    that have it, for any other)."""
    if not isinstance(mechanism, capability):
        from ldptel.client.errors import InvalidParameterError
        from ldptel.client.mechanisms.registry import mechanism_names  # the registry imports this module

        allowed = ", ".join(mechanism_names(having=capability))
        raise InvalidParameterError("metric", f"{what} ({allowed})", mechanism.name)
    return mechanism


CAPABILITIES: tuple[type[Mechanism[Any, Any]], ...] = (
    Permanent, Mergeable, Sketch, Labelled, Binary, Summary, Categorical, Bucketed, Discovering, OnDevice,
)

__all__ = [
    "CAPABILITIES", "SUMMARY_LABELS", "Binary", "Bucketed", "CandidateRole", "Categorical", "Discovering", "Labelled", "Mergeable", "OnDevice", "Permanent",
    "Sketch",
    "Summary", "candidate_role", "on_device", "proportion_label",
    "require",
]
