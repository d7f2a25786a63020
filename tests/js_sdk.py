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
# tsc's result for the inputs it built dist/ from (written after it exits, so dist/ is complete when it exists)
_RESULT = JS / "dist" / ".ldptel-build.json"


def inputs_digest(root: Path = JS) -> str:
    """SHA-256 of every file of client/js that is not an output or an installed package: what tsc reads (sources,
    tsconfig, package.json and the lockfile that pins TypeScript), and a little more."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and rel.parts[0] not in ("node_modules", "dist", "build"):
            digest.update(f"{rel.as_posix()}\0{path.stat().st_size}\0".encode() + path.read_bytes())
    return digest.hexdigest()


def compile_ts() -> subprocess.CompletedProcess[str]:
    """``npm ci`` if needed, then ``tsc --strict`` into dist/; its result is kept beside dist/ with the digest of
    the inputs, for :func:`build`. ``python3 dev.py test`` runs this while pip installs the venv on a fresh checkout
    (pip uses one core, tsc the other): the suite then uses that result instead of compiling again."""
    _RESULT.unlink(missing_ok=True)
    digest = inputs_digest()
    res = run_script("build", timeout=600)
    kept = {"inputs": digest, "returncode": res.returncode, "stdout": res.stdout[-6000:], "stderr": res.stderr[-4000:]}
    _RESULT.parent.mkdir(exist_ok=True)
    partial = _RESULT.with_suffix(".partial")
    partial.write_text(json.dumps(kept))
    partial.replace(_RESULT)
    return res


def compiled(root: Path = JS) -> subprocess.CompletedProcess[str] | None:
    """tsc's kept result, if it was for exactly the inputs there are now."""
    try:
        kept = json.loads((root / _RESULT.relative_to(JS)).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("inputs") != inputs_digest(root):
        return None
    return subprocess.CompletedProcess(["tsc"], kept["returncode"], kept["stdout"], kept["stderr"])


def build() -> None:
    """``tsc --strict`` into client/js/dist (the library, its tests and scripts), once per test process: its kept
    result when dist/ was compiled from the same inputs (:func:`compile_ts`), else compiled now."""
    if _BUILT:
        return
    res = compiled() or compile_ts()
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
