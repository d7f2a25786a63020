"""Aggregator test helpers: ingest through the real app (or the server's appender for chosen days), run the
worker, and run ``ldptel`` as a real subprocess. Redis, the app and the test client come from the root
``tests/conftest.py``; the fixtures are in this folder's ``conftest.py``."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis as redis_lib
from flask.testing import FlaskClient

from ldptel.aggregator.cli import main
from ldptel.aggregator.worker import Worker, WorkerConfig, WorkerStats
from ldptel.client import MetricSpec, ReportBatch, SketchState, encode_batch, fold, privatize_batch
from ldptel.storage import registry
from ldptel.storage.append import BatchAppender
from ldptel.storage.registry import MetricRecord

OCTET = "application/octet-stream"


@dataclass
class Ingested:
    """What a test sent: the batches (to fold locally for exact comparisons) and the true values."""

    record: MetricRecord
    batches: list[ReportBatch]
    values: list[Any]

    @property
    def n(self) -> int:
        return sum(b.n for b in self.batches)

    def expected_state(self) -> SketchState:
        return fold(self.record.current.params, self.batches)


def post_reports(
    client: FlaskClient,
    token: str,
    record: MetricRecord,
    values: Sequence[Any],
    rng: np.random.Generator,
    *,
    batch_size: int = 1000,
) -> Ingested:
    """Privatize ``values`` in batches and POST each to /v1/reports (asserting 202, no duplicates)."""
    spec = record.current
    batches: list[ReportBatch] = []
    for lo in range(0, len(values), batch_size):
        batch = privatize_batch(list(values[lo : lo + batch_size]), spec.params, rng=rng)
        data = encode_batch(metric=spec.name, version=spec.version, batch_id=os.urandom(16), batch=batch, params=spec.params)
        resp = client.post("/v1/reports", data=data, content_type=OCTET, headers={"Authorization": f"Bearer {token}"})
        assert resp.status_code == 202, resp.get_data(as_text=True)
        assert resp.get_json()["duplicate"] is False
        batches.append(batch)
    return Ingested(record=record, batches=batches, values=list(values))


def append_reports(
    r: redis_lib.Redis,
    record: MetricRecord,
    values: Sequence[Any],
    rng: np.random.Generator,
    *,
    day: str,
    batch_size: int = 1000,
    version: int | None = None,
) -> Ingested:
    """Append batches for a chosen UTC day with the server's own appender (the app always stamps today)."""
    spec = record.versions[version or record.current_version]
    batches: list[ReportBatch] = []
    with closing(BatchAppender(r)) as appender:
        for lo in range(0, len(values), batch_size):
            batch = privatize_batch(list(values[lo : lo + batch_size]), spec.params, rng=rng)
            bid = os.urandom(16)
            data = encode_batch(metric=spec.name, version=spec.version, batch_id=bid, batch=batch, params=spec.params)
            res = appender.append(
                metric=spec.name, shards=record.shards, batch_id=bid, version=spec.version, n=batch.n, data=data,
                day=day, dedupe_days=1,
            )
            assert not res.duplicate
            batches.append(batch)
    return Ingested(record=record, batches=batches, values=list(values))


def create(r: redis_lib.Redis, spec: MetricSpec, *, shards: int = 4) -> MetricRecord:
    return registry.create_metric(r, spec, shards=shards)


def drain(r: redis_lib.Redis, **config: Any) -> WorkerStats:
    """Run one in-process worker with ``--once`` semantics."""
    config.setdefault("once", True)
    return Worker(r, WorkerConfig(**config)).run()


def ldptel(*args: str, redis_url: str, timeout: float = 60.0, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the real ``ldptel`` console entry point in a subprocess."""
    env = {**os.environ, "LDPTEL_REDIS_URL": redis_url}
    proc = subprocess.run(
        [sys.executable, "-m", "ldptel.aggregator.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def ldptel_popen(*args: str, redis_url: str) -> subprocess.Popen[str]:
    env = {**os.environ, "LDPTEL_REDIS_URL": redis_url}
    return subprocess.Popen(
        [sys.executable, "-m", "ldptel.aggregator.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``ldptel ARGV`` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()
