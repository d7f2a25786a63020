"""The layout's promises: mechanisms stay in their package, packages load only what they need, one error root."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ldptel.client.errors import LdpError
from ldptel.client.mechanisms import mechanism_names, mechanisms

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ldptel.client", "ldptel.server", "ldptel.storage", "ldptel.aggregator")
# The public facade re-exports each mechanism's params type by name (``from ldptel.client import CmsParams``),
# and the demo's configuration chooses its metrics' mechanisms the way an app's own code (or a user's
# ``--mechanism``) does: both name mechanisms without branching on them.
FACADES = {ROOT / "client" / "__init__.py", ROOT / "aggregator" / "demo" / "config.py"}


def _sources() -> list[Path]:
    files = [p for folder in ("client", "server", "aggregator") for p in (ROOT / folder).rglob("*.py")]
    return [p for p in files if "mechanisms" not in p.relative_to(ROOT).parts and p not in FACADES]


def test_no_module_outside_the_mechanism_package_names_a_mechanism() -> None:
    names = "|".join(re.escape(n) for n in mechanism_names())
    literal = re.compile(rf"""(["'])({names})\1""")
    types = "|".join(
        re.escape(t.__name__) for m in mechanisms() for t in (m.params_type, m.batch_type, type(m))
    )
    identifier = re.compile(rf"\b({types})\b")
    found = []
    for path in _sources():
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if literal.search(line) or identifier.search(line):
                found.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    assert found == [], "\n".join(found)


def _loaded_after(statement: str) -> set[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def _tops(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules} | {m for m in modules if m.startswith("ldptel.")}


@pytest.mark.parametrize(
    ("statement", "forbidden"),
    [
        ("import ldptel.client.protocol.wire, ldptel.client.mechanisms", {"sqlite3", "ldptel.client.sdk", "flask", "redis"}),
        ("import ldptel.client.sdk.reporter", {"flask", "werkzeug", "redis", "ldptel.server", "ldptel.storage"}),
        ("import ldptel.aggregator.worker", {"flask", "werkzeug", "sqlite3", "ldptel.server", "ldptel.client.sdk"}),
        ("import ldptel.aggregator.query", {"flask", "werkzeug", "ldptel.server"}),
        ("import ldptel.storage.registry, ldptel.storage.sketches", {"flask", "werkzeug", "ldptel.server", "ldptel.aggregator"}),
        ("import ldptel.server.app", {"ldptel.aggregator", "ldptel.client.sdk", "matplotlib"}),
        ("import ldptel.client, ldptel.server, ldptel.aggregator, ldptel.storage", {"flask", "redis", "numpy", "sqlite3"}),
    ],
)
def test_importing_a_part_loads_only_what_it_needs(statement: str, forbidden: set[str]) -> None:
    loaded = _tops(_loaded_after(statement))
    assert not any(f in loaded or any(m.startswith(f + ".") for m in loaded) for f in forbidden), sorted(
        f for f in forbidden if f in loaded
    )


def _modules() -> list[str]:
    out = []
    for name in PACKAGES:
        pkg = importlib.import_module(name)
        out.append(name)
        found = pkgutil.walk_packages(pkg.__path__, name + ".")
        # ldptel.storage's folder sits inside ldptel.server's (server/storage/): it is walked as ldptel.storage.
        out += [m.name for m in found if not m.name.endswith("__main__") and not m.name.startswith("ldptel.server.storage")]
    return out


def test_every_exception_ldptel_defines_descends_from_ldp_error() -> None:
    strays = []
    for name in _modules():
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name:
                # Exceptions that derive from BaseException only are control flow for signals (documented there).
                if issubclass(obj, Exception) and not issubclass(obj, LdpError):
                    strays.append(f"{name}.{obj.__name__}")
    assert strays == []
