"""What the dashboard's metric list shows: each metric's registry record, the ``kind`` of its estimates (per version:
the renderer the page uses), what its queries take (candidates required, labels or none; the estimators), the days that have folded reports
(per version), the reports of each recent day and the lag of its streams. One JSON-ready dict per metric."""

from __future__ import annotations

from typing import Any

import redis as redis_lib

from ldptel.aggregator.cli.status import shard_status
from ldptel.aggregator.defaults import DISCOVER_TOP
from ldptel.aggregator.query import candidate_role, described, estimator_choices
from ldptel.aggregator.withholding import REASON, counts_shown
from ldptel.client.mechanisms import mechanism_of
from ldptel.client.mechanisms.capabilities import on_device
from ldptel.client.mechanisms.longitudinal import longitudinal_note
from ldptel.storage import registry, sealed
from ldptel.storage import sketches as store
from ldptel.storage.registry import MetricRecord

RECENT_DAYS = 31  # days of the current version whose report counts the list shows
SKETCH_TOP = 10  # the page's default top for a metric whose queries need candidates


def _default_top(kind: str, candidates: str) -> int | None:
    """The page's ``top`` unless asked: ``ldptel discover``'s for a discovery, 10 where candidates are required (a
    candidate list can be long), else none (every label, every bucket)."""
    return DISCOVER_TOP if kind == "discovery" else SKETCH_TOP if candidates == "required" else None


def metric_summary(r: redis_lib.Redis, record: MetricRecord, lags: list[dict[str, Any]]) -> dict[str, Any]:
    """One metric: the current spec's mechanism, ε (asked and effective), shape and policy, every version with
    its days, reports per recent day and stream lag (None when a lag is unknown)."""
    spec = record.current
    mechanism = mechanism_of(spec.params)
    # every breakdown cell ("" without breakdown) has its own states: a day's reports are the sum over the cells
    cells = ["", *store.cells(r, record.name, record.shards)]
    indexes = {c: store.sketch_index(r, record.name, record.shards, cell=c) for c in cells}
    views = {c: sealed.read_view(r, record.name, c) for c in cells}  # after the shards' index (see ldptel.storage.sealed)
    days_by_version: dict[str, list[str]] = {}
    for cell in cells:
        for members in indexes[cell].values():
            for version, day in members:
                days_by_version.setdefault(str(version), []).append(day)
        for version, number in views[cell].days:
            days_by_version.setdefault(str(version), []).append(sealed.day_name(number))
    days_by_version = {v: sorted(set(days)) for v, days in sorted(days_by_version.items(), key=lambda kv: int(kv[0]))}
    recent = set(days_by_version.get(str(record.current_version), [])[-RECENT_DAYS:])
    reports: dict[str, int] = {}
    for cell in cells:
        pairs = [(shard, v, day) for shard, members in indexes[cell].items() for v, day in members
                 if v == record.current_version and day in recent]
        of_cell = store.day_reports(r, record.name, params=spec.params, pairs=pairs, cell=cell)
        for (version, number), n in views[cell].days.items():  # sealed days: their reports are kept beside them
            day = sealed.day_name(number)
            if version == record.current_version and day in recent:
                of_cell[day] = n  # a sealed day wins over shard states a killed sealer left
        for day, n in of_cell.items():
            reports[day] = reports.get(day, 0) + n
    reports = dict(sorted(reports.items()))
    if on_device(mechanism) is not None:  # the days a query asks are those the reports describe (a period earlier)
        days_by_version = {v: sorted({d for day in days for d in described(mechanism, record.versions[int(v)].params,
                                                                          day, day)})
                           for v, days in days_by_version.items()}
    shard_rows = [row for row in lags if row["metric"] == record.name]
    unknown = any(row["lag"] is None for row in shard_rows)
    return {
        "name": record.name,
        "status": record.status,
        "description": spec.description,
        "version": record.current_version,
        "versions": sorted(record.versions),
        "mechanism": mechanism.name,
        "epsilon": spec.params.epsilon,
        "effective_epsilon": spec.effective_epsilon,
        "daily_epsilon": spec.daily_epsilon,
        "longitudinal": longitudinal_note(spec.params),  # what repeated reports of one device disclose
        "above_default_policy": _above_policy(spec),  # why default-policy devices refuse it (None: they do not)
        "shape": mechanism.shape(spec.params),
        "reports_per_day": spec.reports_per_day,
        "shards": record.shards,
        "kind": mechanism.kind,  # which renderer draws the page (dashboard.js KINDS)
        "kind_by_version": {str(v): mechanism_of(spec_v.params).kind for v, spec_v in sorted(record.versions.items())},
        "candidates": candidate_role(mechanism),  # required | labels | none
        "estimators": list(estimator_choices(mechanism)),
        "default_top": _default_top(mechanism.kind, candidate_role(mechanism)),
        "days_by_version": days_by_version,
        # breakdowns: the dimensions and their declared values ('other' last); profile values are not privatized
        "breakdown": {"dimensions": list(spec.breakdown), "values": {d: [*v, "other"] for d, v in spec.profile}}
        if spec.breakdown else None,
        # a day under the metric's min_reports shows no count: it is derived from its reports too
        "reports_by_day": [{"day": day, "n": n} if n is not None else {"day": day, "n": None, "withheld": REASON.format(
            min_reports=record.min_reports)} for day, n in counts_shown(reports, record).items()],
        "min_reports": record.min_reports,
        "lag": None if unknown else sum(row["lag"] for row in shard_rows),
        "record": record.to_dict(),
    }


def _above_policy(spec: Any) -> str | None:
    from ldptel.storage.registry import default_policy_refusal

    found = default_policy_refusal(spec)
    return None if found is None else found[0].replace("the device policy", "the default device policy")


def metric_list(r: redis_lib.Redis, names: list[str] | None = None) -> list[dict[str, Any]]:
    """:func:`metric_summary` of every registered metric (or of ``names``), by name."""
    records = registry.list_metrics(r) if names is None else [registry.get_metric(r, name) for name in names]
    lags = shard_status(r, records)
    return [metric_summary(r, record, lags) for record in records]
