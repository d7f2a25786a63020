"""Reading a shard: XREAD after a cursor, decoding each entry, merging the batches of a read, and reading ahead.

:meth:`Reader.next_read` reads one batch of entries for an owned shard: the entries after its cursor, which
starts at the committed checkpoint when the worker takes the shard and moves with each read. No consumer
group: XREAD writes nothing (a group's deliveries would be logged to the AOF with a time each), and the
checkpoint, committed with the sketches, is all a new owner needs (:mod:`~ldptel.aggregator.worker.commit`).
Reads are large (``batch`` entries per XREAD, ~130 KB per cms entry) and go through
:class:`~ldptel.storage.streamread.StreamReader`, whose replies are parsed in place: an entry's batch bytes
are a view of the reader's buffer, valid only until its next read.

Each read is decoded, and its batches are merged per (version, day) into a buffer from :class:`BufferPool`, on
the prefetch thread: with ``prefetch``, the next read of a shard starts before the current one is folded, so
Redis I/O, reply parsing, decoding and the merge overlap the fold (numpy releases the GIL). Entries read
ahead count only once folded and committed (a read dropped with its shard is read again by the next owner).

An entry that cannot be folded (missing fields, unknown version, failed decode) is kept with the reason, for
its dead letter; it never stops the worker.
"""

from __future__ import annotations

import functools
import threading
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis as redis_lib

from ldptel.aggregator.worker.shard import OwnedShard
from ldptel.aggregator.worker.specs import MetricSpecs
from ldptel.client.errors import LdpError, WireFormatError
from ldptel.client.mechanisms import Mechanism, Mergeable, get_mechanism, mechanism_of
from ldptel.client.protocol.breakdown import parse_profile
from ldptel.client.protocol.wire import ReportBatch, decode_batch
from ldptel.storage import sketches as store
from ldptel.storage.streamread import StreamReader

__all__ = [
    "CELL_FIELD", "ENTRY_FIELDS", "BufferPool", "Read", "Reader", "StateKey", "UndecodableEntryError", "forget_prefetch",
]

class SealedDayError(LdpError):
    """A stream entry of a day that is already sealed (it goes to the dead letters, see ldptel.storage.sealed)."""


Decoded = tuple[int, str, ReportBatch] | str  # (version, day, batch), or why the entry goes to the dead letters
StateKey = tuple[int, str, str]  # (version, day, breakdown cell: "" without breakdown)
Merged = dict[StateKey, list[ReportBatch]]  # per (version, day, cell)
ENTRY_FIELDS = (b"d", b"v", b"n", b"b")  # a stream entry's fields: UTC day, version, report count, batch bytes
CELL_FIELD = b"c"  # optional: the batch's breakdown cell (absent: ""), ldptel.client.protocol.breakdown


class UndecodableEntryError(LdpError, ValueError):
    """A stream entry lacks a field or its fields disagree with its batch header (it is dead-lettered)."""


def _mergeable(mech: Mechanism[Any, Any]) -> Mergeable[Any, Any] | None:
    """The mechanism, if the fold merges a read's batches first (else None: its batches are folded as decoded)."""
    return mech if isinstance(mech, Mergeable) else None


def _merge_read(batches: list[ReportBatch], take: Callable[[int], np.ndarray]) -> ReportBatch | None:
    """The batches of one (version, day, cell) merged into one, its bits in ``take(size)``; None: not merged
    (the mechanism has no merge step: its batches are folded as decoded)."""
    mech = _mergeable(get_mechanism(batches[0].mechanism))
    if mech is None:
        return None
    merged: ReportBatch = mech.merge(batches, out=take(mech.merge_bytes(batches)))
    return merged


# ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Read:
    """One XREAD reply: its entries, each decoded (or the reason it goes to the dead letters), and the
    decoded batches merged per (version, day, cell)."""

    entries: list[tuple[bytes, dict[bytes, bytes]]]  # fields: {} if decoded, the entry's fields if not
    decoded: list[Decoded]
    merged: Merged
    buffers: list[np.ndarray]  # the memory of the merged bits, for BufferPool.give once folded


class BufferPool:
    """Free buffers for merged reads (~130 MB each at 1,000 entries of 1,000 cms reports, m = 1024).

    Reusing them instead of allocating per read saves faulting in fresh pages for every merge: measured
    ~30% of the merge's time. A buffer is taken by a read (on the prefetch thread) and given back after its
    fold, so at most one per shard read in flight plus the one being folded are out; ``MAX_FREE`` are kept.
    """

    MAX_FREE = 2

    def __init__(self) -> None:
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> np.ndarray:
        with self._lock:
            for i, buffer in enumerate(self._free):
                if buffer.size >= size:
                    return self._free.pop(i)
        return np.empty(size, dtype=np.uint8)

    def give(self, buffers: list[np.ndarray]) -> None:
        with self._lock:
            self._free.extend(buffers)
            self._free.sort(key=lambda b: -b.size)
            del self._free[self.MAX_FREE :]


class Reader:
    """Reads, decodes and merges the entries of owned shards (``decode_responses`` off: entries are binary)."""

    def __init__(self, r: redis_lib.Redis, specs: MetricSpecs, *, batch: int, prefetch: bool) -> None:
        # Stream reads move ~130 KB per entry: connections of their own whose replies are parsed in place.
        self._reads = StreamReader(r)
        self._buffers = BufferPool()
        self._specs = specs
        self._batch = batch
        self._prefetch = prefetch
        self._pool: ThreadPoolExecutor | None = None

    def next_read(self, sh: OwnedShard, *, block_ms: int | None) -> Read:
        """The shard's next read (the one read ahead if any), its cursor advanced. Give it back with :meth:`done`.

        ``block_ms``: wait that long for new entries (None: do not wait). With ``prefetch``, the next read of
        the shard is started before this one is returned.
        """
        if sh.prefetch is not None:
            read = sh.prefetch.result()
            sh.prefetch = None
        else:
            read = self._read(sh, sh.cursor, block_ms)
        if read.entries:
            sh.cursor = read.entries[-1][0].decode()
        sh.drained = not read.entries
        if read.entries and self._prefetch:
            sh.prefetch = self._executor().submit(self._read, sh, sh.cursor, None)
        return read

    def done(self, read: Read) -> None:
        """The read is folded: its merged bits are no longer needed."""
        self._buffers.give(read.buffers)

    def close(self) -> None:
        """Stop the prefetch thread and close the read connections."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._reads.close()

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ldptel-prefetch")
        return self._pool

    def _read(self, sh: OwnedShard, cursor: str, block_ms: int | None) -> Read:
        """One XREAD after ``cursor``, its entries decoded and their batches merged per (version, day, cell).

        Run on the prefetch thread, so decoding and the merge (one copy of every report's bits into one
        array, which the fold would otherwise make) overlap the fold of the previous read.
        """
        decoded: list[Decoded] = []
        groups: Merged = defaultdict(list)
        kept: list[tuple[bytes, dict[bytes, bytes]]] = []
        through = self._specs.sealed_through(sh.metric)
        with self._reads.read(sh.stream, cursor, count=self._batch, block_ms=block_ms) as entries:
            for eid, fields in entries:
                try:
                    version, day, batch = self._decode(sh.metric, fields)
                    cell = _cell(fields)
                    if through is not None and day <= through:  # never folded into a day that is sealed
                        raise SealedDayError(
                            f"day {day} is already sealed (through {through}): the entry arrived after the retry "
                            "horizon and the fold; kept here, not counted")
                except (LdpError, ValueError, KeyError) as exc:
                    decoded.append(f"{type(exc).__name__}: {exc}")
                    kept.append((eid, {k: bytes(v) for k, v in fields.items()}))  # for its dead letter
                    continue
                decoded.append((version, day, batch))
                groups[(version, day, cell)].append(batch)
                kept.append((eid, {}))
            # The batches are views into the reader's buffer until merged (_merge_read copies them).
            held: list[np.ndarray] = []

            def take(size: int) -> np.ndarray:
                buffer = self._buffers.take(size)
                held.append(buffer)
                return buffer

            merged: Merged = {}
            for key, batches in groups.items():
                whole = _merge_read(batches, take)
                merged[key] = batches if whole is None else [whole]
        return Read(entries=kept, decoded=decoded, merged=merged, buffers=held)

    def _decode(self, metric: str, fields: dict[bytes, bytes | memoryview]) -> tuple[int, str, ReportBatch]:
        missing = [name.decode() for name in ENTRY_FIELDS if name not in fields]
        if missing:
            raise UndecodableEntryError(f"entry lacks the field(s) {', '.join(missing)} (expected d, v, n, b)")
        version = int(fields[b"v"])
        day = store.check_day(str(fields[b"d"], "ascii"))
        n = int(fields[b"n"])
        params = self._specs.params(metric, version)
        data = fields[b"b"]
        if _mergeable(mechanism_of(params)) is None:
            data = bytes(data)  # kept as is by _merge_read: must not point into the reader's buffer
        header, batch = decode_batch(data, params)
        if header.metric != metric or header.version != version or header.n != n:
            raise UndecodableEntryError(
                f"entry fields (metric {metric!r}, v {version}, n {n}) disagree with its batch header "
                f"(metric {header.metric!r}, v {header.version}, n {header.n})"
            )
        return version, day, batch


@functools.lru_cache(maxsize=4096)
def _checked_cell(raw: bytes) -> str:
    try:
        parse_profile(raw)
    except WireFormatError as exc:
        raise UndecodableEntryError(f"entry field c is not a breakdown cell: {exc}") from None
    return raw.decode("ascii")


def _cell(fields: dict[bytes, bytes | memoryview]) -> str:
    """The entry's breakdown cell ("" when it has no field ``c``), checked (a malformed one is dead-lettered)."""
    raw = fields.get(CELL_FIELD)
    return "" if raw is None else _checked_cell(bytes(raw))


def forget_prefetch(sh: OwnedShard) -> None:
    """Wait for a read in flight and discard it: its entries are read again by whoever folds next."""
    if sh.prefetch is not None:
        future = sh.prefetch
        sh.prefetch = None
        try:
            future.result()
        except redis_lib.RedisError:
            pass
