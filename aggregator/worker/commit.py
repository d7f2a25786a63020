"""The commit of one shard: sketches, index, checkpoint, folded count, dead letters and trim in one EXEC.

Exactly once. The in-memory state of a (version, day, breakdown cell) starts from what is stored. Every N entries or T
seconds the worker commits, per shard, in ONE MULTI/EXEC guarded by WATCH on the lease and the checkpoint:
the updated sketch blobs, the sketch index, the checkpoint (id of the last entry folded), the count of
entries folded (for the lag), dead letters and the retention trim. The worker reads the stream with XREAD
after its cursor, which starts at the committed checkpoint when it takes the shard: a crash before EXEC
applies nothing and the next owner reads the same entries again from the stored state; after EXEC they are
behind the checkpoint and never read again. So an entry is in the stored sketches exactly when its id is at
or below the checkpoint. The WATCH fences a worker that lost its lease (a long pause): its EXEC fails and it
drops the shard without writing. Reads write nothing, so a paused ex-owner that still reads changes nothing.

No consumer group: a group would record a delivery time for every entry and propagate every delivery to
the AOF and replicas as ``XCLAIM ... TIME <ms>``, a time tied to each batch. Nothing here carries a time.

Poison entries (missing fields, unknown version, failed decode) never stop the worker: they are copied to
the shard's dead-letter stream (:func:`~ldptel.storage.keys.dead_letters`) in the same commit, under an id
with the entry's own day (never Redis's clock). Folded entries are trimmed (XTRIM MINID, in the commit) once
older than ``retention_seconds``, counted in whole days (:func:`trim_below`).
"""

from __future__ import annotations

import logging
import time

import redis as redis_lib
from redis.typing import EncodableT

from ldptel.aggregator.worker.reading import CELL_FIELD, ENTRY_FIELDS
from ldptel.aggregator.worker.shard import OwnedShard
from ldptel.storage import keys
from ldptel.storage import sketches as store
from ldptel.storage.client import CLUSTER_REDIRECT_ERRORS, is_cluster, refresh_slot_map
from ldptel.storage.leases import LeaseLostError
from ldptel.storage.sketches import StreamId, format_id, index_member, next_id, parse_id

__all__ = ["DEAD_LETTER_MAXLEN", "commit", "trim_below"]

log = logging.getLogger(__name__)

DEAD_LETTER_MAXLEN = 10_000  # entries kept per shard's dead-letter stream (XADD MAXLEN)
COMMIT_ATTEMPTS = 8  # sends of one commit redirected by the cluster (MOVED/ASK/TRYAGAIN/CLUSTERDOWN) before it raises
REDIRECT_WAIT = 0.05  # seconds before the first resend (doubles, at most 0.5)


def commit(r: redis_lib.Redis, sh: OwnedShard, *, worker_id: str, retention_seconds: float) -> bool:
    """Write the shard's dirty sketches, checkpoint, folded count, dead letters and trim in one EXEC.

    Returns True when a transaction was executed, False when there was nothing to write (then only the trim
    of entries that aged out of the retention window runs). Raises :class:`LeaseLostError` when the shard is
    no longer leased to ``worker_id`` (nothing written).
    """
    if not sh.uncommitted:
        # Nothing new: still let folded entries age out of the retention window. Entries at or below the
        # committed checkpoint are folded, so trimming them needs no transaction.
        minid = trim_below(sh.checkpoint, retention_seconds=retention_seconds)
        if minid is not None:
            r.xtrim(sh.stream, minid=format_id(minid), approximate=False)
        sh.last_commit = time.monotonic()
        return False
    blobs = {key: sh.states[key].to_bytes() for key in sorted(sh.dirty)}
    wait = REDIRECT_WAIT
    for attempt in range(COMMIT_ATTEMPTS):
        try:
            _transaction(r, sh, worker_id=worker_id, retention_seconds=retention_seconds, blobs=blobs)
            break
        except CLUSTER_REDIRECT_ERRORS as exc:
            # Not executed (a redirect or refusal comes before EXEC applies anything): on a cluster the shard's
            # slot moved (failover, resharding) or is moving; refresh the slot map and send it again. On one
            # Redis a MOVED means the URL is a cluster node: a configuration error, raised.
            if not is_cluster(r) or attempt == COMMIT_ATTEMPTS - 1:
                raise
            log.info("commit redirected; retrying", extra={"event": "commit_redirect", "shard": sh.name,
                                                          "error": type(exc).__name__})
            refresh_slot_map(r, exc)
            time.sleep(wait)
            wait = min(wait * 2, 0.5)
    log.debug(
        "committed",
        extra={"event": "commit", "shard": sh.name, "checkpoint": format_id(sh.last_folded),
               "entries": sh.uncommitted, "sketches": len(blobs)},
    )
    sh.checkpoint = sh.last_folded
    # Keep only the states written now: an idle (version, day) is reloaded from the store if needed.
    sh.states = {key: sh.states[key] for key in sh.dirty}
    sh.dirty = set()
    sh.dead = []
    sh.uncommitted = 0
    sh.last_commit = time.monotonic()
    return True


def _transaction(r: redis_lib.Redis, sh: OwnedShard, *, worker_id: str, retention_seconds: float,
                 blobs: dict[tuple[int, str, str], bytes]) -> None:
    """The WATCH/MULTI/EXEC of :func:`commit` (one attempt)."""
    lease_key = keys.lease(sh.metric, sh.shard)
    ckpt_key = keys.checkpoint(sh.metric, sh.shard)
    try:
        with r.pipeline(transaction=True) as pipe:
            pipe.watch(lease_key, ckpt_key)  # type: ignore[no-untyped-call]
            owner = pipe.get(lease_key)
            stored = pipe.get(ckpt_key)
            if owner != worker_id.encode() or (parse_id(stored) if stored else store.ZERO_ID) != sh.checkpoint:
                pipe.unwatch()
                raise LeaseLostError(f"shard {sh.name} is no longer leased to {worker_id}")
            pipe.multi()
            for (version, day, cell), blob in blobs.items():
                pipe.set(keys.sketch(sh.metric, sh.shard, version, day, cell), blob)
            for cell in sorted({c for _, _, c in blobs}):  # one index per breakdown cell ("" without breakdown)
                pipe.sadd(keys.sketch_index(sh.metric, sh.shard, cell),
                          *(index_member(v, d) for v, d, c in blobs if c == cell))
                if cell:
                    pipe.sadd(keys.cells(sh.metric, sh.shard), cell)
            pipe.set(ckpt_key, format_id(sh.last_folded))
            pipe.incrby(keys.folded(sh.metric, sh.shard), sh.uncommitted)
            for eid, fields, reason in sh.dead:
                letter: dict[EncodableT, EncodableT] = {"id": eid, "error": reason[:500]}
                letter.update({k: v for k, v in fields.items() if k in ENTRY_FIELDS or k == CELL_FIELD})
                # the entry's own day (its id's ms), not Redis's clock ('*' would be the fold's time)
                pipe.xadd(keys.dead_letters(sh.metric, sh.shard), letter, id=f"{parse_id(eid)[0]}-*",
                          maxlen=DEAD_LETTER_MAXLEN)
            minid = trim_below(sh.last_folded, retention_seconds=retention_seconds)
            if minid is not None:
                pipe.xtrim(sh.stream, minid=format_id(minid), approximate=False)
            pipe.execute()
    except redis_lib.WatchError:
        raise LeaseLostError(f"shard {sh.name} changed hands during a commit") from None


def trim_below(folded: StreamId, *, retention_seconds: float) -> StreamId | None:
    """XTRIM MINID bound: every entry below it is folded and older than the retention window.

    Entry ids carry only the start of their UTC arrival day (the ingest never stores arrival times), so
    retention counts in whole days: an entry is kept until the day that contains now − retention has
    begun after its own day, i.e. at least ``retention_seconds`` and less than a day more.
    """
    if folded == store.ZERO_ID:
        return None
    limit = next_id(folded)
    if retention_seconds > 0:
        cutoff_s = time.time() - retention_seconds
        cutoff = (int(cutoff_s // 86400 * 86400 * 1000), 0)
        limit = min(limit, cutoff)
    return limit if limit > (0, 1) else None
