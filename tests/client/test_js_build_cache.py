"""The TypeScript build's kept result (tests/js_sdk.py) is used only for exactly the inputs it was compiled from."""

from __future__ import annotations

import json
from pathlib import Path

from tests.js_sdk import compiled, inputs_digest


def _tree(root: Path) -> None:
    for rel, text in {"src/a.ts": "export const a = 1;\n", "test/a.test.ts": "import './x';\n", "tsconfig.json": "{}",
                      "package-lock.json": '{"typescript": "5.9.3"}', "node_modules/typescript/x.js": "1",
                      "dist/src/a.js": "export const a = 1;\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def _keep(root: Path, returncode: int = 0) -> None:
    (root / "dist" / ".ldptel-build.json").write_text(json.dumps(
        {"inputs": inputs_digest(root), "returncode": returncode, "stdout": "out", "stderr": "err"}))


def test_a_kept_result_holds_for_the_same_inputs_only(tmp_path: Path) -> None:
    _tree(tmp_path)
    _keep(tmp_path)
    kept = compiled(tmp_path)
    assert kept is not None and kept.returncode == 0
    (tmp_path / "node_modules" / "typescript" / "x.js").write_text("2")  # installed packages and outputs: not inputs
    (tmp_path / "dist" / "src" / "a.js").write_text("changed")
    assert compiled(tmp_path) is not None
    for rel, text in [("src/a.ts", "export const a = 2;\n"), ("src/b.ts", ""), ("package-lock.json", "{}")]:
        _tree(tmp_path)
        _keep(tmp_path)
        (tmp_path / rel).write_text(text)  # a source edited or added, another TypeScript pinned
        assert compiled(tmp_path) is None, rel
    (tmp_path / "src" / "b.ts").unlink()
    _tree(tmp_path)
    _keep(tmp_path)
    (tmp_path / "src" / "a.ts").rename(tmp_path / "src" / "c.ts")  # the same bytes under another name
    assert compiled(tmp_path) is None


def test_a_failed_compile_is_kept_as_a_failure_and_a_damaged_record_as_none(tmp_path: Path) -> None:
    _tree(tmp_path)
    _keep(tmp_path, returncode=2)
    kept = compiled(tmp_path)
    assert kept is not None and (kept.returncode, kept.stdout, kept.stderr) == (2, "out", "err")
    (tmp_path / "dist" / ".ldptel-build.json").write_text('{"inputs": ')
    assert compiled(tmp_path) is None
    (tmp_path / "dist" / ".ldptel-build.json").unlink()
    assert compiled(tmp_path) is None
