"""EmbeddedRedis: a real server, AOF that survives SIGKILL, no process left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis as redis_lib

from ldptel.storage.embedded import EmbeddedRedis, EmbeddedRedisError, find_server_binary
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
