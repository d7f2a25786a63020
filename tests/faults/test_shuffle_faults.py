"""Exactly once through the shuffle stage (issue 28): kill -9 at its worst moments, then fold, 0 lost, 0 doubled.

A release is one Lua script (XADD the block, XDEL the held uploads, drop their digests, count): these tests kill
what can be killed around it and check the invariant after every kill — every acknowledged report is either still
held or in exactly one released block, never both, never neither — then fold and compare with the fold of the
uploads themselves, counter for counter.

* the shuffler process (a real subprocess running :class:`~ldptel.storage.shuffle.Shuffler`) gets SIGKILL right
  before a release script is sent (after it read and shuffled the uploads), and right after one returned (the
  block written, the held entries deleted, nothing else done yet), at the 1st and at a later block;
* Redis gets SIGKILL right after a release was acknowledged (appendfsync always), and restarts from its AOF;
* the AOF is cut in the middle of a release's MULTI/EXEC (a torn write at power loss): Redis loads the log up to
  the transaction before it, so the release is undone whole and its uploads are held again.

The fold worker's own kill -9 (mid-shuffle or mid-fold, under load) is ``aggregator_kill9`` in the fault suite
(tests/faults/harness.py, whose aggregators run the stage with real blocks).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import redis as redis_lib

from ldptel.client import CmsParams, MetricSpec, ReportBatch, fold
from ldptel.client.protocol.wire import decode_batch
from ldptel.storage import keys
from ldptel.storage.append import utc_day
from ldptel.storage.embedded import EmbeddedRedis
from ldptel.storage.shuffle import ShuffleConfig
from tests.aggregator.agg_helpers import Ingested, append_reports, create, drain

pytestmark = pytest.mark.slow  # Redis restarts and a subprocess per case: ~20 s in all

SPEC = MetricSpec(name="kill.sh", params=CmsParams(epsilon=2.0, k=4, m=64), reports_per_day=4)
UPLOADS, PER = 12, 5
ROOT = Path(__file__).resolve().parents[2]

_SHUFFLER = textwrap.dedent("""
    import os, signal, sys
    import redis
    from ldptel.storage import registry
    from ldptel.storage.shuffle import ShuffleConfig, Shuffler

    url, metric, moment, at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    r = redis.Redis.from_url(url)
    shuffler = Shuffler(r, lambda m, v: registry.spec_for(registry.get_metric(r, m), v).params,
                        ShuffleConfig(n_min=3, max_block_uploads=3, hold_seconds=3600))
    script = shuffler._release
    calls = [0]

    def release(*args, **kwargs):
        calls[0] += 1
        if calls[0] == at and moment == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        result = script(*args, **kwargs)
        if calls[0] == at and moment == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    shuffler._release = release
    shuffler.shuffle(metric, 0)
    sys.exit(3)  # never reached: the kill comes first
""")


def _batches(r: redis_lib.Redis, key: str) -> list[ReportBatch]:
    return [decode_batch(fields[b"b"], SPEC.params)[1] for _, fields in r.xrange(key)]


def _check_invariant(r: redis_lib.Redis, sent: Ingested) -> tuple[int, int]:
    """Held + released = exactly what was acknowledged (as a fold, counter for counter); (held, blocks)."""
    held = _batches(r, keys.held(SPEC.name, 0))
    released = _batches(r, keys.stream(SPEC.name, 0))
    assert fold(SPEC.params, held + released).equals(sent.expected_state()), "a report lost or doubled at rest"
    return len(held), len(released)


def _fold_and_check(r: redis_lib.Redis, sent: Ingested) -> None:
    stats = drain(r, shuffle=ShuffleConfig(n_min=3, max_block_uploads=0, hold_seconds=0))
    assert r.xlen(keys.held(SPEC.name, 0)) == 0
    from tests.faults.harness import _total

    assert _total(r, SPEC.name).equals(sent.expected_state()), stats


@pytest.fixture
def server(tmp_path: Path) -> EmbeddedRedis:
    with EmbeddedRedis(appendonly=True, data_dir=tmp_path / "redis", appendfsync="always") as redis_server:
        yield redis_server  # type: ignore[misc]


def _setup(r: redis_lib.Redis) -> Ingested:
    record = create(r, SPEC, shards=1)
    return append_reports(r, record, [f"v{i % 9}" for i in range(UPLOADS * PER)], np.random.default_rng(4),
                          day=utc_day(), batch_size=PER)


@pytest.mark.parametrize(("moment", "at"), [("before", 1), ("after", 1), ("before", 3), ("after", 3)])
def test_kill_9_of_the_shuffler_around_a_release(server: EmbeddedRedis, moment: str, at: int) -> None:
    r = server.client()
    try:
        sent = _setup(r)
        proc = subprocess.run([sys.executable, "-c", _SHUFFLER, server.url, SPEC.name, moment, str(at)],
                              cwd=ROOT, capture_output=True, timeout=60)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
        held, blocks = _check_invariant(r, sent)
        assert blocks == (at if moment == "after" else at - 1)  # 3 uploads a block: the kill came where intended
        assert held == UPLOADS - 3 * blocks
        _fold_and_check(r, sent)
    finally:
        r.close()


def test_kill_9_of_redis_right_after_a_release(server: EmbeddedRedis) -> None:
    r = server.client()
    sent = _setup(r)
    from ldptel.storage import registry
    from ldptel.storage.shuffle import Shuffler

    shuffler = Shuffler(r, lambda m, v: registry.spec_for(registry.get_metric(r, m), v).params,
                        ShuffleConfig(n_min=3, max_block_uploads=3, hold_seconds=3600))
    entries = r.xrange(keys.held(SPEC.name, 0), count=3)
    group = {k: v for k, v in entries[0][1].items() if k not in (b"b", b"n")}
    assert shuffler._release_block(SPEC.name, 0, group, entries, n_min=3) == 3 * PER
    r.close()
    server.kill()  # SIGKILL: the release was acknowledged, so (appendfsync always) it is in the AOF
    server.start()
    r = server.client()
    try:
        assert _check_invariant(r, sent) == (UPLOADS - 3, 1)
        _fold_and_check(r, sent)
    finally:
        r.close()


def test_a_release_torn_in_the_aof_is_undone_whole(server: EmbeddedRedis) -> None:
    r = server.client()
    sent = _setup(r)
    from ldptel.storage import registry
    from ldptel.storage.shuffle import Shuffler

    shuffler = Shuffler(r, lambda m, v: registry.spec_for(registry.get_metric(r, m), v).params,
                        ShuffleConfig(n_min=3, max_block_uploads=3, hold_seconds=3600))
    assert shuffler.shuffle(SPEC.name, 0).blocks == UPLOADS // 3
    r.close()
    server.kill()
    incr = max((p for p in server.data_dir.rglob("*.incr.aof")), key=lambda p: p.stat().st_size)
    log = incr.read_bytes()
    last = log.rfind(b"MULTI")
    assert last > 0 and log.find(b"EXEC", last) > last, "a release is logged as one MULTI/EXEC"
    cut = last + (log.find(b"EXEC", last) - last) // 2  # in the middle of the last release
    incr.write_bytes(log[:cut])
    server.start()
    r = server.client()
    try:
        held, blocks = _check_invariant(r, sent)
        assert (held, blocks) == (3, UPLOADS // 3 - 1)  # the torn release is undone, its uploads held again
        _fold_and_check(r, sent)
    finally:
        r.close()
