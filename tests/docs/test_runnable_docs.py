"""Every shell block the docs mark ``<!-- runnable: NAME -->`` runs, verbatim, against a real stack.

The Quick Start of the README is the first: a real Redis, ``ldptel metrics apply``, ``ldptel serve``, a Python app
with 100 ``Reporter``s, ``aggregate --once``, ``estimate`` and ``dashboard``. The only edit is the port numbers
(6379, 8000, 8050 become free ports, so runs in parallel cannot collide). A documented command that stops
working fails here."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
PORTS = (6379, 8000, 8050)


def runnable_blocks() -> dict[str, tuple[Path, str]]:
    found: dict[str, tuple[Path, str]] = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"<!-- runnable: ([\w-]+) -->\n(?:<!--.*?-->\n)*```(?:bash|sh)\n(.*?)^```", text, re.S | re.M):
            assert m.group(1) not in found, f"two runnable blocks named {m.group(1)}"
            found[m.group(1)] = (path, m.group(2))
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_quick_start_is_marked_runnable() -> None:
    blocks = runnable_blocks()
    assert "quickstart" in blocks and blocks["quickstart"][0].name == "README.md"
    assert len(blocks["quickstart"][1].splitlines()) <= 45  # "about 30 lines" of commands and app


def _commands(script: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and blank lines left out (heredoc bodies stay)."""
    lines = re.sub(r"\\\n\s*", " ", script).splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


@pytest.mark.parametrize("name", sorted(runnable_blocks()))
def test_a_block_waits_for_each_server_it_starts_in_the_background(name: str) -> None:
    """A server started with ``&`` is not ready when the next command runs: the next command waits for it
    (``until ...; do sleep ...; done``), unless the block ends there. The Quick Start once went on to
    ``ldptel metrics apply`` 10 ms before its Redis listened, which failed a loaded full run."""
    commands = _commands(runnable_blocks()[name][1])
    for i, command in enumerate(commands[:-1]):
        if command.endswith("&") and not command.endswith("&&"):
            assert commands[i + 1].startswith("until "), f"{name}: nothing waits for `{command}` before `{commands[i + 1]}`"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(runnable_blocks()))
def test_a_runnable_block_runs_verbatim(name: str, tmp_path: Path) -> None:
    _, script = runnable_blocks()[name]
    ports = {old: _free_port() for old in PORTS}
    for old, new in ports.items():
        script = re.sub(rf"(?<!\d){old}(?!\d)", str(new), script)
    (tmp_path / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    (tmp_path / "block.sh").write_text("set -euo pipefail\n" + script, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPTEL_")}
    env.update(PYTHONUNBUFFERED="1", NO_COLOR="1")
    # The docs assume the virtual environment is active (the Quick Start activates it itself).
    env["PATH"] = f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    log = tmp_path / "block.log"  # a file, not a pipe: the block's background services keep their stdout open
    with log.open("w") as sink:
        proc = subprocess.Popen(["bash", "block.sh"], cwd=tmp_path, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        proc.wait(timeout=240)
        out = log.read_text(encoding="utf-8", errors="replace")
        assert proc.returncode == 0, out[-4000:]
        if name == "quickstart":
            # Estimates for the listed emoji and the dark-mode share were printed, and the dashboard answers.
            assert "😂" in out and "dark_mode" in out, out[-4000:]
            login = f"http://127.0.0.1:{ports[8050]}/login"

            def answers() -> bool:
                try:
                    with urllib.request.urlopen(login, timeout=5) as page:
                        return bool(page.status == 200)
                except OSError:
                    return False

            wait_until(answers, what=f"the dashboard at {login}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the background Redis, ingest and dashboard of the block
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
