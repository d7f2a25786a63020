"""Types shared by every mechanism's server half: the exact folded state and the estimate."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from ldptel.client.errors import InvalidParameterError, InvalidValueError, StateMismatchError, WireFormatError
from ldptel.client.protocol.params import ParamsBase
from ldptel.client.protocol.validate import check_number

_STATE_MAGIC = b"LDPS"
# magic, format, mechanism code, dtype code of the counts, dtype code of the row counts (format 2; format 1 has a
# pad byte there and one dtype for both), rows, cols
_STATE_HEADER = struct.Struct("<4sBBBBII")
_DTYPES: dict[int, np.dtype[np.integer]] = {
    1: np.dtype("<i4"), 2: np.dtype("<i8"), 3: np.dtype("u1"), 4: np.dtype("<u2"), 5: np.dtype("<u4"),
    6: np.dtype("i1"), 7: np.dtype("<i2"),
}
# Narrowest first: a state is stored in the first width that holds every value (compact at rest, issue 26).
_WIDTHS = (3, 6, 4, 7, 5, 1, 2)


def _narrowest(a: np.ndarray) -> int:
    """The code of the narrowest stored dtype that holds every value of ``a``."""
    if a.size == 0:
        return 3
    lo, hi = int(a.min()), int(a.max())
    for code in _WIDTHS:
        info = np.iinfo(_DTYPES[code])
        if info.min <= lo and hi <= info.max:
            return code
    raise ValueError("sketch state values exceed 64 bits")


def _codes(fmt: int, code: int, row_code: int) -> tuple[int, int] | None:
    """(counts dtype code, row counts dtype code) of a header, None if invalid."""
    if fmt == 1 and code in (1, 2):
        return code, code
    if fmt == 2 and code in _DTYPES and row_code in _DTYPES:
        return code, row_code
    return None


def state_shape(params: ParamsBase) -> tuple[tuple[int, int], int]:
    """(shape of ``counts``, length of ``row_counts``) for a mechanism's exact integer state."""
    shape: tuple[tuple[int, int], int] = _mechanism_of()(params).state_shape(params)
    return shape


@lru_cache(maxsize=1)
def _mechanism_of() -> Callable[[object], Any]:
    """registry.mechanism_of, imported on first use (the registry imports this module); every Estimate asks."""
    from ldptel.client.mechanisms.registry import mechanism_of

    return mechanism_of


def _code(mechanism: str) -> int:
    from ldptel.client.mechanisms.registry import get_mechanism

    return get_mechanism(mechanism).code


@dataclass(eq=False)
class SketchState:
    """Exact integer fold of many reports; additive across shards, days and workers.

    counts: an integer matrix whose shape and meaning each mechanism defines (``Mechanism.state_shape``);
    row_counts: reports per sketch row, or one total for mechanisms without rows.
    """

    mechanism: str
    counts: np.ndarray
    row_counts: np.ndarray

    @classmethod
    def empty(cls, params: ParamsBase) -> SketchState:
        shape, rows = state_shape(params)
        return cls(params.mechanism, np.zeros(shape, np.int64), np.zeros(rows, np.int64))

    @property
    def n(self) -> int:
        rows = self.row_counts
        return sum(rows.tolist()) if rows.size <= 64 else int(rows.sum())  # a few rows: Python's sum is 10x faster

    def check(self, params: ParamsBase) -> None:
        shape, rows = state_shape(params)
        if self.mechanism != params.mechanism or self.counts.shape != shape or self.row_counts.shape != (rows,):
            raise StateMismatchError(
                f"state {self.mechanism} {self.counts.shape} does not match {params.mechanism} params {shape}"
            )

    def __add__(self, other: SketchState) -> SketchState:
        if self.mechanism != other.mechanism or self.counts.shape != other.counts.shape:
            raise StateMismatchError("cannot add sketch states of different mechanisms or shapes")
        return SketchState(self.mechanism, self.counts + other.counts, self.row_counts + other.row_counts)

    def add_inplace(self, other: SketchState) -> None:
        if self.mechanism != other.mechanism or self.counts.shape != other.counts.shape:
            raise StateMismatchError("cannot add sketch states of different mechanisms or shapes")
        self.counts += other.counts
        self.row_counts += other.row_counts

    def equals(self, other: SketchState) -> bool:
        return (
            self.mechanism == other.mechanism
            and np.array_equal(self.counts, other.counts)
            and np.array_equal(self.row_counts, other.row_counts)
        )

    # Serialization: header, then counts and row_counts little-endian, each in the narrowest integer width that
    # holds all of its values (u1 for most per-shard days of a sketch, i4/i8 only when needed). Format 1 (one
    # width, i4 or i8, for both) is still read.
    def to_bytes(self) -> bytes:
        code, row_code = _narrowest(self.counts), _narrowest(self.row_counts)
        rows, cols = self.counts.shape
        head = _STATE_HEADER.pack(_STATE_MAGIC, 2, _code(self.mechanism), code, row_code, rows, cols)
        return head + self.counts.astype(_DTYPES[code]).tobytes() + self.row_counts.astype(_DTYPES[row_code]).tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, params: ParamsBase) -> SketchState:
        counts, row_counts = _parse_state(data, params)
        return cls(params.mechanism, counts.astype(np.int64).reshape(counts.shape), row_counts.astype(np.int64))

    def add_bytes(self, data: bytes, params: ParamsBase) -> None:
        """Add a serialized state into this one without materialising it (queries sum many day blobs)."""
        self.check(params)
        counts, row_counts = _parse_state(data, params)
        np.add(self.counts, counts, out=self.counts)  # int32 → int64 cast inside the ufunc, no temporary
        np.add(self.row_counts, row_counts, out=self.row_counts)


def _parse_state(data: bytes, params: ParamsBase) -> tuple[np.ndarray, np.ndarray]:
    """Validated read-only views (counts, row_counts) of a serialized state, in its stored dtype."""
    shape, nrows = state_shape(params)
    if len(data) < _STATE_HEADER.size:
        raise WireFormatError("sketch state too short")
    magic, fmt, mech, code, row_code, rows, cols = _STATE_HEADER.unpack_from(data)
    codes = _codes(fmt, code, row_code)
    if magic != _STATE_MAGIC or codes is None:
        raise WireFormatError("not an ldptel sketch state (bad magic, format or dtype)")
    if mech != _code(params.mechanism) or (rows, cols) != shape:
        raise StateMismatchError(f"stored state {(rows, cols)} does not match {params.mechanism} {shape}")
    dt, row_dt = _DTYPES[codes[0]], _DTYPES[codes[1]]
    size = rows * cols
    if len(data) - _STATE_HEADER.size != size * dt.itemsize + nrows * row_dt.itemsize:
        raise WireFormatError("sketch state has the wrong length")
    counts = np.frombuffer(data, dtype=dt, count=size, offset=_STATE_HEADER.size)
    row_counts = np.frombuffer(data, dtype=row_dt, offset=_STATE_HEADER.size + size * dt.itemsize)
    return counts.reshape(shape), row_counts


STATE_HEADER_SIZE = _STATE_HEADER.size  # bytes before the counts of a serialized state


def row_counts_span(header: bytes, params: ParamsBase) -> tuple[int, int, np.dtype[np.integer]]:
    """Byte range [start, stop) and dtype of the row counts (their sum is n) in a serialized state that starts
    with ``header`` (its first :data:`STATE_HEADER_SIZE` bytes): n without reading the counts."""
    shape, nrows = state_shape(params)
    magic, fmt, mech, code, row_code, rows, cols = _STATE_HEADER.unpack_from(header)
    codes = _codes(fmt, code, row_code)
    if magic != _STATE_MAGIC or codes is None or mech != _code(params.mechanism) or (rows, cols) != shape:
        raise WireFormatError("not an ldptel sketch state of these params (bad magic, format, dtype, mechanism or shape)")
    row_dt = _DTYPES[codes[1]]
    start = _STATE_HEADER.size + rows * cols * _DTYPES[codes[0]].itemsize
    return start, start + nrows * row_dt.itemsize, row_dt


_Z_VALUES: dict[float, float] = {}  # confidence → z_value, for the few confidences in use (every Estimate asks)


def z_value(confidence: float) -> float:
    """The two-sided normal quantile of ``confidence`` ∈ (0, 1)."""
    z = _Z_VALUES.get(confidence) if type(confidence) is float else None  # only checked floats are kept
    if z is None:
        check_number("confidence", confidence, 0, 1, open_interval=True)
        z = NormalDist().inv_cdf(0.5 + confidence / 2)
        if type(confidence) is float and len(_Z_VALUES) < 256:
            _Z_VALUES[confidence] = z
    return z


EstimatorName = Literal["plain", "corrected"]
ESTIMATORS: tuple[EstimatorName, ...] = ("plain", "corrected")


@dataclass(frozen=True, eq=False)
class Estimate:
    """Count estimates with standard errors and normal-approximation intervals.

    ``counts`` may be negative or exceed n: they are the raw estimates. Post-processing is a separate, named
    step (``ldptel.aggregator.postprocess``) that keeps these beside its output.

    ``stderr`` means the same for every mechanism: the randomization standard deviation of the count
    estimate, i.e. its spread over the randomness of the reports (the privacy noise and, for sketches, which
    row each report picked), given the values of the devices that reported; for sketches it also includes
    the hash-collision term, the spread of a value's collision bias over the draw of the hash family. It does
    not include the sampling of those devices from a larger population.

    ``estimator``: ``"plain"`` is each mechanism's own unbiased estimator (for sketches Apple's count-mean
    sketch estimate); ``"corrected"`` is the collision-corrected least-squares estimate over a candidate list
    (``ldptel.aggregator.corrected``).
    """

    mechanism: str
    labels: tuple[str, ...]
    counts: np.ndarray
    stderr: np.ndarray
    n: int
    confidence: float = 0.95
    estimator: EstimatorName = "plain"

    def __post_init__(self) -> None:
        z_value(self.confidence)
        if self.estimator not in ESTIMATORS:
            raise InvalidParameterError("estimator", f"one of {list(ESTIMATORS)}", self.estimator)

    @property
    def z(self) -> float:
        return z_value(self.confidence)

    @property
    def ci_low(self) -> np.ndarray:
        return self.counts - self.z * self.stderr

    @property
    def ci_high(self) -> np.ndarray:
        return self.counts + self.z * self.stderr

    @property
    def frequencies(self) -> np.ndarray:
        return self.counts / self.n if self.n else np.full_like(self.counts, np.nan)

    def with_confidence(self, confidence: float) -> Estimate:
        z_value(confidence)
        return Estimate(self.mechanism, self.labels, self.counts, self.stderr, self.n, confidence, self.estimator)

    def rows(self) -> list[dict[str, Any]]:
        """One plain dict per label (for JSON/CSV output); ``estimator`` says which estimator made it."""
        lo, hi = self.ci_low, self.ci_high
        from ldptel.client.mechanisms.registry import get_mechanism  # the registry imports this module

        try:
            shares = get_mechanism(self.mechanism).kind != "summary" and self.n > 0
        except InvalidParameterError:  # an estimate built outside the registry (tests, tools): counts
            shares = self.n > 0
        return [
            {
                "value": label,
                "estimator": self.estimator,
                "estimate": float(self.counts[i]),
                "stderr": float(self.stderr[i]),
                "ci_low": float(lo[i]),
                "ci_high": float(hi[i]),
                "frequency": float(self.counts[i] / self.n) if shares else float("nan"),
            }
            for i, label in enumerate(self.labels)
        ]


DEFAULT_KEEP = 50  # discovery: candidates kept per round (ldp-math-2 §6 simulated 30 and 100)
DEFAULT_ALPHA = 0.05  # discovery: family-wise chance of reporting any value nobody holds


@dataclass(frozen=True, kw_only=True)
class DiscoveryStage:
    """One round of a discovery: the prefix length it estimated, how many candidates it examined, how many
    prefixes it kept for the next round and how many complete values it tested against the threshold."""

    round: int
    prefix_bytes: int
    examined: int
    kept: int
    tested: int


@dataclass(frozen=True, kw_only=True, eq=False)
class Discovery:
    """Values found without a candidate list (``Mechanism.discover``): ``estimate`` holds those whose estimate
    is at least ``threshold`` standard errors, ranked; ``alpha``: the family-wise error the threshold was
    derived from (None when it was given); ``bound``: how many values could have been tested."""

    estimate: Estimate
    threshold: float
    alpha: float | None
    keep: int
    bound: int
    stages: tuple[DiscoveryStage, ...]

    @property
    def tested(self) -> int:
        return sum(s.tested for s in self.stages)

    @property
    def examined(self) -> int:
        return sum(s.examined for s in self.stages)


def codes_for(values: Sequence[object] | np.ndarray) -> tuple[np.ndarray, list[object]]:
    """Map values to integer codes and their distinct values.

    The per-value work runs in C (``dict.fromkeys`` and ``map`` over a dict lookup); Python code runs once
    per *distinct* value only.
    """
    seq = values.tolist() if isinstance(values, np.ndarray) else values
    try:
        uniques = list(dict.fromkeys(seq))
    except TypeError:
        raise InvalidValueError("values must be hashable (str or bytes for sketches, bool for rr)") from None
    index = {v: i for i, v in enumerate(uniques)}
    codes = np.fromiter(map(index.__getitem__, seq), dtype=np.int64, count=len(seq))
    return codes, uniques


def labels_of(values: Iterable[object]) -> tuple[str, ...]:
    values = values if isinstance(values, (list, tuple)) else list(values)
    if set(map(type, values)) <= {str}:  # the usual candidate list: no per-value Python step (100,000: ~2 ms)
        return tuple(values)  # type: ignore[arg-type,unused-ignore]  # all str
    return tuple(v if isinstance(v, str) else v.hex() if isinstance(v, bytes) else str(v) for v in values)
