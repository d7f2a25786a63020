"""Breakdowns: a metric's estimates per combination of profile values (``ldptel estimate NAME --by os``).

A breakdown metric keeps one state per cell (:mod:`ldptel.client.protocol.breakdown`): a combination of the values
of its dimensions (``os=android,app_version=2.1``). A query reads the cells that match ``where``
(:class:`~ldptel.aggregator.query.QueryOptions.where`, ``--where os=android``) and sums them; ``--by`` groups the
cells by the values of some dimensions and estimates each group on its own state (:func:`estimate_breakdown`). The
states are additive, so the groups' counts add up to the total's exactly, and so do the debiased estimates of every
mechanism whose estimate is linear in its state (every count, a sum; within float rounding). Each group has its own
interval, and a group with fewer reports than the metric's ``min_reports`` is withheld (its rows are not shown).

What a breakdown reveals: the profile values travel in clear with each batch (they are not privatized), and a
group's estimate is over the devices of that group only, so a report hides among fewer reports: docs/breakdowns.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis as redis_lib

from ldptel.aggregator.withholding import ReleasePlan, Withheld
from ldptel.client.errors import InvalidParameterError
from ldptel.client.protocol.breakdown import (
    DIMENSION_RE,
    DIMENSION_RULE,
    OTHER,
    VALUE_RE,
    VALUE_RULE,
    parse_cell,
)
from ldptel.storage import registry
from ldptel.storage import sketches as store
from ldptel.storage.sealed import Summed

if TYPE_CHECKING:
    from ldptel.aggregator.query import QueryOptions, Target

__all__ = [
    "BreakdownResult",
    "Group",
    "Where",
    "breakdown_cells",
    "cell_plans",
    "merged_plan",
    "released_cells",
    "check_by",
    "check_where",
    "estimate_breakdown",
    "parse_where",
    "plot_breakdown",
    "sum_summed",
]

Where = tuple[tuple[str, str], ...]


def check_where(where: object) -> Where:
    """``where`` as (dimension, value) pairs: a mapping or pairs, each dimension once, names and values well formed
    (that the metric declares them is checked by :func:`breakdown_cells`)."""
    if isinstance(where, Mapping):
        where = tuple(where.items())
    if isinstance(where, (str, bytes)) or not isinstance(where, (tuple, list)):
        raise InvalidParameterError("where", "dimension=value pairs", where)
    out: list[tuple[str, str]] = []
    for pair in where:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise InvalidParameterError("where", "dimension=value pairs", pair)
        dim, value = pair
        if not isinstance(dim, str) or not DIMENSION_RE.fullmatch(dim):
            raise InvalidParameterError("where", f"a dimension name of {DIMENSION_RULE}", dim)
        if not isinstance(value, str) or not VALUE_RE.fullmatch(value):
            raise InvalidParameterError(f"where {dim}", f"a value of {VALUE_RULE}", value)
        if any(d == dim for d, _ in out):
            raise InvalidParameterError("where", "each dimension once", dim)
        out.append((dim, value))
    return tuple(out)


def parse_where(texts: Sequence[str]) -> Where:
    """``["os=android", "channel=beta"]`` (the CLI's repeated ``--where``; also ``os=android,channel=beta``)."""
    pairs: list[tuple[str, str]] = []
    for text in texts:
        for part in text.split(","):
            dim, eq, value = part.strip().partition("=")
            if not eq:
                raise InvalidParameterError("where", "DIMENSION=VALUE, e.g. os=android", part)
            pairs.append((dim.strip(), value.strip()))
    return check_where(pairs)


def _check_dims(target: Target, names: Sequence[str], what: str) -> None:
    dims = target.spec.breakdown
    if not dims:
        raise InvalidParameterError(
            what, f"no {what}: metric {target.name!r} version {target.version} has no breakdown dimensions "
            "(declare them with breakdown = [...] in the metrics file)", list(names))
    unknown = [d for d in names if d not in dims]
    if unknown:
        raise InvalidParameterError(what, f"dimensions of {target.name!r}'s breakdown: {', '.join(dims)}", unknown[0])


def check_by(target: Target, by: Sequence[str]) -> tuple[str, ...]:
    """``--by``: distinct dimensions of the metric's breakdown (in the order given)."""
    out = tuple(by)
    if not out:
        raise InvalidParameterError("by", "at least one dimension", "none")
    if len(set(out)) != len(out):
        raise InvalidParameterError("by", "each dimension once", list(out))
    _check_dims(target, out, "by")
    return out


def breakdown_cells(r: redis_lib.Redis, target: Target, where: Where = ()) -> list[str]:
    """The cells of ``target`` that a query with ``where`` reads: ``[""]`` without breakdown; else the stored cells
    whose values match. A dimension the metric does not declare, or a value that is neither declared in the profile
    schema, ``other``, nor stored, is an InvalidParameterError naming what is allowed."""
    if not target.spec.breakdown:
        if where:
            _check_dims(target, [d for d, _ in where], "where")
        return [""]
    stored = store.cells(r, target.name, target.record.shards)
    if where:
        _check_dims(target, [d for d, _ in where], "where")
        schema = registry.get_profile(r)
        for dim, value in where:
            seen = {parse_cell(c).get(dim) for c in stored}
            allowed = [*schema.dimensions.get(dim, ()), OTHER, *sorted(v for v in seen if v is not None)]
            if value not in allowed:
                raise InvalidParameterError(f"where {dim}", f"one of {', '.join(dict.fromkeys(allowed))}", value)
    return [c for c in stored if all(parse_cell(c).get(d) == v for d, v in where)]


def sum_summed(parts: Sequence[Summed]) -> Summed:
    """Cells' :class:`Summed` states added: days, spans and states read are merged."""
    state = parts[0].state + parts[1].state if len(parts) > 1 else parts[0].state
    for part in parts[2:]:
        state.add_inplace(part.state)
    days = tuple(sorted({d for p in parts for d in p.days}))
    firsts = [p.first for p in parts if p.first is not None]
    lasts = [p.last for p in parts if p.last is not None]
    coarse = tuple(sorted({c for p in parts for c in p.coarse}))
    return Summed(state, days, min(firsts) if firsts else None, max(lasts) if lasts else None, coarse,
                  sum(p.states for p in parts))


# -------------------------------------------------------------------------------------------- thresholds
def cell_plans(r: redis_lib.Redis, target: Target, days: Sequence[str], cells: Sequence[str]) -> dict[str, ReleasePlan]:
    """Each cell's release plan (:func:`~ldptel.aggregator.withholding.release_plan` over that cell alone): with a
    breakdown the unit the threshold applies to is a (combination, day), so every sum any query shows (a group,
    the total, a ``where``) is a sum of released units only and no two of them differ by a withheld one."""
    from ldptel.aggregator.withholding import release_plan

    return {cell: release_plan(r, target.record, target.version, days, cells=[cell]) for cell in cells}


def merged_plan(plans: Mapping[str, ReleasePlan]) -> ReleasePlan:
    """The spans released in at least one cell, and every cell's withheld units (named ``<cell> <day>``)."""
    spans = tuple(sorted({span for plan in plans.values() for span in plan.spans}))
    held = tuple(Withheld(f"{cell} {w.what}", w.min_reports) for cell, plan in plans.items() for w in plan.withheld)
    return ReleasePlan(runs=(), withheld=held, spans=spans)


def released_cells(r: redis_lib.Redis, target: Target, days: Sequence[str], cells: Sequence[str]
                   ) -> tuple[Summed, tuple[Withheld, ...]]:
    """The summed state of the released (combination, day) units of ``cells`` over ``days`` and the withheld ones;
    WithheldRangeError when none is released."""
    from ldptel.aggregator.query import WithheldRangeError
    from ldptel.storage.sealed import summed_state

    plans = cell_plans(r, target, days, cells)
    parts: list[Summed] = []
    for cell, plan in plans.items():
        runs = plan.runs if plan.withheld else ((days[0], days[-1]),)
        parts += [summed_state(r, target.name, params=target.params, version=target.version, shards=target.record.shards,
                               day_from=first, day_to=last, cell=cell) for first, last in runs]
    held = merged_plan(plans).withheld
    parts = [p for p in parts if p.days]
    if not parts:
        first = held[0] if held else None
        raise WithheldRangeError(
            f"{target.name!r} version {target.version}: every combination and day in the range: "
            f"{first.reason if first else 'no reports'}", metric=target.name, version=target.version,
            mechanism=target.params.mechanism, withheld=held)
    return (sum_summed(parts) if len(parts) > 1 else parts[0]), held


# ------------------------------------------------------------------------------------------------ results
@dataclass(frozen=True, kw_only=True, eq=False)
class Group:
    """One group of a breakdown: its values (``{dimension: value}``), its result, or why it is withheld."""

    values: dict[str, str]
    result: Any  # a QueryResult (or a DiscoverResult); None: withheld
    n: int | None  # reports in the group (None when withheld: the count of a small group is not shown either)
    withheld: str | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.result is None:
            return {**self.values, "n": None, "withheld": self.withheld}
        return {**self.values, "n": self.n, "result": self.result.to_dict()}


@dataclass(frozen=True, kw_only=True, eq=False)
class BreakdownResult:
    """A metric's estimate per group of profile values (``by``), and the total over every group (``total``: the
    unbroken estimate over the cells matching ``where``). ``kind`` is the groups' result kind."""

    by: tuple[str, ...]
    where: Where
    total: Any  # a QueryResult, or a DiscoverResult (``ldptel discover --by``)
    groups: tuple[Group, ...]
    min_reports: int = 0

    @property
    def kind(self) -> str:
        return str(self.total.kind)

    @property
    def shown(self) -> tuple[Group, ...]:
        return tuple(g for g in self.groups if g.result is not None)

    def rows(self, *, summary: bool = False) -> list[dict[str, Any]]:
        """Each shown group's rows with its values and ``n`` in front; a withheld group is one row saying so."""
        from ldptel.aggregator.render import renderer

        out: list[dict[str, Any]] = []
        rend = renderer(self.kind)
        for g in self.groups:
            if g.result is None:
                out.append({**g.values, "n": None, "value": None, "withheld": g.withheld})
                continue
            out += [{**g.values, "n": g.n, **row} for row in rend.group_rows(g.result, summary=summary)]
        return out

    def to_dict(self) -> dict[str, Any]:
        total = self.total.to_dict()
        return {
            **{k: total[k] for k in ("metric", "version", "mechanism", "kind", "days", "confidence") if k in total},
            "by": list(self.by),
            "where": dict(self.where),
            "n": self.total.n,
            "min_reports": self.min_reports,
            "profile_note": PROFILE_NOTE,
            "total": total,
            "groups": [g.to_dict() for g in self.groups],
        }


PROFILE_NOTE = (
    "profile values are sent in clear with each batch (not privatized); a group's estimate hides each report among "
    "that group's reports only: docs/breakdowns.md"
)


def _group_order(target: Target, r: redis_lib.Redis, by: Sequence[str], keys: set[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """Groups in the order of the profile schema's values (``other`` last, values no longer declared after)."""
    schema = registry.get_profile(r)

    def rank(key: tuple[str, ...]) -> tuple[tuple[int, str], ...]:
        out = []
        for dim, value in zip(by, key, strict=True):
            declared = schema.dimensions.get(dim, ())
            out.append((declared.index(value), value) if value in declared else
                       (len(declared), value) if value == OTHER else (len(declared) + 1, value))
        return tuple(out)

    return sorted(keys, key=rank)


def estimate_breakdown(
    r: redis_lib.Redis, name: str, by: Sequence[str], options: QueryOptions | None = None, /, *,
    query: Callable[..., Any] | None = None, **changes: Any,
) -> BreakdownResult:
    """:func:`~ldptel.aggregator.query.estimate_metric` per group of the ``by`` dimensions' values (over the cells
    matching ``options.where``), and over them all. Groups without reports in the range are left out; a group with
    fewer reports than the metric's ``min_reports`` is withheld. Raises what ``estimate_metric`` raises, and
    InvalidParameterError for ``by``/``where`` the metric does not declare. ``query``: the function each group is
    asked of (default ``estimate_metric``; ``ldptel discover --by`` passes ``discover_metric``)."""
    from ldptel.aggregator.query import EmptyRangeError, Target, WithheldRangeError, estimate_metric, query_options
    from ldptel.aggregator.withholding import threshold_of, withheld

    ask = estimate_metric if query is None else query
    opts = query_options(options, changes)
    target = Target.resolve(r, name, opts.version)
    dims = check_by(target, by)
    opts = opts.with_(version=target.version)
    total = ask(r, name, opts)
    cells = breakdown_cells(r, target, opts.where)
    keys = {tuple(parse_cell(c).get(d, OTHER) for d in dims) for c in cells}
    floor = threshold_of(target.record)
    groups: list[Group] = []
    for key in _group_order(target, r, dims, keys):
        values = dict(zip(dims, key, strict=True))
        what = ",".join(f"{d}={v}" for d, v in values.items())
        try:
            res = ask(r, name, opts.with_(where=(*opts.where, *values.items())))
        except WithheldRangeError as exc:  # every (combination, day) of the group is under min_reports
            groups.append(Group(values=values, result=None, n=None,
                                withheld=exc.withheld[0].reason if exc.withheld else str(exc)))
            continue
        except EmptyRangeError:
            continue  # no reports of this group in the range
        # released units hold ≥ min_reports each, so a shown group has at least that many; checked all the same
        held = withheld(res.n, floor, what=what)
        if held is not None:
            groups.append(Group(values=values, result=None, n=None, withheld=held.reason))
        else:
            groups.append(Group(values=values, result=res, n=res.n))
    return BreakdownResult(by=dims, where=opts.where, total=total, groups=tuple(groups), min_reports=floor)


def plot_breakdown(result: BreakdownResult, path: str, *, max_bars: int = 20, max_groups: int = 12) -> None:
    """Small multiples: one panel per shown group (its estimates with intervals, on a shared y axis)."""
    from ldptel.aggregator.render import interval_bars, new_figure, plot_labels, renderer, save_figure

    shown = result.shown[:max_groups]
    if not shown:
        raise InvalidParameterError("plot", "at least one group with reports at or above min_reports", "none")
    cols = min(3, len(shown))
    rows = -(-len(shown) // cols)
    fig = new_figure("--plot", figsize=(4.2 * cols, 3.2 * rows + 0.6))
    axes = fig.subplots(rows, cols, squeeze=False, sharey=True)
    rend = renderer(result.kind)
    for ax, group in zip(axes.flat, shown, strict=False):
        assert group.result is not None
        est = rend.rows_of(group.result).estimate
        count = min(len(est.labels), max_bars)
        err = est.z * est.stderr[:count]
        x = interval_bars(ax, est.counts[:count], err, err, label=f"estimate ± {est.confidence:.0%}")
        ax.set_xticks(x, plot_labels(est.labels[:count], width=12), rotation=60, ha="right", fontsize=7)
        ax.set_title(", ".join(f"{d}={v}" for d, v in group.values.items()) + f" · n = {group.n:,}", fontsize=8)
    for ax in list(axes.flat)[len(shown):]:
        ax.set_visible(False)
    total = result.total
    fig.suptitle(f"{total.metric} v{total.version} by {', '.join(result.by)} · {total.days[0]} .. {total.days[-1]} · "
                 f"n = {total.n:,} (profile values not privatized)", fontsize=9)
    save_figure(fig, path, dpi=110, what="plot")
