"""The commit of one shard: sketches, index, checkpoint, dead letters, acknowledgements and trim in one EXEC.

Exactly once. The in-memory state of a (version, day) starts from what is stored. Every N entries or T
seconds the worker commits, per shard, in ONE MULTI/EXEC guarded by WATCH on the lease and the checkpoint:
the updated sketch blobs, the sketch index, the checkpoint (id of the last entry folded), dead letters,
the XACK of every folded id and the retention trim. A crash before EXEC applies nothing (the entries stay
pending and are refolded from the stored state); after EXEC they are acknowledged. So an entry is pending
exactly when it is not in the stored sketches, and the pending list is always folded. The group itself never
delivers an entry twice: it is created at the checkpoint, and moved forward to it if found behind (an
operator's XGROUP SETID, see :mod:`~ldptel.aggregator.worker.groups`); a new entry at or below the last folded
id is skipped all the same. The WATCH fences a worker that lost its lease (a long pause): its EXEC fails and it
drops the shard without writing.

A worker only reads a shard while its lease is certainly valid (renewed less than half a TTL ago). If an
ex-owner still reads after a pause past that check, its entries land in the shared pending list behind the
new owner; the new owner's next commit counts more pending entries than it has in flight, skips the trim
and re-reads the pending list, so they are folded once, a commit later.

Poison entries (missing fields, unknown version, failed decode) never stop the worker: they are copied to
the shard's dead-letter stream (:func:`~ldptel.storage.keys.dead_letters`) in the same commit and
acknowledged. Folded entries are trimmed (XTRIM MINID, in the commit) once older than ``retention_seconds``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import redis as redis_lib
from redis.typing import EncodableT

from ldptel.aggregator.worker.reading import ENTRY_FIELDS, forget_prefetch, prefetched_entries
from ldptel.aggregator.worker.shard import CONSUMER, OwnedShard
from ldptel.storage import keys
from ldptel.storage import sketches as store
from ldptel.storage.leases import LeaseLostError
from ldptel.storage.sketches import StreamId, format_id, index_member, next_id, parse_id

__all__ = ["DEAD_LETTER_MAXLEN", "commit", "trim_below"]

log = logging.getLogger(__name__)

DEAD_LETTER_MAXLEN = 10_000  # entries kept per shard's dead-letter stream (XADD MAXLEN)
_ACK_CHUNK = 10_000  # ids per XACK


def commit(r: redis_lib.Redis, sh: OwnedShard, *, worker_id: str, retention_seconds: float) -> bool:
    """Write the shard's dirty sketches, checkpoint, index, dead letters, XACK and trim in one EXEC.

    Returns True when a transaction was executed, False when there was nothing to write (then only the trim
    of entries that aged out of the retention window runs). Raises :class:`LeaseLostError` when the shard is
    no longer leased to ``worker_id`` (nothing written).

    Each commit also counts the group's pending entries. After it, the only ones left should be those of
    the read in flight; any more were read by someone else (a former owner that lost its lease while
    paused). Then the trim is skipped and the shard re-reads its pending list next, so those entries
    are folded, not lost.
    """
    prefetched = prefetched_entries(sh)
    if not sh.to_ack and not sh.dirty and not sh.dead:
        # Nothing new: still let folded entries age out of the retention window. Entries at or below
        # the committed checkpoint are acknowledged, so trimming them needs no transaction.
        strays = _our_pending(sh, r.xpending(sh.stream, keys.CONSUMER_GROUP)) > prefetched
        minid = None if strays or sh.cursor != ">" else trim_below(sh.checkpoint, retention_seconds=retention_seconds)
        if minid is not None:
            r.xtrim(sh.stream, minid=format_id(minid), approximate=False)
        sh.last_commit = time.monotonic()
        _rescan_if(sh, strays, prefetched)
        return False
    lease_key = keys.lease(sh.metric, sh.shard)
    ckpt_key = keys.checkpoint(sh.metric, sh.shard)
    blobs = {key: sh.states[key].to_bytes() for key in sorted(sh.dirty)}
    try:
        with r.pipeline(transaction=True) as pipe:
            pipe.watch(lease_key, ckpt_key)  # type: ignore[no-untyped-call]
            owner = pipe.get(lease_key)
            stored = pipe.get(ckpt_key)
            if owner != worker_id.encode() or (parse_id(stored) if stored else store.ZERO_ID) != sh.checkpoint:
                pipe.unwatch()
                raise LeaseLostError(f"shard {sh.name} is no longer leased to {worker_id}")
            pending = _our_pending(sh, pipe.xpending(sh.stream, keys.CONSUMER_GROUP))
            strays = pending > len(set(sh.to_ack)) + prefetched
            pipe.multi()
            for (version, day), blob in blobs.items():
                pipe.set(keys.sketch(sh.metric, sh.shard, version, day), blob)
            if blobs:
                pipe.sadd(keys.sketch_index(sh.metric, sh.shard), *(index_member(v, d) for v, d in blobs))
            if sh.last_folded > sh.checkpoint:
                pipe.set(ckpt_key, format_id(sh.last_folded))
            for eid, fields, reason in sh.dead:
                letter: dict[EncodableT, EncodableT] = {"id": eid, "error": reason[:500]}
                letter.update({k: v for k, v in fields.items() if k in ENTRY_FIELDS})
                pipe.xadd(keys.dead_letters(sh.metric, sh.shard), letter, maxlen=DEAD_LETTER_MAXLEN)
            for lo in range(0, len(sh.to_ack), _ACK_CHUNK):
                pipe.xack(sh.stream, keys.CONSUMER_GROUP, *sh.to_ack[lo : lo + _ACK_CHUNK])
            # No trim while strays are pending or the pending list is being read: entries below the
            # last folded id may still be waiting there (in a page read ahead, say).
            minid = None if strays or sh.cursor != ">" else trim_below(sh.last_folded, retention_seconds=retention_seconds)
            if minid is not None:
                pipe.xtrim(sh.stream, minid=format_id(minid), approximate=False)
            pipe.execute()
    except redis_lib.WatchError:
        raise LeaseLostError(f"shard {sh.name} changed hands during a commit") from None
    log.debug(
        "committed",
        extra={"event": "commit", "shard": sh.name, "checkpoint": format_id(sh.last_folded),
               "entries": sh.uncommitted, "sketches": len(blobs)},
    )
    sh.checkpoint = sh.last_folded
    # Keep only the states written now: an idle (version, day) is reloaded from the store if needed.
    sh.states = {key: sh.states[key] for key in sh.dirty}
    sh.dirty = set()
    sh.to_ack = []
    sh.dead = []
    sh.uncommitted = 0
    sh.last_commit = time.monotonic()
    _rescan_if(sh, strays, prefetched)
    return True


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


def _our_pending(sh: OwnedShard, summary: Mapping[str, Any]) -> int:
    """The fold consumer's pending entries. Another consumer's (an operator reading with this group) are
    not counted as strays; they are never folded and are trimmed like folded ones: warned about once."""
    ours = others = 0
    for consumer in summary.get("consumers") or []:
        if consumer.get("name") in (CONSUMER, CONSUMER.encode()):
            ours += int(consumer.get("pending") or 0)
        else:
            others += int(consumer.get("pending") or 0)
    if others and not sh.warned_foreign:
        sh.warned_foreign = True
        log.warning(
            "another consumer has entries pending in the fold group: they are not folded (read with a group of your own)",
            extra={"event": "foreign_consumer", "shard": sh.name, "pending": others},
        )
    return ours


def _rescan_if(sh: OwnedShard, strays: bool, prefetched: int) -> None:
    """Re-read the pending list next (dropping the read in flight: its entries are pending too).

    Not again while the previous such pass found nothing beyond that read's entries: then the count is off
    for a reason a re-read cannot fix, and re-reading would only spin (a --once worker would never
    finish). A commit that finds no strays clears that.
    """
    if not strays:
        sh.rescan_found = -1
        return
    if sh.cursor != ">" or sh.rescan_found == 0:
        return
    log.warning(
        "entries pending that this worker did not read; re-reading the pending list",
        extra={"event": "rescan", "shard": sh.name},
    )
    forget_prefetch(sh)
    sh.cursor = "0"
    sh.drained = False
    sh.rescanning, sh.scanned = True, -prefetched  # the dropped read's entries come back: not found ones
