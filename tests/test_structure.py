"""The layout's promises: mechanisms stay in their package (no module outside it imports a mechanism's module or
branches on a mechanism's name; capability checks stay few; the dashboard reads the kind), packages load only what
they need, one error root."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
import re
import subprocess
import sys
import textwrap
from functools import cache
from pathlib import Path

import pytest

from ldptel.client.errors import LdpError
from ldptel.client.mechanisms import Mechanism, mechanism_names, mechanisms
from ldptel.client.mechanisms.capabilities import CAPABILITIES

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ldptel.client", "ldptel.server", "ldptel.storage", "ldptel.aggregator")
CONCRETE = frozenset(type(m).__module__ for m in mechanisms())  # the modules that define a registered mechanism
CAPABILITY_BUDGET = 10  # capability checks allowed outside the mechanism package (issue 25: fewer than 10)
DASHBOARD_JS = ROOT / "aggregator" / "dashboard" / "static" / "dashboard.js"


def _sources() -> list[Path]:
    files = [p for folder in ("client", "server", "aggregator") for p in (ROOT / folder).rglob("*.py")]
    return [p for p in files if "mechanisms" not in p.relative_to(ROOT).parts]


@cache  # parsed once for the three tests that walk them (~1 s of CPU each time); they only read the trees
def _trees() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"), str(path))) for path in _sources()]


def _imported(node: ast.AST) -> list[str]:
    """The modules an import statement may load (``from pkg import name`` may load ``pkg.name``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module:
        return [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return []


def test_concrete_mechanisms_are_found() -> None:
    assert len(CONCRETE) >= 8 and all(m.startswith("ldptel.client.mechanisms.") for m in CONCRETE)


def test_no_module_outside_the_mechanism_package_imports_a_concrete_mechanism() -> None:
    # Code outside the package reaches a mechanism through the registry and the capability types only: importing
    # a mechanism's module (or naming it for importlib) would let it depend on that mechanism.
    found = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            names = _imported(node)
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value]
            hits = sorted(set(names) & CONCRETE)
            if hits:
                found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}: {', '.join(hits)}")
    assert found == [], "\n".join(found)


def test_no_module_outside_the_mechanism_package_branches_on_a_mechanism_name() -> None:
    # Naming a mechanism as a value is fine (a default, a spec); comparing against one is a branch on it.
    names = set(mechanism_names())
    found = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                consts = [c for o in operands for c in ast.walk(o) if isinstance(c, ast.Constant)]
                if any(isinstance(c.value, str) and c.value in names for c in consts):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.match_case) and isinstance(node.pattern, ast.MatchValue):
                value = node.pattern.value
                if isinstance(value, ast.Constant) and value.value in names:
                    found.append(f"{path.relative_to(ROOT)}:{node.pattern.lineno}: case {value.value!r}")
    assert found == [], "\n".join(found)


def _capability_checks() -> list[str]:
    caps = {c.__name__ for c in CAPABILITIES}

    def names(node: ast.AST) -> set[str]:
        return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))}

    out = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(node.func, ast.Attribute) else ""
            tested = node.args[1:2] if func in ("isinstance", "issubclass", "require") else [k.value for k in node.keywords if k.arg in ("having", "lacking")]
            if any(names(t) & caps for t in tested):
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_capability_checks_outside_the_mechanism_package_stay_few() -> None:
    # Each kind is a type: code outside the package reads Mechanism.kind (which picks a result type and a renderer)
    # or calls a hook; an isinstance test of a capability (or a registry filter by one) is the exception.
    checks = _capability_checks()
    assert len(checks) < CAPABILITY_BUDGET, "\n".join(checks)


def test_the_dashboard_reads_the_kind_never_params_or_capabilities() -> None:
    js = DASHBOARD_JS.read_text(encoding="utf-8")
    names = "|".join(re.escape(n) for n in mechanism_names())
    forbidden = {
        "a params field": r"\.params\b|\.record\b",
        "a capability flag": r"needs_candidates|discovers|estimates_counts|info\.counts|edges_by_version|\.merges\b|\.permanent\b",
        "a mechanism name": rf"""(["'`])({names})\1""",
        "the mechanism field in a condition": r"\.mechanism\s*[!=]==",
    }
    found = [f"{what}: {m.group(0)!r}" for what, pattern in forbidden.items() for m in re.finditer(pattern, js)]
    assert found == [], found
    assert "KINDS" in js and ".kind" in js


def test_the_core_mechanism_has_no_capability_flags() -> None:
    # Capabilities are types: the core has no boolean class attributes and no method that only raises "unsupported".
    flags = [k for k, v in vars(Mechanism).items() if isinstance(v, bool)]
    assert flags == []
    core = ast.parse(textwrap.dedent(inspect.getsource(Mechanism)))
    raising = [f.name for f in ast.walk(core) if isinstance(f, ast.FunctionDef)
               and isinstance(f.body[-1], ast.Raise) and len([b for b in f.body if not isinstance(b, ast.Expr)]) == 1]
    assert raising == [], f"core methods that only raise (make them a capability): {raising}"
    public = [k for k in dir(Mechanism) if not k.startswith("_")]
    assert len(public) <= 28, public
    for mech in mechanisms():
        kinds = {c.kind for c in type(mech).__mro__ if c in CAPABILITIES and "kind" in vars(c)}
        assert mech.kind in (kinds or {"frequencies"}) and len(kinds) <= 1, (mech.name, kinds)


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
