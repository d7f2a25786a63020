"""`pip install ldp-telemetry` is the SDK alone: a fresh venv with the bare wheel embeds it and uploads.

The wheel is built from this checkout and installed into a new virtual environment with pip (which brings
numpy and mmh3, and nothing else); a script there reports through a real ``Reporter`` to the real ingest
server on loopback. It must work with neither Flask nor redis-py importable.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import textwrap
import tomllib
import venv
from pathlib import Path

import pytest

from ldptel.client import CmsParams, MetricSpec
from tests.client.conftest import LiveServer

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import importlib.util, json, sys, tempfile
    absent = [m for m in ("flask", "werkzeug", "redis", "gunicorn", "matplotlib") if importlib.util.find_spec(m)]
    from ldptel.client import Reporter
    from ldptel.client.sdk.policy import PrivacyPolicy
    with tempfile.TemporaryDirectory() as storage:
        with Reporter(sys.argv[1], token=sys.argv[2], storage_dir=storage, batch_size=20,
                      metrics=["install.check"], policy=PrivacyPolicy(max_daily_epsilon=float("inf"))) as rep:
            assert rep.wait_for_specs(30)
            statuses = [rep.report("install.check", f"value-{i % 7}").status for i in range(50)]
            delivered = rep.flush(timeout=30)
            stats = rep.stats()
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("flask", "werkzeug", "redis", "sqlalchemy"))
    print(json.dumps({"importable": absent, "loaded": loaded, "statuses": sorted(set(statuses)),
                      "flushed": delivered, "delivered": stats.delivered, "pending": stats.pending}))
    """
)


@pytest.mark.slow
def test_the_bare_wheel_embeds_the_sdk_without_flask_or_redis(tmp_path: Path, live: LiveServer, app_token: str) -> None:
    live.create(MetricSpec(name="install.check", params=CmsParams(epsilon=4.0, k=16, m=64), reports_per_day=50))
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(wheels), str(ROOT)], capture_output=True, text=True, timeout=300
    )
    assert built.returncode == 0, built.stderr
    # pyproject.toml builds cleanly: no deprecated license table, no data folder missing from `packages`.
    noise = [line for line in built.stderr.splitlines() if re.search(r"BuildBackendWarning|Deprecat|absent from", line)]
    assert noise == [], noise
    (wheel,) = wheels.glob("ldp_telemetry-*.whl")
    env = tmp_path / "bare"
    # A fresh venv without ensurepip's own pip (6 s of CPU, as long as the install itself): the suite's pip
    # installs into it (pip --python), so the venv holds only what the wheel brings.
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    # --no-compile, as dev.py installs: byte-compiling all of numpy costs more than the SDK's imports compile on use
    subprocess.run([*pip, "--python", str(python), "install", "--no-compile", str(wheel)], check=True, timeout=300)
    installed = subprocess.run(
        [*pip[:-1], "--python", str(python), "list", "--format", "json"], check=True, capture_output=True, text=True
    )
    names = {p["name"].lower() for p in json.loads(installed.stdout)}
    assert names - {"pip", "setuptools", "wheel"} == {"ldp-telemetry", "numpy", "mmh3"}

    run = subprocess.run(
        [str(python), "-c", SCRIPT, live.url, app_token], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["importable"] == [] and out["loaded"] == []
    assert out["statuses"] == ["queued"]
    assert out["flushed"] is True and out["pending"] == 0
    # Each value is memoized per day (7 distinct values), but every one of the 50 reports is sent and counted.
    assert out["delivered"] == 50
    assert live.delivered("install.check")["total"] == 50


def test_the_readme_installs_from_the_checkout_or_a_wheel_it_builds() -> None:
    """The package is on no index: every pip command of the README and docs names the checkout or the wheel built from
    it (the one this file's slow test installs), with extras that exist and the version of pyproject.toml."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wheel = f"ldp_telemetry-{project['version']}-py3-none-any.whl"
    commands = re.findall(r"pip (?:install|wheel) [^`\n#]*", text)
    assert len(commands) >= 4
    for command in commands:
        words = shlex.split(command)
        targets = [w for w in words[2:] if not w.startswith("-") and w != "dist"]
        assert targets, command
        for target in targets:
            base, _, extras = target.partition("[")
            if not (base.startswith((".", "/")) or base.endswith(".whl") or "telemetry" in base.replace("_", "-")):
                continue  # a third-party package from PyPI (e.g. a library a benchmark compares against)
            assert base in (".", wheel), f"README: {command!r} installs {base!r}, which no index has"
            for extra in extras.rstrip("]").split(","):
                assert not extra or extra in project["optional-dependencies"], command
    assert f"dist/{wheel}" in text
