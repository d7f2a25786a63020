"""Acknowledged means stored, with the shipped Redis config (deploy/redis.conf: ``appendfsync always``): Redis
is killed with SIGKILL the moment a batch was acknowledged, again and again under load, while a competing
writer keeps the disk busy so Redis's AOF fsyncs are slow (the window in which ``everysec`` replies before its
postponed AOF write: the old shipped config lost acknowledged batches here). Each kill is followed by a restart
on the same data dir, a drain and the fault suite's audit: 0 lost, 0 doubled.

Three kills are enough to catch the old config: run against a copy of deploy/redis.conf with ``appendfsync
everysec`` (``FaultRun(..., redis_config=that_copy)``; the harness then aims each kill at an acknowledgement
made while writes wait behind a running fsync), this test failed 10 runs of 10 (2026-11-27): 8 at the first
kill (7 losing 100 to 200 acknowledged reports, 1 with the aggregators never catching up on a stream that had
lost its acknowledged tail), 2 at the second; of the 11 kills whose audit ran, 9 lost acknowledged batches.
Under ``always`` there is no such window to aim at (a reply follows the fsync of its write): each kill follows
the first acknowledgement under disk pressure."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.harness import FaultRun

pytestmark = pytest.mark.slow

KILLS = 3


def test_kill9_right_after_an_ack_loses_nothing_with_the_shipped_config(tmp_path: Path) -> None:
    with FaultRun(tmp_path, raw_clients=2, reporters=1, batch=100) as run:
        for _ in range(KILLS):
            result = run.scenario("redis_kill9_after_ack", load_seconds=0.2)
            assert result["lost"] == 0 and result["doubled"] == 0, result
            assert result["raw_sketch_equal"] and result["sdk_sketch_equal"], result
            assert result["reporters_pending"] == 0, result
            assert result["http_5xx_other_than_503"] == 0, result
        assert result["acknowledged_batches"] > 0
