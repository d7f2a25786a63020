"""The ``ldptel`` entry point: the parser assembled from the command modules, and :func:`main`.

Each command lives in its own module (:data:`COMMANDS`), which declares its ``NAME``, the modules it ``NEEDS``
beyond the SDK (checked before it runs), the ``EXTRA`` that brings them, ``add_parser`` and ``run``.
:func:`main` turns every expected failure into one line on stderr and exit status 2: a
:class:`~ldptel.client.errors.LdpError` (which includes :class:`~ldptel.aggregator.cli.common.UserError`), or a
missing optional dependency, named with the extra that brings it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import TextIO

from ldptel.aggregator.cli import (
    aggregate,
    dashboard,
    demo,
    discover,
    estimate,
    inference,
    metrics,
    plan,
    seal,
    serve,
    shuffle,
    status,
)
from ldptel.aggregator.cli.common import EXIT_OK, EXIT_USER, redis_url_option
from ldptel.aggregator.cli.extras import DISTRIBUTION, from_import_error, require
from ldptel.client.errors import LdpError

COMMANDS = (aggregate, estimate, inference, metrics, status, serve, demo, plan, discover, dashboard, seal, shuffle)
_BY_NAME = {command.NAME: command for command in COMMANDS}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ldptel",
        description="ldptel: local-differential-privacy telemetry — aggregation, queries and the metric registry.",
    )
    parser.add_argument("--version", action="version", version=f"ldptel {metadata.version(DISTRIBUTION)}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = redis_url_option()
    for command in COMMANDS:
        command.add_parser(sub, common)
    return parser


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Entry point of the ``ldptel`` console script; returns the exit status."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    arglist = demo.shield(list(sys.argv[1:] if argv is None else argv))
    command = _BY_NAME.get(arglist[0]) if arglist else None
    try:
        try:
            args = build_parser().parse_args(arglist)
        except SystemExit as exc:  # --help (0) or a usage error (2), already printed by argparse
            return int(exc.code or 0)
        if command is not None:
            require(command.NAME, *command.NEEDS, extra=command.EXTRA)
        return int(args.func(args, out, err))
    except LdpError as exc:
        err.write(f"ldptel: error: {exc}\n")
        return EXIT_USER
    except ModuleNotFoundError as exc:  # an optional dependency, imported by the command (or a type= function)
        missing = None if command is None else from_import_error(exc, command=command.NAME, extra=command.EXTRA)
        if missing is None:
            raise
        err.write(f"ldptel: error: {missing}\n")
        return EXIT_USER
    except BrokenPipeError:
        return EXIT_OK
