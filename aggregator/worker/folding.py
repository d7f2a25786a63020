"""Folding a read into an owned shard's in-memory states, one per (version, day, cell), and choosing what to fold.

The in-memory state of a (version, day, breakdown cell) starts from what is stored (:func:`ldptel.storage.sketches.load_state`)
and every read is folded into it in one vectorized :func:`~ldptel.client.fold` call per (version, day, cell). Each
entry read advances the shard's last folded id (and, if it cannot be folded, is queued for the dead letters);
all of it is written by the next commit (:mod:`~ldptel.aggregator.worker.commit`).
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
    """What one :func:`fold_read` did: entries read, reports folded."""

    entries: int
    reports: int


def fold_read(r: redis_lib.Redis, specs: MetricSpecs, sh: OwnedShard, read: Read) -> Folded:
    """Fold a read (entries after the shard's cursor, in id order) into the in-memory states."""
    reports = 0
    for (eid, fields), decoded in zip(read.entries, read.decoded, strict=True):
        sh.last_folded = max(sh.last_folded, parse_id(eid))
        if isinstance(decoded, str):
            sh.dead.append((eid, fields, decoded))
            log.warning(
                "dead-lettered a stream entry",
                extra={"event": "dead_letter", "shard": sh.name, "id": eid.decode(), "error": decoded},
            )
            continue
        reports += decoded[2].n
    for (version, day, cell), batches in read.merged.items():
        state = _state(r, specs, sh, version, day, cell)
        fold(specs.params(sh.metric, version), batches, into=state)  # the one call into the mechanisms
        sh.dirty.add((version, day, cell))
    sh.uncommitted += len(read.entries)
    return Folded(entries=len(read.entries), reports=reports)


def _state(r: redis_lib.Redis, specs: MetricSpecs, sh: OwnedShard, version: int, day: str, cell: str) -> SketchState:
    """The in-memory state of (version, day, cell): loaded from the store the first time (empty if none)."""
    key = (version, day, cell)
    state = sh.states.get(key)
    if state is None:
        params = specs.params(sh.metric, version)
        stored = store.load_state(r, keys.sketch(sh.metric, sh.shard, version, day, cell), params)
        state = stored if stored is not None else SketchState.empty(params)
        sh.states[key] = state
    return state
