"""One owned shard's in-memory state: read position, read in flight, folded states not yet committed.

:class:`OwnedShard` is created when the worker takes a shard's lease (:mod:`~ldptel.aggregator.worker.loop`),
advanced by reads (:mod:`~ldptel.aggregator.worker.reading`), filled by folds
(:mod:`~ldptel.aggregator.worker.folding`) and emptied by commits (:mod:`~ldptel.aggregator.worker.commit`).
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ldptel.client import SketchState
from ldptel.storage import keys
from ldptel.storage.sketches import StreamId

if TYPE_CHECKING:
    from ldptel.aggregator.worker.reading import Read

__all__ = ["DeadLetter", "OwnedShard"]

DeadLetter = tuple[bytes, dict[bytes, bytes], str]  # (entry id, its fields, why it cannot be folded)


@dataclass(eq=False)
class OwnedShard:
    metric: str
    shard: int
    checkpoint: StreamId  # the committed checkpoint: last entry id folded into the stored sketches
    last_folded: StreamId  # last entry id folded into ``states`` (committed or not)
    leased_at: float  # time.monotonic() of the last successful lease renewal
    cursor: str  # id of the last entry read (XREAD reads after it): the checkpoint when the shard is taken
    prefetch: Future[Read] | None = None  # the read in flight (after ``cursor``)
    drained: bool = False
    states: dict[tuple[int, str, str], SketchState] = field(default_factory=dict)  # per (version, day, cell)
    dirty: set[tuple[int, str, str]] = field(default_factory=set)  # states changed since the last commit
    dead: list[DeadLetter] = field(default_factory=list)
    uncommitted: int = 0  # entries read since the last commit
    last_commit: float = field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        return f"{self.metric}:{self.shard}"

    @property
    def stream(self) -> str:
        return keys.stream(self.metric, self.shard)
