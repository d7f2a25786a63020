"""Folding a read into an owned shard's in-memory states, one per (version, day), and choosing what to fold.

The in-memory state of a (version, day) starts from what is stored (:func:`ldptel.storage.sketches.load_state`)
and every read is folded into it in one vectorized :func:`~ldptel.client.fold` call per (version, day). Each
entry read is queued for acknowledgement (and, if it cannot be folded, for the dead letters); all of it is
written by the next commit (:mod:`~ldptel.aggregator.worker.commit`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis as redis_lib

from ldptel.aggregator.worker.reading import Read
from ldptel.aggregator.worker.shard import OwnedShard
from ldptel.aggregator.worker.specs import MetricSpecs
from ldptel.client import SketchState, fold
from ldptel.storage import keys
from ldptel.storage import sketches as store
from ldptel.storage.sketches import parse_id

__all__ = ["Folded", "fold_read"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Folded:
    """What one :func:`fold_read` did: entries read, reports folded, entries skipped as already folded."""

    entries: int
    reports: int
    skipped: int


def fold_read(r: redis_lib.Redis, specs: MetricSpecs, sh: OwnedShard, read: Read) -> Folded:
    """Fold entries read from the pending list (``read.pending``) or new ones (``>``).

    A pending entry was delivered but never acknowledged, and acknowledgements are committed with the
    sketches, so it was never folded into them: it is always folded, even below the checkpoint (an entry
    a former owner read after it lost its lease, while this worker had already moved past it). A new
    entry at or below the last folded id can only come from a group moved backwards under a running
    worker; it is already counted and skipped.
    """
    pending = read.pending
    keep: list[bool] = []
    reports = skipped = 0
    for (eid, fields), decoded in zip(read.entries, read.decoded, strict=True):
        sh.to_ack.append(eid)
        sid = parse_id(eid)
        keep.append(False)
        if not pending and sid <= sh.last_folded:
            skipped += 1
            continue
        if pending and sid <= sh.checkpoint:
            log.warning(
                "folding an entry another reader left pending below the checkpoint",
                extra={"event": "stray", "shard": sh.name, "id": eid.decode()},
            )
        sh.last_folded = max(sh.last_folded, sid)
        if isinstance(decoded, str):
            sh.dead.append((eid, fields or {}, decoded))
            if fields is not None:
                log.warning(
                    "dead-lettered a stream entry",
                    extra={"event": "dead_letter", "shard": sh.name, "id": eid.decode(), "error": decoded},
                )
            continue
        keep[-1] = True
        reports += decoded[2].n
    # Nothing skipped (the normal case): fold the batches the read merged already.
    groups = read.merged if not skipped else read.without(keep)
    for (version, day), batches in groups.items():
        state = _state(r, specs, sh, version, day)
        fold(specs.params(sh.metric, version), batches, into=state)  # the one call into the mechanisms
        sh.dirty.add((version, day))
    sh.uncommitted += len(read.entries)
    return Folded(entries=len(read.entries), reports=reports, skipped=skipped)


def _state(r: redis_lib.Redis, specs: MetricSpecs, sh: OwnedShard, version: int, day: str) -> SketchState:
    """The in-memory state of (version, day): loaded from the store the first time (empty if none)."""
    key = (version, day)
    state = sh.states.get(key)
    if state is None:
        params = specs.params(sh.metric, version)
        stored = store.load_state(r, keys.sketch(sh.metric, sh.shard, version, day), params)
        state = stored if stored is not None else SketchState.empty(params)
        sh.states[key] = state
    return state
