"""kill -9 of the gunicorn master (deploy/gunicorn.conf.py): its workers free the port within a bound, even with
a slow client holding a worker thread (before: the workers waited graceful_timeout, 20 s, and a thread blocked
on the slow client kept the process and the port for as long as the client stayed)."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from ldptel.storage.embedded import EmbeddedRedis
from tests.faults.slow import slow_clients
from tests.faults.stack import gunicorn, worker_pids
from tests.wait import wait_until

pytestmark = pytest.mark.slow

BOUND_SECONDS = 5.0  # MASTER_POLL_SECONDS + ORPHAN_GRACE_SECONDS = 2.25 s, plus a loaded machine's slack


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds: TIME_WAIT does not count
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_workers_of_a_killed_master_free_the_port_promptly(tmp_path: Path) -> None:
    with EmbeddedRedis(data_dir=tmp_path / "redis") as redis_server, \
            gunicorn(redis_server.url, tmp_path / "gunicorn.log", workers=2) as (port, master):
        workers = wait_until(lambda: pids if len(pids := worker_pids(master.pid)) == 2 else None,
                             what="both gunicorn workers")
        assert len(workers) == 2
        time.sleep(0.5)  # both workers are past post_worker_init
        try:
            with slow_clients(port, 4):  # threads blocked reading slow requests, as in production
                t0 = time.monotonic()
                master.send_signal(signal.SIGKILL)
                master.wait(timeout=10)
                while not _port_free(port) and time.monotonic() - t0 < 30:
                    time.sleep(0.05)
                freed = time.monotonic() - t0
                while any(_alive(pid) for pid in workers) and time.monotonic() - t0 < 30:
                    time.sleep(0.05)
                gone = time.monotonic() - t0
            print(f"port free after {freed:.2f} s, workers gone after {gone:.2f} s")
            assert freed < BOUND_SECONDS and gone < BOUND_SECONDS, (freed, gone)
        finally:
            for pid in workers:
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
