"""The durable report queue: compact per-report payloads, batch formation with a stored batch id, acks.

A report is stored as the bytes of its privatized form only (never the value): the wire payload of a batch
of that one report (the mechanism's columns, :mod:`ldptel.client.mechanisms.base`), so forming a batch stacks
the stored records and re-lays them out column by column, vectorized.

Forming a batch is one transaction: take up to ``batch_size`` reports of one (metric, version, budget day)
in queue order (an offline backlog of several days becomes one batch per day, stored apart by the server, not
one entry that links the days), encode them with :func:`ldptel.client.protocol.wire.encode_batch` under a fresh random 16-byte batch id,
insert the batch row (id and exact body) and delete the reports. Retries resend the stored body, so the
batch id never changes and the server's dedupe counts it once.

Uploads (:func:`plan_uploads`): stored batches go out combined, up to ``max_parts`` batches and
``max_bytes`` bytes per request (:func:`ldptel.client.protocol.wire.encode_upload`), at most one batch per
metric in one upload (two parts of one metric would land side by side in that metric's stream), oldest
first. Each part keeps its own batch id, so a combined upload is stored as unrelated entries.
"""

from __future__ import annotations

import heapq
import itertools
import sqlite3
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import closing
from dataclasses import dataclass

from ldptel.client.mechanisms.base import ReportBatch
from ldptel.client.mechanisms.registry import mechanism_of
from ldptel.client.protocol.breakdown import encode_profile
from ldptel.client.protocol.rng import secure_token
from ldptel.client.protocol.specs import MetricSpec, Params
from ldptel.client.protocol.wire import encode_batch, upload_size


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


def enqueue(conn: sqlite3.Connection, metric: str, version: int, payload: bytes, *, day: int) -> None:
    """Queue a privatized report of budget ``day`` (batches never mix days: see :func:`form_batches`)."""
    conn.execute(
        "INSERT INTO reports(metric, version, day, payload) VALUES (?, ?, ?, ?)", (metric, version, day, payload))


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
    profile: Mapping[str, str] | None = None,
) -> FormResult:
    """Turn queued reports into batches of at most ``batch_size`` (partial ones only when ``partial``).

    ``day``: the UTC day now (stored with each batch: its retries are dropped after the retry horizon).
    ``profile``: the device's system profile; a batch of a breakdown metric carries its values of the metric's
    dimensions, each value the spec does not declare as ``other`` (:func:`~ldptel.client.protocol.breakdown.encode_profile`).
    One ``BEGIN IMMEDIATE`` transaction; on a ``synchronous=FULL`` connection its commit also makes every
    earlier commit durable, before anything is sent.

    Batches are formed group by group (metric, version, budget day) in that order, each group's reports in queue
    order. With ``partial`` every queued report goes into a batch (or is dropped as unencodable), so the queue is
    read once, sorted by group, and emptied at the end; otherwise only groups of at least ``batch_size`` reports
    are read, one full batch at a time. (The reports table has no index on the group: reading it per group scanned
    the whole queue for every group and batch, quadratic in a backlog of many metrics or days.)
    """
    formed = moved = dropped = 0
    conn.execute("BEGIN IMMEDIATE")
    try:
        if partial:
            last = -1  # the largest report id read
            with closing(conn.execute(
                    "SELECT metric, version, day, id, payload FROM reports ORDER BY metric, version, day, id")) as rows:
                for (metric, version, _report_day), group in itertools.groupby(rows, key=lambda r: r[:3]):
                    spec = spec_of(metric, version)
                    if spec is None:  # cannot be encoded (should not happen: specs are stored with their reports)
                        for row in group:
                            last = max(last, row[3])
                            dropped += 1
                            moved += 1
                        continue
                    while chunk := list(itertools.islice(group, batch_size)):
                        _insert_batch(conn, metric, version, [r[4] for r in chunk], spec, day, profile)
                        last = max(last, max(r[3] for r in chunk))
                        formed += 1
                        moved += len(chunk)
            # Every queued report was read above (this BEGIN IMMEDIATE transaction has no other writer): delete them.
            conn.execute("DELETE FROM reports WHERE id <= ?", (last,))
        else:
            groups = conn.execute(
                "SELECT metric, version, day, COUNT(*) FROM reports GROUP BY metric, version, day").fetchall()
            for metric, version, report_day, count in groups:
                if count < batch_size:
                    continue
                spec = spec_of(metric, version)
                if spec is None:  # cannot be encoded (should not happen: specs are stored with their reports)
                    conn.execute(
                        "DELETE FROM reports WHERE metric = ? AND version = ? AND day = ?", (metric, version, report_day))
                    dropped += count
                    moved += count
                    continue
                for _ in range(count // batch_size):
                    full = conn.execute(
                        "SELECT id, payload FROM reports WHERE metric = ? AND version = ? AND day = ? ORDER BY id LIMIT ?",
                        (metric, version, report_day, batch_size),
                    ).fetchall()
                    _insert_batch(conn, metric, version, [r[1] for r in full], spec, day, profile)
                    conn.execute(
                        "DELETE FROM reports WHERE metric = ? AND version = ? AND day = ? AND id <= ?",
                        (metric, version, report_day, full[-1][0]),
                    )
                    formed += 1
                    moved += len(full)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return FormResult(formed=formed, moved=moved, unencodable=dropped)


def _insert_batch(
    conn: sqlite3.Connection, metric: str, version: int, payloads: list[bytes], spec: MetricSpec, day: str,
    profile: Mapping[str, str] | None,
) -> None:
    """Store the reports ``payloads`` (queue order) as one batch under a fresh batch id (in the caller's transaction)."""
    batch = unpack_reports(payloads, spec.params)
    batch_id = secure_token(16)
    wire_profile = encode_profile(profile or {}, spec.breakdown, spec.profile_schema if spec.breakdown else None)
    body = encode_batch(metric=metric, version=version, batch_id=batch_id, batch=batch, params=spec.params,
                        profile=wire_profile)
    conn.execute(
        "INSERT INTO batches(batch_id, metric, version, n, body, formed_day) VALUES (?, ?, ?, ?, ?, ?)",
        (batch_id, metric, version, len(payloads), body, day),
    )


def plan_uploads(conn: sqlite3.Connection, *, max_parts: int, max_bytes: int) -> list[list[int]]:
    """The stored batches (row ids) grouped into uploads: each at most ``max_parts`` batches of distinct
    metrics and ``max_bytes`` bytes (a larger batch goes alone), oldest batch first. O(batches · log metrics)."""
    queues: dict[str, deque[tuple[int, int]]] = {}
    for row_id, metric, size in conn.execute("SELECT id, metric, length(body) FROM batches ORDER BY id"):
        queues.setdefault(metric, deque()).append((int(row_id), int(size)))
    heads = [(q[0][0], metric) for metric, q in queues.items()]
    heapq.heapify(heads)
    plans: list[list[int]] = []
    while heads:
        taken: list[int] = []
        sizes: list[int] = []
        skipped: list[tuple[int, str]] = []
        used: list[str] = []
        while heads and len(taken) < max_parts:
            head = heapq.heappop(heads)
            row_id, size = queues[head[1]][0]
            if taken and upload_size([*sizes, size]) > max_bytes:
                skipped.append(head)  # too big for this upload: next time
                continue
            taken.append(row_id)
            sizes.append(size)
            used.append(head[1])
        for metric in used:
            queue = queues[metric]
            queue.popleft()
            if queue:
                skipped.append((queue[0][0], metric))
        for head in skipped:
            heapq.heappush(heads, head)
        plans.append(taken)
    return plans


def load_batches(conn: sqlite3.Connection, ids: list[int]) -> list[StoredBatch]:
    """The stored batches with these row ids that are still there, in the order given."""
    marks = ",".join("?" * len(ids))
    rows = conn.execute(
        f"SELECT id, batch_id, metric, version, n, body, formed_day FROM batches WHERE id IN ({marks})", ids).fetchall()
    found = {row[0]: StoredBatch(*row) for row in rows}
    return [found[i] for i in ids if i in found]


def remove_batches(conn: sqlite3.Connection, batches: list[StoredBatch]) -> None:
    """The server acknowledged these batches (or refused them for good): forget them, in one transaction (one
    fsync on the upload connection, however many parts an upload had)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany("DELETE FROM batches WHERE id = ?", [(b.id,) for b in batches])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
