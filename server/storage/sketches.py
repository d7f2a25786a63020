"""The sketch store: per-(metric, shard, version, UTC day) folded states in Redis, and how to read them.

Layout (all keys from :mod:`ldptel.storage.keys`, every key of one shard under one hash tag):

* ``sketch(metric, shard, version, day)``: :meth:`SketchState.to_bytes` of everything folded from that shard
  for that version and day;
* ``sketch_index(metric, shard)``: a set of ``"<version>:<day>"`` members naming the sketch keys that exist;
* ``checkpoint(metric, shard)``: the id of the last stream entry folded into the shard's sketches.

The three are only ever written together, in one MULTI/EXEC by the fold worker
(:mod:`ldptel.aggregator.worker`). Sketches are additive, so a query sums shards and days.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import redis as redis_lib

from ldptel.client import SketchState
from ldptel.client.errors import LdpError
from ldptel.client.mechanisms.state import STATE_HEADER_SIZE, row_counts_span
from ldptel.client.protocol.specs import Params
from ldptel.client.protocol.validate import check_day
from ldptel.storage import keys

StreamId = tuple[int, int]
ZERO_ID: StreamId = (0, 0)
_GET_CHUNK = 8  # sketch blobs per pipelined round trip (bounds memory: k=2048, m=1024 is 8 MB a blob)


class StoreError(LdpError):
    """Stored state is unreadable (a corrupt blob or an index naming a missing key)."""


# ---------------------------------------------------------------------------------------------- ids
def parse_id(value: bytes | str) -> StreamId:
    """A stream id ``"<ms>-<seq>"`` as a comparable tuple."""
    text = value.decode() if isinstance(value, bytes) else value
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def format_id(value: StreamId) -> str:
    return f"{value[0]}-{value[1]}"


def next_id(value: StreamId) -> StreamId:
    """The smallest id after ``value`` (for exclusive bounds such as XTRIM MINID)."""
    return value[0], value[1] + 1


# --------------------------------------------------------------------------------------------- days
def index_member(version: int, day: str) -> str:
    return f"{version}:{day}"


def parse_index_member(member: bytes | str) -> tuple[int, str]:
    text = member.decode() if isinstance(member, bytes) else member
    version, _, day = text.partition(":")
    return int(version), day


def cells(r: redis_lib.Redis, metric: str, shards: int) -> list[str]:
    """Every breakdown cell (other than "") that has a state in a shard or sealed, sorted."""
    pipe = r.pipeline(transaction=False)
    for shard in range(shards):
        pipe.smembers(keys.cells(metric, shard))
    found: set[str] = set()
    for members in pipe.execute():
        found |= {m.decode() if isinstance(m, bytes) else m for m in members}
    found |= {m.decode() if isinstance(m, bytes) else m for m in r.smembers(keys.sealed_cells(metric))}
    return sorted(found)


def read_checkpoint(r: redis_lib.Redis, metric: str, shard: int) -> StreamId:
    raw = r.get(keys.checkpoint(metric, shard))
    return parse_id(raw) if raw else ZERO_ID


def load_state(r: redis_lib.Redis, key: str, params: Params) -> SketchState | None:
    """The stored state at ``key``, or None when the key does not exist."""
    raw = r.get(key)
    if raw is None:
        return None
    if isinstance(raw, str):
        raise StoreError(f"sketch {key} was read as text: sketches need a client with decode_responses=False")
    try:
        return SketchState.from_bytes(raw, params)
    except (LdpError, ValueError) as exc:
        raise StoreError(f"sketch {key} is unreadable: {exc}") from None


def sketch_index(r: redis_lib.Redis, metric: str, shards: int, *, cell: str = "") -> dict[int, list[tuple[int, str]]]:
    """Per shard, the (version, day) pairs that have a sketch of breakdown ``cell`` (one pipelined SMEMBERS per shard)."""
    pipe = r.pipeline(transaction=False)
    for shard in range(shards):
        pipe.smembers(keys.sketch_index(metric, shard, cell))
    out: dict[int, list[tuple[int, str]]] = {}
    for shard, members in enumerate(pipe.execute()):
        out[shard] = sorted(parse_index_member(m) for m in members)
    return out


def available_days(r: redis_lib.Redis, metric: str, shards: int, *, version: int, cell: str = "") -> list[str]:
    """Sorted UTC days with reports of ``version`` (in breakdown ``cell``): a sketch in at least one shard, or sealed
    (:mod:`ldptel.storage.sealed`; also a sealed day whose own state retention dropped)."""
    days = {day for pairs in sketch_index(r, metric, shards, cell=cell).values() for v, day in pairs if v == version}
    for member in r.hkeys(keys.sealed_days(metric, cell)):  # read after the shards' index: see ldptel.storage.sealed
        v, day = parse_index_member(member)
        if v == version:
            days.add(day)
    return sorted(days)


def get_blobs(r: redis_lib.Redis, names: Sequence[str], *, chunk: int = _GET_CHUNK) -> Iterator[tuple[str, bytes | None]]:
    """(name, blob or None when missing) for every name, in order: pipelined GETs, ``chunk`` blobs per round trip
    (bounds memory: a k = 2048, m = 1024 state is up to 16 MiB). The one fetch loop of the sketch and sealed
    stores. A blob read as text (a client with ``decode_responses=True``) raises :class:`StoreError`."""
    for lo in range(0, len(names), chunk):
        part = names[lo : lo + chunk]
        pipe = r.pipeline(transaction=False)
        for name in part:
            pipe.get(name)
        for name, raw in zip(part, pipe.execute(), strict=True):
            if isinstance(raw, str):
                raise StoreError(f"sketch {name} was read as text: sketches need a client with decode_responses=False")
            yield name, raw


def add_blob(total: SketchState, name: str, raw: bytes, params: Params) -> None:
    """Add the serialized state ``raw`` (stored at ``name``) into ``total`` in place; a corrupt blob raises
    :class:`StoreError` naming the key."""
    try:
        total.add_bytes(raw, params)  # summed in place: no 16 MB temporary per day blob
    except (LdpError, ValueError) as exc:
        raise StoreError(f"sketch {name} is unreadable: {exc}") from None


def sum_sketches(
    r: redis_lib.Redis,
    metric: str,
    *,
    params: Params,
    pairs: Iterable[tuple[int, int, str]],
    cell: str = "",
) -> tuple[SketchState, int]:
    """Sum the sketches named by (shard, version, day) of breakdown ``cell`` (:func:`get_blobs`).

    Returns the total state and how many blobs were found. Missing keys count as empty.
    """
    total = SketchState.empty(params)
    found = 0
    names = [keys.sketch(metric, shard, version, day, cell) for shard, version, day in pairs]
    for name, raw in get_blobs(r, names):
        if raw is not None:
            add_blob(total, name, raw, params)
            found += 1
    return total, found


def day_reports(
    r: redis_lib.Redis, metric: str, *, params: Params, pairs: Iterable[tuple[int, int, str]], cell: str = ""
) -> dict[str, int]:
    """Reports per UTC day in the sketches named by (shard, version, day), read with two pipelined GETRANGEs
    per blob (its header, then its row counts), never the counts: cheap for a dashboard's list of metrics."""
    names = [(keys.sketch(metric, shard, version, day, cell), day) for shard, version, day in pairs]
    pipe = r.pipeline(transaction=False)
    for name, _day in names:
        pipe.getrange(name, 0, STATE_HEADER_SIZE - 1)
    spans = []
    for (name, day), head in zip(names, pipe.execute(), strict=True):
        if len(head) == STATE_HEADER_SIZE:  # a missing key reads as b""
            try:
                spans.append((name, day, *row_counts_span(head, params)))
            except (LdpError, ValueError) as exc:
                raise StoreError(f"sketch {name} is unreadable: {exc}") from None
    pipe = r.pipeline(transaction=False)
    for name, _day, start, stop, _dt in spans:
        pipe.getrange(name, start, stop - 1)
    out: dict[str, int] = {}
    for (_name, day, _start, _stop, dt), raw in zip(spans, pipe.execute(), strict=True):
        out[day] = out.get(day, 0) + int(np.frombuffer(raw, dtype=dt).sum())
    return dict(sorted(out.items()))


__all__ = [
    "StoreError",
    "StreamId",
    "ZERO_ID",
    "add_blob",
    "available_days",
    "cells",
    "check_day",
    "day_reports",
    "format_id",
    "get_blobs",
    "index_member",
    "load_state",
    "next_id",
    "parse_id",
    "parse_index_member",
    "read_checkpoint",
    "sketch_index",
    "sum_sketches",
]
