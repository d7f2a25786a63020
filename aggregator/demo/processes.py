"""The demo's child processes: each started as the leader of its own process group, watched, and stopped
(SIGTERM to the group, then SIGKILL) whatever happens to the demo.

On Linux a child also gets SIGTERM from the kernel if the demo dies without cleaning up (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ldptel.aggregator.demo.errors import DemoFailure

STOP_TIMEOUT = 5.0  # seconds between SIGTERM and SIGKILL of a child process group
LOG_TAIL_LINES = 8
_PR_SET_PDEATHSIG = 1


def _pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGTERM if the demo dies without cleaning up (e.g. SIGKILL)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path


class Children:
    """Child processes, each the leader of its own process group; :meth:`stop_all` ends every group."""

    def __init__(self) -> None:
        self.children: list[Child] = []

    def start(self, name: str, argv: Sequence[str], *, env: dict[str, str], log_path: Path) -> Child:
        """Start ``argv`` with stdout and stderr appended to ``log_path``."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_file:
            proc = subprocess.Popen(
                list(argv),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: Ctrl-C reaches only the demo, which stops it
                preexec_fn=_pdeathsig if sys.platform.startswith("linux") else None,
            )
        child = Child(name, proc, log_path)
        self.children.append(child)
        return child

    def stop(self, child: Child, *, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM the child's process group, wait, then SIGKILL whatever is left of the group."""
        proc = child.proc
        pgid = proc.pid  # start_new_session: the child leads a group with its own pid
        if proc.poll() is None:
            _signal_group(pgid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(pgid, signal.SIGKILL)
                proc.wait(timeout)
        _signal_group(pgid, signal.SIGKILL)  # stragglers of the group (gunicorn workers)
        _wait_group_gone(pgid, timeout=timeout)

    def stop_all(self) -> None:
        for child in reversed(self.children):
            with contextlib.suppress(Exception):
                self.stop(child)

    def check(self) -> None:
        """Raise :class:`DemoFailure` (with the end of its log) if any child has exited."""
        for child in self.children:
            code = child.proc.poll()
            if code is not None:
                raise DemoFailure(
                    f"the {child.name} process exited with status {code}; its log ends with:\n{log_tail(child.log_path)}"
                )


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_group_gone(pgid: int, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.02)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a child's log, indented (empty if it cannot be read)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


def free_port() -> int:
    """A loopback port free right now (a server started on it may still lose a race for it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])

