"""The fold worker: exactly-once aggregation of stream shards into per-(version, day) sketches.

One worker owns some shards at a time, by lease (``SET lease <worker> NX PX ttl``, renewed with a
compare-and-set script; a dead worker's leases expire and another worker takes its shards). A new owner
reads the stream with XREAD after the shard's committed checkpoint (no consumer group: nothing is written
per read, so no delivery time reaches the AOF). Reads are large (``batch`` entries per XREAD) and every read
is folded in one vectorized :func:`~ldptel.client.fold` call per (version, day).

Exactly once: every N entries or T seconds a shard's sketches, checkpoint, folded count, dead letters and
trim are written in ONE MULTI/EXEC guarded by WATCH on the lease and the checkpoint, so an entry is in the
stored sketches exactly when it is at or below the checkpoint. The full argument (crashes, fenced ex-owners,
poison entries, retention) is in :mod:`~ldptel.aggregator.worker.commit`.

Several workers share the shards fairly: each registers a heartbeat in the live-worker set and holds at
most ⌈shards / live workers⌉ leases, releasing extras (after a commit) when more workers join.

Modules, one concern each:

* :mod:`~ldptel.aggregator.worker.config`: :class:`WorkerConfig`, its defaults and checks;
* :mod:`~ldptel.aggregator.worker.loop`: :class:`Worker` (run loop, rounds, idle wait, claims and
  rebalancing, stats) and :class:`WorkerStats`;
* :mod:`~ldptel.aggregator.worker.reading`: XREAD after the cursor, decoding, merging into reused buffers, read-ahead;
* :mod:`~ldptel.aggregator.worker.folding`: folding a read into the per-(version, day) in-memory states;
* :mod:`~ldptel.aggregator.worker.commit`: the MULTI/EXEC commit (and the exactly-once design);
* :mod:`~ldptel.aggregator.worker.lag`: :func:`shard_lag`, entries not yet folded;
* :mod:`~ldptel.aggregator.worker.shard`: the in-memory state of one owned shard;
* :mod:`~ldptel.aggregator.worker.specs`: the registry's specs and shard counts, cached;
* :mod:`ldptel.storage.leases`: the shard leases and the live-worker heartbeat (Redis state).

Names are imported on first use: importing this package loads nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ldptel.client._lazy import lazy_exports

_EXPORTS = {
    "DEFAULT_BATCH": "ldptel.aggregator.worker.config",
    "DEFAULT_BLOCK_SECONDS": "ldptel.aggregator.worker.config",
    "DEFAULT_CHECKPOINT_EVERY": "ldptel.aggregator.worker.config",
    "DEFAULT_CHECKPOINT_SECONDS": "ldptel.aggregator.worker.config",
    "DEFAULT_LEASE_TTL": "ldptel.aggregator.worker.config",
    "DEFAULT_RESCAN_SECONDS": "ldptel.aggregator.worker.config",
    "DEFAULT_RETENTION_SECONDS": "ldptel.aggregator.worker.config",
    "MIN_LEASE_TTL": "ldptel.aggregator.worker.config",
    "WorkerConfig": "ldptel.aggregator.worker.config",
    "Worker": "ldptel.aggregator.worker.loop",
    "WorkerStats": "ldptel.aggregator.worker.loop",
    "shard_lag": "ldptel.aggregator.worker.lag",
    "LeaseLostError": "ldptel.storage.leases",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from ldptel.aggregator.worker.config import (
        DEFAULT_BATCH as DEFAULT_BATCH,
    )
    from ldptel.aggregator.worker.config import (
        DEFAULT_BLOCK_SECONDS as DEFAULT_BLOCK_SECONDS,
    )
    from ldptel.aggregator.worker.config import (
        DEFAULT_CHECKPOINT_EVERY as DEFAULT_CHECKPOINT_EVERY,
    )
    from ldptel.aggregator.worker.config import (
        DEFAULT_CHECKPOINT_SECONDS as DEFAULT_CHECKPOINT_SECONDS,
    )
    from ldptel.aggregator.worker.config import (
        DEFAULT_LEASE_TTL as DEFAULT_LEASE_TTL,
    )
    from ldptel.aggregator.worker.config import (
        DEFAULT_RESCAN_SECONDS as DEFAULT_RESCAN_SECONDS,
    )
    from ldptel.aggregator.worker.config import (
        DEFAULT_RETENTION_SECONDS as DEFAULT_RETENTION_SECONDS,
    )
    from ldptel.aggregator.worker.config import (
        MIN_LEASE_TTL as MIN_LEASE_TTL,
    )
    from ldptel.aggregator.worker.config import (
        WorkerConfig as WorkerConfig,
    )
    from ldptel.aggregator.worker.lag import shard_lag as shard_lag
    from ldptel.aggregator.worker.loop import Worker as Worker
    from ldptel.aggregator.worker.loop import WorkerStats as WorkerStats
    from ldptel.storage.leases import LeaseLostError as LeaseLostError
