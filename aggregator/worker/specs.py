"""The registry as one worker sees it: the params of every metric version it folds and every metric's shard count.

Read from :mod:`ldptel.storage.registry` on first use and cached; an entry of an unknown version makes the
cache reload that metric (at most once a second), so a version created after the worker started is folded.
Used from the prefetch thread (decoding) as well as from the worker's own.
"""

from __future__ import annotations

import time

import redis as redis_lib

from ldptel.client.protocol.specs import MetricSpec, Params
from ldptel.storage import registry

__all__ = ["MetricSpecs"]

_RELOAD_SECONDS = 1.0  # an unknown version reloads its metric at most this often


class MetricSpecs:
    """Cached registry reads: :meth:`params` per (metric, version), :meth:`shard_count` per metric."""

    def __init__(self, r: redis_lib.Redis) -> None:
        self.r = r
        self._specs: dict[str, dict[int, MetricSpec]] = {}
        self._refreshed: dict[str, float] = {}
        self._shard_counts: dict[str, int] = {}

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
