"""How results are shown: the one registry of renderers by result ``kind``, and the formatting the CLI, the dashboard
and the demo share (tables, strict JSON, CSV, charts).

* :func:`renderer` picks a :class:`Renderer` by ``kind`` (:mod:`ldptel.aggregator.results`): frequencies,
  summary, histogram, discovery. Each writes a result as ``table``, ``json`` (its ``to_dict()``) or ``csv``
  (:data:`RESULT_COLUMNS`, plus an ``estimator`` column when the result has collision-corrected rows) and draws
  it (:meth:`Renderer.plot`); :func:`write_result`, :func:`write_daily` and :func:`plot_result` dispatch through it.
  A histogram is printed as its summary (count, mean, sum, percentiles) when asked (``summary=True``), except in
  JSON, which always holds every key. The dashboard's JavaScript keeps the same registry, keyed the same way.
* :func:`table`: columns aligned by terminal width (emoji take two columns), floats through :func:`fmt_num`;
  :func:`json_text` / :func:`write_json` for any document (non-finite numbers as null).
* Charts (matplotlib, the ``plot`` extra, imported only when drawing): :func:`new_figure`,
  :func:`interval_bars`, :func:`save_figure`; the demo composes the same parts.

Invariant: nothing here reads a mechanism or its params; what is drawn follows from the result's ``kind`` only.
"""

from __future__ import annotations

import csv
import json
import math
import unicodedata
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TextIO

import numpy as np

from ldptel.aggregator.json_api import versioned

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ldptel.aggregator.amplification import CentralPrivacy
    from ldptel.aggregator.breakdowns import BreakdownResult
    from ldptel.aggregator.discover import DiscoverResult
    from ldptel.aggregator.fleet import Fleet
    from ldptel.aggregator.query import DailyResult
    from ldptel.aggregator.results import QueryResult
    from ldptel.aggregator.withholding import Withheld
    from ldptel.client.mechanisms.bucketed import Percentile

RESULT_COLUMNS = ("value", "estimate", "stderr", "ci_low", "ci_high", "frequency", "adjusted", "adjusted_frequency")
ESTIMATOR_COLUMN = "estimator"  # csv: last, when the result has corrected rows; table: after the value
SIGNIFICANT_COLUMN = "significant"  # rows of candidates: distinguishable from zero over all of them (selection)
RESULT_FORMATS = ("table", "json", "csv")
DAILY_COLUMNS = ("day", "n")  # in front of RESULT_COLUMNS with --by-day
# csv: after the rows' columns (before significant and estimator, which stay last), the local ε per report and the
# central (ε, δ) of the row's range or day (empty where not applicable)
PRIVACY_COLUMNS = ("local_epsilon", "central_epsilon", "central_delta")
ESTIMATE_COLOR = "#4c72b0"  # bars of raw estimates
MARKER_COLOR = "#dd8452"  # what is drawn over them: post-processed values, true counts
LABEL_WIDTH = 24  # longest tick label of a chart
MIDPOINT_NOTE = (
    "mean and sum: values taken at their bucket's midpoint (within ±{bound} of the mean of the clipped values); "
    "percentile intervals by test inversion; --histogram for the buckets"
)


# ---------------------------------------------------------------------------------------------- tables
def fmt_num(value: float) -> str:
    """A float for a table: 2 decimals from 10 up (never scientific notation: 287000.00, not 2.87e+05),
    4 below, 4 significant digits when tiny."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if abs(value) < 1e-3 and value != 0:
        return f"{value:.4g}"
    return f"{value:.2f}" if abs(value) >= 10 else f"{value:.4f}"


def display_width(text: str) -> int:
    """Terminal columns: emoji and other wide characters take two, combining marks and VS16 none."""
    width = 0
    for ch in text:
        if unicodedata.combining(ch) or ch == "\ufe0f":
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    out: TextIO,
    *,
    left: Collection[int] = (0,),
    rule: bool = True,
) -> None:
    """Aligned columns: those in ``left`` flush left, the others right; a ``---`` rule under the header."""
    cells = [[str(h) for h in headers]] + [[fmt_num(v) if isinstance(v, float) else str(v) for v in row] for row in rows]
    widths = [max(display_width(row[i]) for row in cells) for i in range(len(headers))]
    for idx, row in enumerate(cells):
        parts = []
        for i, (cell, width) in enumerate(zip(row, widths, strict=True)):
            pad = " " * (width - display_width(cell))
            parts.append(cell + pad if i in left else pad + cell)
        out.write("  ".join(parts).rstrip() + "\n")
        if rule and idx == 0:
            out.write("  ".join("-" * w for w in widths) + "\n")


def finite(document: Any) -> Any:
    """``document`` with every non-finite float (a numeric metric's share, an empty range's) as None: strict
    JSON (RFC 8259 has no NaN), which browsers and jq parse."""
    if isinstance(document, float):
        return document if math.isfinite(document) else None
    if isinstance(document, dict):
        return {k: finite(v) for k, v in document.items()}
    if isinstance(document, (list, tuple)):
        return [finite(v) for v in document]
    return document


def json_text(document: object, *, indent: int | None = 2) -> str:
    """The JSON every ``--format json`` prints (and the dashboard serves): non-finite numbers as null."""
    return json.dumps(finite(document), indent=indent, allow_nan=False)


def write_json(document: object, out: TextIO, *, indent: int | None = 2) -> None:
    out.write(json_text(document, indent=indent) + "\n")


# ---------------------------------------------------------------------------------------------- charts
def new_figure(option: str, *, figsize: tuple[float, float]) -> Figure:
    """An empty matplotlib figure (no pyplot, no GUI backend); without matplotlib a one-line UserError."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        from ldptel.aggregator.cli.common import UserError  # the CLI's one-line error, which the demo shares
        from ldptel.aggregator.cli.extras import install_hint

        raise UserError(f"{option} needs matplotlib: {install_hint('plot')}") from None
    return Figure(figsize=figsize)


def interval_bars(ax: Axes, counts: np.ndarray, below: np.ndarray, above: np.ndarray, *, label: str) -> np.ndarray:
    """Bars of estimates with their intervals (``counts - below`` to ``counts + above``) and a zero line;
    returns the bars' x positions."""
    x = np.arange(len(counts))
    ax.bar(x, counts, yerr=np.vstack([below, above]), capsize=3, color=ESTIMATE_COLOR, label=label)
    ax.axhline(0, color="black", linewidth=0.6)
    return x


def save_figure(fig: Figure, path: str, *, dpi: int, what: str, image_format: str | None = None) -> None:
    """Lay out and write the figure (format from the file name unless given); an unwritable path is a UserError."""
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=dpi, format=image_format)
    except OSError as exc:
        from ldptel.aggregator.cli.common import UserError

        raise UserError(f"cannot write {what} {path}: {exc}") from None


def plot_labels(labels: Sequence[str], *, width: int = LABEL_WIDTH) -> list[str]:
    """Tick labels a reader can read: labels with symbols (emoji) or characters the font lacks become their
    Unicode names, e.g. '😂' → 'face with tears of joy', instead of boxes, specks and font warnings."""
    from matplotlib import font_manager, ft2font

    charmap = ft2font.FT2Font(font_manager.findfont(font_manager.FontProperties())).get_charmap()
    out = []
    for label in labels:
        text = str(label)
        if any(ord(ch) not in charmap or unicodedata.category(ch) == "So" for ch in text):
            names = (unicodedata.name(ch, f"U+{ord(ch):04X}").lower() for ch in text if unicodedata.category(ch) not in ("Mn", "Cf"))
            text = " ".join(n for n in names if not n.startswith("variation selector"))
        out.append(text if len(text) <= width else text[: width - 1] + "…")
    return out


# ------------------------------------------------------------------------------------------- renderers
def _span(days: Sequence[str]) -> str:
    return days[0] if len(days) == 1 else f"{days[0]} .. {days[-1]} ({len(days)} days)"


class Renderer:
    """How a result of one ``kind`` is printed and drawn (this base: rows of estimates with intervals)."""

    kind: ClassVar[str] = "frequencies"
    y_label: ClassVar[str] = "reports"

    def write(self, result: Any, fmt: str, out: TextIO, *, summary: bool = False) -> None:
        """``result`` as ``table`` (title, what the kind adds, rows), ``json`` or ``csv``."""
        if fmt == "json":
            write_json(versioned("result", result.to_dict()), out)
        elif fmt == "csv":
            self.csv(result, out)
        else:
            self.table(result, out)

    def rows_of(self, result: Any) -> QueryResult:
        """The query result whose rows are printed (a discovery prints the result over the values it found)."""
        rows: QueryResult = result
        return rows

    def csv(self, result: Any, out: TextIO) -> None:
        first = self.rows_of(result)
        _rows_csv(first, [{**row, **privacy_cells(first)} for row in first.rows()], out, front=())

    def table(self, result: Any, out: TextIO) -> None:
        first = self.rows_of(result)
        _title(first, out, days=first.days, n=first.n, per_day=False)
        self.head(result, out)
        _rows_table(first, first.rows(), out, front=())
        if first.fleet is not None:
            _write_fleet(first.fleet, out)
        privacy_note(first.local_epsilon, first.central, out)

    def head(self, result: Any, out: TextIO) -> None:
        """Lines between the title and the rows (the note, the candidates' test; a kind adds its own)."""
        first = self.rows_of(result)
        if first.note:
            out.write(f"{first.note}\n")
        withheld_note(first.withheld, out)
        selection_note(first, out)

    def daily(self, result: DailyResult, fmt: str, out: TextIO) -> None:
        """``--by-day``: the rows with :data:`DAILY_COLUMNS` (day, that day's n) in front."""
        if fmt == "json":
            write_json(versioned("result", result.to_dict()), out)
            return
        first = result.results[0]
        cells = {result._day(i): privacy_cells(res) for i, res in enumerate(result.results)}
        if fmt == "csv":
            writer = _rows_csv(first, [{**row, **cells.get(row["day"], {})} for row in result.rows()], out,
                               front=DAILY_COLUMNS)
            for w in result.withheld:  # a row per withheld day: its day and the reason, nothing derived from its reports
                writer.writerow({"day": w.what, "value": w.reason})
            return
        _title(first, out, days=tuple(res.days[0] for res in result.results), n=sum(res.n for res in result.results),
               per_day=True)
        withheld_note(result.withheld, out)
        _rows_table(first, result.rows(), out, front=DAILY_COLUMNS)
        privacy_note(first.local_epsilon, result.central(), out)
        per_day = [f"{day} {c['central_epsilon']:.3f}" for day, c in cells.items() if c["central_epsilon"] != ""]
        if per_day and len(result.results) > 1:
            out.write("central ε per day: " + ", ".join(per_day) + "\n")

    def group_rows(self, result: Any, *, summary: bool = False) -> list[dict[str, Any]]:
        """The rows one group of a breakdown shows (``--by``; a kind may show its summary instead)."""
        rows: list[dict[str, Any]] = self.rows_of(result).rows()
        return rows

    def breakdown(self, result: BreakdownResult, fmt: str, out: TextIO, *, summary: bool = False) -> None:
        """``--by``: each group's rows with its values and ``n`` in front; withheld groups say so."""
        if fmt == "json":
            write_json(versioned("breakdown", result.to_dict()), out)
            return
        front = (*result.by, "n")
        rows = result.rows(summary=summary)
        first = self.rows_of(result.total)
        if fmt == "csv":
            writer = csv.DictWriter(out, fieldnames=[*front, *_group_columns(first, summary), "withheld"],
                                    lineterminator="\n", extrasaction="ignore")
            writer.writeheader()
            for row in rows:
                writer.writerow({k: (repr(v) if isinstance(v, float) else "" if v is None else v) for k, v in row.items()})
            return
        _title(first, out, days=first.days, n=first.n, per_day=False)
        where = ", ".join(f"{d}={v}" for d, v in result.where)
        out.write(f"by {', '.join(result.by)}{f' where {where}' if where else ''} · {len(result.shown)} of "
                  f"{len(result.groups)} groups shown (min_reports {result.min_reports}) · {PROFILE_NOTE_SHORT}\n")
        if first.note:
            out.write(f"{first.note}\n")
        shown = [row for row in rows if row.get("withheld") is None]
        if summary or not first.counts:
            cols = ("estimate", "stderr", "ci_low", "ci_high")
            table([*front, "value", *cols], [[*(row[c] for c in front), row["value"],
                                               *("" if row.get(c) is None else row[c] for c in cols)] for row in shown],
                  out, left=set(range(len(front) + 1)) - {len(front) - 1})
        else:
            _rows_table(first, shown, out, front=front)
        for row in rows:
            if row.get("withheld") is not None:
                out.write(f"{', '.join(f'{d}={row[d]}' for d in result.by)}: {row['withheld']}\n")

    def plot(self, result: Any, path: str, *, max_bars: int = 50) -> None:
        """Bars of the raw estimates with their intervals, post-processed values as markers."""
        first = self.rows_of(result)
        est = first.estimate
        count = min(len(est.labels), max_bars)
        fig = new_figure("--plot", figsize=(max(6.0, 0.35 * count + 2), 4.5))
        ax = fig.subplots()
        err = est.z * est.stderr[:count]
        below = above = err
        if first.selection is not None and first.selection.low is not None and first.selection.high is not None:
            below = est.counts[:count] - first.selection.low[:count]
            above = first.selection.high[:count] - est.counts[:count]
        x = interval_bars(ax, est.counts[:count], below, above, label=f"estimate ± {est.confidence:.0%} interval"
                          + (" (simultaneous)" if first.selection is not None and first.selection.low is not None else ""))
        if first.postprocess != "none":
            ax.plot(x, first.adjusted[:count], "o", color=MARKER_COLOR, label=first.postprocess)
        labels = plot_labels(est.labels[:count])
        sel = first.selection
        if sel is not None:  # * on the significant rows' ticks; the method in the title
            labels = [f"* {lab}" if sel.significant[i] else lab for i, lab in enumerate(labels)]
        ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=8)
        self.mark(result, ax, count)
        ax.set_ylabel(self.y_label)
        title = _plot_title(first)
        if first.withheld:  # under min_reports: in no bar, named in the title
            title += f" · withheld (< {first.withheld[0].min_reports:,} reports): " + ", ".join(w.what for w in first.withheld)
        if sel is not None:
            how = "Bonferroni" if sel.method == "bonferroni" else "Benjamini–Hochberg"
            title += (f"\n* = distinguishable from zero after {sel.candidates:,} candidates ({how}, α = {sel.alpha:g})"
                      + (" · simultaneous intervals" if sel.low is not None else ""))
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
        save_figure(fig, path, dpi=120, what="plot")

    def mark(self, result: Any, ax: Axes, count: int) -> None:
        """What a kind draws over the bars."""


class FrequencyRenderer(Renderer):
    """Counts of values; a proportion line when the result has one (rr)."""

    def head(self, result: Any, out: TextIO) -> None:
        super().head(result, out)
        prop = getattr(result, "proportion", None)
        if prop is not None:
            out.write(
                f"proportion true: {prop.estimate:.4f} ± {prop.stderr:.4f} (stderr), "
                f"interval [{prop.ci_low:.4f}, {prop.ci_high:.4f}]\n"
            )


class SummaryRenderer(Renderer):
    """A mean, a sum and a count: the same rows; the chart's axis is the value, not reports."""

    kind = "summary"
    y_label = "estimate"

    def plot(self, result: Any, path: str, *, max_bars: int = 50) -> None:
        """One panel per row, each on its own axis (a sum is n times a mean: on one axis only the sum showed):
        the estimate with its interval; an exact row (stderr 0, the count) says so."""
        first = self.rows_of(result)
        est = first.estimate
        labels = [str(v) for v in est.labels]
        fig = new_figure("--plot", figsize=(3.2 * len(labels) + 0.6, 4.2))
        axes = fig.subplots(1, len(labels), squeeze=False)[0]
        for i, (ax, label) in enumerate(zip(axes, labels, strict=True)):
            value, err = float(est.counts[i]), float(est.z * est.stderr[i])
            exact = err == 0
            ax.bar([0], [value], yerr=None if exact else [[err], [err]], capsize=6, color=ESTIMATE_COLOR, width=0.5)
            ax.axhline(0, color="black", linewidth=0.6)
            ax.set_xticks([0], [label])
            ax.set_xlim(-0.8, 0.8)
            unit = "reports" if exact else "value units"
            ax.set_ylabel(f"{label} ({unit})")
            ax.set_title(f"{label}: {value:,.0f} (exact)" if exact else
                         f"{label}: {value:,.4g} ± {err:,.3g} ({est.confidence:.0%})", fontsize=9)
        fig.suptitle(_plot_title(first), fontsize=9)
        save_figure(fig, path, dpi=120, what="plot")


class HistogramRenderer(Renderer):
    """Buckets with their percentiles below (``summary``: count, mean, sum and percentiles instead)."""

    kind = "histogram"

    def write(self, result: Any, fmt: str, out: TextIO, *, summary: bool = False) -> None:
        if summary and fmt != "json":
            self.summary(result, fmt, out)
        else:
            super().write(result, fmt, out)

    def csv(self, result: Any, out: TextIO) -> None:
        writer = _rows_csv(result, [{**row, **privacy_cells(result)} for row in result.rows()], out, front=())
        for pc in result.percentiles:  # a row per asked percentile, "p50", ...
            writer.writerow({"value": f"p{pc.percentile:g}", "estimate": "" if pc.shown is None else repr(pc.shown),
                             "ci_low": repr(pc.ci_low), "ci_high": repr(pc.ci_high)})

    def table(self, result: Any, out: TextIO) -> None:
        super().table(result, out)
        if result.percentiles:
            out.write("\n")
            table(["percentile", "estimate", "ci_low", "ci_high"],
                  [[f"p{pc.percentile:g}", "" if pc.shown is None else pc.shown, pc.ci_low, pc.ci_high]
                   for pc in result.percentiles], out)
            unresolved_note(result.percentiles, out)

    def group_rows(self, result: Any, *, summary: bool = False) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = result.summary_rows() if summary else result.rows()
        return rows

    def summary(self, result: Any, fmt: str, out: TextIO) -> None:
        rows = result.summary_rows()
        if fmt == "csv":
            writer = csv.DictWriter(out, fieldnames=RESULT_COLUMNS + PRIVACY_COLUMNS, lineterminator="\n",
                                    extrasaction="ignore")
            writer.writeheader()
            for row in rows:
                row = {**row, **privacy_cells(result)}
                writer.writerow({k: (repr(v) if isinstance(v, float) else "" if v is None else v) for k, v in row.items()})
            return
        out.write(f"{result.metric} v{result.version} ({result.mechanism}) · {_span(result.days)} · n = {result.n:,} "
                  f"reports · {result.confidence:.0%} intervals\n")
        if result.note:
            out.write(f"{result.note}\n")
        withheld_note(result.withheld, out)
        cols = ("estimate", "stderr", "ci_low", "ci_high")
        table(["value", *cols], [[row["value"], *("" if row[c] is None else row[c] for c in cols)] for row in rows], out)
        unresolved_note(result.percentiles, out)
        if result.mean is not None:
            out.write(MIDPOINT_NOTE.format(bound=fmt_num(result.mean.midpoint_bound)) + "\n")
        privacy_note(result.local_epsilon, result.central, out)

    def mark(self, result: Any, ax: Axes, count: int) -> None:
        if len(result.edges) == count + 1:  # each percentile where it falls inside its bar
            for pc in result.percentiles:
                if not pc.resolved:  # no point to mark: the interval spans too much of the range
                    continue
                at = float(np.interp(pc.estimate, result.edges, np.arange(count + 1) - 0.5))
                ax.axvline(at, color=MARKER_COLOR, linestyle="--", linewidth=1)
                ax.text(at, 0.97 * ax.get_ylim()[1], f" p{pc.percentile:g}", color=MARKER_COLOR, ha="left", va="top",
                        fontsize=8)


class DiscoveryRenderer(Renderer):
    """The values found (rows as frequencies), then the walk: threshold, rounds, candidates examined."""

    kind = "discovery"

    def rows_of(self, result: Any) -> QueryResult:
        found: DiscoverResult = result
        return found.result

    def table(self, result: Any, out: TextIO) -> None:
        super().table(result, out)
        d = result.discovery
        rule = f"Bonferroni for α = {d.alpha:g} over {d.bound:,} possible tests" if d.alpha is not None else "as given"
        out.write(f"\n{len(d.estimate.labels)} values at ≥ {d.threshold:.2f} stderr ({rule}); "
                  f"{d.examined:,} candidates examined, {d.tested:,} tested, {d.keep} kept per round\n")
        table(["round", "prefix bytes", "examined", "kept", "tested"],
              [[s.round, s.prefix_bytes, s.examined, s.kept, s.tested] for s in d.stages], out, left=())


RENDERERS: dict[str, Renderer] = {
    r.kind: r for r in (FrequencyRenderer(), SummaryRenderer(), HistogramRenderer(), DiscoveryRenderer())
}


def renderer(kind: str) -> Renderer:
    """The renderer of a result ``kind`` (a kind without its own renders as frequencies)."""
    return RENDERERS.get(kind, RENDERERS["frequencies"])


def write_result(result: Any, fmt: str, out: TextIO, *, summary: bool = False) -> None:
    """Print a result of any kind as ``table``, ``json`` or ``csv`` (its renderer); ``summary``: a numeric
    histogram's summary rows in place of its buckets (table and csv)."""
    renderer(result.kind).write(result, fmt, out, summary=summary)


def write_daily(result: DailyResult, fmt: str, out: TextIO) -> None:
    """``--by-day``: :func:`write_result` with the :data:`DAILY_COLUMNS` (day, that day's n) in front."""
    renderer(result.results[0].kind).daily(result, fmt, out)


def write_breakdown(result: BreakdownResult, fmt: str, out: TextIO, *, summary: bool = False) -> None:
    """``--by``: a breakdown (:mod:`ldptel.aggregator.breakdowns`) through the renderer of its groups' kind."""
    renderer(result.kind).breakdown(result, fmt, out, summary=summary)


def _group_columns(first: QueryResult, summary: bool) -> tuple[str, ...]:
    return ("value", "estimate", "stderr", "ci_low", "ci_high") if summary or not first.counts else _columns(first)


PROFILE_NOTE_SHORT = "profile values are not privatized (docs/breakdowns.md)"


def plot_result(result: Any, path: str, *, max_bars: int = 50) -> None:
    """``--plot``: the result's chart (its renderer)."""
    renderer(result.kind).plot(result, path, max_bars=max_bars)


def _plot_title(first: QueryResult) -> str:
    """A chart's title: the metric, version, days, n and the ε of its reports (issue 31 §3)."""
    eps = "" if first.local_epsilon is None else f" · ε = {first.local_epsilon:.3g} per report"
    return f"{first.metric} v{first.version} · {first.days[0]} .. {first.days[-1]} · n = {first.n:,}{eps}"


def _title(first: QueryResult, out: TextIO, *, days: Sequence[str], n: int, per_day: bool) -> None:
    labelled = first.estimator != "plain"
    estimators = "" if not labelled else f" · {first.estimator} estimator" + ("s" if first.estimator == "both" else "")
    out.write(
        f"{first.metric} v{first.version} ({first.mechanism}"
        f"{'' if first.local_epsilon is None else f', ε = {first.local_epsilon:.4g} per report'}) · {_span(days)} · n = {n:,} reports"
        f"{' · per day' if per_day else ''} · {first.confidence:.0%} intervals{estimators} · stderr: {first.uncertainty}"
        f"{' (json: also population)' if first.uncertainty == 'randomization' else ''}\n"
    )


def unresolved_note(levels: Sequence[Percentile], out: TextIO) -> None:
    """One line per percentile whose interval is too wide for a point (:mod:`~ldptel.client.mechanisms.bucketed`)."""
    from ldptel.client.mechanisms.bucketed import MAX_SPAN, UNRESOLVED_NOTE

    for pc in levels:
        if not pc.resolved:
            out.write(f"p{pc.percentile:g} {UNRESOLVED_NOTE.format(share=MAX_SPAN)} (interval spans {pc.buckets} buckets)\n")


def _write_fleet(fleet: Fleet, out: TextIO) -> None:
    """sample_rate < 1: the fleet-scaled counts (population uncertainty) and the amplified ε with whom it holds against."""
    from ldptel.client.protocol.specs import AMPLIFIED_EPSILON_NOTE

    out.write(f"\nfleet (sample_rate {fleet.sample_rate:g}: counts ÷ {fleet.sample_rate:g}, stderr adds the sampling; "
              f"≈ {fleet.devices:,.0f} ± {fleet.devices_stderr:,.0f} devices) · population uncertainty\n")
    table(["value", "estimate", "stderr", "ci_low", "ci_high"],
          [[r["value"], r["estimate"], r["stderr"], r["ci_low"], r["ci_high"]] for r in fleet.rows()], out, left={0})
    out.write(f"amplified ε {fleet.amplified_epsilon:.4g} (ε {fleet.epsilon:.4g} per device and day): {AMPLIFIED_EPSILON_NOTE}\n")


def privacy_cells(result: QueryResult) -> dict[str, Any]:
    """The :data:`PRIVACY_COLUMNS` of a result: its local ε, and its central (ε, δ) or empty where not applicable."""
    central = result.central
    ok = central is not None and central.applicable
    return {"local_epsilon": "" if result.local_epsilon is None else result.local_epsilon,
            "central_epsilon": central.epsilon if ok else "",  # type: ignore[union-attr]
            "central_delta": central.delta if ok else ""}  # type: ignore[union-attr]


def privacy_note(local: float | None, central: CentralPrivacy | None, out: TextIO) -> None:
    """One line: the local ε of a report beside the central (ε, δ), or why the central bound does not apply."""
    if central is None:
        return
    head = "" if local is None else f"local ε {local:.4g} per report · "
    out.write(f"{head}{central.line()}\n")


def withheld_note(withheld: Sequence[Withheld], out: TextIO) -> None:
    """One line per day (or roll-up) under the metric's min_reports: shown nowhere, left out of every total."""
    for w in withheld:
        out.write(f"{w.what}: {w.reason}; left out of every estimate and total\n")


def selection_note(first: QueryResult, out: TextIO) -> None:
    """That the rows were selected from the candidates, and how ``*`` (distinguishable from zero) was decided."""
    for name, sel in (("", first.selection), ("corrected rows: ", first.corrected_selection)):
        if sel is not None:
            out.write(f"{name}{sel.describe()}\n")


def _columns(first: QueryResult) -> tuple[str, ...]:
    """RESULT_COLUMNS for rows of counts; rows that are not counts (a mean) have no share of n to show."""
    return RESULT_COLUMNS if first.counts else tuple(c for c in RESULT_COLUMNS if "frequency" not in c)


def _rows_csv(first: QueryResult, rows: list[dict[str, Any]], out: TextIO, *, front: tuple[str, ...]) -> csv.DictWriter[str]:
    # Plain-only results keep the columns they always had; results with corrected rows say which row is which.
    labelled = first.estimator != "plain"
    marked = (SIGNIFICANT_COLUMN,) if first.selection is not None else ()
    fields = front + _columns(first) + PRIVACY_COLUMNS + marked + ((ESTIMATOR_COLUMN,) if labelled else ())
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()})
    return writer


def _rows_table(first: QueryResult, rows: list[dict[str, Any]], out: TextIO, *, front: tuple[str, ...]) -> None:
    labelled = first.estimator != "plain"
    counts = first.counts  # a mean's rows are not counts: no frequency column (it would be nan)
    marked = first.selection is not None
    headers = list(front) + ["value"] + ([ESTIMATOR_COLUMN] if labelled else []) + ["estimate", "stderr", "ci_low", "ci_high"]
    headers += ["frequency"] if counts else []
    adjusted = first.postprocess != "none"
    if adjusted:
        headers += [first.postprocess, f"{first.postprocess} freq"]
    headers += ["sig"] if marked else []
    table_rows = []
    for row in rows:
        cells = [row[c] for c in front] + [row["value"]] + ([row[ESTIMATOR_COLUMN]] if labelled else [])
        cells += [row["estimate"], row["stderr"], row["ci_low"], row["ci_high"]]
        cells += [row["frequency"]] if counts else []
        if adjusted:
            cells += [row["adjusted"], row["adjusted_frequency"]]
        if marked:
            cells += ["*" if row.get(SIGNIFICANT_COLUMN) else ""]
        table_rows.append(cells)
    table(headers, table_rows, out, left={0, len(front), len(front) + 1} if labelled else {0, len(front)})
