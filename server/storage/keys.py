"""Every Redis key ldptel uses: the one place where keys are built.

The ingest service (stream appends, dedupe keys, the registry), the aggregator (fold workers, checkpoints,
leases, the worker heartbeat set, dead letters, queries) and the CLI all build their keys with these
functions; no other module formats a key. All keys start with ``ldp:v1:`` and those that belong to one metric
shard carry the hash tag ``{<metric>:<shard>}``, so a shard's stream, dedupe keys, sketches, checkpoint and
lease live in one Redis Cluster slot and can be written in one MULTI/EXEC or Lua script.
"""

from __future__ import annotations

PREFIX = "ldp:v1:"


def registry() -> str:
    """Hash: metric name → JSON record (versions, current version, status, shards)."""
    return f"{PREFIX}metrics"


def tag(metric: str, shard: int) -> str:
    """The hash tag of one metric shard (every key of the shard carries it)."""
    return f"{{{metric}:{shard}}}"


def stream(metric: str, shard: int) -> str:
    """Stream the fold reads: one entry per block released by the shuffle stage (:mod:`ldptel.storage.shuffle`),
    fields d (UTC day), v (version), n (reports), b (batch bytes)."""
    return f"{PREFIX}{tag(metric, shard)}:reports"


def held(metric: str, shard: int) -> str:
    """Stream the ingest appends to: one entry per accepted upload, fields d, v, n, b (as :func:`stream`), held
    until the shuffle stage releases it inside a shuffled block (:mod:`ldptel.storage.shuffle`)."""
    return f"{PREFIX}{tag(metric, shard)}:held"


def shuffle_stats(metric: str, shard: int) -> str:
    """Hash "<version>:<day>:<cell>:<stat>" → integer: what the shuffle stage released (:mod:`ldptel.storage.shuffle`)."""
    return f"{PREFIX}{tag(metric, shard)}:shuffle"


def seen(metric: str, shard: int, batch_id_hex: str) -> str:
    """Dedupe key for a client batch id, next to the stream it guards (SET PXAT a UTC day boundary, atomic with XADD)."""
    return f"{PREFIX}{tag(metric, shard)}:seen:{batch_id_hex}"


def _cell(cell: str) -> str:
    """The key part of a breakdown cell (:mod:`ldptel.client.protocol.breakdown`): "" for the cell "" (a metric
    without breakdown: every key as before breakdowns existed), else ``cell:<cell>:`` right after the hash tag."""
    return f"cell:{cell}:" if cell else ""


def sketch(metric: str, shard: int, version: int, day: str, cell: str = "") -> str:
    """Folded state (SketchState bytes) of one shard for one metric version, UTC day and breakdown cell."""
    return f"{PREFIX}{tag(metric, shard)}:{_cell(cell)}sketch:{version}:{day}"


def sketch_index(metric: str, shard: int, cell: str = "") -> str:
    """Set of "<version>:<day>" members that have a sketch key of ``cell`` in this shard."""
    return f"{PREFIX}{tag(metric, shard)}:{_cell(cell)}sketches"


def cells(metric: str, shard: int) -> str:
    """Set of the breakdown cells (other than "") that have a sketch in this shard (written with them)."""
    return f"{PREFIX}{tag(metric, shard)}:cells"


def profile() -> str:
    """String: the registry's profile schema (JSON: dimension → declared values; see ldptel.client.protocol.breakdown)."""
    return f"{PREFIX}profile"


def checkpoint(metric: str, shard: int) -> str:
    """Id of the last stream entry folded into this shard's sketches (written with them, atomically)."""
    return f"{PREFIX}{tag(metric, shard)}:checkpoint"


def folded(metric: str, shard: int) -> str:
    """Count of this shard's stream entries folded (or dead-lettered), incremented with the checkpoint (the lag)."""
    return f"{PREFIX}{tag(metric, shard)}:folded"


def lease(metric: str, shard: int) -> str:
    """Which aggregator worker owns this shard (SET NX PX, renewed; expires when the worker dies; not in the AOF)."""
    return f"{PREFIX}{tag(metric, shard)}:lease"


def dead_letters(metric: str, shard: int) -> str:
    """Stream of entries the aggregator could not decode (kept, acked, never folded)."""
    return f"{PREFIX}{tag(metric, shard)}:dead"


def sealed_tag(metric: str) -> str:
    """The hash tag of a metric's sealed states (every sealed day and roll-up of the metric, all versions, in one
    Redis Cluster slot, so sealing and roll-ups write them together in one MULTI/EXEC)."""
    return f"{{{metric}:sealed}}"


def sealed_state(metric: str, version: int, level: int, start_day: str, cell: str = "") -> str:
    """A sealed state (SketchState bytes summed over every shard): level 0 is one UTC day, level j ≥ 1 the
    2**j days of the aligned block that starts on ``start_day`` (see :mod:`ldptel.storage.sealed`)."""
    return f"{PREFIX}{sealed_tag(metric)}:{_cell(cell)}state:{version}:{level}:{start_day}"


def sealed_index(metric: str, cell: str = "") -> str:
    """Set of "<version>:<level>:<start day>" members naming the sealed states that exist."""
    return f"{PREFIX}{sealed_tag(metric)}:{_cell(cell)}index"


def sealed_days(metric: str, cell: str = "") -> str:
    """Hash "<version>:<day>" → reports of that sealed day (kept after the day's state is dropped by retention)."""
    return f"{PREFIX}{sealed_tag(metric)}:{_cell(cell)}days"


def sealed_cells(metric: str) -> str:
    """Set of the breakdown cells (other than "") that have sealed states (written with them)."""
    return f"{PREFIX}{sealed_tag(metric)}:cells"


def sealed_marks(metric: str) -> str:
    """Hash of the sealer's progress: "through" (every day up to it is sealed and its roll-ups are built) and
    "dropped" (the daily and fine roll-up states of days up to it may be gone: retention)."""
    return f"{PREFIX}{sealed_tag(metric)}:marks"


def sealed_sources(metric: str, cell: str = "") -> str:
    """Hash "<version>:<day>:<shard>" → SHA-1 of the shard state summed into that sealed day: a shard state is
    removed only while it is still exactly that one (see :mod:`ldptel.storage.sealed`)."""
    return f"{PREFIX}{sealed_tag(metric)}:{_cell(cell)}sources"


def seal_lease(metric: str) -> str:
    """Which worker seals this metric now (SET NX PX; not in the AOF, like the shard leases)."""
    return f"{PREFIX}{sealed_tag(metric)}:lease"


def rate(token_digest_prefix: str) -> str:
    """String: an app token's request-rate state (GCRA time, ms; in memory only, see ``ldptel.server.ratelimit``)."""
    return f"{PREFIX}rate:{token_digest_prefix}"


def ready_probe(tag: str | None = None) -> str:
    """String the ingest service's ``/readyz`` writes (a constant, no expiry, not in the AOF) to learn that Redis
    accepts writes; on a cluster one per primary, each under a hash tag ``{<tag>}`` chosen to land on a slot that
    primary serves."""
    return f"{PREFIX}ready-probe" if tag is None else f"{PREFIX}{{{tag}}}:ready-probe"


def aggregators() -> str:
    """Sorted set of live aggregator workers (score: heartbeat expiry, ms; not in the AOF), to share shards fairly."""
    return f"{PREFIX}aggregators"


def shard_for(batch_id: bytes, shards: int) -> int:
    """Shard of a batch: from its id, so a retried batch always meets its own dedupe key."""
    return int.from_bytes(batch_id[:4], "little") % shards
