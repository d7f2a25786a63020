"""MkDocs hooks: the reference pages are generated from the code at build time, so they cannot drift.

* ``reference/cli.md`` from the argparse definitions (``ldptel.aggregator.cli.build_parser``): every command and
  subcommand's ``--help``, exactly as the terminal prints it;
* ``reference/http-api.md`` from the OpenAPI document the ingest service serves (``openapi_document()``);
* ``reference/python-api.md`` from the docstrings and signatures of ``ldptel.client``'s public names.

Wired in ``mkdocs.yml`` (``hooks:``); ``tests/docs/test_docs_site.py`` builds the site with ``--strict``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
from typing import Any

from mkdocs.structure.files import File, Files


def _help(parser: argparse.ArgumentParser) -> str:
    os.environ.setdefault("COLUMNS", "110")  # a stable width: argparse wraps by the terminal's
    return parser.format_help()


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:  # argparse keeps subcommands here; it has no public accessor
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # aliases point at the same parser
                    seen.add(id(sub))
                    found.append((name, sub))
    return found


def cli_reference() -> str:
    from ldptel.aggregator.cli import build_parser

    out = ["# CLI reference", "", "Generated from the argparse definitions at build time: this is what `--help` prints.", ""]

    def walk(prefix: str, parser: argparse.ArgumentParser, level: int) -> None:
        out.extend([f"{'#' * level} `{prefix}`", "", "```text", _help(parser).rstrip(), "```", ""])
        for name, sub in _subparsers(parser):
            walk(f"{prefix} {name}", sub, min(level + 1, 4))

    walk("ldptel", build_parser(), 2)
    return "\n".join(out)


def http_reference() -> str:
    from ldptel.server.openapi import openapi_document

    doc = openapi_document()
    out = ["# HTTP API", "", f"Generated from the OpenAPI {doc.get('openapi', '')} document the ingest service serves at "
           "`/openapi.json` (the test suite checks the server against it with schemathesis).", ""]
    for path, item in doc.get("paths", {}).items():
        for method, op in item.items():
            if not isinstance(op, dict):
                continue
            out += [f"## `{method.upper()} {path}`", "", str(op.get("summary", "")).strip(), ""]
            if op.get("description"):
                out += [str(op["description"]).strip(), ""]
            responses = op.get("responses", {})
            if responses:
                out += ["| status | meaning |", "|---|---|"]
                out += [f"| {code} | {str(r.get('description', '')).replace('|', '/')} |" for code, r in responses.items()]
                out.append("")
    out += ["## Schemas", "", "```json", json.dumps(doc.get("components", {}), indent=2, ensure_ascii=False), "```", ""]
    return "\n".join(out)


def python_reference() -> str:
    import ldptel.client as client

    out = ["# Python API (`ldptel.client`)", "", "Generated from the docstrings of the package's public names.", ""]
    for name in client.__all__:
        if name.startswith("__"):
            continue
        obj: Any = getattr(client, name)
        kind = "class" if inspect.isclass(obj) else "function" if callable(obj) else "value"
        try:
            sig = str(inspect.signature(obj)) if callable(obj) else ""
        except (TypeError, ValueError):
            sig = ""
        out += [f"## `{name}`", "", f"```python\n{kind} {name}{sig}\n```", "", inspect.getdoc(obj) or "", ""]
        if inspect.isclass(obj):
            for attr, member in sorted(vars(obj).items()):
                if attr.startswith("_") or not (inspect.isfunction(member) or isinstance(member, property)):
                    continue
                doc = inspect.getdoc(member) or ""
                try:
                    msig = str(inspect.signature(member)) if inspect.isfunction(member) else ""
                except (TypeError, ValueError):
                    msig = ""
                out += [f"### `{name}.{attr}{msig}`", "", doc, ""]
    return "\n".join(out)


def on_files(files: Files, config: Any) -> Files:
    for uri, render in (("reference/cli.md", cli_reference), ("reference/http-api.md", http_reference),
                        ("reference/python-api.md", python_reference)):
        files.append(File.generated(config, uri, content=render()))
    return files
