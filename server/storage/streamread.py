"""XREAD for the fold worker, with the reply parsed in place instead of by redis-py and hiredis.

A read of 1,000 cms entries is a ~130 MB reply. Through redis-py, every entry's batch bytes are copied twice on
the client: into hiredis's buffer, then into a ``bytes`` object. Here the reply is received into the buffer of
a raw connection (:mod:`ldptel.storage.connection`, shared with the ingest append) and walked in place: the
batch field (``b``) of each entry is a ``memoryview`` into that buffer, the other fields and the ids are small
``bytes``. Measured with ``tests/bench/bench_aggregate.py``, this made the prefetch thread, which had become
the fold's critical path, about twice as fast.

Plain XREAD from the worker's own cursor, not XREADGROUP: a consumer group stores a delivery time per entry
and propagates every delivery to the AOF and replicas as ``XCLAIM ... TIME <ms>``, a time tied to each batch.
XREAD writes nothing; the fold's position is its checkpoint (:mod:`ldptel.aggregator.worker.commit`).

The views are only valid inside :meth:`StreamReader.read`'s ``with`` block: the buffer is reused by the next
read on that connection. Any failure while reading (a timeout, a reply of an unexpected shape) disconnects
that connection, so no partial reply is ever read as the next one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ldptel.storage.connection import RawClient, RawConnection, UnexpectedReplyError, pack_command

__all__ = ["Entry", "StreamReader"]

Entry = tuple[bytes, dict[bytes, bytes | memoryview]]  # (id, fields)
_BIG_FIELDS = frozenset({b"b"})  # fields returned as views (the batch bytes); the rest are copied


class StreamReader(RawClient):
    """XREAD on raw connections of its own (thread-safe; up to ``MAX_IDLE`` idle connections kept)."""

    MAX_IDLE = 4
    BUFFER_BYTES = 1 << 20  # grows to the largest reply (~130 MB for 1,000 cms entries)

    @contextmanager
    def read(self, stream: str, after: str, *, count: int, block_ms: int | None = None) -> Iterator[list[Entry]]:
        """The entries of one XREAD after id ``after``; their ``b`` views are valid inside the ``with`` block only."""
        block = () if block_ms is None else ("BLOCK", block_ms)
        packed = pack_command("XREAD", "COUNT", count, *block, "STREAMS", stream, after)
        conn, entries = self._routed(stream, packed, _entries)  # on a cluster: where the stream's slot lives
        try:
            yield entries
        finally:
            self._checkin(conn)


def _entries(conn: RawConnection) -> list[Entry]:
    """Parse an XREAD reply of one stream: ``[[stream, [[id, [field, value, ...]], ...]]]``."""
    streams = conn.array()
    if streams <= 0:  # null (BLOCK timed out) or empty
        return []
    if streams != 1 or conn.array() != 2:
        raise UnexpectedReplyError("expected one stream in the XREAD reply")
    conn.bulk()  # the stream's name
    entries: list[Entry] = []
    for _ in range(conn.array()):
        if conn.array() != 2:
            raise UnexpectedReplyError("expected [id, fields] entries")
        eid = bytes(conn.bulk())
        pairs = conn.array()
        fields: dict[bytes, bytes | memoryview] = {}
        for _ in range(pairs // 2):
            name = bytes(conn.bulk())
            value = conn.bulk()
            fields[name] = value if name in _BIG_FIELDS else bytes(value)
        entries.append((eid, fields))
    return entries
