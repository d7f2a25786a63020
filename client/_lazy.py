"""Lazy package exports (PEP 562), so that importing a package never loads what its callers do not use.

``import ldptel.client.protocol.wire`` runs ``ldptel/client/__init__.py`` first; with eager re-exports that
would load the SDK runtime (sqlite, threads) into the ingest server. Each package ``__init__`` instead maps
its public names to the modules that define them and imports a module on first access.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``exports[name]`` (a module path) on first access to ``name``."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(importlib.import_module(package), name, value)  # later accesses skip this function
        return value

    return __getattr__
