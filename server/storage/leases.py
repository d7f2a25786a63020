"""Shard leases and the set of live fold workers: the Redis state through which workers share the shards.

* A shard lease (:func:`ldptel.storage.keys.lease`) names the one worker that owns a shard. It is taken with
  ``SET <lease> <worker> NX PX <ttl>`` (in a script), and renewed and released only by its owner (compare-and-set Lua
  scripts: GET, then PEXPIRE or DEL only if the value is still the caller's id), so a dead worker's leases
  expire after one TTL and another worker takes its shards. The fold worker's commit also WATCHes the lease
  key, which fences a worker that lost its lease (see :mod:`ldptel.aggregator.worker.commit`).
* The live workers (:func:`ldptel.storage.keys.aggregators`): a sorted set of worker ids scored by the expiry
  of their last heartbeat (ms since the epoch). Each worker heartbeats every third of a TTL and holds at most
  ⌈shards / live workers⌉ leases.

Every lease and heartbeat write runs in a script with ``redis.set_repl(redis.REPL_NONE)``: it is neither
appended to the AOF nor sent to replicas. These writes carry times (expiries, heartbeat scores) and come every
few seconds, so in the AOF they would timestamp the batch appends between them. They are coordination state
only: after a restart from the AOF (or a failover) there are no leases, a worker's next commit finds the
lease not its own and drops the shard (:mod:`~ldptel.aggregator.worker.commit`), and the workers claim again.
"""

from __future__ import annotations

import time

import redis as redis_lib

from ldptel.client.errors import LdpError
from ldptel.storage import keys

__all__ = ["LeaseLostError", "Leases"]

# Not propagated (AOF, replicas): see the module docs.
_CLAIM_LUA = """
redis.set_repl(redis.REPL_NONE)
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
"""
_RENEW_LUA = """
redis.set_repl(redis.REPL_NONE)
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE_LUA = """
redis.set_repl(redis.REPL_NONE)
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""
_HEARTBEAT_LUA = """
redis.set_repl(redis.REPL_NONE)
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
return redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
"""
_LEAVE_LUA = """
redis.set_repl(redis.REPL_NONE)
return redis.call('ZREM', KEYS[1], ARGV[1])
"""


class LeaseLostError(LdpError):
    """This worker no longer owns a shard (its lease expired and possibly another worker took it)."""


class Leases:
    """The shard leases and the heartbeat of one worker, ``owner``; both live ``ttl_seconds`` unless renewed."""

    def __init__(self, r: redis_lib.Redis, *, owner: str, ttl_seconds: float) -> None:
        self.r = r
        self.owner = owner
        self.ttl_ms = int(ttl_seconds * 1000)
        self._claim = r.register_script(_CLAIM_LUA)
        self._renew = r.register_script(_RENEW_LUA)
        self._release = r.register_script(_RELEASE_LUA)
        self._heartbeat = r.register_script(_HEARTBEAT_LUA)
        self._leave = r.register_script(_LEAVE_LUA)

    # ------------------------------------------------------------------------------------ shard leases
    def claim(self, metric: str, shard: int) -> bool:
        """Take the shard's lease if nobody holds it (SET NX PX); True if this worker got it."""
        return self._claim(keys=[keys.lease(metric, shard)], args=[self.owner, self.ttl_ms]) is not None

    def renew(self, metric: str, shard: int) -> bool:
        """Extend the lease by a full TTL if this worker still holds it; False if it does not."""
        return bool(self._renew(keys=[keys.lease(metric, shard)], args=[self.owner, self.ttl_ms]))

    def held_elsewhere(self, shards: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[str, int]]:
        """The shards among ``shards`` whose lease another worker holds now: (holder, milliseconds left)."""
        pipe = self.r.pipeline(transaction=False)
        for metric, shard in shards:
            pipe.get(keys.lease(metric, shard))
            pipe.pttl(keys.lease(metric, shard))
        replies = pipe.execute()
        held: dict[tuple[str, int], tuple[str, int]] = {}
        for key, holder, left in zip(shards, replies[::2], replies[1::2], strict=True):
            name = holder.decode("utf-8", "replace") if isinstance(holder, bytes) else holder
            if name is not None and name != self.owner and int(left) > 0:
                held[key] = (name, int(left))
        return held

    def release(self, metric: str, shard: int) -> None:
        """Delete the lease if this worker still holds it (another worker's lease is left alone)."""
        self._release(keys=[keys.lease(metric, shard)], args=[self.owner])

    # ------------------------------------------------------------------------------------- live workers
    def heartbeat(self) -> None:
        """Register this worker as live for one TTL and forget the workers whose heartbeat expired."""
        now_ms = int(time.time() * 1000)
        self._heartbeat(keys=[keys.aggregators()], args=[now_ms + self.ttl_ms, self.owner, now_ms])

    def live_workers(self) -> int:
        """Workers whose heartbeat has not expired (at least 1: this one)."""
        return max(1, int(self.r.zcount(keys.aggregators(), int(time.time() * 1000), "+inf")))

    def leave(self) -> None:
        """Remove this worker from the live set (at shutdown, so the others rebalance at once)."""
        self._leave(keys=[keys.aggregators()], args=[self.owner])
