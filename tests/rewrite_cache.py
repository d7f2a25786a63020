"""The test modules' assertion rewrite, done once for all pytest-xdist workers instead of once in each.

pytest rewrites each test module's ``assert`` statements when it imports it, and caches the result in
``__pycache__`` (``*.cpython-311-pytest-<version>.pyc``). On a fresh checkout the workers start together, all
miss the cache and each rewrites every test module: 3.3 s of CPU per worker (measured: collection of a clean clone
6.6 s, 3.4 s with the cache written), most of it in pytest's AST walk. Here each worker first rewrites its own
share of the modules (every N-th, N workers) into that cache, then what the others have not written yet, so
collection reads the cache. Measured, 4 workers collecting a clean clone's tests (``dev.py test -m none``, the CPU
of the whole run): 26.7 s and 27.2 s before, 19.7 s and 20.0 s with this; 17.0 s with every rewrite cached.

This calls pytest's own rewrite and cache functions, which are not public API: the code written is exactly what
pytest's import hook writes, and if those functions change (pytest is pinned below 9.2 in pyproject.toml) the
share is skipped and each worker rewrites at collection, as before. ``tests/test_rewrite_cache.py`` checks
that the hook reads what is written here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def modules(root: Path = TESTS) -> list[Path]:
    """The files pytest's hook rewrites under ``root``: test modules and conftest files (pyproject's
    ``norecursedirs`` leaves out tests/bench, whose scripts match neither)."""
    found = {*root.rglob("test_*.py"), *root.rglob("conftest.py")}
    return sorted(path for path in found if "bench" not in path.relative_to(root).parts)


def rewrite_into_cache(files: Sequence[Path], config: pytest.Config) -> int:
    """Rewrite each file whose cached rewrite is missing or stale into pytest's cache; the number written."""
    from _pytest.assertion import assertstate_key
    from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, _rewrite_test, _write_pyc, get_cache_dir, try_makedirs

    state = config.stash[assertstate_key]
    written = 0
    for fn in files:
        cache = get_cache_dir(fn)
        pyc = cache / (fn.name[:-3] + PYC_TAIL)
        if _read_pyc(fn, pyc, state.trace) is not None or not try_makedirs(cache):
            continue
        source_stat, co = _rewrite_test(fn, config)
        written += bool(_write_pyc(state, co, source_stat, pyc))
    return written


def order(files: Sequence[Path], own: int, count: int) -> list[Path]:
    """Worker ``own`` of ``count``: its own share (every count-th file from the own-th), then the others' shares,
    each from its far end (where its owner is least likely to be at that moment)."""
    return [*files[own::count], *(f for i in range(1, count) for f in reversed(files[(own + i) % count :: count]))]


def share_among_workers(config: pytest.Config) -> None:
    """In an xdist worker (``PYTEST_XDIST_WORKER`` gwI of ``PYTEST_XDIST_WORKER_COUNT``): rewrite every N-th
    module from the I-th, then any other module still missing from the cache. Nothing outside xdist, nor with
    bytecode writing off or plain asserts (``--assert=plain``)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2 or sys.dont_write_bytecode or config.getoption("assertmode") != "rewrite":
        return
    try:
        rewrite_into_cache(order(modules(), int(worker[2:]) % count, count), config)
    except (ImportError, AttributeError, TypeError, KeyError):  # pytest's internals moved: collection rewrites
        return
