"""Acknowledged means stored, with the shipped Redis config (deploy/redis.conf: ``appendfsync always``): Redis
is killed with SIGKILL the moment a batch was acknowledged, again and again under load, while a competing
writer keeps the disk busy so Redis's AOF fsyncs are slow (the window in which ``everysec`` replies before its
postponed AOF write: the old shipped config lost acknowledged batches here). Each kill is followed by a restart
on the same data dir, a drain and the fault suite's audit: 0 lost, 0 doubled."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.harness import FaultRun

pytestmark = pytest.mark.slow

KILLS = 6


def test_kill9_right_after_an_ack_loses_nothing_with_the_shipped_config(tmp_path: Path) -> None:
    with FaultRun(tmp_path, raw_clients=4, reporters=1, batch=100) as run:
        for _ in range(KILLS):
            result = run.scenario("redis_kill9_after_ack", load_seconds=0.5)
            assert result["lost"] == 0 and result["doubled"] == 0, result
            assert result["raw_sketch_equal"] and result["sdk_sketch_equal"], result
            assert result["reporters_pending"] == 0, result
            assert result["http_5xx_other_than_503"] == 0, result
        assert result["acknowledged_batches"] > 0
