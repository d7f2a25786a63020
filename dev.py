#!/usr/bin/env python3
"""Bootstrap and run ldptel from a fresh checkout with nothing but Python 3.11+.

    python3 dev.py demo [ARGS...]   the one-command demo (embedded Redis, ingest, aggregator, devices)
    python3 dev.py test [ARGS...]   the test suite (pytest; ARGS go to pytest); what CI runs. It runs in 4
                                    pytest-xdist workers (LDPTEL_TEST_WORKERS=N to change; -n 0 or -s: one
                                    process)
    python3 dev.py test --quick     the edit loop (goal ≤ 90 s): skips the tests marked slow (statistical and
                                    end-to-end runs, the fault suite, the wheel install, the browser) and cluster
                                    (a local Redis Cluster); everything else, lint-free units and Redis-backed
                                    tests, still runs. Run the full suite before landing.
    python3 dev.py test --grid      also every case of the parameter grids (marker grid; by default one
                                    representative case per grid runs: tests/aggregator/test_corrected.py,
                                    test_percentiles.py, tests/client/test_discovery.py) and the full
                                    repetition counts of the simulations that size themselves by it
    python3 dev.py lint             ruff and mypy --strict over the packages (CI runs it before the tests)
    python3 dev.py bench [NAME]     the benchmarks in tests/bench (one JSON line per figure)
    python3 dev.py docs [serve]     build the documentation site into site/ (mkdocs --strict), or serve it live

The first run creates .venv/ and installs the project with its test extras (pip only); later runs reuse it
and reinstall only when pyproject.toml changed. While pip installs, `dev.py test` also installs the TypeScript
SDK's packages (npm ci from the lockfile) and compiles it (tsc), which the suite would do first otherwise.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
import venv
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".ldptel-installed"
QUICK_MARKERS = "not slow and not cluster"  # dev.py test --quick
# dev.py test runs the suite in WORKERS pytest-xdist processes. Much of its wall time is waiting (servers starting,
# processes killed and restarted, a browser, npm): more workers than the two cores keep both busy while some wait
# (the statistical tests are pure CPU). Measured on the 2-core machine, warm checkout, whole suite: 3 workers
# 212.9 s and 209.0 s, 4 workers 200.5 s and 199.2 s (the same CPU, 376-385 s); later, 4 and 5 workers in turn:
# 189.4 and 192.1 s against 193 and 192.5 s (a fifth collects everything once more and gains nothing). Tests that
# share a costly fixture or a build directory run in one worker (xdist_group, tests/conftest.py). -n 0: one process.
WORKERS = os.environ.get("LDPTEL_TEST_WORKERS", "4")


def ensure_env(alongside: Callable[[], None] | None = None) -> None:
    """Create .venv and install the project into it when pyproject.toml changed; ``alongside`` runs in a thread
    meanwhile (pip installs on one core)."""
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py itself must say so on an older Python
        sys.exit(f"ldptel needs Python 3.11 or newer, this is {sys.version.split()[0]}")
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == digest and PY.exists():
        return
    beside = threading.Thread(target=alongside, daemon=True) if alongside else None
    if beside:
        beside.start()
    if not PY.exists():
        print("dev.py: creating .venv", file=sys.stderr)
        venv.EnvBuilder(with_pip=False).create(VENV)
    print("dev.py: installing ldp-telemetry[test] into .venv (first run only)", file=sys.stderr)
    pip = [str(PY), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    if subprocess.run([*pip[:3], "--version"], capture_output=True).returncode == 0:
        _quiet(pip + ["--upgrade", "pip"])
    else:
        _quiet([str(PY), *_bundled_pip(), "install", "--disable-pip-version-check", "-q", "--no-compile", "--upgrade",
                "pip"])
    # --no-compile: pip would byte-compile every module of every package, one after another on one core (13 s of
    # the 29 s install, measured on a clean clone); Python compiles what is imported on first use instead, and the
    # suite imports a fraction of scipy, matplotlib, mkdocs-material and the rest (suite_env keeps the caches)
    _quiet(pip + ["--no-compile", "-e", f"{ROOT}[test]"])
    STAMP.write_text(digest)
    if beside:
        beside.join()


def _bundled_pip() -> list[str]:
    """How the new venv runs a pip to install the current pip with: the pip wheel Python bundles for ensurepip, run
    from the wheel itself (2.0 s; ensurepip first installs and byte-compiles that older pip, then it upgrades
    itself: 4.9 s), or, where Python has no bundled wheel (Debian keeps them elsewhere), ensurepip."""
    try:
        import ensurepip

        wheels = sorted((Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"))
    except ImportError:
        wheels = []
    if wheels:
        return [str(wheels[-1] / "pip")]
    _quiet([str(PY), "-m", "ensurepip", "--default-pip"])
    return ["-m", "pip"]


def compile_ts() -> None:
    """The TypeScript SDK's ``npm ci`` and ``tsc`` (tests/js_sdk.py's compile_ts), run while pip installs on a
    fresh checkout: the suite then uses tsc's kept result for the same inputs instead of compiling (about 6 s of
    CPU that would otherwise run beside the suite's other work; pip leaves the second core idle). Any failure
    here is left for the suite, which compiles again and reports it."""
    if shutil.which("npm") is None or not (ROOT / "client" / "js" / "package.json").exists():
        return
    spec = importlib.util.spec_from_file_location("ldptel_dev_js_sdk", ROOT / "tests" / "js_sdk.py")
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        module.compile_ts()
    except Exception:  # the suite compiles again and reports the failure
        return


def _quiet(cmd: list[str]) -> None:
    """Run pip keeping its output unless it fails.

    A successful editable install still prints setuptools' "Editable installation ... be careful with folders"
    notice (emitted for every package-dir mapping) and any index notices of the host's pip configuration: noise on
    a first run that looks like a problem. pyproject.toml itself builds without warnings (tests/test_packaging.py).
    """
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        sys.exit(f"dev.py: {' '.join(cmd[2:5])} failed (exit {done.returncode}); its output is above")


# The import packages and their folders (pyproject's package-dir); mypy reads them through links named alike.
PACKAGES = {
    "ldptel/client": "client",
    "ldptel/server": "server",
    "ldptel/storage": "server/storage",
    "ldptel/aggregator": "aggregator",
}


def lint() -> int:
    status = subprocess.call([str(BIN / "ruff"), "check", "."], cwd=ROOT)
    tree = VENV / "mypy-src"
    for name, folder in PACKAGES.items():
        link = tree / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(ROOT / folder, target_is_directory=True)
    cmd = [str(BIN / "mypy"), "--config-file", str(ROOT / "pyproject.toml"), "--exclude", "ldptel/server/storage/"]
    for name in PACKAGES:
        cmd += ["-p", name.replace("/", ".")]
    return status | subprocess.call(cmd, cwd=tree)


def parallel(args: list[str]) -> list[str]:
    """The xdist options dev.py adds to pytest's ``args`` (none when they choose: -n/--numprocesses, -p no:xdist,
    or a debugger; none for WORKERS 0 or 1)."""
    own = ("-n", "--numprocesses", "--pdb", "--trace", "-s", "--capture=no")
    chosen = any(a in own or a.startswith(("-n", "--numprocesses=")) for a in args) or "no:xdist" in args
    if chosen or WORKERS in ("0", "1"):
        return []
    return ["-n", WORKERS, "--dist", "loadgroup"]


def suite_env() -> dict[str, str]:
    """The environment of the test run: bytecode caching on even where PYTHONDONTWRITEBYTECODE is set.

    Each worker would otherwise compile every test module (pytest's assertion rewrite, 1,000 files with the
    plugins' own), and every Python subprocess of the suite (the CLI, gunicorn and its workers, scripts) every
    ldptel module, on each run: 6 s of CPU per worker for collection alone. The caches go to the gitignored
    __pycache__ folders.

    One BLAS thread per process (unless the caller chose): the suite already runs a process per core and more, and
    OpenBLAS's threads spin while they wait for each other on a busy machine. Measured on test_corrected.py (its
    linear algebra), the whole process tree: 31.4 s of CPU with the default threads, 20.7 s with one.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(name, "1")
    return env


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("demo", "test", "lint", "bench", "docs", "shell"):
        print(__doc__, file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    ensure_env(alongside=compile_ts if cmd == "test" else None)
    if cmd == "demo":
        return subprocess.call([str(BIN / "ldptel"), "demo", *rest])
    if cmd == "test":
        if "--quick" in rest:
            rest = [a for a in rest if a != "--quick"] + ["-m", QUICK_MARKERS]
        return subprocess.call([str(PY), "-m", "pytest", *parallel(rest), *rest], cwd=ROOT, env=suite_env())
    if cmd == "lint":
        return lint()
    if cmd == "bench":
        scripts = sorted((ROOT / "tests" / "bench").glob("bench_*.py"))
        if rest:
            scripts = [s for s in scripts if any(r in s.name for r in rest)]
        status = 0
        for script in scripts:
            status |= subprocess.call([str(PY), str(script)], cwd=ROOT)
        return status
    if cmd == "docs":
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        args = ["serve"] if rest[:1] == ["serve"] else ["build", "--strict"]
        return subprocess.call([str(BIN / "mkdocs"), *args, *rest[1 if args == ["serve"] else 0 :]], cwd=ROOT, env=env)
    return subprocess.call([str(PY), *rest])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
