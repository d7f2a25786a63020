"""The metric registry: named, versioned metric specs in one Redis hash (``keys.registry()``).

Each hash field is a metric name; its value is the JSON of a :class:`MetricRecord` (every version's spec, the
current version, the status and the shard count). A change of privatization (params or reports per day)
appends a new version and makes it current; old versions stay readable so that their sketches can still be
estimated. A change of metadata only (description, owner, expiry, notes) rewrites the current version in place,
and so does re-creating a retired metric with its privatization unchanged: no new version, so devices keep
their permanent randomization and queued reports stay valid (:func:`plan_change` decides). Every change is a
WATCH/MULTI/EXEC on the registry hash, retried on conflict, so two concurrent changes can never hand out the
same version number or lose one another.

The shard count can only grow (:func:`grow_shards`): new batches then spread over more streams (on a Redis
Cluster, more primaries) and more fold workers, and queries and workers sum every shard below the count. A
batch's shard is derived from its id, so after a growth a retried batch may map to another shard than its first
attempt did: the record keeps each earlier count with the UTC day it was replaced (``resharded``), and while the
dedupe keys of batches accepted before it can exist the append also checks the batch's shard under the earlier count
(:meth:`MetricRecord.earlier_shards`, :meth:`ldptel.storage.append.BatchAppender.append`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np
import redis

from ldptel.client.errors import InvalidParameterError, LdpError
from ldptel.client.mechanisms.registry import mechanism_of
from ldptel.client.mechanisms.state import state_shape
from ldptel.client.protocol.breakdown import ProfileSchema, check_breakdown
from ldptel.client.protocol.specs import MetricSpec
from ldptel.client.protocol.validate import check_int
from ldptel.storage import keys
from ldptel.storage.append import DAY_MS

__all__ = [
    "check_breakdowns",
    "get_profile",
    "set_profile",
    "with_profile",
    "DEFAULT_SHARDS",
    "MAX_SHARDS",
    "Change",
    "ChangeKind",
    "MAX_RETENTION_DAYS",
    "MetricRecord",
    "RegistryConflictError",
    "RegistryCorruptError",
    "Status",
    "UnknownMetricError",
    "UnknownVersionError",
    "create_metric",
    "get_metric",
    "grow_shards",
    "list_metrics",
    "parse_record",
    "plan_change",
    "register_metric",
    "register_metrics",
    "retire_metric",
    "check_min_reports",
    "DEFAULT_MIN_REPORTS",
    "set_min_reports",
    "set_retention",
    "set_shuffle_n_min",
    "check_shuffle_n_min",
    "spec_for",
]

Status = Literal["active", "retired"]  # a metric's status (the OpenAPI document lists these values)
# What registering a spec does to a metric (plan_change): a new metric, nothing, metadata rewritten in place,
# a retired metric made active again under its current version, or a new version.
ChangeKind = Literal["create", "unchanged", "metadata", "reactivate", "version"]
_MAX_WATCH_RETRIES = 50
DAY_S = DAY_MS // 1000
DEFAULT_SHARDS = 4  # stream shards of a new metric (LDPTEL_SHARDS overrides it at ingest)
MAX_SHARDS = 1024
DEFAULT_MIN_REPORTS = 0  # off: every report is already ε-LDP (docs/central-privacy.md says when to set one)
MAX_MIN_REPORTS = 1_000_000_000


class UnknownMetricError(LdpError, KeyError):
    """No metric of that name is registered."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"unknown metric {name!r}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class UnknownVersionError(LdpError, KeyError):
    """The metric exists but has no such version."""

    def __init__(self, name: str, version: int, known: list[int]) -> None:
        self.name, self.version, self.known = name, version, known
        super().__init__(f"metric {name!r} has no version {version!r}; known versions: {known}")

    def __str__(self) -> str:
        return str(self.args[0])


class RegistryConflictError(LdpError, ValueError):
    """A change that would break an existing metric (e.g. changing its shard count)."""


class AboveDefaultPolicyError(LdpError, ValueError):
    """A spec beyond the default device :class:`~ldptel.client.sdk.policy.PrivacyPolicy`: every device with
    that policy would refuse it (``policy_refused``) and its reports would be lost. ``limit`` names the bound
    (``report_epsilon``, ``daily_epsilon``, ``longitudinal_epsilon``), ``value`` and ``allowed`` its numbers."""

    def __init__(self, metric: str, reason: str, limit: str, value: float, allowed: float) -> None:
        super().__init__(
            f"metric {metric!r}: {reason.replace('the device policy', 'the default device policy')}; devices with the "
            f"default PrivacyPolicy refuse it and its reports are lost (nothing was changed; if your apps set a wider "
            f"policy, allow it: --allow-above-default-policy, allow_above_default_policy = true in a metrics "
            f"file, \"allow_above_default_policy\": true over HTTP)"
        )
        self.metric, self.limit, self.value, self.allowed = metric, limit, value, allowed


def default_policy_refusal(spec: MetricSpec) -> tuple[str, str, float, float] | None:
    """Why a device with the default PrivacyPolicy refuses ``spec``: (reason, limit, value, allowed), or None."""
    from ldptel.client.sdk.policy import PrivacyPolicy

    policy = PrivacyPolicy()
    reason = policy.spec_refusal(spec)
    if reason is None:
        return None
    limit = reason.split()[0]
    value = {"report_epsilon": spec.effective_epsilon, "daily_epsilon": spec.daily_epsilon}.get(limit)
    if value is None:
        value = float(mechanism_of(spec.params).longitudinal_epsilon(spec.params))
    allowed = {"report_epsilon": policy.max_report_epsilon, "daily_epsilon": policy.max_daily_epsilon}.get(
        limit, policy.max_longitudinal_epsilon)
    return reason, limit, value, allowed


def _lifetime_refusal(old: MetricRecord | None, spec: MetricSpec) -> tuple[str, str, float, float] | None:
    """A new permanent privatization that takes the lifetime ε∞ a default-policy device charges for a value
    reported under every version of the metric (:func:`ldptel.client.sdk.ledger.charge_lifetime`) past the cap."""
    from ldptel.client.protocol.keyed import privatization_fingerprint
    from ldptel.client.sdk.policy import PrivacyPolicy

    if old is None or mechanism_of(spec.params).permanent_channel(spec.params) is None:
        return None
    used = {privatization_fingerprint(v.params): float(mechanism_of(v.params).longitudinal_epsilon(v.params))
            for v in old.versions.values() if mechanism_of(v.params).permanent_channel(v.params) is not None}
    new = privatization_fingerprint(spec.params)
    if new in used:
        return None  # devices already charged it
    total = sum(used.values()) + float(mechanism_of(spec.params).longitudinal_epsilon(spec.params))
    cap = PrivacyPolicy().max_longitudinal_epsilon
    if total <= cap * (1 + 1e-9):
        return None
    reason = (f"longitudinal_epsilon {total:.4g} (the lifetime ε∞ of a value reported under every version: a new "
              f"permanent randomization) is above the device policy's maximum {cap:.4g}, so devices that reported "
              f"under the earlier versions refuse it")
    return reason, "longitudinal_epsilon", total, cap


def check_default_policy(r: redis.Redis, specs: Sequence[MetricSpec], allow: bool | Collection[str] = False) -> None:
    """Refuse (:class:`AboveDefaultPolicyError`, the first offender) any spec that devices with the default
    PrivacyPolicy would refuse, unless ``allow`` is True or holds its name: its own ε per report, per day and
    ε∞, and, for a new permanent randomization of an existing metric, the lifetime ε∞ summed over the metric's
    versions. The one check behind ``ldptel metrics create|plan|apply`` and ``POST /v1/metrics`` (issue 22 §3).
    Reads the registry, writes nothing."""
    checked = [spec for spec in specs if not (allow is True or (not isinstance(allow, bool) and spec.name in allow))]
    if not checked:
        return
    raws = r.hmget(keys.registry(), [spec.name for spec in checked])
    for spec, raw in zip(checked, raws, strict=True):
        found = default_policy_refusal(spec) or _lifetime_refusal(None if raw is None else parse_record(raw), spec)
        if found is not None:
            raise AboveDefaultPolicyError(spec.name, *found)


class RegistryCorruptError(LdpError, ValueError):
    """A registry entry in Redis could not be parsed (written by something else)."""


@dataclass(frozen=True, kw_only=True)
class MetricRecord:
    """One metric in the registry: every version's spec, which one is current, status and shard count."""

    name: str
    current_version: int
    status: Status
    shards: int
    versions: dict[int, MetricSpec] = field(hash=False)
    resharded: tuple[tuple[int, int], ...] = ()  # (earlier shard count, start of the UTC day it was replaced, s)
    # days a sealed day's own state is kept before only roll-ups hold it (None: kept; see ldptel.storage.sealed)
    retention_days: int | None = None
    # reporting threshold (Cobalt's reporting_threshold): a day (or breakdown cell) with fewer reports is withheld
    # from every estimate (ldptel.aggregator.withholding); 0: off. Server-side only: never served to devices.
    min_reports: int = DEFAULT_MIN_REPORTS
    # distinct uploads a shuffled block of this metric must hold (ldptel.storage.shuffle); None: the shuffle stage's
    # own n_min (LDPTEL_SHUFFLE_N_MIN, default 100). A shuffler's per-metric --shuffle-n-min-for overrides it.
    shuffle_n_min: int | None = None

    @property
    def current(self) -> MetricSpec:
        return self.versions[self.current_version]

    @property
    def active(self) -> bool:
        return self.status == "active"

    def earlier_shards(self, dedupe_days: int, *, now: float | None = None) -> tuple[int, ...]:
        """The earlier shard counts whose dedupe keys may still exist. A batch accepted under a count arrived
        on or before the day it was replaced, and its dedupe key expires at the latest at the end of that day
        + ``dedupe_days`` (:meth:`ldptel.storage.append.BatchAppender.append`)."""
        t = time.time() if now is None else now
        return tuple(count for count, until in self.resharded if t < _day_start(until) + (dedupe_days + 1) * DAY_S)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the registry's storage format and the API's response body."""
        return {
            "name": self.name,
            "status": self.status,
            "current_version": self.current_version,
            "shards": self.shards,
            "current": self.current.to_dict(),
            "versions": {str(v): spec.to_dict() for v, spec in sorted(self.versions.items())},
        } | ({"resharded": [list(pair) for pair in self.resharded]} if self.resharded else {}) | (
            {"retention_days": self.retention_days} if self.retention_days is not None else {}) | (
            {"min_reports": self.min_reports} if self.min_reports != DEFAULT_MIN_REPORTS else {}) | (
            {"shuffle_n_min": self.shuffle_n_min} if self.shuffle_n_min is not None else {})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Any) -> MetricRecord:
        try:
            versions = {int(v): MetricSpec.from_dict(spec) for v, spec in data["versions"].items()}
            record = cls(
                name=data["name"],
                current_version=int(data["current_version"]),
                status=data["status"],
                shards=int(data["shards"]),
                versions=versions,
                resharded=tuple((int(count), int(until)) for count, until in data.get("resharded", ())),
                retention_days=None if data.get("retention_days") is None else int(data["retention_days"]),
                min_reports=check_min_reports(data.get("min_reports", DEFAULT_MIN_REPORTS)),
                shuffle_n_min=None if data.get("shuffle_n_min") is None else check_shuffle_n_min(data["shuffle_n_min"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError, InvalidParameterError) as exc:
            raise RegistryCorruptError(f"unreadable registry record: {exc}") from None
        if record.status not in get_args(Status) or record.current_version not in versions:
            raise RegistryCorruptError(f"inconsistent registry record for {record.name!r}")
        if any(spec.version != v or spec.name != record.name for v, spec in versions.items()):
            raise RegistryCorruptError(f"registry record for {record.name!r} has mislabelled versions")
        return record


def parse_record(raw: bytes | str) -> MetricRecord:
    """Parse one registry hash value."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RegistryCorruptError(f"registry value is not JSON: {exc}") from None
    return MetricRecord.from_dict(data)


@dataclass(frozen=True, kw_only=True)
class Change:
    """What :func:`create_metric` would do with ``spec``: ``kind``, the record before and the spec it would store."""

    kind: ChangeKind
    version: int  # the version ``spec`` would be stored as
    before: MetricRecord | None
    spec: MetricSpec  # ``spec`` labelled with ``version``

    @property
    def new_version(self) -> bool:
        return self.kind in ("create", "version")


def plan_change(old: MetricRecord | None, spec: MetricSpec) -> Change:
    """Classify registering ``spec`` over ``old`` (None: no such metric). The privatization (params and
    reports per day) decides: unchanged, it is the current version (metadata edited in place, a retired metric
    reactivated); changed, it is the next version (even when an older version had the same privatization:
    versions only move forward)."""
    if old is None:
        return Change(kind="create", version=1, before=None, spec=spec.with_version(1))
    current = old.current
    if not current.same_privatization(spec):
        version = max(old.versions) + 1
        return Change(kind="version", version=version, before=old, spec=spec.with_version(version))
    stored = spec.with_version(old.current_version)
    kind: ChangeKind = "reactivate" if not old.active else "unchanged" if stored == current else "metadata"
    return Change(kind=kind, version=old.current_version, before=old, spec=stored)


def _day_start(unix_second: int | float) -> int:
    """The start of the UTC day holding ``unix_second`` (s)."""
    return int(unix_second // DAY_S * DAY_S)


def _update(r: redis.Redis, name: str, change: Callable[[MetricRecord | None], MetricRecord]) -> MetricRecord:
    """Read-modify-write one registry field under WATCH; ``change`` returns the record to store.

    When ``change`` returns the record it was given (same object), nothing is written.
    """
    key = keys.registry()
    for _ in range(_MAX_WATCH_RETRIES):
        with r.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key)  # type: ignore[no-untyped-call]  # redis-py's Pipeline.watch has no annotations
                raw = pipe.hget(key, name)
                old = None if raw is None else parse_record(raw)
                new = change(old)
                if new is old:
                    pipe.unwatch()
                    return new
                pipe.multi()
                pipe.hset(key, name, new.to_json())
                pipe.execute()
                return new
            except redis.WatchError:
                continue
    raise RegistryConflictError(f"metric {name!r} is being changed concurrently; try again")


def _update_existing(r: redis.Redis, name: str, change: Callable[[MetricRecord], MetricRecord]) -> MetricRecord:
    """:func:`_update` of a registered metric: :class:`UnknownMetricError` when ``name`` is not one. ``change``
    returns the record it was given when there is nothing to change (nothing is written)."""

    def existing(old: MetricRecord | None) -> MetricRecord:
        if old is None:
            raise UnknownMetricError(name)
        return change(old)

    return _update(r, name, existing)


# ------------------------------------------------------------------------------------------------- API
def create_metric(
    r: redis.Redis, spec: MetricSpec, *, shards: int | None = None, default_shards: int = DEFAULT_SHARDS
) -> MetricRecord:
    """Register ``spec``: the record after :func:`register_metrics` (which also says what changed)."""
    return register_metrics(r, [(spec, shards)], default_shards=default_shards)[0][0]


def register_metric(
    r: redis.Redis, spec: MetricSpec, *, shards: int | None = None, default_shards: int = DEFAULT_SHARDS
) -> tuple[MetricRecord, Change]:
    """Register one ``spec``: its record and the change applied (see :func:`register_metrics`)."""
    return register_metrics(r, [(spec, shards)], default_shards=default_shards)[0]


RECORD_SETTINGS = ("retention_days", "min_reports", "shuffle_n_min")  # record fields a metrics file sets beside the specs


def _checked_settings(settings: Mapping[str, Mapping[str, object]], names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``settings`` validated before anything is written: known metrics, known fields, values in range."""
    out: dict[str, dict[str, Any]] = {}
    for name, values in settings.items():
        if name not in names:
            raise InvalidParameterError("settings", f"settings of the metrics registered with them ({names})", name)
        for key, value in values.items():
            if key == "retention_days":
                if value is not None:
                    check_int("retention_days", value, 0, MAX_RETENTION_DAYS)
            elif key == "min_reports":
                check_min_reports(value)
            elif key == "shuffle_n_min":
                if value is not None:
                    check_shuffle_n_min(value)
            else:
                raise InvalidParameterError("settings", f"one of {list(RECORD_SETTINGS)}", key)
        out[name] = dict(values)
    return out


def register_metrics(
    r: redis.Redis, specs: Sequence[tuple[MetricSpec, int | None]], *, default_shards: int = DEFAULT_SHARDS,
    settings: Mapping[str, Mapping[str, object]] | None = None,
) -> list[tuple[MetricRecord, Change]]:
    """Register every ``(spec, shards)`` at once, all or nothing; each one as :func:`plan_change` classifies it.

    ``settings``: per metric name, record fields to set in the same transaction (``retention_days``: None is
    forever; ``min_reports``), so a metrics file is applied whole or not at all (never its specs without its
    retention). Validated before anything is written.

    Specs' ``version`` is ignored and assigned here. New name: version 1 with ``shards`` (None: ``default_shards``,
    the service's ``LDPTEL_SHARDS``). Existing name with the privatization of its current version: that version
    is rewritten in place with the spec's metadata and the metric is active (nothing is written when nothing
    differs: idempotent). Otherwise the next version becomes current and the metric is active. ``shards`` must
    be None or the existing count (:class:`RegistryConflictError`, and then nothing is written). One
    WATCH/MULTI/EXEC covers every metric, so a concurrent change re-plans them all. Returns, in order, each
    stored record and the change applied to it.
    """
    names = [spec.name for spec, _ in specs]
    for spec, shards in specs:
        if not isinstance(spec, MetricSpec):
            raise InvalidParameterError("spec", "a MetricSpec", type(spec).__name__)
        if shards is not None:
            check_int("shards", shards, 1, MAX_SHARDS)
        if names.count(spec.name) > 1:
            raise InvalidParameterError("name", "each metric once", spec.name)
    check_int("shards", default_shards, 1, MAX_SHARDS)
    fields = _checked_settings(settings or {}, names)
    if not specs:
        return []
    schema = get_profile(r)
    check_breakdowns(schema, [spec for spec, _ in specs])
    specs = [(with_profile(spec, schema), shards) for spec, shards in specs]
    key = keys.registry()
    for _ in range(_MAX_WATCH_RETRIES):
        with r.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key)  # type: ignore[no-untyped-call]  # redis-py's Pipeline.watch has no annotations
                raws = pipe.hmget(key, names)
                results = [
                    _register(None if raw is None else parse_record(raw), spec, shards, default_shards)
                    for (spec, shards), raw in zip(specs, raws, strict=True)
                ]
                set_too = [(_with_settings(rec, fields.get(rec.name, {})), rec, change) for rec, change in results]
                results = [(rec, change) for rec, _, change in set_too]
                writes = [(rec.name, rec.to_json()) for rec, before, change in set_too
                          if change.kind != "unchanged" or rec is not before]
                if not writes:
                    pipe.unwatch()
                    return results
                pipe.multi()
                for name, value in writes:
                    pipe.hset(key, name, value)
                pipe.execute()
                return results
            except redis.WatchError:
                continue
    raise RegistryConflictError(f"metrics {names} are being changed concurrently; try again")


def _with_settings(record: MetricRecord, values: Mapping[str, Any]) -> MetricRecord:
    changed = {k: v for k, v in values.items() if getattr(record, k) != v}
    return dataclasses.replace(record, **changed) if changed else record


def _register(
    old: MetricRecord | None, spec: MetricSpec, shards: int | None, default_shards: int
) -> tuple[MetricRecord, Change]:
    """The record after registering ``spec`` over ``old``, and the change (``old`` itself when unchanged)."""
    if old is not None and shards is not None and shards != old.shards:
        raise RegistryConflictError(
            f"metric {spec.name!r} has {old.shards} shards; change it with grow_shards (ldptel metrics grow)"
        )
    planned = plan_change(old, spec)
    if old is None:
        count = shards if shards is not None else default_shards
        record = MetricRecord(name=spec.name, current_version=1, status="active", shards=count, versions={1: planned.spec})
        return record, planned
    if planned.kind == "unchanged":
        return old, planned
    record = dataclasses.replace(  # keeps the shard count and its history (``resharded``)
        old, current_version=planned.version, status="active", versions={**old.versions, planned.version: planned.spec}
    )
    return record, planned


def get_metric(r: redis.Redis, name: str) -> MetricRecord:
    """The record of ``name``; :class:`UnknownMetricError` when absent."""
    raw = r.hget(keys.registry(), name)
    if raw is None:
        raise UnknownMetricError(name)
    return parse_record(raw)


def list_metrics(r: redis.Redis) -> list[MetricRecord]:
    """Every registered metric (active and retired), sorted by name."""
    raw = r.hgetall(keys.registry())
    return sorted((parse_record(value) for value in raw.values()), key=lambda rec: rec.name)


def retire_metric(r: redis.Redis, name: str) -> MetricRecord:
    """Stop accepting reports for ``name`` (its specs and sketches stay readable). Idempotent."""
    return _update_existing(r, name, lambda old: dataclasses.replace(old, status="retired") if old.active else old)


def grow_shards(r: redis.Redis, name: str, shards: int) -> MetricRecord:
    """Raise the shard count of ``name`` to ``shards`` (idempotent when it is that already). A count can only
    grow: the streams, sketches and checkpoints of every shard below it stay where they are."""
    check_int("shards", shards, 1, MAX_SHARDS)

    def change(old: MetricRecord) -> MetricRecord:
        if shards == old.shards:
            return old
        if shards < old.shards:
            raise RegistryConflictError(f"metric {name!r} has {old.shards} shards; a shard count can only grow")
        # only the UTC day of the change is stored (no finer time: see ldptel.storage.append)
        replaced = _day_start(int(time.time()))
        return dataclasses.replace(old, shards=shards, resharded=(*old.resharded, (old.shards, replaced)))

    return _update_existing(r, name, change)


MAX_RETENTION_DAYS = 36_500


def check_min_reports(value: object) -> int:
    """A metric's ``min_reports``: a whole number of reports in [0, 10⁹] (0: no threshold)."""
    return check_int("min_reports", value, 0, MAX_MIN_REPORTS, allowed=f"a whole number of reports from 0 (no threshold) to "
                  f"{MAX_MIN_REPORTS:,}: a day or combination with fewer reports is withheld from every estimate")


def set_min_reports(r: redis.Redis, name: str, min_reports: int) -> MetricRecord:
    """Withhold every estimate of ``name`` over a day (or breakdown cell) with fewer than ``min_reports`` reports
    (0: no threshold). Idempotent; applies to queries at once. Lowering it releases days that were withheld."""
    check_min_reports(min_reports)
    return _update_existing(r, name, lambda old: old if old.min_reports == min_reports
                            else dataclasses.replace(old, min_reports=min_reports))


MAX_SHUFFLE_N_MIN = 1 << 31


def check_shuffle_n_min(value: object) -> int:
    """A metric's ``shuffle_n_min``: distinct uploads per shuffled block, a whole number in [1, 2³¹]."""
    return check_int("shuffle_n_min", value, 1, MAX_SHUFFLE_N_MIN, allowed=f"a whole number of uploads from 1 to "
                  f"{MAX_SHUFFLE_N_MIN:,}: each shuffled block of the metric holds at least that many distinct uploads "
                  "(docs/shuffle.md)")


def set_shuffle_n_min(r: redis.Redis, name: str, n_min: int | None) -> MetricRecord:
    """Release ``name``'s held uploads in shuffled blocks of at least ``n_min`` distinct uploads (None: the shuffle
    stage's own n_min). Idempotent; running shufflers read it within seconds (:mod:`ldptel.storage.shuffle`)."""
    if n_min is not None:
        check_shuffle_n_min(n_min)
    return _update_existing(r, name, lambda old: old if old.shuffle_n_min == n_min
                            else dataclasses.replace(old, shuffle_n_min=n_min))


def set_retention(r: redis.Redis, name: str, days: int | None) -> MetricRecord:
    """Keep each sealed day's own state of ``name`` for ``days`` days (None: forever); older days are then read
    from roll-ups only (:mod:`ldptel.storage.sealed`). Idempotent; takes effect at the next seal pass."""
    if days is not None:
        check_int("retention_days", days, 0, MAX_RETENTION_DAYS)
    return _update_existing(r, name, lambda old: old if old.retention_days == days
                            else dataclasses.replace(old, retention_days=days))


def spec_for(record: MetricRecord, version: int) -> MetricSpec:
    """The spec of ``version``; :class:`UnknownVersionError` when the metric never had it."""
    try:
        return record.versions[version]
    except (KeyError, TypeError):
        raise UnknownVersionError(record.name, version, sorted(record.versions)) from None


# ------------------------------------------------------------------------------------------ profile schema
def get_profile(r: redis.Redis) -> ProfileSchema:
    """The registry's profile schema (dimension → declared values; empty when none was set)."""
    raw = r.get(keys.profile())
    if raw is None:
        return ProfileSchema({})
    try:
        return ProfileSchema.from_dict(json.loads(raw))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RegistryCorruptError(f"the profile schema is not valid JSON: {exc}") from None


def state_counters(spec: MetricSpec) -> int:
    """Counters of one state of ``spec`` (its memory is at most 4 bytes each before sealing: k·m·4 for a sketch)."""
    shape, rows = state_shape(spec.params)
    return int(np.prod(shape)) + rows


def check_breakdowns(schema: ProfileSchema, specs: Sequence[MetricSpec]) -> None:
    """Every spec's breakdown names dimensions of ``schema`` and stays within the caps
    (:func:`ldptel.client.protocol.breakdown.check_breakdown`); InvalidParameterError otherwise."""
    for spec in specs:
        if spec.breakdown:
            check_breakdown(spec.name, spec.breakdown, schema, state_counters(spec))


def with_profile(spec: MetricSpec, schema: ProfileSchema) -> MetricSpec:
    """``spec`` with the declared values of its breakdown dimensions from ``schema`` (what devices and ingest map by)."""
    values = tuple((d, schema.dimensions[d]) for d in spec.breakdown if d in schema.dimensions)
    return spec if values == spec.profile else dataclasses.replace(spec, profile=values)


def set_profile(r: redis.Redis, schema: ProfileSchema) -> ProfileSchema:
    """Store ``schema`` as the registry's profile schema and copy its values into the current spec of every metric
    broken down by its dimensions (in place, like metadata: growing an enumeration is not a new version), all in one
    transaction; refused (InvalidParameterError, nothing written) when an active metric's breakdown would name a
    dimension it lacks or outgrow the caps. Values are stored by name: a removed value's old cells stay readable
    and new reports of it count as ``other``."""
    if not isinstance(schema, ProfileSchema):
        raise InvalidParameterError("profile", "a ProfileSchema", type(schema).__name__)
    key = keys.registry()
    for _ in range(_MAX_WATCH_RETRIES):
        with r.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key, keys.profile())  # type: ignore[no-untyped-call]
                records = [parse_record(raw) for raw in pipe.hvals(key)]
                check_breakdowns(schema, [rec.current for rec in records if rec.active])
                changed = []
                for rec in records:
                    spec = with_profile(rec.current, schema)
                    if spec is not rec.current:
                        changed.append(dataclasses.replace(rec, versions={**rec.versions, rec.current_version: spec}))
                pipe.multi()
                pipe.set(keys.profile(), json.dumps(schema.to_dict(), sort_keys=True, separators=(",", ":")))
                for rec in changed:
                    pipe.hset(key, rec.name, rec.to_json())
                pipe.execute()
                return schema
            except redis.WatchError:
                continue
    raise RegistryConflictError("the registry is being changed concurrently; try again")
