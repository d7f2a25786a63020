"""A cache of what is derived from one particular object (not from any object equal to it).

Used where a value is derived from a params object or a spec on every report (:mod:`ldptel.client.mechanisms.daily_mean`,
:class:`~ldptel.client.sdk.reporter.Reporter`'s costs): keyed by ``id(obj)`` with no field hashing per lookup, and
exact where equality is not (``-0.0 == 0.0``; two specs of one version from a hostile server). The cache holds the
object beside its value, so its id cannot be reused while the entry exists; past ``limit`` entries it starts over."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

V = TypeVar("V")

IdentityCache = dict[int, tuple[object, V]]


def by_identity(cache: IdentityCache[V], obj: object, make: Callable[[], V], *, limit: int = 1024) -> V:
    """``make()`` for ``obj``, computed once while ``cache`` keeps it."""
    hit = cache.get(id(obj))
    if hit is None or hit[0] is not obj:
        if len(cache) >= limit:
            cache.clear()
        hit = cache[id(obj)] = (obj, make())
    return hit[1]
