"""The :class:`Mechanism` contract, the report batch and the one codec of a report.

A mechanism is one module in this package that defines its params type, its typed batch and one
:class:`Mechanism` object (registered in :mod:`ldptel.client.mechanisms.registry`). Code outside the package
asks the object; it never branches on a mechanism's name.

The codec. A mechanism declares the columns of its reports (:meth:`Mechanism.columns`), each one of:

* ``index``: one unsigned little-endian integer per report (``size`` = 1 or 2 bytes), below ``bound``;
* ``bit``: one bit per report, packed MSB first over the batch, padding bits 0;
* ``bytes``: ``size`` raw bytes per report.

The columns are declared once and give every form of a report: the binary wire payload (its columns one after
another, each holding all n reports: :mod:`ldptel.client.protocol.wire`), the record of one queued report on
the device (the same columns side by side, each index as u16 and each bit as a 0/1 byte, a fixed width that
does not depend on the metric's size), and the JSON debugging form.
"""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, Generic, Literal, TypeVar

import numpy as np

from ldptel.client.errors import InvalidParameterError, WireFormatError
from ldptel.client.mechanisms.longitudinal import PermanentChannel
from ldptel.client.mechanisms.state import Estimate, SketchState
from ldptel.client.protocol.hashing import value_bytes
from ldptel.client.protocol.params import ParamsBase

Values = Sequence[object] | np.ndarray
Kind = Literal["frequencies", "summary", "histogram", "discovery"]  # what a mechanism's estimates are
KINDS: tuple[Kind, ...] = ("frequencies", "summary", "histogram", "discovery")


@dataclass(frozen=True, eq=False, kw_only=True)
class ReportBatch:
    """Privatized reports of one mechanism, in columns (each mechanism's batch type says which it has).

    rows: the sketch row j of each report, int64; cols: a column or label index per report, int64;
    bits: one bit per report packed MSB first, shape (ceil(n/8),), or a row of bits per report, shape
    (n, m/8), uint8. A mechanism's own batch type narrows the ones it has to non-optional arrays.
    """

    mechanism: str
    n: int
    rows: np.ndarray | None = None
    cols: np.ndarray | None = None
    bits: np.ndarray | None = None

    def bit_values(self) -> np.ndarray:
        """The n reported bits as uint8 0/1 (batches with one bit per report)."""
        if self.bits is None or self.bits.ndim != 1:
            raise InvalidParameterError("batch", "a batch with one bit per report", self.mechanism)
        return np.unpackbits(self.bits, count=self.n)


ColumnKind = Literal["index", "bit", "bytes"]


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a mechanism's reports: the batch attribute, its JSON key and its encoding."""

    attr: Literal["rows", "cols", "bits"]
    json: str
    kind: ColumnKind
    size: int = 1  # index: bytes per value (1 or 2); bytes: bytes per report; bit: unused
    bound: int = 2  # index: values are < bound
    what: str = ""  # index: how errors name it ("row index", "label index", ...)

    def nbytes(self, n: int) -> int:
        return (n + 7) // 8 if self.kind == "bit" else n * self.size

    @property
    def dtype(self) -> str:
        return "<u1" if self.size == 1 else "<u2"


P = TypeVar("P", bound=ParamsBase)
B = TypeVar("B", bound=ReportBatch)


@dataclass(frozen=True)
class PlanCandidate:
    """One params a plan compares (:meth:`Mechanism.plan_candidates`), with its sketch shape (k rows, m columns)
    when it has one."""

    params: ParamsBase
    k: int | None = None
    m: int | None = None


class Mechanism(ABC, Generic[P, B]):
    """Everything ldptel does with one mechanism, over its one frozen params type ``P`` and batch type ``B``.

    Client half: :meth:`privatize` (one value, one CSPRNG call), :meth:`privatize_batch` (vectorized, same
    distribution) and the longitudinal protection the SDK applies to repeated values: a per-day memo of the report
    keyed by :meth:`value_key` (or, for a :class:`~ldptel.client.mechanisms.capabilities.Permanent` mechanism,
    a permanent randomized response). Server half: :meth:`fold` into an exact integer :class:`SketchState`,
    :meth:`estimate` with :meth:`variance`. Both halves read the same params, so the debias constants cannot drift
    from the sampling probabilities.

    This is the core every mechanism has. What only some mechanisms can do is a capability type in
    :mod:`~ldptel.client.mechanisms.capabilities` (Mergeable, Permanent, Sketch, Labelled, Binary, Summary,
    Bucketed, Discovering), each with its methods and its math; :attr:`kind` names the kind of estimate.
    """

    name: ClassVar[str]
    code: ClassVar[int]  # the wire code: never reuse one
    params_type: ClassVar[type[ParamsBase]]
    batch_type: ClassVar[type[ReportBatch]]
    kind: ClassVar[Kind] = "frequencies"  # what its estimates are (:mod:`~ldptel.client.mechanisms.capabilities`)

    # ------------------------------------------------------------------------------------- client half
    @abstractmethod
    def privatize(self, value: object, params: P, *, rng: np.random.Generator | None = None) -> B:
        """One value privatized now (OS CSPRNG unless ``rng`` is given): a batch of one report."""

    @abstractmethod
    def privatize_batch(self, values: Values, params: P, *, rng: np.random.Generator | None = None) -> B:
        """Many values at once (vectorized; the same distribution as :meth:`privatize`)."""

    def value_key(self, value: object, params: P) -> bytes:
        """The canonical bytes of a value (checked for type), for keying its memoized or permanent report."""
        return value_bytes(value)

    def privatize_repeated(self, value: object, params: P, *, secret: bytes, metric: str, fingerprint: bytes) -> B | None:
        """A report of a value the device may report again, where the mechanism protects repeats itself (a
        :class:`~ldptel.client.mechanisms.capabilities.Permanent` response keyed by the device ``secret``, the
        ``metric`` and its privatization ``fingerprint``); None: the SDK memoizes the day's report instead."""
        return None

    def longitudinal_epsilon(self, params: P) -> float:
        """ε of any number of reports of one value (permanent: per privatization, ever, for the level: see
        :mod:`~ldptel.client.mechanisms.longitudinal`; memoized: per day)."""
        return params.effective_epsilon

    def permanent_channel(self, params: P) -> PermanentChannel | None:
        """The permanent randomized response's two stages (a :class:`~ldptel.client.mechanisms.capabilities.Permanent`
        mechanism's; None for any other): what
        :mod:`~ldptel.client.mechanisms.longitudinal` bounds and charges."""
        return None

    # ------------------------------------------------------------------------------------- server half
    @abstractmethod
    def state_shape(self, params: P) -> tuple[tuple[int, int], int]:
        """(shape of the state's ``counts``, length of its ``row_counts``)."""

    @abstractmethod
    def fold(self, params: P, batches: Sequence[B], state: SketchState) -> SketchState:
        """Add the reports of ``batches`` to ``state`` exactly (integers), in place; returns ``state``."""

    @abstractmethod
    def estimate(
        self, params: P, state: SketchState, *, candidates: Sequence[object] | None = None, confidence: float = 0.95
    ) -> Estimate:
        """Unbiased counts with standard errors (for candidate values where the mechanism is a sketch)."""

    @abstractmethod
    def variance(self, params: P, counts: np.ndarray, n: int) -> np.ndarray:
        """Variance of the estimated counts, plugging in ``counts`` (estimates) out of ``n`` reports."""

    def clips(self, value: object, params: P) -> bool:
        """Numeric metrics: the value lies outside the declared range (the SDK counts these on the device)."""
        return False

    def estimate_note(self, params: P) -> str:
        """What a reader of an estimate must know about the params (numeric metrics: the clipping range)."""
        return ""

    def plan_variants(self) -> tuple[dict[str, Any], ...]:
        """The params fields of each variant ``ldptel plan`` compares (one entry each, merged into the planned params;
        ``({},)``: the mechanism has one)."""
        return ({},)

    def shape(self, params: P) -> str:
        """The size of a metric's params in a few characters, for listings ("" when there is none)."""
        return ""

    def plan_candidates(self, epsilon: float, d: int, *, ks: Sequence[int], ms: Sequence[int]) -> tuple[PlanCandidate, ...]:
        """The params ``ldptel plan`` compares for a categorical metric of ``d`` values at ``epsilon`` (a sketch:
        one per (k, m) of ``ks`` × ``ms``; a declared domain: one over d labels). (): the mechanism cannot carry
        such a metric (numeric ones; a domain too large; rr when d ≠ 2)."""
        return ()

    def collision_variance(self, params: P, *, f2: float, counts: np.ndarray) -> np.ndarray:
        """The variance hash collisions add to the estimated counts ``counts`` when Σ f² over all values is ``f2``
        (zero but for sketches, which override it)."""
        return np.zeros(np.shape(counts), dtype=np.float64)

    @abstractmethod
    def params_schema(self) -> tuple[dict[str, Any], list[str]]:
        """(JSON schema of each params field but ``mechanism``, the required fields) for the OpenAPI document."""

    # ---------------------------------------------------------------------------------------- the codec
    @abstractmethod
    def columns(self, params: P) -> tuple[Column, ...]:
        """The columns of this mechanism's reports, in payload order."""

    def layout(self, params: P) -> Layout:
        """:meth:`columns` and the numpy record type of one stored report, computed once per params object.

        Cached by object identity (a weak reference), not by value: hashing a grr domain of 65,536 labels on
        every decode would cost more than the decode.
        """
        key = id(params)
        hit = _LAYOUTS.get(key)
        if hit is not None and hit[0]() is params:
            return hit[1]
        layout = _layout(self.columns(params))
        _LAYOUTS[key] = (weakref.ref(params, lambda _ref: _LAYOUTS.pop(key, None)), layout)
        return layout

    def payload_size(self, params: P, n: int) -> int:
        return _payload_size(self.layout(params).columns, n)

    def report_size(self, params: P) -> int:
        """Bytes of one stored report."""
        return int(self.layout(params).record.itemsize)

    def _make(self, n: int, arrays: dict[str, np.ndarray]) -> B:
        return self.batch_type(mechanism=self.name, n=n, **arrays)  # type: ignore[return-value]

    def encode_payload(self, batch: ReportBatch, params: P) -> list[bytes]:
        """The payload of ``batch`` as byte strings to concatenate (no validation: the wire decodes it back)."""
        parts = []
        for col in self.layout(params).columns:
            arr = getattr(batch, col.attr)
            if arr is None:
                raise WireFormatError(f"a {self.name} batch needs {col.attr!r}")
            if col.kind == "index":
                parts.append(np.asarray(arr).astype(col.dtype).tobytes())
            else:
                parts.append(np.ascontiguousarray(arr, dtype=np.uint8).tobytes())
        return parts

    def check_plausible(self, batch: B, params: P) -> None:
        """Raise :class:`WireFormatError` if a report of ``batch`` (already decoded, so well formed) is one an
        honest client produces with probability below
        :data:`~ldptel.client.protocol.params.PLAUSIBILITY_FALSE_REJECTION` (the ingest calls it on every
        batch, ldp-math §8.2). Default: every well-formed report is possible (rr, grr, hcms: any bit and any
        index in range occurs), so nothing more can be refused."""

    def decode_payload(self, buf: memoryview, n: int, params: P) -> B:
        """The reports of a payload, every column checked (exact length, index ranges, zero padding).

        Bit and byte columns are views of ``buf`` (no copy); raises WireFormatError for anything else.
        """
        columns = self.layout(params).columns
        expected = _payload_size(columns, n)
        if len(buf) != expected:
            raise WireFormatError(f"payload is {len(buf)} bytes; {n} {self.name} reports need exactly {expected}")
        arrays: dict[str, np.ndarray] = {}
        off = 0
        for col in columns:
            size = col.nbytes(n)
            part = buf[off : off + size]
            off += size
            if col.kind == "index":
                raw = np.frombuffer(part, dtype=col.dtype)
                top = int(raw.max())
                if top >= col.bound:
                    raise WireFormatError(f"{col.what} {top} out of range [0, {col.bound - 1}]")
                arrays[col.attr] = raw.astype(np.int64)
            elif col.kind == "bit":
                bits = np.frombuffer(part, dtype=np.uint8)
                spare = (-n) % 8
                if spare and int(bits[-1]) & ((1 << spare) - 1):
                    raise WireFormatError("padding bits after the last report must be 0")
                arrays[col.attr] = bits
            else:
                arrays[col.attr] = np.frombuffer(part, dtype=np.uint8).reshape(n, col.size)
        return self._make(n, arrays)

    def pack_report(self, batch: ReportBatch, params: P) -> bytes:
        """The stored record of a one-report batch (:attr:`Layout.record`)."""
        if batch.n != 1:
            raise InvalidParameterError("batch", "a batch of one report", f"{batch.n} reports")
        parts = []  # one report: Python ints and bytes are cheaper here than a numpy record (report()'s path)
        for col in self.layout(params).columns:
            arr = getattr(batch, col.attr)
            if arr is None:
                raise WireFormatError(f"a {self.name} batch needs {col.attr!r}")
            if col.kind == "index":
                parts.append(int(arr[0]).to_bytes(2, "little"))
            elif col.kind == "bit":
                parts.append(b"\x01" if int(arr[0]) & 0x80 else b"\x00")
            else:
                parts.append(arr[0].tobytes())
        return b"".join(parts)

    def unpack_reports(self, records: Sequence[bytes], params: P) -> B:
        """Many stored one-report records of one metric version as one batch (vectorized over reports)."""
        layout = self.layout(params)
        table = np.frombuffer(b"".join(records), dtype=layout.record)
        arrays: dict[str, np.ndarray] = {}
        for col in layout.columns:
            part = table[col.attr]
            if col.kind == "index":
                arrays[col.attr] = part.astype(np.int64)
            elif col.kind == "bit":
                arrays[col.attr] = np.packbits(part != 0)
            else:
                arrays[col.attr] = np.ascontiguousarray(part)
        return self._make(len(records), arrays)

    def reports_from_json(self, reports: list[Any], params: P) -> B:
        """The batch of a JSON ``reports`` list (debugging path; every value checked)."""
        cols = self.layout(params).columns
        n = len(reports)
        if len(cols) > 1 and not all(isinstance(r, dict) for r in reports):
            raise WireFormatError(f"{self.name} reports must be objects")
        arrays: dict[str, np.ndarray] = {}
        for col in cols:
            raw = reports if len(cols) == 1 else [r.get(col.json) for r in reports]
            if col.kind == "bytes":
                arrays[col.attr] = _hex_rows(raw, col)
                continue
            what = f"{self.name} reports" if len(cols) == 1 else f"{col.json!r} values"
            ints = _ints(raw, what, col.bound)
            arrays[col.attr] = np.packbits(ints.astype(np.uint8)) if col.kind == "bit" else ints
        return self._make(n, arrays)


@dataclass(frozen=True, slots=True)
class Layout:
    """A mechanism's columns for one params, and the numpy record type of one stored report.

    The record holds the columns side by side: an index as little-endian u16 (every bound is at most 2¹⁶),
    a bit as a 0/1 byte, bytes as they are. Its width depends only on the columns' kinds and byte sizes, so
    reports queued under one metric size stay readable after an upgrade (the device format of ldptel 0.1).
    """

    columns: tuple[Column, ...]
    record: np.dtype[np.void]


_LAYOUTS: dict[int, tuple[weakref.ref[ParamsBase], Layout]] = {}


def _payload_size(columns: tuple[Column, ...], n: int) -> int:
    return sum(c.nbytes(n) for c in columns)


@lru_cache(maxsize=256)
def _layout(columns: tuple[Column, ...]) -> Layout:
    """Keyed on the columns (a few small values), never on the params: a grr domain can hold 65,536 labels."""
    fields: list[tuple[str, str] | tuple[str, str, tuple[int]]] = []
    for col in columns:
        if col.kind == "index":
            fields.append((col.attr, "<u2"))
        elif col.kind == "bit":
            fields.append((col.attr, "u1"))
        else:
            fields.append((col.attr, "u1", (col.size,)))
    return Layout(columns, np.dtype(fields))


def reports_to_json(batch: ReportBatch) -> list[Any]:
    """The readable form of a batch's reports: plain integers for a one-column batch, else one object per
    report with the keys ``row``, ``col``, ``bit`` (one bit) or ``bits`` (hex), as the columns' JSON keys."""
    values: dict[str, list[Any]] = {}
    if batch.rows is not None:
        values["row"] = [int(v) for v in batch.rows]
    if batch.cols is not None:
        values["col"] = [int(v) for v in batch.cols]
    if batch.bits is not None and batch.bits.ndim == 1:
        values["bit"] = [int(v) for v in batch.bit_values()]
    elif batch.bits is not None:
        values["bits"] = [row.tobytes().hex() for row in batch.bits]
    if len(values) == 1:
        return next(iter(values.values()))
    return [dict(zip(values, report, strict=True)) for report in zip(*values.values(), strict=True)]


def _ints(values: Sequence[Any], what: str, hi: int) -> np.ndarray:
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < hi:
            raise WireFormatError(f"{what} must be integers in [0, {hi - 1}]")
    return np.asarray(values, dtype=np.int64)


def _hex_rows(values: Sequence[Any], col: Column) -> np.ndarray:
    out = np.zeros((len(values), col.size), dtype=np.uint8)
    message = f"{col.json!r} must be {2 * col.size} hex characters ({8 * col.size} bits)"
    for i, text in enumerate(values):
        if not isinstance(text, str) or len(text) != 2 * col.size:
            raise WireFormatError(message)
        try:
            out[i] = np.frombuffer(bytes.fromhex(text), dtype=np.uint8)
        except ValueError:
            raise WireFormatError(message) from None
    return out
