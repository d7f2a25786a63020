"""``ldptel demo ...``: hands every argument after ``demo`` (``--help`` included) to :mod:`ldptel.aggregator.demo`."""

from __future__ import annotations

import argparse
from typing import TextIO

from ldptel.aggregator.cli.common import UserError

NAME = "demo"
EXTRA = "server"
NEEDS: tuple[str, ...] = ()  # the demo checks its own after its arguments, so that `demo --help` works (demo/entry.py)
DEMO_MODULE = "ldptel.aggregator.demo"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, help="the end-to-end demo", add_help=False)
    p.add_argument("demo_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)


def shield(argv: list[str]) -> list[str]:
    """``demo ARGS`` → ``demo -- ARGS``: everything after ``demo`` belongs to the demo, ``--help`` included."""
    return [NAME, "--", *argv[1:]] if argv[:1] == [NAME] else argv


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        from ldptel.aggregator.demo import main
    except ModuleNotFoundError as exc:
        if exc.name in (DEMO_MODULE, f"{DEMO_MODULE}.entry"):
            raise UserError(f"the demo is not part of this build ({DEMO_MODULE} is missing)") from None
        raise
    demo_args = list(args.demo_args)
    if demo_args[:1] == ["--"]:
        demo_args = demo_args[1:]
    return main(demo_args, stdout=out, stderr=err)
