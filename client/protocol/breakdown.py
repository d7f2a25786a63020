"""Breakdowns by system profile: the profile schema, a metric's dimensions, and the cell of a batch.

A **profile schema** (one per registry) enumerates, per *dimension*, the values an operator wants to see:
``os ∈ {android, ios, web, …}``, ``app_version ∈ {declared release names}``, ``channel``. Every dimension has the
implicit value :data:`OTHER`. A metric declares the dimensions it is broken down by (``MetricSpec.breakdown``,
in order). A device states its profile once; each batch of a breakdown metric carries the profile's values of
the metric's dimensions, **in clear** (they are not privatized: see ``docs/breakdowns.md``).

A **cell** (one combination of values) is a string: ``dim=value`` pairs in the metric's declared order joined by
``,`` (``os=android,app_version=2.1``); the cell of a metric without breakdown is ``""``. Values outside the
schema become ``other`` (on the device and again on the server). The cell is part of every state's key
(:mod:`ldptel.storage.keys`), so it never contains ``:``, braces or spaces.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ldptel.client.errors import InvalidParameterError, WireFormatError

__all__ = [
    "DIMENSION_RE",
    "MAX_BYTES_PER_SHARD_DAY",
    "MAX_COMBINATIONS",
    "MAX_DIMENSIONS",
    "MAX_PROFILE_BYTES",
    "MAX_VALUES",
    "OTHER",
    "VALUE_RE",
    "ProfileSchema",
    "cell_for",
    "cell_of",
    "check_dimensions",
    "check_profile",
    "combinations",
    "encode_profile",
    "parse_cell",
    "parse_profile",
]

OTHER = "other"
DIMENSION_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")
DIMENSION_RULE = "1-32 characters of a-z, 0-9, '_', starting with a letter"
VALUE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,39}")
VALUE_RULE = "1-40 characters of A-Z, a-z, 0-9, '.', '_', '-', starting with a letter or digit"
MAX_DIMENSIONS = 4  # per metric
MAX_VALUES = 255  # per dimension, besides 'other'
MAX_COMBINATIONS = 1024  # per metric: ∏ (values + 1) over its dimensions (Cobalt's bound)
# Worst-case memory of one metric version's states per shard and day, before sealing: combinations × one
# state's counters × 4 bytes (the fold commits at most int32 for counts this size; k·m·4 for a sketch).
MAX_BYTES_PER_SHARD_DAY = 1 << 30
MAX_PROFILE_BYTES = 255  # the wire's u8 length


# ------------------------------------------------------------------------------------------------ schema
@dataclass(frozen=True)
class ProfileSchema:
    """The registry's enumeration of profile dimensions: name → declared values (``other`` is implicit)."""

    dimensions: Mapping[str, tuple[str, ...]]

    def __post_init__(self) -> None:
        if not isinstance(self.dimensions, Mapping):
            raise InvalidParameterError("profile", "a table of dimension = [values]", self.dimensions)
        clean: dict[str, tuple[str, ...]] = {}
        for dim, values in self.dimensions.items():
            if not isinstance(dim, str) or not DIMENSION_RE.fullmatch(dim):
                raise InvalidParameterError("profile dimension", DIMENSION_RULE, dim)
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                raise InvalidParameterError(f"profile.{dim}", "a list of values", values)
            seen: list[str] = []
            for value in values:
                if not isinstance(value, str) or not VALUE_RE.fullmatch(value):
                    raise InvalidParameterError(f"profile.{dim} value", VALUE_RULE, value)
                if value == OTHER:
                    continue  # implicit in every dimension
                if value in seen:
                    raise InvalidParameterError(f"profile.{dim}", "distinct values", value)
                seen.append(value)
            if len(seen) > MAX_VALUES:
                raise InvalidParameterError(f"profile.{dim}", f"at most {MAX_VALUES} values besides 'other'", len(seen))
            clean[dim] = tuple(seen)
        object.__setattr__(self, "dimensions", dict(sorted(clean.items())))

    def values(self, dim: str) -> tuple[str, ...]:
        """Every value of ``dim``, ``other`` last."""
        return (*self.dimensions[dim], OTHER)

    def canonical(self, dim: str, value: str) -> str:
        """``value`` if ``dim`` declares it, else ``other``."""
        return value if value in self.dimensions.get(dim, ()) else OTHER

    def to_dict(self) -> dict[str, list[str]]:
        return {dim: list(values) for dim, values in self.dimensions.items()}

    @classmethod
    def from_dict(cls, data: object) -> ProfileSchema:
        if not isinstance(data, dict):
            raise InvalidParameterError("profile", "a table of dimension = [values]", type(data).__name__)
        return cls(data)

    def restricted(self, dims: Sequence[str]) -> ProfileSchema:
        """The schema of ``dims`` only (what a device needs for one metric)."""
        return ProfileSchema({d: self.dimensions[d] for d in dims if d in self.dimensions})


def check_dimensions(dims: object) -> tuple[str, ...]:
    """A metric's ``breakdown``: distinct dimension names, at most :data:`MAX_DIMENSIONS`."""
    if isinstance(dims, (str, bytes)) or not isinstance(dims, (list, tuple)):
        raise InvalidParameterError("breakdown", "a list of profile dimension names", dims)
    out = tuple(dims)
    for dim in out:
        if not isinstance(dim, str) or not DIMENSION_RE.fullmatch(dim):
            raise InvalidParameterError("breakdown", f"dimension names of {DIMENSION_RULE}", dim)
    if len(set(out)) != len(out):
        raise InvalidParameterError("breakdown", "distinct dimension names", list(out))
    if len(out) > MAX_DIMENSIONS:
        raise InvalidParameterError("breakdown", f"at most {MAX_DIMENSIONS} dimensions", len(out))
    return out


def combinations(dims: Sequence[str], schema: ProfileSchema) -> int:
    """Cells a metric broken down by ``dims`` can have: ∏ (declared values + 1) (1 without breakdown)."""
    return math.prod(len(schema.dimensions.get(d, ())) + 1 for d in dims)


def check_breakdown(name: str, dims: Sequence[str], schema: ProfileSchema, state_counters: int) -> None:
    """Refuse a breakdown whose dimensions the schema does not declare, or beyond the caps (combinations, and
    worst-case bytes per shard-day = combinations × ``state_counters`` × 4)."""
    missing = [d for d in dims if d not in schema.dimensions]
    if missing:
        raise InvalidParameterError(
            "breakdown", f"{name}: dimensions of the profile schema {sorted(schema.dimensions)} "
            "(declare them first: [profile] in the metrics file, or `ldptel metrics profile --set DIM=V1,V2`)", missing)
    longest = sum(len(d) + 1 + max(len(v) for v in schema.values(d)) for d in dims) + len(dims) - 1
    if longest > MAX_PROFILE_BYTES:
        raise InvalidParameterError(
            "breakdown", f"{name}: dimension and value names whose longest profile fits {MAX_PROFILE_BYTES} bytes", longest)
    cells = combinations(dims, schema)
    if cells > MAX_COMBINATIONS:
        raise InvalidParameterError(
            "breakdown", f"{name}: at most {MAX_COMBINATIONS} combinations (∏ of values + 1 for 'other')", cells)
    worst = cells * state_counters * 4
    if worst > MAX_BYTES_PER_SHARD_DAY:
        raise InvalidParameterError(
            "breakdown",
            f"{name}: at most {MAX_BYTES_PER_SHARD_DAY >> 20} MiB of state per shard-day: combinations × counters × 4 bytes "
            f"= {cells} × {state_counters} × 4", f"{worst / (1 << 20):.0f} MiB")


# ----------------------------------------------------------------------------------------------- profiles
def check_profile(profile: object) -> dict[str, str]:
    """A device profile as the SDK takes it: ``{dimension: value}``; a value that is not a valid name (or is not
    text) becomes ``other`` rather than failing the app (a dimension name must be valid)."""
    if profile is None:
        return {}
    if not isinstance(profile, Mapping):
        raise InvalidParameterError("profile", "a mapping of dimension → value", type(profile).__name__)
    out: dict[str, str] = {}
    for dim, value in profile.items():
        if not isinstance(dim, str) or not DIMENSION_RE.fullmatch(dim):
            raise InvalidParameterError("profile dimension", DIMENSION_RULE, dim)
        out[dim] = value if isinstance(value, str) and VALUE_RE.fullmatch(value) else OTHER
    return out


def encode_profile(profile: Mapping[str, str], dims: Sequence[str], schema: ProfileSchema | None = None) -> bytes:
    """The wire bytes of a batch's profile: ``dims`` in order, each ``dim=value`` (``other`` when the profile
    lacks it or, given ``schema``, when the schema does not declare the value); b"" when ``dims`` is empty."""
    if not dims:
        return b""
    parts = []
    for dim in dims:
        value = profile.get(dim, OTHER)
        if schema is not None:
            value = schema.canonical(dim, value)
        parts.append(f"{dim}={value}")
    data = ",".join(parts).encode("ascii")
    if len(data) > MAX_PROFILE_BYTES:
        raise WireFormatError(f"profile is {len(data)} bytes; at most {MAX_PROFILE_BYTES}")
    return data


def parse_profile(data: bytes | str) -> list[tuple[str, str]]:
    """The (dimension, value) pairs of a wire profile, in order. Raises WireFormatError (never anything else)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            text = bytes(data).decode("ascii")
        except UnicodeDecodeError:
            raise WireFormatError("profile is not ASCII") from None
    else:
        text = data
    return list(_parse_text(text))


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> tuple[tuple[str, str], ...]:
    """:func:`parse_profile` of text (cached: a fleet sends few distinct profiles; an error is never cached)."""
    if not text:
        return ()
    pairs = []
    for part in text.split(","):
        dim, eq, value = part.partition("=")
        if not eq or not DIMENSION_RE.fullmatch(dim) or not VALUE_RE.fullmatch(value):
            raise WireFormatError(
                f"profile part {part[:60]!r} is not dimension=value ({DIMENSION_RULE}; values {VALUE_RULE})")
        pairs.append((dim, value))
    if len({d for d, _ in pairs}) != len(pairs):
        raise WireFormatError("profile names a dimension twice")
    return tuple(pairs)


def cell_of(profile: bytes | str | Mapping[str, str], dims: Sequence[str], schema: ProfileSchema) -> str:
    """The canonical cell of a batch of a metric broken down by ``dims``: every dimension in order, a value the
    schema does not declare (or a missing one) as ``other``. Raises WireFormatError when the profile names a
    dimension the metric does not declare (or is malformed)."""
    pairs = dict(profile.items()) if isinstance(profile, Mapping) else dict(parse_profile(profile))
    extra = [d for d in pairs if d not in dims]
    if extra:
        declared = ", ".join(dims) if dims else "none (the metric has no breakdown)"
        raise WireFormatError(f"profile dimension(s) {', '.join(extra)} not declared by the metric; declared: {declared}")
    return ",".join(f"{d}={schema.canonical(d, pairs.get(d, OTHER))}" for d in dims)


@functools.lru_cache(maxsize=4096)
def cell_for(profile: str, dims: tuple[str, ...], values: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    """:func:`cell_of` of a wire profile by a spec's ``breakdown`` and ``profile`` (cached: ingest computes it once per
    distinct (profile, spec), not per batch; an invalid profile raises every time, never cached)."""
    return cell_of(profile, dims, ProfileSchema(dict(values)))


def parse_cell(cell: str) -> dict[str, str]:
    """``{dimension: value}`` of a cell (``{}`` for ``""``)."""
    return dict(parse_profile(cell)) if cell else {}
