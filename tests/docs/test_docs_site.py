"""The documentation site builds in strict mode: a broken link or anchor, a page missing from the navigation or a
reference page the hooks cannot generate fails the suite (issue 31: docs that cannot rot)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")


@pytest.mark.slow
def test_the_site_builds_strict_with_generated_references(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(site)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "WARNING" not in run.stderr, run.stderr
    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    import argparse

    from ldptel.aggregator.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    commands = list(sub.choices)
    assert len(commands) >= 10
    for command in commands:  # every command's --help is in the reference
        assert f"ldptel {command}</code>" in cli, command
    http = (site / "reference" / "http-api" / "index.html").read_text(encoding="utf-8")
    assert "/v1/reports" in http or "/v1/batches" in http
    python = (site / "reference" / "python-api" / "index.html").read_text(encoding="utf-8")
    assert "Reporter" in python and "PrivacyPolicy" in python
    assert (site / "search" / "search_index.json").exists()  # the site has search


def test_every_docs_page_is_in_the_navigation_and_the_readme_stays_short() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    missing = sorted(p for p in pages if f": {p}" not in nav)
    assert missing == [], f"add these pages to mkdocs.yml's nav: {missing}"
    assert len((ROOT / "README.md").read_bytes()) <= 15 * 1024
