"""Delegation: a mechanism whose reports, state and estimator are another mechanism's.

Some mechanisms reuse a registered mechanism's channel under their own name, wire code and batch type, over params
derived from their own: the α-rounded daily mean and the day's event count (through the bounded mean), the day's
event histogram (through the numeric histogram), unique devices (through binary randomized response). What they add
is on the device (what value is reported, when, how repeats are protected) and in the words around an estimate;
the privatization, the fold into an exact state and the debiasing are the inner mechanism's, unchanged. So the
debias constants are the inner mechanism's own and cannot drift from its sampling probabilities.

:class:`Delegating` owns that delegation once: a subclass names its :attr:`~Delegating.inner` mechanism, says how
its params map to the inner params (:meth:`~Delegating.inner_params`) and, where it accepts fewer values than the
inner mechanism, how one value is checked (:meth:`~Delegating.inner_value`). Batches and states cross between the
two names here (the columns are the same arrays; only the ``mechanism`` name differs). Capability methods (a
histogram's buckets, a permanent randomized response, a period on the device) stay in each mechanism, where the
capability type it subclasses asks for them.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Generic, TypeVar, cast

import numpy as np

from ldptel.client.mechanisms.base import B, Column, Mechanism, P, ReportBatch, Values
from ldptel.client.mechanisms.state import Estimate, SketchState
from ldptel.client.protocol.params import ParamsBase

IP = TypeVar("IP", bound=ParamsBase)
IB = TypeVar("IB", bound=ReportBatch)

__all__ = ["Delegating"]


class Delegating(Mechanism[P, B], Generic[P, B, IP, IB]):
    """A mechanism (params ``P``, batches ``B``) that privatizes, folds and estimates through :attr:`inner` (params
    ``IP``, batches ``IB``) under its own name (module docstring)."""

    inner: Mechanism[IP, IB]  # set by each subclass to the registered mechanism it reports through

    @abstractmethod
    def inner_params(self, params: P) -> IP:
        """The inner mechanism's params for ``params`` (a property of the params type, which validates them)."""

    def inner_value(self, value: object) -> object:
        """One value as the inner mechanism takes it, checked for what this mechanism accepts (default: as it is).
        :meth:`privatize`, :meth:`value_key` and :meth:`clips` apply it; :meth:`privatize_batch` (simulations) does
        not."""
        return value

    # ------------------------------------------------------------------- batches and states across the names
    def own_batch(self, batch: ReportBatch) -> B:
        """The inner mechanism's ``batch`` as this mechanism's (the same arrays)."""
        return cast(B, self.batch_type(mechanism=self.name, n=batch.n, rows=batch.rows, cols=batch.cols, bits=batch.bits))

    def inner_batch(self, batch: ReportBatch) -> IB:
        """This mechanism's ``batch`` as the inner mechanism's (the same arrays)."""
        inner = self.inner
        return cast(IB, inner.batch_type(mechanism=inner.name, n=batch.n, rows=batch.rows, cols=batch.cols, bits=batch.bits))

    def inner_state(self, state: SketchState) -> SketchState:
        """``state`` under the inner mechanism's name (the same arrays: what the inner fold adds lands in ``state``)."""
        return SketchState(self.inner.name, state.counts, state.row_counts)

    # ------------------------------------------------------------------------------------- client half
    def columns(self, params: P) -> tuple[Column, ...]:
        return self.inner.columns(self.inner_params(params))

    def privatize(self, value: object, params: P, *, rng: np.random.Generator | None = None) -> B:
        return self.own_batch(self.inner.privatize(self.inner_value(value), self.inner_params(params), rng=rng))

    def privatize_batch(self, values: Values, params: P, *, rng: np.random.Generator | None = None) -> B:
        return self.own_batch(self.inner.privatize_batch(values, self.inner_params(params), rng=rng))

    def value_key(self, value: object, params: P) -> bytes:
        return self.inner.value_key(self.inner_value(value), self.inner_params(params))

    def clips(self, value: object, params: P) -> bool:
        return self.inner.clips(self.inner_value(value), self.inner_params(params))

    # ------------------------------------------------------------------------------------- server half
    def state_shape(self, params: P) -> tuple[tuple[int, int], int]:
        return self.inner.state_shape(self.inner_params(params))

    def fold(self, params: P, batches: Sequence[B], state: SketchState) -> SketchState:
        self.inner.fold(self.inner_params(params), [self.inner_batch(b) for b in batches], self.inner_state(state))
        return state

    def estimate(
        self, params: P, state: SketchState, *, candidates: Sequence[object] | None = None, confidence: float = 0.95
    ) -> Estimate:
        """The inner estimate, named for this mechanism (after checking ``state`` is one of ``params``)."""
        state.check(params)
        est = self.inner.estimate(self.inner_params(params), self.inner_state(state), candidates=candidates,
                                  confidence=confidence)
        return Estimate(self.name, est.labels, est.counts, est.stderr, est.n, confidence)

    def variance(self, params: P, counts: np.ndarray, n: int) -> np.ndarray:
        return self.inner.variance(self.inner_params(params), counts, n)

    def check_plausible(self, batch: B, params: P) -> None:
        self.inner.check_plausible(self.inner_batch(batch), self.inner_params(params))
