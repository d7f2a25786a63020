"""Metrics as code: ``ldptel metrics plan|diff|apply FILE``, one TOML file that describes many metrics.

Each table ``[metrics.NAME]`` is one metric (``deploy/metrics.example.toml`` is a complete example)::

    [metrics.emoji]
    mechanism = "..."              # the params: mechanism, epsilon and the mechanism's own fields
    epsilon = 4                    #   (k, m, hash_seed, domain, prob_bits: what its params type takes)
    k = 2048
    m = 1024
    reports_per_day = 1            # device policy
    sample_rate = 0.1              # secret sampling: the share of devices taking part each day (default 1)
    description = "emoji usage"    # metadata: description, owner, expires (a TOML date), notes
    owner = "growth@example.com"
    expires = 2027-06-30
    shards = 4                     # only when the metric is created
    retention_days = 90            # days each sealed day keeps its own state (then 32-day roll-ups only;
                                   #   left out: unchanged, new metrics keep every day; see ldptel.storage.sealed)
    min_reports = 50               # reporting threshold: a day (or combination) with fewer reports is withheld
                                   #   from every estimate (left out: unchanged; new metrics 0 = off)
    shuffle_n_min = 500            # distinct uploads per shuffled block (left out: unchanged; new metrics use the
                                   #   shuffle stage's own n_min, default 100; see docs/shuffle.md)
    breakdown = ["os"]             # profile dimensions it is broken down by (declared in [profile]; not privatized)

    [profile]                      # the registry's profile schema: each dimension's declared values ('other' is
    os = ["android", "ios", "web"] #   implicit); applied before the metrics; growing a list is not a new version

Breakdowns: docs/breakdowns.md.

Params, ``reports_per_day`` and ``sample_rate`` are the privatization: changing them is a new version, which devices see as a
new metric (see :func:`consequences`). Metadata is edited in place. The whole file is read and validated before
anything is written, every error names its metric and field, and ``apply`` writes all the metrics in one Redis
transaction (:func:`ldptel.storage.registry.register_metrics`): nothing is ever half-applied. Metrics in the
registry but not in the file are listed and left as they are (``ldptel metrics retire NAME`` retires one).
"""

from __future__ import annotations

import datetime
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import TYPE_CHECKING, Any, TextIO

from ldptel.aggregator.cli.common import UserError, read_text
from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms import get_mechanism, mechanism_names, mechanism_of
from ldptel.client.mechanisms.longitudinal import longitudinal_note
from ldptel.client.protocol.breakdown import ProfileSchema
from ldptel.client.protocol.specs import METADATA_FIELDS, MetricSpec, params_from_dict
from ldptel.client.protocol.validate import check_int
from ldptel.client.sdk.policy import DEFAULT_MAX_LONGITUDINAL_EPSILON

if TYPE_CHECKING:
    from ldptel.storage.registry import Change, MetricRecord

SPEC_KEYS = ("reports_per_day", "sample_rate", "breakdown", *METADATA_FIELDS)  # a metric's keys besides its params and shards
RECORD_KEYS = ("shards", "retention_days", "min_reports", "shuffle_n_min", "allow_above_default_policy")  # keys of the record or the file, not of a version
PRIVATIZATION_KEYS = ("reports_per_day", "sample_rate")  # besides the params: what a version fixes
SYMBOLS = {"create": "+", "unchanged": "=", "metadata": "~", "reactivate": "~", "version": "!"}


@dataclass(frozen=True, kw_only=True)
class FileMetric:
    """One ``[metrics.NAME]`` table: the spec it defines and its shard count (None: the default)."""

    spec: MetricSpec
    shards: int | None
    retention_days: int | None = None  # None: not in the file (the registry's value is left as it is)
    min_reports: int | None = None  # None: not in the file (the registry's value is left as it is)
    shuffle_n_min: int | None = None  # None: not in the file (the registry's value is left as it is)
    allow_above_default_policy: bool = False  # registered even beyond the default device PrivacyPolicy


def load_metrics_file(path: str) -> list[FileMetric]:
    """Every metric of the TOML file at ``path``, validated; a :class:`UserError` listing every problem."""
    return load_metrics_document(path)[0]


def load_metrics_document(path: str) -> tuple[list[FileMetric], ProfileSchema | None]:
    """The metrics of the TOML file at ``path`` and its ``[profile]`` schema (None: the file has none)."""
    text = read_text(path, what="metrics file")
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"metrics file {path} is not valid TOML: {exc}") from None
    profile = None
    if "profile" in document:
        try:
            profile = ProfileSchema.from_dict(document.pop("profile"))
        except InvalidParameterError as exc:
            raise UserError(f"metrics file {path}, [profile]: {exc}; nothing was changed") from None
    extra = sorted(set(document) - {"metrics"})
    tables = document.get("metrics")
    if extra or not isinstance(tables, dict) or not tables:
        raise UserError(f"metrics file {path} must hold [metrics.NAME] tables and nothing else (found {sorted(document)})")
    metrics, errors = [], []
    for name, table in tables.items():
        try:
            metrics.append(_file_metric(name, table))
        except InvalidParameterError as exc:
            errors.append(f"metric {name!r}, field {exc.parameter!r}: {exc}")
    if errors:
        lines = "\n  ".join(errors)
        raise UserError(f"metrics file {path}: {len(errors)} invalid metric(s), nothing was changed:\n  {lines}")
    return metrics, profile


def _file_metric(name: str, table: object) -> FileMetric:
    if not isinstance(table, dict):
        raise InvalidParameterError("metrics." + name, "a table of fields", table)
    mechanism = table.get("mechanism")
    if isinstance(mechanism, str) and mechanism in mechanism_names():
        allowed = ["mechanism", *(f.name for f in dataclass_fields(get_mechanism(mechanism).params_type)), *SPEC_KEYS, *RECORD_KEYS]
        for key in table:
            if key not in allowed:
                raise InvalidParameterError(key, f"one of the keys of a {mechanism} metric {allowed}", table[key])
    params = {key: value for key, value in table.items() if key not in SPEC_KEYS and key not in RECORD_KEYS}
    fields: dict[str, Any] = {key: table[key] for key in SPEC_KEYS if key in table}
    expires = fields.get("expires")
    if isinstance(expires, datetime.date) and not isinstance(expires, datetime.datetime):
        fields["expires"] = expires.isoformat()
    shards = table.get("shards")
    if shards is not None:
        check_int("shards", shards, 1, 1 << 20)  # the registry enforces the real maximum
    retention = table.get("retention_days")
    if retention is not None:
        check_int("retention_days", retention, 0, 36_500)
    min_reports = table.get("min_reports")
    if min_reports is not None:
        from ldptel.storage.registry import check_min_reports

        check_min_reports(min_reports)
    shuffle_n_min = table.get("shuffle_n_min")
    if shuffle_n_min is not None:
        from ldptel.storage.registry import check_shuffle_n_min

        check_shuffle_n_min(shuffle_n_min)
    allow = table.get("allow_above_default_policy", False)
    if not isinstance(allow, bool):
        raise InvalidParameterError("allow_above_default_policy", "true or false", allow)
    spec = MetricSpec(name=name, params=params_from_dict(params), **fields)
    return FileMetric(spec=spec, shards=shards, retention_days=retention, min_reports=min_reports,
                      shuffle_n_min=shuffle_n_min, allow_above_default_policy=allow)


# record settings a file may set, and their value on a metric that does not exist yet
SETTING_DEFAULTS: dict[str, int | None] = {"retention_days": None, "min_reports": 0, "shuffle_n_min": None}


def setting_changes(records: Sequence[MetricRecord], metrics: Sequence[FileMetric], setting: str
                    ) -> list[tuple[str, int | None, int]]:
    """``(name, before, after)`` of every metric whose file sets a record ``setting`` (one of
    :data:`SETTING_DEFAULTS`) to a value the registry does not have (a new metric's before is the default)."""
    by_name = {rec.name: rec for rec in records}
    out = []
    for item in metrics:
        old = by_name.get(item.spec.name)
        before = SETTING_DEFAULTS[setting] if old is None else getattr(old, setting)
        after = getattr(item, setting)
        if after is not None and after != before:
            out.append((item.spec.name, before, after))
    return out


# ---------------------------------------------------------------------------------------------- planning
def plan_file(records: Sequence[MetricRecord], metrics: Sequence[FileMetric]) -> tuple[list[Change], list[str]]:
    """What applying ``metrics`` would do to the registry's ``records``, and the registered names the file
    leaves out. A shard count that differs from an existing metric's is a :class:`UserError`."""
    from ldptel.storage.registry import plan_change

    by_name = {rec.name: rec for rec in records}
    changes = []
    for item in metrics:
        old = by_name.get(item.spec.name)
        if old is not None and item.shards is not None and item.shards != old.shards:
            raise UserError(
                f"metric {old.name!r}, field 'shards': it has {old.shards} shards and the count of an existing "
                f"metric cannot change (remove shards = {item.shards} from the file)"
            )
        changes.append(plan_change(old, item.spec))
    named = {item.spec.name for item in metrics}
    return changes, sorted(set(by_name) - named)


def flat_fields(spec: MetricSpec) -> dict[str, object]:
    """A spec as the file writes it: params fields, then reports_per_day and the metadata (and a breakdown's values)."""
    out = {**spec.params.to_dict(), **{key: getattr(spec, key) for key in SPEC_KEYS}}
    if not spec.breakdown:
        del out["breakdown"]
    else:
        out["breakdown"] = list(spec.breakdown)
        out.update({f"profile.{d}": list(v) for d, v in spec.profile})
    return out


def differences(old: MetricSpec | None, new: MetricSpec) -> list[tuple[str, object, object]]:
    """``(field, before, after)`` for every field that differs (``before`` None for a new metric)."""
    before = {} if old is None else flat_fields(old)
    after = flat_fields(new)
    return [(key, before.get(key), after.get(key)) for key in dict.fromkeys([*before, *after]) if before.get(key) != after.get(key)]


def privatization_field(key: str) -> bool:
    return key not in METADATA_FIELDS and not key.startswith("profile.")  # declared values are edited in place


def consequences(old: MetricSpec, new: MetricSpec) -> list[str]:
    """What a new version means for devices and queries: ε per report, per day and for repeated values."""
    lines = [
        f"ε per report {old.effective_epsilon:.4g} → {new.effective_epsilon:.4g}; per device and day "
        f"{old.daily_epsilon:.4g} → {new.daily_epsilon:.4g} ({old.reports_per_day} → {new.reports_per_day} reports/day)"
    ]
    old_mech, new_mech = mechanism_of(old.params), mechanism_of(new.params)
    if old.params == new.params:
        lines.append("the params are unchanged, so devices keep their permanent randomization and the day's memo "
                     "(both are keyed by the privatization, not the version)")
    elif old_mech.permanent_channel(old.params) is not None or new_mech.permanent_channel(new.params) is not None:
        a, b = old_mech.longitudinal_epsilon(old.params), new_mech.longitudinal_epsilon(new.params)
        lines.append(
            f"devices start a new permanent randomization: a value reported under both v{old.version} and "
            f"v{new.version} is protected by ε∞ {a:.3g} + {b:.3g} = {a + b:.3g} instead of {a:.3g}; each device "
            f"charges it to its lifetime ledger and refuses the new version if the sum passes its policy's ε∞ "
            f"(default {DEFAULT_MAX_LONGITUDINAL_EPSILON:g}); that covers the level of a value, not when it changes"
        )
    else:
        lines.append("sketch reports are memoized per privatization and day; the day's budget is per metric name, so the switch does not reopen it")
    if new_mech.permanent_channel(new.params) is not None:
        lines.append(longitudinal_note(new.params))
    lines.append(
        f"reports devices queued under v{old.version} are refused (409) and dropped, their budget spent; "
        f"`ldptel estimate` shows v{new.version} (--version {old.version} for the old sketches)"
    )
    return lines


def _value(value: object) -> str:
    return "(none)" if value is None else repr(value) if isinstance(value, str) else str(value)


def write_plan(changes: Sequence[Change], missing: Sequence[str], out: TextIO, *, applied: bool = False) -> None:
    """The plan as text: one line per metric, the changed fields, and for a new version its ε consequences."""
    counts = {kind: sum(c.kind == kind for c in changes) for kind in SYMBOLS}
    verb = "applied" if applied else "would apply"
    out.write(
        f"{verb}: {counts['create']} to create, {counts['metadata']} metadata edit(s) in place, "
        f"{counts['reactivate']} to reactivate, {counts['version']} NEW VERSION(S), {counts['unchanged']} unchanged\n"
    )
    for change in changes:
        spec, old = change.spec, change.before
        head = f"{SYMBOLS[change.kind]} {spec.name}"
        if change.kind == "create":
            out.write(f"{head}: create v1 ({spec.mechanism}, ε {spec.params.epsilon:g}, {spec.reports_per_day} reports/day)\n")
            if spec.breakdown:
                out.write(f"    {breakdown_note(spec)}\n")
            if mechanism_of(spec.params).permanent_channel(spec.params) is not None:
                out.write(f"    {longitudinal_note(spec.params)}\n")
        elif change.kind == "unchanged":
            out.write(f"{head}: unchanged (v{spec.version})\n")
        elif change.kind in ("metadata", "reactivate"):
            what = "reactivate" if change.kind == "reactivate" else "edit"
            out.write(f"{head}: {what} v{spec.version} in place (privatization unchanged: no new version)\n")
        else:
            assert old is not None
            out.write(f"{head}: NEW VERSION v{spec.version} (current v{old.current_version}): the privatization changes\n")
        if old is not None:
            for key, before, after in differences(old.current, spec):
                flag = "  (privatization)" if privatization_field(key) else ""
                out.write(f"    {key}: {_value(before)} → {_value(after)}{flag}\n")
            if change.kind == "version":
                for line in consequences(old.current, spec):
                    out.write(f"    !! {line}\n")
                if spec.breakdown != old.current.breakdown and spec.breakdown:
                    out.write(f"    {breakdown_note(spec)}\n")
        if change.kind in ("create", "version"):
            from ldptel.aggregator.amplification import planned_line

            out.write(f"    {planned_line(spec)}\n")
    for name in missing:
        out.write(f"  {name}: registered but not in the file (left as it is)\n")


def plan_document(changes: Sequence[Change], missing: Sequence[str], *, applied: bool = False) -> dict[str, Any]:
    """The plan as JSON: per metric the change, versions, changed fields and, for a new version, its consequences."""
    metrics = []
    for change in changes:
        old = change.before
        fields = [] if old is None else differences(old.current, change.spec)
        metrics.append({
            "name": change.spec.name,
            "change": change.kind,
            "version": change.version,
            "current_version": None if old is None else old.current_version,
            "fields": [{"field": k, "before": b, "after": a, "privatization": privatization_field(k)} for k, b, a in fields],
            "consequences": consequences(old.current, change.spec) if old is not None and change.kind == "version" else [],
            **({"breakdown": breakdown_facts(change.spec)} if change.spec.breakdown else {}),
            **({"central": _planned_central(change.spec)} if change.kind in ("create", "version") else {}),
        })  # fmt: skip
    return {"applied": applied, "metrics": metrics, "not_in_file": list(missing)}


def _planned_central(spec: MetricSpec) -> list[dict[str, Any]]:
    """The central (ε, δ) of ``spec``'s reports in a shuffled block of each planned size (or why none)."""
    from ldptel.aggregator.amplification import PLAN_SIZES, central_for_n, randomizer

    r = randomizer(spec)[1]
    return [{"devices_per_block": n, **central_for_n(spec, n * r).to_dict()} for n in PLAN_SIZES]


def write_change_note(change: Change, err: TextIO) -> None:
    """One line on what ``metrics create`` did (plus a new version's ε consequences), for stderr."""
    notes = {
        "create": "created",
        "unchanged": "unchanged",
        "metadata": "metadata edited in place (no new version)",
        "reactivate": "reactivated (no new version)",
        "version": "NEW VERSION: the privatization changed",
    }
    err.write(f"ldptel: {change.spec.name} v{change.version}: {notes[change.kind]}\n")
    if change.kind == "version" and change.before is not None:
        for line in consequences(change.before.current, change.spec):
            err.write(f"  !! {line}\n")


def write_diff(changes: Sequence[Change], missing: Sequence[str], out: TextIO) -> bool:
    """Field by field, where the registry differs from the file; True when anything differs."""
    differs = False
    for change in changes:
        if change.kind == "unchanged":
            continue
        differs = True
        old = change.before
        label = "not registered" if old is None else f"v{old.current_version}" + ("" if old.active else ", retired")
        out.write(f"{change.spec.name} ({label}):\n")
        if old is not None and not old.active:
            out.write(f"    status: {old.status!r} → 'active'\n")
        for key, before, after in differences(None if old is None else old.current, change.spec):
            out.write(f"    {key}: {_value(before)} → {_value(after)}\n")
    for name in missing:
        differs = True
        out.write(f"{name}: registered, not in the file\n")
    if not differs:
        out.write("no differences: the registry matches the file\n")
    return differs


# --------------------------------------------------------------------------------------------- breakdowns
def breakdown_facts(spec: MetricSpec) -> dict[str, Any]:
    """A breakdown's combinations, worst-case memory and what it reveals (``metrics plan``/``show``)."""
    from ldptel.client.protocol.breakdown import MAX_COMBINATIONS, combinations
    from ldptel.storage.registry import state_counters

    cells = combinations(spec.breakdown, spec.profile_schema)
    per_cell = state_counters(spec) * 4
    return {
        "dimensions": list(spec.breakdown),
        "values": {d: [*v, "other"] for d, v in spec.profile},
        "combinations": cells,
        "max_combinations": MAX_COMBINATIONS,
        "bytes_per_combination_per_shard_day": per_cell,
        "worst_case_bytes_per_shard_day": cells * per_cell,
        "reveals": BREAKDOWN_REVEALS,
    }


BREAKDOWN_REVEALS = (
    "profile values are sent in clear with each batch (not privatized, not covered by ε): the server and anyone "
    "who reads the streams learn each batch's combination; and a report hides among the reports of its combination "
    "only, so a combination with few devices is a small crowd (its estimate is noisier, and central ε from shuffling "
    "is computed per combination); combinations below min_reports are withheld from results. docs/breakdowns.md"
)


def breakdown_note(spec: MetricSpec) -> str:
    """One line for a plan: the dimensions, combinations and memory, and that the values are not privatized."""
    facts = breakdown_facts(spec)
    per = facts["bytes_per_combination_per_shard_day"]
    return (f"breakdown by {', '.join(spec.breakdown)}: {facts['combinations']} combinations (cap "
            f"{facts['max_combinations']}), ≤ {_mib(facts['worst_case_bytes_per_shard_day'])} of state per shard-day "
            f"({_mib(per)} each before sealing); NOT privatized: {BREAKDOWN_REVEALS}")


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB"
