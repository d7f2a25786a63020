"""How far the fold is behind a shard stream: entries appended minus entries folded (the CLI's ``status`` and the
worker's progress line show it).

The stream counts every entry ever appended (``entries-added`` of XINFO STREAM) and each commit adds the
entries it folded to :func:`~ldptel.storage.keys.folded`, in the same transaction as the checkpoint, so the
difference is exactly the entries after the checkpoint.
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
    info, folded = pipe.execute(raise_on_error=False)
    if isinstance(info, redis_lib.ResponseError):  # no such stream
        return 0 if folded is None else None
    if isinstance(info, Exception):
        raise info
    return max(0, int(info["entries-added"]) - int(folded or 0))
