"""gunicorn with deploy/gunicorn.conf.py refuses a bad configuration in one log line, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "ldptel: LDPTEL_APP_TOKENS is not set"),
        ({"LDPTEL_APP_TOKENS": "replace-with-app-token-1", "LDPTEL_ADMIN_TOKEN": "replace-with-admin-token"},
         "placeholder"),
    ],
)
def test_a_missing_or_placeholder_token_is_one_line_and_exit_1(tmp_path: Path, settings: dict[str, str], message: str) -> None:
    """Regression: a missing token printed a 21-line traceback from gunicorn's arbiter."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("LDPTEL_")}
    env.update(settings, LDPTEL_REDIS_URL="redis://127.0.0.1:1/0")  # never reached: the check comes first
    proc = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py"), "-b", "127.0.0.1:0"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    assert proc.returncode == 1, log
    assert "Traceback" not in log
    errors = [line for line in log.splitlines() if "[ERROR]" in line]
    assert len(errors) == 1 and message in errors[0], log
    assert len(log.splitlines()) <= 2  # gunicorn's "Starting gunicorn" line, then ours
