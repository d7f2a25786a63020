"""Running the TypeScript SDK (client/js) from pytest: dependencies from the lockfile, the build, node scripts.

``npm ci`` installs exactly the committed ``package-lock.json``; it runs again only when the lockfile changed
(a stamp in node_modules holds its digest), so the suite pays for it once per checkout.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JS = ROOT / "client" / "js"
_STAMP = JS / "node_modules" / ".ldptel-lock-sha256"


def npm() -> str:
    path = shutil.which("npm")
    if path is None:
        raise AssertionError("npm is not on PATH: the TypeScript SDK's tests need Node 20 and npm (CI installs them)")
    return path


def ensure_deps() -> None:
    """``npm ci`` from the lockfile unless node_modules already matches it."""
    digest = hashlib.sha256((JS / "package-lock.json").read_bytes()).hexdigest()
    if _STAMP.exists() and _STAMP.read_text() == digest:
        return
    # --prefer-offline: a tarball already in npm's cache is used without asking the registry whether it is stale
    # (the lockfile pins each version and its integrity hash, which the cache is checked against): ~1 s less CPU
    # on a clean checkout; anything not cached is still downloaded
    res = subprocess.run([npm(), "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--prefer-offline"], cwd=JS,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"npm ci failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    _STAMP.write_text(digest)


_BUILT: list[bool] = []  # set once this process built dist/: the js tests share one xdist worker (tests/conftest.py)


def build() -> None:
    """``tsc --strict`` into client/js/dist (the library, its tests and scripts), once per test process."""
    if _BUILT:
        return
    res = run_script("build", timeout=600)
    assert res.returncode == 0, f"tsc failed:\n{res.stdout[-6000:]}\n{res.stderr[-4000:]}"
    _BUILT.append(True)


def run_script(script: str, *, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """The command of package.json's ``scripts[script]``, run as ``npm run`` runs it (``sh -c`` in client/js with
    node_modules/.bin first on PATH) but without starting npm itself (~0.25 s of CPU each) and without its
    pre/post scripts."""
    ensure_deps()
    command = json.loads((JS / "package.json").read_text())["scripts"][script]
    path = f"{JS / 'node_modules' / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(["sh", "-c", command], cwd=JS, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {}), "PATH": path})


def run_npm(script: str, *, env: dict[str, str] | None = None, timeout: float = 900,
            pre: bool = True) -> subprocess.CompletedProcess[str]:
    """``npm run script``; ``pre=False`` skips its pre/post scripts (the caller ran them, e.g. :func:`build`)."""
    ensure_deps()
    flags = [] if pre else ["--ignore-scripts"]
    return subprocess.run([npm(), "run", "--silent", *flags, script], cwd=JS, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
