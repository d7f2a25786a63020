"""The tuning of one fold worker (:class:`WorkerConfig`), its defaults as named constants, and their checks.

The ``ldptel aggregate`` options map one to one onto the fields; the defaults are defined here only.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import uuid
from dataclasses import dataclass, field

from ldptel.client.protocol.validate import check_int, check_number
from ldptel.storage.shuffle import ShuffleConfig

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_BLOCK_SECONDS",
    "DEFAULT_CHECKPOINT_EVERY",
    "DEFAULT_CHECKPOINT_SECONDS",
    "DEFAULT_LEASE_TTL",
    "DEFAULT_RESCAN_SECONDS",
    "DEFAULT_RETENTION_SECONDS",
    "DEFAULT_SEAL_SECONDS",
    "MIN_LEASE_TTL",
    "WorkerConfig",
    "default_worker_id",
]

DEFAULT_BATCH = 1000  # stream entries per XREAD
DEFAULT_CHECKPOINT_EVERY = 100_000  # entries read since a shard's last commit that make it commit
DEFAULT_CHECKPOINT_SECONDS = 1.0  # ... or seconds since it
DEFAULT_LEASE_TTL = 10.0  # seconds a lease lives without renewal
DEFAULT_BLOCK_SECONDS = 1.0  # longest wait for new entries
DEFAULT_RETENTION_SECONDS = 3600.0  # folded entries older than this are trimmed
DEFAULT_RESCAN_SECONDS = 5.0  # look for new shards and rebalance this often
DEFAULT_SEAL_SECONDS = 600.0  # seal the days that can no longer change this often (ldptel.storage.sealed)


def _env_horizon() -> int:
    """LDPTEL_RETRY_HORIZON_DAYS (the ingest's setting: days a batch may be retried), else its default."""
    from ldptel.client.protocol.wire import DEFAULT_RETRY_HORIZON_DAYS, MAX_RETRY_HORIZON_DAYS

    raw = os.environ.get("LDPTEL_RETRY_HORIZON_DAYS", "").strip()
    if not raw:
        return DEFAULT_RETRY_HORIZON_DAYS
    try:
        value = int(raw)
    except ValueError:
        value = -1
    check_int("LDPTEL_RETRY_HORIZON_DAYS", value, 0, MAX_RETRY_HORIZON_DAYS)
    return value
MIN_LEASE_TTL = 0.5  # seconds: the shortest lease accepted
_NO_LIMIT = sys.maxsize  # counts have no upper bound of their own


def default_worker_id() -> str:
    """``host:pid:random``: unique per process, and says where the worker runs."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """Tuning of one fold worker.

    metrics: names to fold (empty: every metric in the registry, rescanned every ``rescan_seconds``).
    batch: stream entries per XREAD. checkpoint_every / checkpoint_seconds: commit a shard when
    either that many entries were read since its last commit or that much time passed. lease_ttl: seconds
    a lease lives without renewal (renewed every third of it). retention_seconds: folded entries older than
    this are trimmed (0: trimmed at the commit that folds them). seal_seconds: seal the days that can no longer
    change this often (inf: never); seal_after_once: a ``once`` worker seals what is due after draining (else
    it does not seal: ``ldptel seal`` does); retry_horizon_days: the
    ingest's ``LDPTEL_RETRY_HORIZON_DAYS`` (read from the environment by default), which decides when a day can no
    longer change. once: drain what is there and stop.
    prefetch: read a shard's next batch while folding the current one. shuffle: the shuffle stage this worker
    runs on the shards it leases before folding them (:mod:`ldptel.storage.shuffle`); None: it folds only what a
    separate ``ldptel shuffle`` process releases. A ``once`` worker releases every held upload of its shards (a group
    short of n_min as a block marked below n_min: no central ε for that day). Invalid values raise
    :class:`~ldptel.client.errors.InvalidParameterError` (a ``ValueError``).
    """

    metrics: tuple[str, ...] = ()
    batch: int = DEFAULT_BATCH
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
    checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS
    lease_ttl: float = DEFAULT_LEASE_TTL
    block_seconds: float = DEFAULT_BLOCK_SECONDS
    retention_seconds: float = DEFAULT_RETENTION_SECONDS
    rescan_seconds: float = DEFAULT_RESCAN_SECONDS
    seal_seconds: float = DEFAULT_SEAL_SECONDS
    seal_after_once: bool = False
    retry_horizon_days: int = field(default_factory=_env_horizon)
    once: bool = False
    prefetch: bool = True
    shuffle: ShuffleConfig | None = field(default_factory=ShuffleConfig)
    worker_id: str = field(default_factory=default_worker_id)

    def __post_init__(self) -> None:
        check_int("batch", self.batch, 1, _NO_LIMIT)
        check_int("checkpoint_every", self.checkpoint_every, 1, _NO_LIMIT)
        check_number("checkpoint_seconds", self.checkpoint_seconds, 0.0, math.inf, open_interval=True, allow_inf=True)
        check_number("lease_ttl", self.lease_ttl, MIN_LEASE_TTL, math.inf)
        check_number("retention_seconds", self.retention_seconds, 0.0, math.inf)
        check_number("rescan_seconds", self.rescan_seconds, 0.0, math.inf, open_interval=True, allow_inf=True)
        check_number("block_seconds", self.block_seconds, 0.0, math.inf, open_interval=True)
        check_number("seal_seconds", self.seal_seconds, 0.0, math.inf, open_interval=True, allow_inf=True)
        check_int("retry_horizon_days", self.retry_horizon_days, 0, 30)
