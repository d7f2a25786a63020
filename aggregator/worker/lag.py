"""How far the fold is behind a shard stream: entries appended minus entries folded (the CLI's ``status`` and the
worker's progress line show it).

The stream counts every entry ever appended (``entries-added`` of XINFO STREAM) and each commit adds the
entries it folded to :func:`~ldptel.storage.keys.folded`, in the same transaction as the checkpoint, so the
difference is exactly the entries after the checkpoint. Uploads the shuffle stage still holds
(:func:`~ldptel.storage.keys.held`) are added: they are not folded yet either.
"""

from __future__ import annotations

import redis as redis_lib

from ldptel.storage import keys

__all__ = ["shard_lag"]


def shard_lag(r: redis_lib.Redis, metric: str, shard: int) -> int | None:
    """Entries of one shard not yet folded (committed): 0 for a shard nothing was ever appended to; None
    (unknown) when the stream is gone although entries were folded from it."""
    pipe = r.pipeline(transaction=False)
    pipe.xinfo_stream(keys.stream(metric, shard))
    pipe.get(keys.folded(metric, shard))
    pipe.xlen(keys.held(metric, shard))  # uploads the shuffle stage still holds (ldptel.storage.shuffle)
    info, folded, held = pipe.execute(raise_on_error=False)
    held = held if isinstance(held, int) else 0
    if isinstance(info, redis_lib.ResponseError):  # no such stream
        return held if folded is None else None
    if isinstance(info, Exception):
        raise info
    return max(0, int(info["entries-added"]) - int(folded or 0)) + held
