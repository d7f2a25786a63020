"""``ldptel metrics list|show|create|retire|plan|diff|apply``: the metric registry (:mod:`ldptel.storage.registry`).

``create`` builds the spec from a ``--spec-file`` (a MetricSpec as JSON) or from options: a flag per params field,
derived from the mechanisms' params schemas (:mod:`ldptel.aggregator.cli.params_options`: TOML key ``hash_seed`` is
``--hash-seed``), the ones given going to :func:`~ldptel.client.protocol.specs.params_from_dict` as they are, so the
params themselves say which values are valid. A
spec with the current version's privatization edits its metadata in place; any other is a new version.
``plan``, ``diff`` and ``apply`` take a TOML file of many metrics (:mod:`ldptel.aggregator.cli.metrics_file`).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from ldptel.aggregator.cli import metrics_file
from ldptel.aggregator.cli.common import (
    EXIT_OK,
    UserError,
    comma_list,
    connected,
    day,
    positive_int,
    read_text,
)
from ldptel.aggregator.cli.output import table, write_json
from ldptel.aggregator.cli.params_options import add_params_options, params_dict
from ldptel.aggregator.json_api import versioned
from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms import mechanism_names, mechanism_of
from ldptel.client.protocol.specs import MetricSpec, params_from_dict

if TYPE_CHECKING:
    import redis

    from ldptel.storage.registry import MetricRecord

NAME = "metrics"
EXTRA = "aggregator"
NEEDS = ("redis",)  # top-level modules the command imports beyond the SDK
RECORD_FORMATS = ("table", "json")
RECORD_HEADERS = ("name", "status", "version", "mechanism", "epsilon", "shape", "reports/day", "shards", "min reports",
                  "retention", "expires", "owner")
EXIT_DIFFERS = 1  # `metrics diff`: the registry differs from the file (as diff(1))



def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    met = sub.add_parser(NAME, help="manage the metric registry",
                         description="List, show, create, grow or retire metrics, or plan, diff and apply a TOML file of them.")
    msub = met.add_subparsers(dest="action", metavar="ACTION", required=True)
    mlist = msub.add_parser("list", parents=[common], help="every metric (status 'expired' past its expires day)")
    mlist.add_argument("--format", choices=RECORD_FORMATS, default="table")
    mshow = msub.add_parser("show", parents=[common], help="one metric's record (JSON by default)")
    mshow.add_argument("name", metavar="NAME")
    mshow.add_argument("--format", choices=RECORD_FORMATS, default="json",
                       help="json (default: the versioned record, docs/json-output.md) or table (a readable summary)")
    mcreate = msub.add_parser(
        "create", parents=[common], help="create a metric, a new version of it, or edit its metadata",
        description="Create a metric. On an existing one: a new version when the privatization (params or "
        "--reports-per-day) changes, else its description, owner, expiry and notes are edited in place (no new "
        "version). The options are the whole definition: metadata left out is cleared.")
    mcreate.add_argument("name", metavar="NAME", nargs="?")
    mcreate.add_argument("--spec-file", metavar="FILE", help="a MetricSpec as JSON instead of the options below")
    mcreate.add_argument("--mechanism", choices=mechanism_names())
    mcreate.add_argument("--epsilon", type=float, help="ε per report")
    add_params_options(mcreate)
    mcreate.add_argument("--reports-per-day", type=int, default=1, help="reports a device may send per day")
    mcreate.add_argument("--sample-rate", type=float, default=1.0, metavar="BETA",
                         help="secret sampling: each device takes part on a day with probability BETA in (0, 1], "
                              "decided on the device (default 1: every device); estimates of counts scale by 1/BETA")
    mcreate.add_argument("--description", default="", help="metadata: what the metric measures")
    mcreate.add_argument("--owner", default="", help="metadata: who to ask about it (a team or an address)")
    mcreate.add_argument("--expires", type=day, metavar="DAY", help="metadata: UTC day after which it is listed as expired")
    mcreate.add_argument("--notes", default="", help="metadata: free text")
    mcreate.add_argument("--shards", type=int, help="stream shards (new metrics only; raise later with metrics grow)")
    mcreate.add_argument("--min-reports", type=int, metavar="N",
                         help="reporting threshold: estimates of a day with fewer than N reports are withheld "
                              "everywhere, and left out of every total (0: off, a new metric's default; left out: "
                              "unchanged). Lowering it releases days that were withheld")
    mcreate.add_argument("--breakdown", type=comma_list, metavar="DIM[,DIM]", default=[],
                         help="profile dimensions to break the metric down by (declared with `ldptel metrics profile`); "
                              "their values travel in clear with each batch: docs/breakdowns.md")
    mcreate.add_argument("--allow-above-default-policy", action="store_true",
                         help="register a spec beyond the default device PrivacyPolicy (ε 4 per report, 8 per day, "
                         "ε∞ 8): only for fleets whose apps set a wider policy; without it such a spec is refused")
    mcreate.add_argument("--format", choices=RECORD_FORMATS, default="table")
    mgrow = msub.add_parser("grow", parents=[common], help="raise a metric's shard count (spread it over more shards)",
                            description="Raise the shard count: new batches spread over more streams (on a Redis "
                            "Cluster, more primaries) and fold workers; every shard keeps counting in queries.")
    mgrow.add_argument("name", metavar="NAME")
    mgrow.add_argument("--shards", type=positive_int, required=True, help="the new shard count (larger)")
    mgrow.add_argument("--format", choices=RECORD_FORMATS, default="table")
    mret = msub.add_parser("retention", parents=[common], help="how long sealed days keep their own state",
                           description="Keep each sealed day's own state for DAYS days; older days are then read "
                           "from 32-day roll-ups only (a per-day series shows 32-day periods there). Applied at the "
                           "next seal pass (ldptel seal, or a following aggregate).")
    mret.add_argument("name", metavar="NAME")
    keep = mret.add_mutually_exclusive_group(required=True)
    keep.add_argument("--days", type=int, metavar="DAYS", help="days a sealed day keeps its own state (0 or more)")
    keep.add_argument("--forever", action="store_true", help="keep every day's state (the default of a new metric)")
    mret.add_argument("--format", choices=RECORD_FORMATS, default="table")
    mshuf = msub.add_parser("shuffle-n-min", parents=[common], help="distinct uploads per shuffled block of a metric",
                            description="Release the metric's held uploads in shuffled blocks of at least N distinct "
                            "uploads (its central ε is computed from the smallest block: docs/shuffle.md). Stored in "
                            "the registry; running shufflers read it within seconds. A shuffler started with "
                            "--shuffle-n-min-for METRIC=N overrides it.")
    mshuf.add_argument("name", metavar="NAME")
    size = mshuf.add_mutually_exclusive_group(required=True)
    size.add_argument("--uploads", type=positive_int, metavar="N", help="distinct uploads per block (1 or more)")
    size.add_argument("--default", action="store_true",
                      help="the shuffle stage's own n_min (LDPTEL_SHUFFLE_N_MIN, default 100), as a new metric has")
    mshuf.add_argument("--format", choices=RECORD_FORMATS, default="table")
    mprof = msub.add_parser("profile", parents=[common], help="show or change the profile schema (breakdown dimensions)",
                            description="The registry's profile schema: each dimension's declared values ('other' is "
                            "implicit). Metrics name dimensions in breakdown = [...]. Growing a dimension's values (a "
                            "new release) is no new version. Profile values are not privatized: docs/breakdowns.md")
    mprof.add_argument("--set", action="append", metavar="DIM=V1,V2,...", default=[],
                       help="declare DIM with exactly these values (repeatable; replaces DIM's list)")
    mprof.add_argument("--remove", action="append", metavar="DIM", default=[],
                       help="remove a dimension no active metric uses")
    mprof.add_argument("--format", choices=RECORD_FORMATS, default="table")
    mretire = msub.add_parser("retire", parents=[common], help="stop accepting reports (sketches stay)")
    mretire.add_argument("name", metavar="NAME")
    mretire.add_argument("--format", choices=RECORD_FORMATS, default="table")
    for action, help_text in (
        ("plan", "what applying a TOML file of metrics would change (a dry run; new versions flagged with their ε)"),
        ("diff", "field by field, where the registry differs from a TOML file (exit 1 when it does)"),
        ("apply", "create, version or edit every metric of a TOML file, all or nothing"),
    ):
        mfile = msub.add_parser(action, parents=[common], help=help_text, description=help_text + ". "
                                "Format: deploy/metrics.example.toml.")
        mfile.add_argument("file", metavar="FILE", help="a TOML file of [metrics.NAME] tables ('-': standard input)")
        if action != "diff":
            mfile.add_argument("--format", choices=RECORD_FORMATS, default="table",
                               help="json: per metric the change, versions, changed fields and consequences")
            mfile.add_argument("--allow-above-default-policy", action="store_true",
                               help="allow every metric of the file beyond the default device PrivacyPolicy "
                               "(one metric: allow_above_default_policy = true in its table)")
    met.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ldptel.storage import registry

    with connected(args.redis_url) as r:
        action = args.action
        if action == "list":
            _write_records(registry.list_metrics(r), args.format, out)
        elif action == "show":
            record = registry.get_metric(r, args.name)
            doc = {**with_sampling(record), "min_reports": record.min_reports}
            if record.current.breakdown:
                doc["breakdown"] = metrics_file.breakdown_facts(record.current)
            _write_show(doc, args.format, out)
        elif action == "profile":
            _run_profile(r, args, out)
        elif action == "create":
            spec = spec_from_args(args)
            registry.check_default_policy(r, [spec], allow=args.allow_above_default_policy)
            if args.min_reports is not None:
                registry.check_min_reports(args.min_reports)  # before anything is written
            rec, change = registry.register_metric(r, spec, shards=args.shards)
            if args.min_reports is not None:  # a record field, not a version: set after the spec (idempotent)
                rec = registry.set_min_reports(r, spec.name, args.min_reports)
            metrics_file.write_change_note(change, err)
            if args.format == "json":
                write_json(versioned("metric", rec.to_dict()), out)
            else:
                _write_records([rec], "table", out)
        elif action == "grow":
            _write_records([registry.grow_shards(r, args.name, args.shards)], args.format, out, one=True)
        elif action == "retention":
            rec = registry.set_retention(r, args.name, None if args.forever else args.days)
            _write_setting(rec, args.format, out, "retention_days", "forever" if rec.retention_days is None
                           else rec.retention_days)
        elif action == "shuffle-n-min":
            rec = registry.set_shuffle_n_min(r, args.name, None if args.default else args.uploads)
            _write_setting(rec, args.format, out, "shuffle_n_min", "default" if rec.shuffle_n_min is None
                           else rec.shuffle_n_min)
        elif action == "retire":
            _write_records([registry.retire_metric(r, args.name)], args.format, out, one=True)
        else:
            return _run_file(r, action, args.file, args.format if action != "diff" else "table", out,
                             allow=getattr(args, "allow_above_default_policy", False))
    return EXIT_OK


def _write_setting(rec: MetricRecord, fmt: str, out: TextIO, setting: str, shown: object) -> None:
    """The record after a setting changed: its JSON document, or its table row and ``setting: shown``."""
    if fmt == "json":
        write_json(versioned("metric", rec.to_dict()), out)
    else:
        _write_records([rec], "table", out)
        out.write(f"{setting}: {shown}\n")


def _run_file(r: redis.Redis, action: str, path: str, fmt: str, out: TextIO, *, allow: bool = False) -> int:
    """``plan``/``diff``/``apply`` FILE: validate the whole file, compare it with the registry, maybe write.
    ``plan`` and ``apply`` refuse a metric beyond the default device policy unless it (or ``allow``) allows it."""
    from ldptel.storage import registry

    metrics, profile = metrics_file.load_metrics_document(path)
    schema = registry.get_profile(r) if profile is None else profile
    try:
        registry.check_breakdowns(schema, [item.spec for item in metrics])
    except InvalidParameterError as exc:
        raise UserError(f"metrics file {path}: {exc}; nothing was changed") from None
    metrics = [dataclasses.replace(item, spec=registry.with_profile(item.spec, schema)) for item in metrics]
    if action != "diff":
        registry.check_default_policy(r, [item.spec for item in metrics],
                                      allow=allow or {item.spec.name for item in metrics if item.allow_above_default_policy})
    records = registry.list_metrics(r)
    changes, missing = metrics_file.plan_file(records, metrics)
    retention = metrics_file.setting_changes(records, metrics, "retention_days")
    thresholds = metrics_file.setting_changes(records, metrics, "min_reports")
    blocks = metrics_file.setting_changes(records, metrics, "shuffle_n_min")
    lines = [f"~ {name}: retention_days {'forever' if before is None else before} → {after}" for name, before, after in retention]
    lines += [f"~ {name}: min_reports {before or 'off'} → {after or 'off'}" for name, before, after in thresholds]
    lines += [f"~ {name}: shuffle_n_min {'default' if before is None else before} → {after}" for name, before, after in blocks]
    if action == "diff":
        differs = metrics_file.write_diff(changes, missing, out)
        out.writelines(line + "\n" for line in lines)
        return EXIT_DIFFERS if differs or lines else EXIT_OK
    before_profile = registry.get_profile(r)
    if profile is not None and profile != before_profile:
        lines.insert(0, f"~ profile: {json.dumps(before_profile.to_dict())} → {json.dumps(profile.to_dict())} "
                        "(declared values; metrics broken down by them are edited in place)")
    if action == "apply":
        if profile is not None and profile != before_profile:
            registry.set_profile(r, profile)  # first: the metrics below may name its new dimensions
        settings: dict[str, dict[str, object]] = {}  # record fields, written in the specs' one transaction
        for name, _before, after in retention:
            settings.setdefault(name, {})["retention_days"] = after
        for name, _before, threshold in thresholds:
            settings.setdefault(name, {})["min_reports"] = threshold
        for name, _before, n_min in blocks:
            settings.setdefault(name, {})["shuffle_n_min"] = n_min
        try:
            applied = registry.register_metrics(r, [(item.spec, item.shards) for item in metrics], settings=settings)
        except registry.RegistryConflictError as exc:
            raise UserError(f"{exc}; nothing was changed") from None
        changes = [change for _, change in applied]
    if fmt == "json":
        doc = metrics_file.plan_document(changes, missing, applied=action == "apply")
        if retention:
            doc["retention"] = [{"name": n, "before": b, "after": a} for n, b, a in retention]
        if thresholds:
            doc["min_reports"] = [{"name": n, "before": b, "after": a} for n, b, a in thresholds]
        if blocks:
            doc["shuffle_n_min"] = [{"name": n, "before": b, "after": a} for n, b, a in blocks]
        write_json(versioned("metrics-plan", doc), out)
    else:
        metrics_file.write_plan(changes, missing, out, applied=action == "apply")
        out.writelines(line + "\n" for line in lines)
    return EXIT_OK


def _run_profile(r: redis.Redis, args: argparse.Namespace, out: TextIO) -> None:
    """``metrics profile``: print the schema, after ``--set``/``--remove`` if given (one transaction)."""
    from ldptel.client.protocol.breakdown import ProfileSchema
    from ldptel.storage import registry

    schema = registry.get_profile(r)
    if args.set or args.remove:
        dims = dict(schema.dimensions)
        for text in args.set:
            dim, eq, values = text.partition("=")
            if not eq:
                raise UserError(f"--set takes DIM=V1,V2,..., got {text!r}")
            dims[dim.strip()] = tuple(comma_list(values))
        for dim in args.remove:
            if dim not in dims:
                raise UserError(f"--remove {dim}: no such dimension; declared: {', '.join(dims) or 'none'}")
            del dims[dim]
        schema = registry.set_profile(r, ProfileSchema(dims))
    if args.format == "json":
        write_json(versioned("profile", {"dimensions": schema.to_dict(), "implicit": "other"}), out)
        return
    if not schema.dimensions:
        out.write("no profile dimensions declared (ldptel metrics profile --set os=android,ios,web)\n")
        return
    table(["dimension", "values"], [[d, ", ".join(schema.values(d))] for d in schema.dimensions], out)


def spec_from_args(args: argparse.Namespace) -> MetricSpec:
    """The spec of ``metrics create``: from ``--spec-file`` (NAME overrides its name), else from the options."""
    if args.spec_file:
        text = read_text(args.spec_file, what="spec file")
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
    return MetricSpec(
        name=args.name,
        params=params_from_dict(params_dict(args.mechanism, args.epsilon, args)),
        reports_per_day=args.reports_per_day,
        sample_rate=args.sample_rate,
        description=args.description,
        owner=args.owner,
        expires=args.expires,
        notes=args.notes,
        breakdown=tuple(args.breakdown),
    )


def with_sampling(record: MetricRecord) -> dict[str, Any]:
    """The record's JSON, each version with ``sample_rate`` < 1 carrying its amplified ε and whom it holds against."""
    from ldptel.client.protocol.specs import AMPLIFIED_EPSILON_NOTE

    doc = record.to_dict()
    for key, spec in [("current", record.current), *((f"versions.{v}", s) for v, s in record.versions.items())]:
        if spec.sample_rate < 1.0:
            target = doc["current"] if key == "current" else doc["versions"][key.split(".", 1)[1]]
            target["amplified_epsilon"] = spec.amplified_epsilon
            target["amplified_epsilon_note"] = AMPLIFIED_EPSILON_NOTE
    return doc


def _shape(record: MetricRecord) -> str:
    params = record.current.params
    shape: str = mechanism_of(params).shape(params)
    return shape


def _status(record: MetricRecord, today: str) -> str:
    """The registry status, or ``expired`` for an active metric past its expires day (still accepting reports)."""
    return "expired" if record.active and record.current.expired(today) else record.status


def _above_policy(record: MetricRecord) -> str | None:
    """Why devices with the default PrivacyPolicy refuse the current version (None: they accept it)."""
    from ldptel.storage.registry import default_policy_refusal

    found = default_policy_refusal(record.current)
    return None if found is None else found[0].replace("the device policy", "the default device policy")


def _write_show(doc: dict[str, Any], fmt: str, out: TextIO) -> None:
    """``metrics show``: the record as JSON (default; versioned) or a readable summary of every version."""
    if fmt == "json":
        write_json(versioned("metric", doc), out)
        return
    out.write(f"{doc['name']} · {doc['status']} · {doc['shards']} shards · current version {doc['current_version']}\n")
    for version, spec in doc["versions"].items():
        params = spec["params"]
        rest = ", ".join(f"{k}={v}" for k, v in params.items() if k not in ("mechanism", "epsilon", "domain"))
        if "domain" in params:
            rest = ", ".join(filter(None, [rest, f"domain of {len(params['domain'])} labels"]))
        out.write(f"  v{version}: {params['mechanism']} · ε = {params['epsilon']:g}" + (f" · {rest}" if rest else "") + "\n")
    for key in ("description", "owner", "expires", "notes"):
        if doc["current"].get(key):
            out.write(f"  {key}: {doc['current'][key]}\n")


def _write_records(records: Sequence[MetricRecord], fmt: str, out: TextIO, *, one: bool = False) -> None:
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    if fmt == "json":
        docs = [{**rec.to_dict(), "expired": rec.current.expired(today), "above_default_policy": _above_policy(rec)}
                for rec in records]
        if one:
            write_json(versioned("metric", docs[0]), out)
        else:
            write_json(versioned("metrics-list", {"metrics": docs}), out)
        return
    if not records:
        out.write("no metrics registered (create one: ldptel metrics create NAME --mechanism ... --epsilon ...)\n")
        return
    rows = [
        [rec.name, _status(rec, today) + ("" if _above_policy(rec) is None else " (above default policy)"), rec.current_version, rec.current.mechanism, f"{rec.current.params.epsilon:g}",
         _shape(rec), rec.current.reports_per_day, rec.shards, rec.min_reports or "off",
         "forever" if rec.retention_days is None else f"{rec.retention_days}d", rec.current.expires or "",
         rec.current.owner]
        for rec in records
    ]
    table(RECORD_HEADERS, rows, out, left=(0, 1, len(RECORD_HEADERS) - 1))
