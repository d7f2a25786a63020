"""``ldptel metrics list|show|create|retire``: the metric registry (:mod:`ldptel.storage.registry`).

``create`` builds the spec from a ``--spec-file`` (a MetricSpec as JSON) or from options: the mechanism
options the user gave (:data:`PARAMS_OPTIONS`) go to :func:`~ldptel.client.protocol.specs.params_from_dict`
as they are, so the params themselves say which options a mechanism takes and which values are valid.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ldptel.aggregator.cli.common import EXIT_OK, UserError, comma_list, connected, positive_int, read_values
from ldptel.aggregator.cli.output import table, write_json
from ldptel.client.mechanisms import mechanism_names, mechanism_of
from ldptel.client.protocol.specs import MetricSpec, params_from_dict

if TYPE_CHECKING:
    from ldptel.storage.registry import MetricRecord

NAME = "metrics"
EXTRA = "aggregator"
NEEDS = ("redis",)  # top-level modules the command imports beyond the SDK
RECORD_FORMATS = ("table", "json")
RECORD_HEADERS = ("name", "status", "version", "mechanism", "epsilon", "shape", "reports/day", "shards")

# options of `metrics create` that are params fields, passed to params_from_dict when given
PARAMS_OPTIONS = ("k", "m", "hash_seed", "domain", "prob_bits")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    sketches = ", ".join(mechanism_names(candidates=True))
    met = sub.add_parser(NAME, help="manage the metric registry", description="List, show, create, grow or retire metrics.")
    msub = met.add_subparsers(dest="action", metavar="ACTION", required=True)
    mlist = msub.add_parser("list", parents=[common], help="every metric")
    mlist.add_argument("--format", choices=RECORD_FORMATS, default="table")
    mshow = msub.add_parser("show", parents=[common], help="one metric's record (JSON)")
    mshow.add_argument("name", metavar="NAME")
    mcreate = msub.add_parser("create", parents=[common], help="create a metric or a new version of it",
                              description="Create a metric (or a new version when its parameters change).")
    mcreate.add_argument("name", metavar="NAME", nargs="?")
    mcreate.add_argument("--spec-file", metavar="FILE", help="a MetricSpec as JSON instead of the options below")
    mcreate.add_argument("--mechanism", choices=mechanism_names())
    mcreate.add_argument("--epsilon", type=float, help="ε per report")
    mcreate.add_argument("--k", type=int, help=f"sketch rows ({sketches})")
    mcreate.add_argument("--m", type=int, help=f"sketch columns, a power of two ({sketches})")
    mcreate.add_argument("--hash-seed", type=int, help="sketch hash seed (default 0)")
    mcreate.add_argument("--domain", type=comma_list, metavar="A,B,...", help="grr labels, comma-separated")
    mcreate.add_argument("--domain-file", metavar="FILE", help="grr labels, one per line")
    mcreate.add_argument("--prob-bits", type=int, help="probability resolution in bits (default: automatic)")
    mcreate.add_argument("--reports-per-day", type=int, default=1, help="reports a device may send per day")
    mcreate.add_argument("--description", default="")
    mcreate.add_argument("--shards", type=int, help="stream shards (new metrics only; raise later with metrics grow)")
    mcreate.add_argument("--format", choices=RECORD_FORMATS, default="table")
    mgrow = msub.add_parser("grow", parents=[common], help="raise a metric's shard count (spread it over more shards)",
                            description="Raise the shard count: new batches spread over more streams (on a Redis "
                            "Cluster, more primaries) and fold workers; every shard keeps counting in queries.")
    mgrow.add_argument("name", metavar="NAME")
    mgrow.add_argument("--shards", type=positive_int, required=True, help="the new shard count (larger)")
    mgrow.add_argument("--format", choices=RECORD_FORMATS, default="table")
    mretire = msub.add_parser("retire", parents=[common], help="stop accepting reports (sketches stay)")
    mretire.add_argument("name", metavar="NAME")
    mretire.add_argument("--format", choices=RECORD_FORMATS, default="table")
    met.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ldptel.storage import registry

    with connected(args.redis_url) as r:
        action = args.action
        if action == "list":
            _write_records(registry.list_metrics(r), args.format, out)
        elif action == "show":
            write_json(registry.get_metric(r, args.name).to_dict(), out)
        elif action == "create":
            if args.domain_file:
                args.domain = read_values(args.domain_file, what="domain file")
            rec = registry.create_metric(r, spec_from_args(args), shards=args.shards)
            if args.format == "json":
                write_json(rec.to_dict(), out)
            else:
                _write_records([rec], "table", out)
        elif action == "grow":
            _write_records([registry.grow_shards(r, args.name, args.shards)], args.format, out)
        elif action == "retire":
            _write_records([registry.retire_metric(r, args.name)], args.format, out)
    return EXIT_OK


def spec_from_args(args: argparse.Namespace) -> MetricSpec:
    """The spec of ``metrics create``: from ``--spec-file`` (NAME overrides its name), else from the options."""
    if args.spec_file:
        try:
            text = Path(args.spec_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"cannot read spec file {args.spec_file}: {exc}") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UserError(f"spec file {args.spec_file} is not JSON: {exc}") from None
        if isinstance(data, dict) and args.name:
            data = {**data, "name": args.name}
        return MetricSpec.from_dict(data)
    if not args.name:
        raise UserError("metrics create needs a NAME (or a --spec-file that has one)")
    if not args.mechanism or args.epsilon is None:
        raise UserError("metrics create needs --mechanism and --epsilon (or --spec-file FILE)")
    given = {name: getattr(args, name) for name in PARAMS_OPTIONS if getattr(args, name) is not None}
    return MetricSpec(
        name=args.name,
        params=params_from_dict({"mechanism": args.mechanism, "epsilon": args.epsilon, **given}),
        reports_per_day=args.reports_per_day,
        description=args.description,
    )


def _shape(record: MetricRecord) -> str:
    params = record.current.params
    shape: str = mechanism_of(params).shape(params)
    return shape


def _write_records(records: Sequence[MetricRecord], fmt: str, out: TextIO) -> None:
    if fmt == "json":
        write_json([rec.to_dict() for rec in records], out)
        return
    if not records:
        out.write("no metrics registered (create one: ldptel metrics create NAME --mechanism ... --epsilon ...)\n")
        return
    rows = [
        [rec.name, rec.status, rec.current_version, rec.current.mechanism, f"{rec.current.params.epsilon:g}",
         _shape(rec), rec.current.reports_per_day, rec.shards]
        for rec in records
    ]
    table(RECORD_HEADERS, rows, out)
