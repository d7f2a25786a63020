"""The simulated fleet: the devices' true values (seeded) and each device's life as a real
:class:`~ldptel.client.sdk.reporter.Reporter` with its own storage directory, privatizing with the OS CSPRNG
and uploading over HTTP. A thread pool runs many devices at once; their counts add up in :class:`FleetStats`.
"""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ldptel.aggregator.demo.config import (
    DARK_MODE_SHARE,
    FLAG_METRIC,
    SESSION_HIST_METRIC,
    SESSION_MEAN_METRIC,
    SESSION_MEDIAN_S,
    SESSION_SIGMA,
    SKETCH_METRIC,
    WORDS_METRIC,
    WORDS_PER_DEVICE,
)
from ldptel.aggregator.demo.distribution import Distribution
from ldptel.client.protocol.specs import MetricSpec

DEVICE_RETRY = 30.0  # seconds one device keeps retrying its upload before it gives up
DEVICE_HTTP_TIMEOUT = 5.0
DEVICE_BACKOFF = (0.05, 1.0)  # base and cap of a device's retry backoff, seconds


@dataclass(frozen=True, kw_only=True)
class Truth:
    """What each simulated device really has: dark mode on or off, and its most used emoji."""

    flags: np.ndarray  # bool per device
    picks: np.ndarray  # index into the distribution's values, per device
    true_counts: np.ndarray  # devices per value of the distribution
    seconds: np.ndarray  # session length per device (float64, unclipped)

    @classmethod
    def draw(cls, dist: Distribution, *, devices: int, seed: int) -> Truth:
        """Seeded draw of the true values (privatization inside each Reporter uses the CSPRNG, never this)."""
        rng = np.random.default_rng(seed)
        flags = rng.random(devices) < DARK_MODE_SHARE
        picks = rng.choice(len(dist.values), size=devices, p=dist.weights)
        seconds = rng.lognormal(np.log(SESSION_MEDIAN_S), SESSION_SIGMA, devices)
        return cls(flags=flags, picks=picks, true_counts=np.bincount(picks, minlength=len(dist.values)), seconds=seconds)


def draw_words(words: Distribution, *, devices: int, seed: int) -> np.ndarray:
    """Seeded draw of the words each device types (devices × WORDS_PER_DEVICE indices into ``words``)."""
    rng = np.random.default_rng([seed, 16])
    return rng.choice(len(words.values), size=(devices, WORDS_PER_DEVICE), p=words.weights)


@dataclass
class FleetStats:
    """Totals over the devices that finished (updated under ``lock`` by the device threads)."""

    delivered: int = 0
    queued: int = 0
    refused: int = 0
    undelivered_devices: int = 0
    upload_errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True, kw_only=True)
class Fleet:
    endpoint: str
    token: str
    specs: tuple[MetricSpec, ...]
    root: Path
    flags: np.ndarray  # bool per device
    values: tuple[str, ...]  # the true emoji of each device
    seconds: np.ndarray  # the true session length of each device
    keep: bool
    cancel: threading.Event
    stats: FleetStats
    words: tuple[tuple[str, ...], ...] = ()  # the words each device types (WORDS_METRIC)

    def on_error(self, _exc: Exception) -> None:
        with self.stats.lock:
            self.stats.upload_errors += 1

    def run_device(self, i: int) -> None:
        """One device: a fresh Reporter reports its flag, its emoji and its words, uploads over HTTP and shuts down."""
        from ldptel.client.sdk.reporter import Reporter

        if self.cancel.is_set():
            return
        storage = self.root / f"{i:07d}"
        backoff_base, backoff_cap = DEVICE_BACKOFF
        rep = Reporter(
            self.endpoint,
            self.token,
            storage,
            specs=self.specs,  # the specs this app was built with, fetched once over HTTP (see services.py)
            start=False,  # the fleet's thread pool uploads: flush() sends in the calling thread
            timeout=DEVICE_HTTP_TIMEOUT,
            backoff_base=backoff_base,
            backoff_cap=backoff_cap,
            on_error=self.on_error,
        )
        queued = refused = 0
        give_up = time.monotonic() + DEVICE_RETRY
        try:
            typed = [(WORDS_METRIC, w) for w in self.words[i]] if self.words else []
            seconds = float(self.seconds[i])
            for metric, value in ((FLAG_METRIC, bool(self.flags[i])), (SKETCH_METRIC, self.values[i]),
                                  (SESSION_MEAN_METRIC, seconds), (SESSION_HIST_METRIC, seconds), *typed):
                result = rep.report(metric, value)
                queued += result.queued
                refused += not result.queued
            while not rep.flush(timeout=1.0):
                if self.cancel.is_set() or time.monotonic() > give_up:
                    break
            stats = rep.stats()
        finally:
            rep.close(timeout=0.5)
        with self.stats.lock:
            self.stats.delivered += stats.delivered
            self.stats.queued += queued
            self.stats.refused += refused
            self.stats.undelivered_devices += stats.pending > 0
        if not self.keep and stats.pending == 0:
            shutil.rmtree(storage, ignore_errors=True)
