"""The durable report queue: compact per-report payloads, batch formation with a stored batch id, acks.

A report is stored as the bytes of its privatized form only (never the value): the wire payload of a batch
of that one report (the mechanism's columns, :mod:`ldptel.client.mechanisms.base`), so forming a batch stacks
the stored records and re-lays them out column by column, vectorized.

Forming a batch is one transaction: take up to ``batch_size`` reports of one (metric, version) in queue
order, encode them with :func:`ldptel.client.protocol.wire.encode_batch` under a fresh random 16-byte batch id,
insert the batch row (id and exact body) and delete the reports. Retries resend the stored body, so the
batch id never changes and the server's dedupe counts it once.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from ldptel.client.mechanisms.base import ReportBatch
from ldptel.client.mechanisms.registry import mechanism_of
from ldptel.client.protocol.rng import secure_token
from ldptel.client.protocol.specs import MetricSpec, Params
from ldptel.client.protocol.wire import encode_batch


# ------------------------------------------------------------------------------------------- payloads
def pack_report(batch: ReportBatch, params: Params) -> bytes:
    """The stored bytes of a one-report batch: the wire payload of a batch of one (one codec for both)."""
    return mechanism_of(params).pack_report(batch, params)


def unpack_reports(payloads: list[bytes], params: Params) -> ReportBatch:
    """Many stored reports of one metric version as one batch (vectorized)."""
    batch: ReportBatch = mechanism_of(params).unpack_reports(payloads, params)
    return batch


def payload_size(params: Params) -> int:
    """Bytes of one stored report."""
    return mechanism_of(params).report_size(params)


# ------------------------------------------------------------------------------------------- the queue
@dataclass(frozen=True, slots=True)
class StoredBatch:
    id: int
    batch_id: bytes
    metric: str
    version: int
    n: int
    body: bytes
    formed_day: str | None  # UTC day the batch was formed (None: formed by an SDK before the retry horizon)


def enqueue(conn: sqlite3.Connection, metric: str, version: int, payload: bytes) -> None:
    conn.execute("INSERT INTO reports(metric, version, payload) VALUES (?, ?, ?)", (metric, version, payload))


def pending_count(conn: sqlite3.Connection) -> int:
    """Reports not yet acknowledged: queued ones plus the ones in formed batches."""
    queued = conn.execute("SELECT COUNT(*) FROM reports").fetchone()[0]
    batched = conn.execute("SELECT COALESCE(SUM(n), 0) FROM batches").fetchone()[0]
    return int(queued) + int(batched)


def unbatched_count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM reports").fetchone()[0])


@dataclass(frozen=True, slots=True)
class FormResult:
    formed: int  # batches formed
    moved: int  # reports moved from the queue into batches, or dropped as unencodable
    unencodable: int  # reports dropped because no spec of their version is known


def form_batches(
    conn: sqlite3.Connection,
    *,
    batch_size: int,
    partial: bool,
    spec_of: Callable[[str, int], MetricSpec | None],
    day: str,
) -> FormResult:
    """Turn queued reports into batches of at most ``batch_size`` (partial ones only when ``partial``).

    ``day``: the UTC day now (stored with each batch: its retries are dropped after the retry horizon).
    One ``BEGIN IMMEDIATE`` transaction; on a ``synchronous=FULL`` connection its commit also makes every
    earlier commit durable, before anything is sent.
    """
    formed = moved = dropped = 0
    conn.execute("BEGIN IMMEDIATE")
    try:
        groups = conn.execute("SELECT metric, version, COUNT(*) FROM reports GROUP BY metric, version").fetchall()
        for metric, version, count in groups:
            if count < batch_size and not partial:
                continue
            spec = spec_of(metric, version)
            if spec is None:  # cannot be encoded (should not happen: specs are stored with their reports)
                conn.execute("DELETE FROM reports WHERE metric = ? AND version = ?", (metric, version))
                dropped += count
                moved += count
                continue
            while True:
                rows = conn.execute(
                    "SELECT id, payload FROM reports WHERE metric = ? AND version = ? ORDER BY id LIMIT ?",
                    (metric, version, batch_size),
                ).fetchall()
                if not rows or (len(rows) < batch_size and not partial):
                    break
                batch = unpack_reports([r[1] for r in rows], spec.params)
                batch_id = secure_token(16)
                body = encode_batch(metric=metric, version=version, batch_id=batch_id, batch=batch, params=spec.params)
                conn.execute(
                    "INSERT INTO batches(batch_id, metric, version, n, body, formed_day) VALUES (?, ?, ?, ?, ?, ?)",
                    (batch_id, metric, version, len(rows), body, day),
                )
                conn.execute(
                    "DELETE FROM reports WHERE metric = ? AND version = ? AND id <= ?", (metric, version, rows[-1][0])
                )
                formed += 1
                moved += len(rows)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return FormResult(formed=formed, moved=moved, unencodable=dropped)


def next_batch(conn: sqlite3.Connection, after_id: int = 0) -> StoredBatch | None:
    row = conn.execute(
        "SELECT id, batch_id, metric, version, n, body, formed_day FROM batches WHERE id > ? ORDER BY id LIMIT 1",
        (after_id,),
    ).fetchone()
    return None if row is None else StoredBatch(*row)


def remove_batch(conn: sqlite3.Connection, batch: StoredBatch) -> None:
    """The server acknowledged the batch (or refused it for good): forget it."""
    conn.execute("DELETE FROM batches WHERE id = ?", (batch.id,))
