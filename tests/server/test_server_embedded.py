"""EmbeddedRedis: a real server, AOF that survives SIGKILL, no process left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis as redis_lib

from ldptel.storage.embedded import EmbeddedRedis, EmbeddedRedisError, find_server_binary
from tests.disk_pressure import DiskPressure, fsync_backlog
from tests.wait import wait_until


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_kill_and_restart_keeps_acknowledged_writes(tmp_path: Path) -> None:
    server = EmbeddedRedis(data_dir=tmp_path)
    with server:
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        r = server.client()
        assert r.config_get("appendonly") == {"appendonly": "yes"}
        assert r.config_get("rdbcompression") == {"rdbcompression": "no"}  # as deploy/redis.conf
        r.xadd("s", {"b": b"\x00\xff" * 1000})
        port, pid = server.port, server.pid
        r.close()
        server.kill()
        assert server.pid is None and not _alive(pid)
        server.start()
        assert server.port == port and server.pid != pid
        r = server.client()
        assert r.xlen("s") == 1
        r.close()
    assert server.pid is None
    assert any(tmp_path.iterdir())  # a given data dir is kept


@pytest.mark.slow
def test_default_server_keeps_a_write_acknowledged_just_before_kill9_under_disk_pressure(tmp_path: Path) -> None:
    """The default is durable: every reply follows its AOF fsync. Under ``everysec`` (the old default, which the
    ingest tests' private servers used) a busy disk makes Redis postpone its AOF write for up to 2 s while it
    still replies, and kill -9 then loses writes it acknowledged: the cause of ingest tests that once lost
    acknowledged batches under load. Writes are acknowledged one by one; Redis is killed right after a reply
    that came while (under everysec) writes wait behind a background fsync."""
    server = EmbeddedRedis(data_dir=tmp_path / "redis")
    with server, DiskPressure(tmp_path / "pressure.bin"):
        r, probe = server.client(), server.client()
        assert r.config_get("appendfsync") == {"appendfsync": "always"}
        acked = 0
        backlog_at = None
        deadline = time.monotonic() + 3  # under always there is no backlog to wait for: 3 s of writes and kill
        while time.monotonic() < deadline:
            r.xadd("s", {"b": b"x" * 100})
            acked += 1
            if fsync_backlog(probe):  # acknowledged writes wait in Redis's memory for their AOF write
                backlog_at = acked
                break
        r.close()
        probe.close()
        server.kill()
        server.start()
        r = server.client()
        assert r.xlen("s") == acked, f"{acked - r.xlen('s')} acknowledged writes lost (backlog seen: {backlog_at})"
        r.close()


def test_temporary_dir_is_removed_and_stop_is_idempotent() -> None:
    server = EmbeddedRedis(appendonly=False).start()
    data_dir, pid = server.data_dir, server.pid
    assert server.client().ping()
    server.stop()
    server.stop()
    assert not data_dir.exists() and pid is not None and not _alive(pid)


def test_fixed_port_in_use_fails_cleanly(redis_server: EmbeddedRedis) -> None:
    with pytest.raises(EmbeddedRedisError, match="another process|exited|PING"):
        EmbeddedRedis(port=redis_server.port).start()


@pytest.mark.slow
def test_no_server_left_when_the_owner_is_killed(tmp_path: Path) -> None:
    code = (
        "import os, sys; from ldptel.storage.embedded import EmbeddedRedis;"
        "s = EmbeddedRedis().start(); print(s.port, s.pid, flush=True); sys.stdin.read()"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    port, pid = map(int, proc.stdout.readline().split())
    proc.kill()  # SIGKILL: no atexit; the kernel's parent-death signal stops the server
    proc.wait()
    proc.stdout.close()
    assert proc.stdin is not None
    proc.stdin.close()
    wait_until(lambda: not _alive(pid), what="the server to exit with its parent")
    with pytest.raises(redis_lib.ConnectionError):
        redis_lib.Redis(port=port, socket_connect_timeout=0.5).ping()


def test_binary_found() -> None:
    binary = find_server_binary()
    assert binary.name in ("redis-server", "valkey-server") and os.access(binary, os.X_OK)


def test_a_cluster_node_gets_a_port_whose_bus_port_fits_below_the_ephemeral_range(tmp_path: Path) -> None:
    """A cluster node listens on port + 10000 too and refuses a port above 55535. Ports from bind(0) come from
    the ephemeral range (32768-60999), often several neighbours in a row above 55535: every start attempt of a
    node failed that way once in CI. A node's port now leaves its bus port below 32768."""
    node = EmbeddedRedis(data_dir=tmp_path, appendonly=False, extra_args=("--cluster-enabled", "yes"))
    node.start()
    try:
        assert node.port + 10000 <= 32767
        client = node.client()
        assert client.ping()
        client.close()
    finally:
        node.stop()
