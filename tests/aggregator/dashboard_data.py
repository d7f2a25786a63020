"""Folded data and a running ``ldptel dashboard`` for the dashboard's browser test and its screenshot script
(``scripts/dashboard_screenshot.py``): three metrics over several UTC days (and, from :func:`populate_more`,
numeric and discovery ones), appended with the ingest's own
appender (one batch per day, so each day is a chosen one), folded by the real worker; the dashboard runs as
the real console command in a subprocess on a free loopback port."""

from __future__ import annotations

import datetime as dt
import os
import selectors
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import redis as redis_lib

from ldptel.aggregator.demo.distribution import load_distribution
from ldptel.client import MetricSpec
from ldptel.client.mechanisms.histogram import bucket_edges
from ldptel.client.protocol.specs import params_from_dict
from tests.aggregator.agg_helpers import append_reports, create, drain

# names of mechanisms are data here (a user's --mechanism), never branched on
SKETCH = {"mechanism": "cms", "epsilon": 4.0, "k": 256, "m": 1024}
BOOLEAN = {"mechanism": "rr", "epsilon": 1.0}
PLATFORMS = ("android", "ios", "web", "desktop")
CATEGORIES = {"mechanism": "grr", "epsilon": 2.0, "domain": list(PLATFORMS)}
BATCH = 2000  # reports per appended batch
PLATFORM_SHARES = (0.46, 0.31, 0.15, 0.08)
RISING = "🔥"
MEAN = {"mechanism": "mean", "epsilon": 4.0, "lo": 0.0, "hi": 5000.0}
HISTOGRAM = {"mechanism": "num-histogram", "epsilon": 4.0, "edges": list(bucket_edges(10, 10000, 16, scale="log"))}
DISCOVERY = {"mechanism": "pem", "epsilon": 4.0, "k": 32, "m": 256, "max_bytes": 9, "hash_seed": 4}
WORDS = {"ok": 0.25, "日本語": 0.18, "😀": 0.15, "héllo": 0.12}  # the rest: rare words, a few devices each  # an emoji whose share grows over the days, so the per-day chart has a trend to show


@dataclass(frozen=True)
class Populated:
    days: tuple[str, ...]
    candidates: tuple[str, ...]  # the emoji a reader would paste: the shipped distribution's head


def day_list(last: str, count: int) -> tuple[str, ...]:
    end = dt.date.fromisoformat(last)
    return tuple((end - dt.timedelta(days=count - 1 - i)).isoformat() for i in range(count))


def populate(r: redis_lib.Redis, *, days: tuple[str, ...], per_day: int, seed: int = 7) -> Populated:
    """Create ``emoji`` (sketch), ``dark_mode`` (boolean) and ``platform`` (categories), append ``per_day``
    reports of each on every day (emoji: the shipped distribution, with :data:`RISING` gaining share; dark mode
    from 30% to 40%), and fold them."""
    rng = np.random.default_rng(seed)
    dist = load_distribution()
    weights = np.asarray(dist.weights, dtype=float)
    rising = dist.values.index(RISING)
    emoji = create(r, MetricSpec(name="emoji", params=params_from_dict(SKETCH), reports_per_day=1,
                                 description="emoji sent in chats"), shards=2)
    dark = create(r, MetricSpec(name="dark_mode", params=params_from_dict(BOOLEAN), description="dark mode is on"), shards=2)
    platform = create(r, MetricSpec(name="platform", params=params_from_dict(CATEGORIES), description="device platform"), shards=1)
    for i, day in enumerate(days):
        weekday = dt.date.fromisoformat(day).weekday()
        per_day_now = per_day if weekday < 5 else per_day * 3 // 4  # fewer reports at weekends
        w = weights.copy()
        w[rising] += 0.004 * i
        values = rng.choice(len(w), size=per_day_now, p=w / w.sum())
        append_reports(r, emoji, [dist.values[v] for v in values], rng, day=day, batch_size=BATCH)
        share = 0.30 + 0.10 * i / max(1, len(days) - 1)
        append_reports(r, dark, list(rng.random(per_day_now) < share), rng, day=day, batch_size=BATCH)
        picks = rng.choice(len(PLATFORMS), size=per_day_now, p=PLATFORM_SHARES)
        append_reports(r, platform, [PLATFORMS[p] for p in picks], rng, day=day, batch_size=BATCH)
    drain(r)
    return Populated(days=days, candidates=tuple(dist.values[:12]) + (RISING,))


def populate_more(r: redis_lib.Redis, *, days: tuple[str, ...], per_day: int, words_per_day: int | None = None,
                  seed: int = 11) -> None:
    """Create ``load_ms`` (mean), ``load_hist`` (num-histogram over log buckets) and ``typed`` (pem), append
    ``per_day`` reports of the load times on every day (lognormal around 300 ms, slower by the day) and
    ``words_per_day`` (default ``per_day``) of the words (:data:`WORDS` and rare ones), and fold them."""
    rng = np.random.default_rng(seed)
    mean = create(r, MetricSpec(name="load_ms", params=params_from_dict(MEAN), reports_per_day=1,
                                description="page load time, ms"), shards=1)
    hist = create(r, MetricSpec(name="load_hist", params=params_from_dict(HISTOGRAM), reports_per_day=1,
                                description="page load time, ms (buckets)"), shards=1)
    typed = create(r, MetricSpec(name="typed", params=params_from_dict(DISCOVERY), description="words typed"), shards=1)
    heavy = list(WORDS)
    shares = np.array([*WORDS.values(), 1.0 - sum(WORDS.values())])
    for i, day in enumerate(days):
        load = rng.lognormal(np.log(300.0 * (1 + 0.05 * i)), 0.9, per_day)
        append_reports(r, mean, load.tolist(), rng, day=day, batch_size=BATCH)
        append_reports(r, hist, load.tolist(), rng, day=day, batch_size=BATCH)
        picks = rng.choice(len(shares), size=per_day if words_per_day is None else words_per_day, p=shares)
        words = [heavy[p] if p < len(heavy) else f"r{rng.integers(0, 99_999):05d}" for p in picks]
        append_reports(r, typed, words, rng, day=day, batch_size=BATCH)
    drain(r)


T = TypeVar("T")
_SNAPSHOTS: dict[object, tuple[list[tuple[bytes, int, bytes]], object]] = {}


def snapshot(r: redis_lib.Redis, key: object, build: Callable[[], T]) -> T:
    """``build()`` on ``r`` the first time this process asks for ``key``; later calls put the database back exactly
    as ``build`` left it (FLUSHDB, then RESTORE of every key's DUMP with its TTL) and return the first result.

    For function-scoped fixtures whose data no test may share (a test writes to it) but whose building is costly:
    privatizing, appending and folding 4 days of 3 metrics costs ~0.1 s of CPU per test, a restore a few ms.
    ``key`` names everything ``build`` depends on, including the database state it starts from."""
    if key in _SNAPSHOTS:
        entries, result = _SNAPSHOTS[key]
        r.flushdb()
        pipe = r.pipeline(transaction=False)
        for name, ttl, blob in entries:
            pipe.restore(name, max(ttl, 0), blob)
        pipe.execute()
        return result  # type: ignore[return-value]
    result = build()
    names = sorted(r.scan_iter(count=1000))
    pipe = r.pipeline(transaction=False)
    for name in names:
        pipe.pttl(name)
        pipe.dump(name)
    got = pipe.execute()
    _SNAPSHOTS[key] = ([(n, int(got[2 * i]), got[2 * i + 1]) for i, n in enumerate(names)], result)
    return result


@contextmanager
def running_dashboard(redis_url: str, token: str, *, timeout: float = 60.0, log: list[str] | None = None) -> Iterator[str]:
    """``ldptel dashboard --port 0`` in a subprocess; yields its base URL (from its first line), stops it after
    (and appends what it wrote to stderr to ``log``)."""
    env = {**os.environ, "LDPTEL_REDIS_URL": redis_url, "LDPTEL_DASHBOARD_TOKEN": token}
    proc = subprocess.Popen([sys.executable, "-m", "ldptel.aggregator.cli", "dashboard", "--port", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                raise RuntimeError(f"ldptel dashboard printed nothing in {timeout} s")
        line = proc.stdout.readline()
        if "http://" not in line:
            raise RuntimeError(f"ldptel dashboard did not start: {line}{proc.stderr.read() if proc.stderr else ''}")
        yield line.split()[2].rstrip("/")
    finally:
        proc.terminate()
        try:
            _, stderr = proc.communicate(timeout=10)  # reads and closes the pipes
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
        if log is not None:
            log.append(stderr)
