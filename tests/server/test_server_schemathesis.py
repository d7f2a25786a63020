"""Schemathesis against the running service, in a pytest process of its own: ``schemathesis_cases.py`` (read its
docstring for what it checks).

Why a process of its own: schemathesis builds its cases (its coverage phase: boundary and negative values for every
operation) when pytest *collects* them, and pytest-xdist has every worker collect every test. Collected with the
suite, each of the 4 workers loaded schemathesis's pytest plugin (0.5 s) and built every case (1.1 s) to run them in
one worker; the controller loaded the plugin too. Collecting the suite took 17.5-18.1 s of CPU with it and
9.0-9.7 s without. The suite now runs with ``-p no:schemathesis`` (pyproject.toml) and this test runs the cases once.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CASES = Path(__file__).with_name("schemathesis_cases.py")
ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = 9  # one schemathesis test per operation of /v1/openapi.json (the cases check the document is served)
EXPLICIT = 3  # real batches of cms, rr and grr specs


def test_schemathesis_cases_pass_in_a_process_of_their_own(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    cmd = [sys.executable, "-m", "pytest", "-p", "schemathesis", "-p", "no:xdist", "-p", "no:cacheprovider",
           "-q", "-rA", f"--basetemp={tmp_path / 'tmp'}", str(CASES)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    passed = re.search(r"(\d+) passed", out)
    assert passed is not None and int(passed.group(1)) == OPERATIONS + EXPLICIT, out[-3000:]
    assert not re.search(r"\d+ (skipped|xfailed|deselected)", out), out[-3000:]
