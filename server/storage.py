"""Redis writes of the ingest path: one stream entry per accepted batch, deduplicated by batch id.

The dedupe check and the append run in one Lua script (``append.lua``) on the shard's hash tag, so they are
atomic with each other (and legal on Redis Cluster). Because the script is idempotent per batch id, a client
or redis-py retry after a lost reply can never append twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources

import redis

from . import keys

__all__ = ["AppendResult", "BatchAppender", "utc_day"]

_LUA = resources.files(__package__).joinpath("append.lua").read_text(encoding="utf-8")


def utc_day(now: datetime | None = None) -> str:
    """The server-assigned UTC day ``YYYY-MM-DD`` of an accepted batch."""
    return (now or datetime.now(UTC)).strftime("%Y-%m-%d")


@dataclass(frozen=True, slots=True)
class AppendResult:
    duplicate: bool
    entry_id: str | None
    shard: int


class BatchAppender:
    """Registers the append script once per client and appends batches with EVALSHA (EVAL on NOSCRIPT)."""

    def __init__(self, r: redis.Redis) -> None:
        self._script = r.register_script(_LUA)

    def append(
        self,
        *,
        metric: str,
        shards: int,
        batch_id: bytes,
        version: int,
        n: int,
        data: bytes,
        day: str,
        dedupe_ttl: int,
    ) -> AppendResult:
        """Append ``data`` (the validated binary batch) unless ``batch_id`` was seen on its shard."""
        shard = keys.shard_for(batch_id, shards)
        result = self._script(
            keys=[keys.stream(metric, shard), keys.seen(metric, shard, batch_id.hex())],
            args=[day, version, n, data, dedupe_ttl],
        )
        if result is None:
            return AppendResult(duplicate=True, entry_id=None, shard=shard)
        entry = result.decode() if isinstance(result, bytes) else str(result)
        return AppendResult(duplicate=False, entry_id=entry, shard=shard)
