"""The registry as one worker sees it: the params of every metric version it folds and every metric's shard count.

Read from :mod:`ldptel.storage.registry` on first use and cached; an entry of an unknown version makes the
cache reload that metric (at most once a second), so a version created after the worker started is folded.
Used from the prefetch thread (decoding) as well as from the worker's own.
"""

from __future__ import annotations

import time

import redis as redis_lib

from ldptel.client.protocol.specs import MetricSpec, Params
from ldptel.storage import keys, registry

__all__ = ["MetricSpecs"]

_RELOAD_SECONDS = 1.0  # an unknown version reloads its metric at most this often
_SEALED_SECONDS = 2.0  # how long a metric's sealed-through day is reused before it is read again


class MetricSpecs:
    """Cached registry reads: :meth:`params` per (metric, version), :meth:`shard_count` per metric."""

    def __init__(self, r: redis_lib.Redis) -> None:
        self.r = r
        self._specs: dict[str, dict[int, MetricSpec]] = {}
        self._refreshed: dict[str, float] = {}
        self._shard_counts: dict[str, int] = {}
        self._sealed: dict[str, tuple[float, str | None]] = {}
        self._n_min: dict[str, tuple[float, int | None]] = {}

    def params(self, metric: str, version: int) -> Params:
        """The params of one metric version (``UnknownVersionError`` if the registry has no such version)."""
        specs = self._specs.get(metric, {})
        if version not in specs and time.monotonic() - self._refreshed.get(metric, -1e18) > _RELOAD_SECONDS:
            self._load(metric)
            specs = self._specs.get(metric, {})
        if version not in specs:
            raise registry.UnknownVersionError(metric, version, sorted(specs))
        return specs[version].params

    def shard_count(self, metric: str) -> int:
        """The metric's shard count (read from the registry the first time, or after :meth:`forget_shards`)."""
        shards = self._shard_counts.get(metric)
        if shards is None:
            self._load(metric)
            shards = self._shard_counts.get(metric, 0)
        return shards

    def sealed_through(self, metric: str) -> str | None:
        """The last UTC day of ``metric`` that is sealed (:mod:`ldptel.storage.sealed`), None if none; read at most
        every ``_SEALED_SECONDS``. An entry of such a day arrived after every bound sealing relies on."""
        now = time.monotonic()
        cached = self._sealed.get(metric)
        if cached is None or now - cached[0] > _SEALED_SECONDS:
            raw = self.r.hget(keys.sealed_marks(metric), "through")
            cached = (now, None if raw is None else (raw.decode() if isinstance(raw, bytes) else str(raw)))
            self._sealed[metric] = cached
        return cached[1]

    def shuffle_n_min(self, metric: str) -> int | None:
        """The metric's ``shuffle_n_min`` in the registry (None: not set), read at most every ``_SEALED_SECONDS``,
        so a change made while the worker runs applies to its next blocks."""
        now = time.monotonic()
        cached = self._n_min.get(metric)
        if cached is None or now - cached[0] > _SEALED_SECONDS:
            cached = (now, registry.get_metric(self.r, metric).shuffle_n_min)
            self._n_min[metric] = cached
        return cached[1]

    def forget_shards(self) -> None:
        """Read every shard count from the registry again on next use (a rescan of every metric)."""
        self._shard_counts.clear()

    def registry_names(self) -> list[str]:
        """Every registered metric, sorted by name."""
        return [record.name for record in registry.list_metrics(self.r)]

    def _load(self, metric: str) -> None:
        record = registry.get_metric(self.r, metric)
        self._specs[metric] = {v: registry.spec_for(record, v) for v in record.versions}
        self._shard_counts[metric] = int(record.shards)
        self._refreshed[metric] = time.monotonic()
