"""CI runs exactly the test command that the README gives a newcomer."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_test_command() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    assert block, "README.md has no fenced code block"
    lines = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    commands = [line for line in lines if re.search(r"\bdev\.py\s+test\b", line)]
    assert len(commands) == 1, f"the README's first code block should give one `dev.py test` command: {lines}"
    return shlex.split(commands[0])


def ci_commands() -> list[list[str]]:
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    out = []
    for line in lines:
        code = line.split("#", 1)[0].strip()
        if code and re.search(r"\bdev\.py\b", code):
            out.append(shlex.split(code))
    return out


def test_ci_runs_the_readme_test_command() -> None:
    assert ci_commands() == [readme_test_command()]


def test_ci_script_is_executable_fails_fast_and_runs_from_the_repo_root() -> None:
    script = ROOT / ".ci" / "run"
    assert os.access(script, os.X_OK)
    text = script.read_text(encoding="utf-8")
    assert text.startswith("#!")
    assert re.search(r"^set -[a-z]*e[a-z]*", text, re.M)  # a failing step fails the run
    assert 'cd "$(dirname "$0")/.."' in text


def test_readme_demo_command_comes_first() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    assert block
    first = next(line for line in block.group(1).splitlines() if line.strip())
    assert re.search(r"\bdev\.py\s+demo\b", first), first
