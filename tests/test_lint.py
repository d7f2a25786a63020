"""ruff and mypy --strict over the packages pass: the same checks as ``python3 dev.py lint``, run in CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_ruff_and_mypy_strict_pass() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "dev.py"), "lint"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
