"""tests/rewrite_cache.py writes exactly what pytest's own import hook reads back as a rewritten test module."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests import rewrite_cache

ROOT = Path(__file__).resolve().parents[1]

# Run 1 (this plugin): rewrite the module into the cache at configure time and report the cache file's inode.
# pytest replaces the file (a new inode: it writes a temporary file and renames it) whenever it rewrites.
WRITER = """
import json, os, sys
from pathlib import Path
import pytest
from tests import rewrite_cache
from _pytest.assertion.rewrite import PYC_TAIL, get_cache_dir

module = Path(sys.argv[1])
class Writer:
    def pytest_configure(self, config):
        written = rewrite_cache.rewrite_into_cache([module], config)
        pyc = get_cache_dir(module) / (module.name[:-3] + PYC_TAIL)
        print(json.dumps({"written": written, "inode": os.stat(pyc).st_ino, "pyc": str(pyc)}))
sys.exit(pytest.main([str(module), "--collect-only", "-q", "-p", "no:cacheprovider"], plugins=[Writer()]))
"""


def test_the_modules_are_the_files_the_hook_rewrites() -> None:
    files = rewrite_cache.modules()
    assert Path(__file__).resolve() in files and ROOT / "tests" / "conftest.py" in files
    assert all(f.name.startswith("test_") or f.name == "conftest.py" for f in files)
    assert not [f for f in files if "bench" in f.relative_to(ROOT).parts]


def test_pytest_reads_the_cached_rewrite_and_its_asserts_explain_themselves(tmp_path: Path) -> None:
    """The module rewritten into the cache is used as it is by two pytest runs (the cache file is never replaced,
    as it would be by a second rewrite), and its failing assert shows pytest's introspection."""
    module = tmp_path / "test_cached.py"
    module.write_text("def test_it():\n    values = [1, 2]\n    assert len(values) == 3\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    first = subprocess.run([sys.executable, "-c", WRITER, str(module)], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120, env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    made = json.loads(first.stdout.splitlines()[0])
    assert made["written"] == 1
    second = subprocess.run([sys.executable, "-m", "pytest", str(module), "-q", "-p", "no:cacheprovider"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, env=env)
    assert second.returncode == 1 and "where 2 = len([1, 2])" in second.stdout, second.stdout + second.stderr
    assert Path(made["pyc"]).stat().st_ino == made["inode"]  # read from the cache by both runs, never rewritten


def test_each_worker_starts_with_its_own_share_and_ends_with_every_module() -> None:
    files = rewrite_cache.modules()
    orders = [rewrite_cache.order(files, own, 4) for own in range(4)]
    assert all(sorted(o) == files for o in orders)  # every module once, in every worker
    heads = [o[: len(files[own::4])] for own, o in enumerate(orders)]
    assert sorted(f for head in heads for f in head) == files  # the own shares split the modules between them
