"""The fold consumer group of a shard stream: placed at the checkpoint when a worker takes the shard, and its lag.

The group delivers only entries after the checkpoint: one created when a worker takes a shard (first run, or
after an operator deleted it) starts there, and one whose last-delivered id is behind it (an operator's XGROUP
SETID) is moved forward, so no folded entry is ever delivered again. :func:`shard_lag` reads how far the group
is behind the stream (the CLI's ``status`` and the worker's progress line show it).
"""

from __future__ import annotations

import logging
from typing import Any

import redis as redis_lib

from ldptel.storage import keys
from ldptel.storage.sketches import StreamId, format_id, parse_id

__all__ = ["place_group", "shard_lag"]

log = logging.getLogger(__name__)


def place_group(r: redis_lib.Redis, metric: str, shard: int, checkpoint: StreamId) -> None:
    """Create the shard's fold group at ``checkpoint`` (and the stream if missing), or move it forward to it."""
    stream = keys.stream(metric, shard)
    try:
        r.xgroup_create(stream, keys.CONSUMER_GROUP, id=format_id(checkpoint), mkstream=True)
    except redis_lib.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
        group = _fold_group(r, stream)
        delivered = None if group is None else parse_id(group["last-delivered-id"])
        if delivered is not None and delivered < checkpoint:
            log.warning(
                "consumer group was behind the checkpoint; moved it forward",
                extra={"event": "group_setid", "shard": f"{metric}:{shard}", "from": format_id(delivered),
                       "to": format_id(checkpoint)},
            )
            r.xgroup_setid(stream, keys.CONSUMER_GROUP, format_id(checkpoint))


def shard_lag(r: redis_lib.Redis, metric: str, shard: int) -> tuple[int | None, int]:
    """(entries not yet folded = undelivered + pending, pending) for one shard, from XINFO GROUPS."""
    try:
        group = _fold_group(r, keys.stream(metric, shard))
    except redis_lib.ResponseError:
        return None, 0
    if group is None:
        return None, 0
    pending = int(group.get("pending") or 0)
    lag = group.get("lag")
    return (None if lag is None else int(lag) + pending), pending


def _fold_group(r: redis_lib.Redis, stream: str) -> dict[str, Any] | None:
    """XINFO GROUPS of ``stream``, the fold group's entry (None if it has none; ResponseError if no stream)."""
    groups: list[dict[str, Any]] = r.xinfo_groups(stream)
    for group in groups:
        if group.get("name") in (keys.CONSUMER_GROUP, keys.CONSUMER_GROUP.encode()):
            return group
    return None
