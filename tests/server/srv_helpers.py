"""Helpers for the server tests: specs, batches and Redis snapshots."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import redis

from ldptel.client import CmsParams, GrrParams, MetricSpec, RrParams, privatize_batch
from ldptel.client.protocol.wire import batch_to_json, encode_batch

AUTH_JSON = "application/json"
OCTET = "application/octet-stream"


def cms_spec(name: str = "app.feature", *, m: int = 1024, k: int = 16, epsilon: float = 4.0) -> MetricSpec:
    return MetricSpec(name=name, params=CmsParams(epsilon=epsilon, k=k, m=m), description="test metric")


def rr_spec(name: str = "app.flag") -> MetricSpec:
    return MetricSpec(name=name, params=RrParams(epsilon=1.0))


def grr_spec(name: str = "app.color") -> MetricSpec:
    return MetricSpec(name=name, params=GrrParams(epsilon=2.0, domain=("red", "green", "blue")))


def values_for(spec: MetricSpec, n: int, rng: np.random.Generator) -> list[Any]:
    mech = spec.mechanism
    if mech == "rr":
        return [bool(x) for x in rng.integers(0, 2, n)]
    if mech == "grr":
        domain = spec.params.domain  # type: ignore[union-attr]
        return [domain[int(i)] for i in rng.integers(0, len(domain), n)]
    return [f"value-{int(i)}" for i in rng.integers(0, 50, n)]


def make_batch(
    spec: MetricSpec, n: int, rng: np.random.Generator, *, batch_id: bytes | None = None, version: int | None = None
) -> tuple[bytes, bytes]:
    """(binary batch, batch id) for ``spec`` at ``version`` (default: the spec's own)."""
    bid = batch_id if batch_id is not None else os.urandom(16)
    batch = privatize_batch(values_for(spec, n, rng), spec.params, rng=rng)
    data = encode_batch(
        metric=spec.name, version=spec.version if version is None else version, batch_id=bid, batch=batch, params=spec.params
    )
    return data, bid


def make_json_batch(spec: MetricSpec, n: int, rng: np.random.Generator, *, batch_id: bytes | None = None) -> dict[str, Any]:
    bid = batch_id if batch_id is not None else os.urandom(16)
    batch = privatize_batch(values_for(spec, n, rng), spec.params, rng=rng)
    return batch_to_json(metric=spec.name, version=spec.version, batch_id=bid, batch=batch)


def snapshot(r: redis.Redis) -> dict[bytes, tuple[bytes | None, int]]:
    """Every key with its DUMP bytes and whether it has a TTL: equal snapshots = byte-for-byte equal data."""
    out: dict[bytes, tuple[bytes | None, int]] = {}
    for key in r.scan_iter(count=1000):
        ttl = r.pttl(key)
        out[key] = (r.dump(key), -1 if ttl < 0 else 1)  # type: ignore[operator]
    return out


def stream_entries(r: redis.Redis, metric: str, shards: int) -> list[tuple[int, bytes, dict[bytes, bytes]]]:
    """(shard, entry id, fields) of every entry of every shard stream of ``metric``."""
    from ldptel.storage import keys

    out = []
    for shard in range(shards):
        for entry_id, fields in r.xrange(keys.held(metric, shard)):
            out.append((shard, entry_id, fields))
    return out


def fill_to_maxmemory(r: redis.Redis, headroom: int = 256 * 1024) -> None:
    """Give ``r`` (a private server) a tiny ``maxmemory`` with ``noeviction`` and fill it until it refuses
    writes ("OOM command not allowed"), then lower the limit to half the memory in use so that what a client
    frees meanwhile (a worker trimming a stream) cannot let writes through; :func:`lift_maxmemory` undoes it."""
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", int(r.info("memory")["used_memory"]) + headroom)
    filler = b"x" * 16_384
    for i in range(10_000):
        try:
            r.set(f"test:fill:{i}", filler)
        except redis.exceptions.OutOfMemoryError:
            r.config_set("maxmemory", int(r.info("memory")["used_memory"]) // 2)
            return
    raise AssertionError("maxmemory was never reached")


def lift_maxmemory(r: redis.Redis) -> None:
    r.config_set("maxmemory", 0)
