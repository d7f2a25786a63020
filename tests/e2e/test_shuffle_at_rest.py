"""Issue 28, the at-rest proof of the shuffle stage: after a real run (real gunicorn ingest, the real fold with its
shuffle stage, Redis with the AOF on), nothing at rest links two reports of one upload or tells their arrival
order beyond the released block: not a key, a value, an expiry, nor a byte of the AOF files.

The test knows every report it sent: a cms report here is 32 random-looking bytes (m = 256), unique among the
240 sent, so a report is found by its bytes and mapped back to its upload and its place in that upload. Then:

* no 16-byte batch id is stored anywhere (the released block carries zeros);
* no stored entry holds exactly one upload's reports (an upload boundary);
* two reports of one upload, adjacent and in their upload's order, occur in the stored bytes no more often than a
  uniform shuffle puts them there by chance. Every copy at rest (memory, AOF) is the same block, one uniform
  permutation of N = 240 reports; any k given in-order pairs are all adjacent with probability at most
  (N − k)!/N!, so X, the number of the U(r − 1) = 210 pairs found, has P(X ≥ 10) ≤ E[C(X, 10)] ≤
  C(210, 10)·230!/240! = 7e-8 (Markov on the 10th binomial moment; mean 210/240 = 0.875). Stored unshuffled,
  all 210 are there;
* the stored order of the reports says nothing about the order of the uploads: the rank correlation between a
  report's position in the fold's input and its upload's arrival index is within 6/√(N − 1) of 0 (its standard
  deviation under a uniform permutation is 1/√(N − 1)); stored in arrival order it is ≈ 1.

Against the storage before the stage (one stream entry per upload in arrival order) every check fails; the run
is the same (the settings it passes are environment variables the old code ignores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ldptel.client import CmsParams, MetricSpec, encode_batch, privatize_batch
from ldptel.client.protocol.wire import decode_batch
from ldptel.storage import registry
from ldptel.storage import sketches as store
from ldptel.storage.embedded import EmbeddedRedis
from tests.e2e.test_privacy_scan import _redis_dump
from tests.server.test_server_http import ADMIN_TOKEN, APP_TOKEN, Http, _env, _free_port, _gunicorn, _stop, _wait_http
from tests.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
SPEC = MetricSpec(name="rest.page", params=CmsParams(epsilon=2.0, k=4, m=256), reports_per_day=4)
UPLOADS, PER = 30, 8
pytestmark = pytest.mark.slow


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, EmbeddedRedis]]:
    with EmbeddedRedis(appendonly=True, data_dir=tmp_path / "redis") as server:
        port = _free_port()
        log = tmp_path / "gunicorn.log"
        proc = _gunicorn(port, server.url, log)
        try:
            _wait_http(port, proc, log)
            yield port, server
        finally:
            _stop(proc)


def _send(port: int) -> tuple[list[bytes], list[np.ndarray]]:
    """Create the metric (one shard) and post the uploads in order: (batch ids, each upload's report bits)."""
    http = Http(port)
    body = json.dumps({**{k: v for k, v in SPEC.to_dict().items() if k != "version"}, "shards": 1}).encode()
    assert http.request("POST", "/v1/metrics", body, token=ADMIN_TOKEN, content_type="application/json")[0] in (200, 201)
    rng = np.random.default_rng(28)
    ids, bits = [], []
    for u in range(UPLOADS):
        batch = privatize_batch([f"page{u}-{i}" for i in range(PER)], SPEC.params, rng=rng)
        bid = os.urandom(16)
        data = encode_batch(metric=SPEC.name, version=1, batch_id=bid, batch=batch, params=SPEC.params)
        status, _, _ = http.request("POST", "/v1/reports", data, token=APP_TOKEN, content_type="application/octet-stream")
        assert status == 202
        ids.append(bid)
        bits.append(np.asarray(batch.bits))
    http.close()
    return ids, bits


def _fold(server: EmbeddedRedis, tmp: Path) -> None:
    """The real fold, once; its shuffle stage cuts one block of all uploads and asks for an AOF rewrite after it."""
    env = {**_env(server.url), "LDPTEL_SHUFFLE_N_MIN": str(UPLOADS), "LDPTEL_SHUFFLE_MAX_BLOCK_UPLOADS": "0",
           "LDPTEL_SHUFFLE_PURGE_SECONDS": "0"}
    with (tmp / "worker.log").open("w") as err:
        proc = subprocess.run([sys.executable, "-m", "ldptel.aggregator.cli", "aggregate", "--once", "--no-progress",
                               "--retention", "86400"], env=env, stdout=subprocess.DEVNULL, stderr=err,
                              timeout=120, cwd=ROOT)
    assert proc.returncode == 0, (tmp / "worker.log").read_text()
    r = server.client()
    try:
        record = registry.get_metric(r, SPEC.name)
        index = store.sketch_index(r, SPEC.name, record.shards)
        pairs = [(s, v, d) for s, members in index.items() for v, d in members]
        assert store.sum_sketches(r, SPEC.name, params=SPEC.params, pairs=pairs)[0].n == UPLOADS * PER  # all folded

        def rewritten() -> bool:  # a rewrite the worker asked for has ended (none under way or scheduled)
            info = r.info("persistence")
            return not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]

        wait_until(rewritten, timeout=60, what="the AOF rewrite to end")
        r.execute_command("CONFIG", "SET", "appendfsync", "always")
        r.set("rest:flush", "1")  # one more write: the AOF buffer reaches the file
    finally:
        r.close()
    time.sleep(1.2)  # appendfsync everysec before the switch


@pytest.mark.timeout(240)
def test_nothing_at_rest_links_the_reports_of_an_upload_or_their_order(
    served: tuple[int, EmbeddedRedis], tmp_path: Path
) -> None:
    port, server = served
    ids, bits = _send(port)
    _fold(server, tmp_path)
    r = server.client()
    try:
        dump = _redis_dump(r)
        entries = [(key, fields) for key in r.scan_iter(count=1000) if r.type(key) == b"stream"
                   for _, fields in r.xrange(key)]
    finally:
        r.close()
    blobs = {f"redis key {k}": v for k, v in dump.items()}
    aof = [p for p in server.data_dir.rglob("*") if p.is_file() and "aof" in p.name.lower()]
    assert aof
    blobs.update({f"AOF {p.name}": p.read_bytes() for p in aof})

    # no batch id
    found_ids = [where for where, blob in blobs.items() for bid in ids if bid in blob]
    assert found_ids == [], f"batch ids stored in {sorted(set(found_ids))}"

    # no upload boundary: map every stored report to (upload, place)
    where_is = {row.tobytes(): (u, i) for u, rows in enumerate(bits) for i, row in enumerate(rows)}
    stored: list[tuple[int, int]] = []  # (upload, place) of the reports the fold reads, in stored order
    boundaries = 0
    for _key, fields in entries:
        if b"b" not in fields:
            continue
        try:
            _, batch = decode_batch(fields[b"b"], SPEC.params)
        except Exception:
            continue
        owners = [where_is[row.tobytes()] for row in np.asarray(batch.bits)]
        stored += owners
        boundaries += len({u for u, _ in owners}) == 1 and len(owners) == PER
    assert sorted(stored) == sorted(where_is.values()), "every report stored exactly once where the fold reads"
    assert boundaries == 0, f"{boundaries} stored entries hold exactly one upload's reports"

    # adjacent in-order pairs of one upload, anywhere at rest
    pairs = {rows[i].tobytes() + rows[i + 1].tobytes() for rows in bits for i in range(PER - 1)}
    hits = {pair for pair in pairs if any(pair in blob for blob in blobs.values())}
    assert len(hits) < 10, f"{len(hits)} of {len(pairs)} in-order pairs of one upload are stored side by side"

    # arrival order: rank correlation of stored position with the upload's arrival index
    n = len(stored)
    arrival = np.array([u for u, _ in stored], dtype=np.float64)
    position = np.arange(n, dtype=np.float64)
    ranks = np.argsort(np.argsort(arrival, kind="stable"), kind="stable").astype(np.float64)
    rho = float(np.corrcoef(position, ranks)[0, 1])
    assert abs(rho) < 6 / np.sqrt(n - 1), f"stored order correlates with arrival order: rho = {rho:.3f}"
