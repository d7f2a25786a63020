"""Command-line options for a mechanism's params, derived from the mechanisms' params schemas.

One vocabulary: a params field is a TOML key (``metrics apply``), a JSON key (``--spec-file``, the HTTP API) and a
flag with ``_`` written ``-`` (``hash_seed`` ⇔ ``--hash-seed``, ``lo`` ⇔ ``--lo``). Every field of every registered
mechanism's :meth:`~ldptel.client.mechanisms.base.Mechanism.params_schema` gets its flag, typed from the schema
(integer, number, a string enum as choices, an array as a comma list), so a new mechanism's new field needs no
edit here. Only the flags given reach :func:`~ldptel.client.protocol.specs.params_from_dict`, which stays the
validator; a mechanism's required field left out is a :class:`UserError` naming the flags it needs.

Sugar kept for convenience, each expanding to fields (giving both is an error): ``--range LO HI`` is ``--lo LO
--hi HI``; ``--buckets D [--scale linear|log]`` over ``lo``/``hi`` is ``--edges``; ``--domain-file FILE`` is
``--domain`` read from a file (one label per line).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ldptel.aggregator.cli.common import UserError, comma_list, read_values
from ldptel.client.mechanisms import get_mechanism, mechanism_names

HAND_WRITTEN = frozenset({"mechanism", "epsilon"})  # options of their own, not derived
DEST_PREFIX = "param_"  # argparse dest of a derived flag: param_<field> (never clashes with other options)


def flag(field: str) -> str:
    """``hash_seed`` → ``--hash-seed``."""
    return "--" + field.replace("_", "-")


def schema_fields() -> dict[str, tuple[dict[str, Any], tuple[str, ...]]]:
    """Every params field of the registered mechanisms: (its JSON schema, the mechanisms taking it), in order."""
    out: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {}
    for name in mechanism_names():
        fields, _required = get_mechanism(name).params_schema()
        for field, schema in fields.items():
            if field in HAND_WRITTEN:
                continue
            first, takers = out.get(field, (schema, ()))
            out[field] = (first, (*takers, name))
    return out


def _types(schema: dict[str, Any]) -> set[str]:
    kind = schema.get("type", "string")
    return set(kind) if isinstance(kind, list) else {kind}


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _converter(field: str, schema: dict[str, Any]) -> tuple[Callable[[str], Any], str]:
    """(argparse ``type``, metavar) of one field's flag."""
    kinds = _types(schema) - {"null"}
    if "array" in kinds:
        items = _types(schema.get("items", {}))
        if items & {"number", "integer"}:
            def numbers(text: str) -> list[float]:
                try:
                    return [float(item) for item in comma_list(text)]
                except ValueError:
                    raise argparse.ArgumentTypeError(f"takes numbers separated by commas, got {text!r}") from None
            return numbers, "X0,X1,..."
        return comma_list, "A,B,..."
    if "integer" in kinds:
        return int, field.upper()
    if "number" in kinds:
        return _number, field.upper()
    if "boolean" in kinds:
        return lambda text: text.lower() in ("1", "true", "yes", "on"), "BOOL"
    return str, field.upper()


def add_params_options(parser: argparse.ArgumentParser) -> None:
    """Add a flag per params field (see the module docstring) and the sugar options, in one argument group."""
    group = parser.add_argument_group(
        "mechanism params (each a params field: TOML key hash_seed = flag --hash-seed; only the given ones are set)")
    for field, (schema, takers) in schema_fields().items():
        convert, metavar = _converter(field, schema)
        what = schema.get("description", "")
        choices = schema.get("enum") if "array" not in _types(schema) else None
        help_text = (f"{what}; " if what else "") + f"params field {field!r} of {', '.join(takers)}"
        if choices is not None:
            help_text += f" (one of {', '.join(str(c) for c in choices)})"
        group.add_argument(flag(field), dest=DEST_PREFIX + field, type=convert, metavar=metavar, help=help_text)
    sugar = parser.add_argument_group("shorthands (each expands to params fields)")
    sugar.add_argument("--range", type=float, nargs=2, metavar=("LO", "HI"), help="numeric metrics: --lo LO --hi HI")
    sugar.add_argument("--buckets", type=int, metavar="D", help="histogram: --edges of D buckets over --range")
    sugar.add_argument("--scale", default=None, help="--buckets: linear (default) | log spacing")
    sugar.add_argument("--domain-file", metavar="FILE", help="--domain read from a file, one label per line")


def given_params(args: argparse.Namespace) -> dict[str, Any]:
    """The params fields the user set (derived flags and expanded shorthands), by field name."""
    from ldptel.client import bucket_edges

    given: dict[str, Any] = {}
    for key, value in vars(args).items():
        if key.startswith(DEST_PREFIX) and value is not None:
            given[key[len(DEST_PREFIX):]] = value

    def expand(option: str, fields: dict[str, Any]) -> None:
        clash = sorted(set(fields) & set(given))
        if clash:
            raise UserError(f"{option} sets {', '.join(flag(f) for f in clash)}: give one or the other")
        given.update(fields)

    rng = getattr(args, "range", None)
    buckets = getattr(args, "buckets", None)
    scale = getattr(args, "scale", None)
    if scale is not None and buckets is None:
        raise UserError("--scale spaces the --buckets: give --buckets D --range LO HI too")
    if buckets is not None:
        lo_hi = rng if rng is not None else (given.pop("lo", None), given.pop("hi", None))
        if None in lo_hi:
            raise UserError("--buckets needs --range LO HI (or --lo and --hi)")
        edges = list(bucket_edges(float(lo_hi[0]), float(lo_hi[1]), buckets, scale=scale or "linear"))
        expand("--buckets", {"edges": edges})
    elif rng is not None:
        expand("--range", {"lo": rng[0], "hi": rng[1]})
    domain_file = getattr(args, "domain_file", None)
    if domain_file:
        expand("--domain-file", {"domain": read_values(domain_file, what="domain file")})
    return given


def params_dict(mechanism: str, epsilon: float, args: argparse.Namespace) -> dict[str, Any]:
    """``{"mechanism", "epsilon", fields...}`` for :func:`params_from_dict`; a :class:`UserError` when a flag
    given is not a field of ``mechanism`` or a required one is missing (naming the flags, not Python's error)."""
    fields, required = get_mechanism(mechanism).params_schema()
    given = given_params(args)
    foreign = sorted(set(given) - set(fields))
    if foreign:
        takes = ", ".join(flag(f) for f in fields if f not in HAND_WRITTEN) or "no further options"
        raise UserError(f"--mechanism {mechanism} does not take {', '.join(flag(f) for f in foreign)} "
                        f"(it takes {takes})")
    missing = [f for f in required if f not in given]
    if missing:
        names = " and ".join(flag(f) for f in missing)
        if {"lo", "hi"} <= set(missing):
            names += " (or --range LO HI)"
        hints = "; ".join(f"{flag(f)}: {fields[f].get('description') or _describe(fields[f])}" for f in missing)
        raise UserError(f"--mechanism {mechanism} needs {names} ({hints}; TOML: {', '.join(missing)})")
    return {"mechanism": mechanism, "epsilon": epsilon, **given}


def _describe(schema: dict[str, Any]) -> str:
    kinds = sorted(_types(schema) - {"null"})
    if "enum" in schema:
        return "one of " + ", ".join(str(v) for v in schema["enum"])
    bounds = [f"≥ {schema['minimum']}" if "minimum" in schema else "", f"≤ {schema['maximum']}" if "maximum" in schema else ""]
    text = "/".join(kinds)
    if "array" in kinds:
        text = "a comma list"
    return " ".join([text, *[b for b in bounds if b]])
