"""Everything the CLI and the demo print or draw: aligned tables, JSON, CSV, and charts of estimates.

* :func:`table`: columns aligned by terminal width (emoji take two columns), floats through :func:`fmt_num`.
* :func:`write_result`: a :class:`~ldptel.aggregator.query.QueryResult` as table, json or csv
  (:data:`RESULT_COLUMNS`, plus an ``estimator`` column when the result has collision-corrected rows; every
  JSON row has it); ``summary=True`` (a numeric histogram without ``--histogram``) prints its
  :meth:`~ldptel.aggregator.query.QueryResult.summary_rows` (count, mean, sum, percentiles) in those columns
  instead of the buckets, except in JSON, which always holds every key (rows, mean, percentiles);
  :func:`write_json` for any document.
* Charts (matplotlib, the ``plot`` extra, imported only when drawing): :func:`new_figure`,
  :func:`interval_bars`, :func:`save_figure` and the CLI's :func:`plot_result`; the demo composes the same parts.
"""

from __future__ import annotations

import csv
import json
import math
import unicodedata
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from ldptel.aggregator.cli.common import UserError
from ldptel.aggregator.cli.extras import install_hint
from ldptel.aggregator.percentiles import MAX_SPAN, UNRESOLVED_NOTE, Percentile

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ldptel.aggregator.fleet import Fleet
    from ldptel.aggregator.query import DailyResult, QueryResult

RESULT_COLUMNS = ("value", "estimate", "stderr", "ci_low", "ci_high", "frequency", "adjusted", "adjusted_frequency")
ESTIMATOR_COLUMN = "estimator"  # csv: last, when the result has corrected rows; table: after the value
RESULT_FORMATS = ("table", "json", "csv")
DAILY_COLUMNS = ("day", "n")  # in front of RESULT_COLUMNS with --by-day
ESTIMATE_COLOR = "#4c72b0"  # bars of raw estimates
MARKER_COLOR = "#dd8452"  # what is drawn over them: post-processed values, true counts
LABEL_WIDTH = 24  # longest tick label of a chart


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


@dataclass
class NoData:
    written: bool = False  # the empty document was written in place of a result


@contextmanager
def no_data_as_empty(fmt: str, out: TextIO, err: TextIO) -> Iterator[NoData]:
    """Around a query: with json or csv, no data in the range (``EmptyRangeError``) is a valid document with
    no rows (json: the metric, version, mechanism, ``"rows": []`` and the reason; csv: the header), the reason
    on ``err``, and ``written`` set; a table keeps the one-line error."""
    from ldptel.aggregator.query import EmptyRangeError

    state = NoData()
    try:
        yield state
    except EmptyRangeError as exc:
        if fmt == "json":
            write_json({"metric": exc.metric, "version": exc.version, "mechanism": exc.mechanism, "days": [],
                        "n": 0, "rows": [], "message": str(exc)}, out)
        elif fmt == "csv":
            out.write(",".join(RESULT_COLUMNS) + "\n")
        else:
            raise
        err.write(f"ldptel: {exc}\n")
        state.written = True


def write_result(result: QueryResult, fmt: str, out: TextIO, *, summary: bool = False) -> None:
    """Print a query result as ``table`` (title, proportion line for rr, rows), ``json`` or ``csv``; ``summary``:
    a numeric histogram's summary rows in place of its buckets (table and csv)."""
    if fmt == "json":
        write_json(result.to_dict(), out)
        return
    if summary:
        _write_summary(result, fmt, out)
        return
    _write_rows(result, result.rows(), fmt, out, days=result.days, n=result.n, front=())


def write_daily(result: DailyResult, fmt: str, out: TextIO) -> None:
    """``--by-day``: :func:`write_result` with the :data:`DAILY_COLUMNS` (day, that day's n) in front."""
    if fmt == "json":
        write_json(result.to_dict(), out)
        return
    days = tuple(res.days[0] for res in result.results)
    n = sum(res.n for res in result.results)
    _write_rows(result.results[0], result.rows(), fmt, out, days=days, n=n, front=DAILY_COLUMNS)


def _write_rows(
    first: QueryResult, rows: list[dict[str, Any]], fmt: str, out: TextIO, *, days: Sequence[str], n: int,
    front: tuple[str, ...],
) -> None:
    # Plain-only results keep the columns they always had; results with corrected rows say which row is which.
    labelled = first.estimator != "plain"
    if fmt == "csv":
        fields = front + RESULT_COLUMNS + ((ESTIMATOR_COLUMN,) if labelled else ())
        writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()})
        for pc in () if front else first.percentiles:  # numeric histograms: a row per asked percentile, "p50", ...
            writer.writerow({"value": f"p{pc.percentile:g}", "estimate": "" if pc.shown is None else repr(pc.shown),
                             "ci_low": repr(pc.ci_low), "ci_high": repr(pc.ci_high)})
        return
    span = days[0] if len(days) == 1 else f"{days[0]} .. {days[-1]} ({len(days)} days)"
    estimators = "" if not labelled else f" · {first.estimator} estimator" + ("s" if first.estimator == "both" else "")
    per_day = " · per day" if front else ""
    out.write(
        f"{first.metric} v{first.version} ({first.mechanism}) · {span} · n = {n:,} reports{per_day} · "
        f"{first.confidence:.0%} intervals{estimators} · stderr: {first.uncertainty}"
        f"{' (json: also population)' if first.uncertainty == 'randomization' else ''}\n"
    )
    if first.note and not front:
        out.write(f"{first.note}\n")
    prop = first.proportion
    if prop is not None and not front:
        out.write(
            f"proportion true: {prop.estimate:.4f} ± {prop.stderr:.4f} (stderr), "
            f"interval [{prop.ci_low:.4f}, {prop.ci_high:.4f}]\n"
        )
    headers = list(front) + ["value"] + ([ESTIMATOR_COLUMN] if labelled else []) + ["estimate", "stderr", "ci_low", "ci_high", "frequency"]
    adjusted = first.postprocess != "none"
    if adjusted:
        headers += [first.postprocess, f"{first.postprocess} freq"]
    table_rows = []
    for row in rows:
        cells = [row[c] for c in front] + [row["value"]] + ([row[ESTIMATOR_COLUMN]] if labelled else [])
        cells += [row["estimate"], row["stderr"], row["ci_low"], row["ci_high"], row["frequency"]]
        if adjusted:
            cells += [row["adjusted"], row["adjusted_frequency"]]
        table_rows.append(cells)
    table(headers, table_rows, out, left={0, len(front), len(front) + 1} if labelled else {0, len(front)})
    if first.fleet is not None and not front:
        _write_fleet(first.fleet, out)
    if first.percentiles and not front:
        out.write("\n")
        table(["percentile", "estimate", "ci_low", "ci_high"],
              [[f"p{pc.percentile:g}", "" if pc.shown is None else pc.shown, pc.ci_low, pc.ci_high] for pc in first.percentiles], out)
        unresolved_note(first.percentiles, out)


def _write_fleet(fleet: Fleet, out: TextIO) -> None:
    """sample_rate < 1: the fleet-scaled counts (population uncertainty) and the amplified ε with whom it holds against."""
    from ldptel.client.protocol.specs import AMPLIFIED_EPSILON_NOTE

    out.write(f"\nfleet (sample_rate {fleet.sample_rate:g}: counts ÷ {fleet.sample_rate:g}, stderr adds the sampling; "
              f"≈ {fleet.devices:,.0f} ± {fleet.devices_stderr:,.0f} devices) · population uncertainty\n")
    table(["value", "estimate", "stderr", "ci_low", "ci_high"],
          [[r["value"], r["estimate"], r["stderr"], r["ci_low"], r["ci_high"]] for r in fleet.rows()], out, left={0})
    out.write(f"amplified ε {fleet.amplified_epsilon:.4g} (ε {fleet.epsilon:.4g} per report): {AMPLIFIED_EPSILON_NOTE}\n")


MIDPOINT_NOTE = (
    "mean and sum: values taken at their bucket's midpoint (within ±{bound} of the mean of the clipped values); "
    "percentile intervals by test inversion; --histogram for the buckets"
)


def _write_summary(result: QueryResult, fmt: str, out: TextIO) -> None:
    rows = result.summary_rows()
    if fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=RESULT_COLUMNS, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (repr(v) if isinstance(v, float) else "" if v is None else v) for k, v in row.items()})
        return
    days = result.days
    span = days[0] if len(days) == 1 else f"{days[0]} .. {days[-1]} ({len(days)} days)"
    out.write(f"{result.metric} v{result.version} ({result.mechanism}) · {span} · n = {result.n:,} reports · "
              f"{result.confidence:.0%} intervals\n")
    if result.note:
        out.write(f"{result.note}\n")
    cols = ("estimate", "stderr", "ci_low", "ci_high")
    table(["value", *cols], [[row["value"], *("" if row[c] is None else row[c] for c in cols)] for row in rows], out)
    unresolved_note(result.percentiles, out)
    if result.mean is not None:
        out.write(MIDPOINT_NOTE.format(bound=fmt_num(result.mean.midpoint_bound)) + "\n")


def unresolved_note(levels: Sequence[Percentile], out: TextIO) -> None:
    """One line per percentile whose interval is too wide for a point (:mod:`~ldptel.aggregator.percentiles`)."""
    for pc in levels:
        if not pc.resolved:
            out.write(f"p{pc.percentile:g} {UNRESOLVED_NOTE.format(share=MAX_SPAN)} (interval spans {pc.buckets} buckets)\n")


# ---------------------------------------------------------------------------------------------- charts
def new_figure(option: str, *, figsize: tuple[float, float]) -> Figure:
    """An empty matplotlib figure (no pyplot, no GUI backend); without matplotlib a one-line UserError."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
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


def plot_result(result: QueryResult, path: str, *, max_bars: int = 50) -> None:
    """``ldptel estimate --plot``: bars of the raw estimates with their intervals, post-processed values as markers."""
    est = result.estimate
    count = min(len(est.labels), max_bars)
    fig = new_figure("--plot", figsize=(max(6.0, 0.35 * count + 2), 4.5))
    ax = fig.subplots()
    err = est.z * est.stderr[:count]
    x = interval_bars(ax, est.counts[:count], err, err, label=f"estimate ± {est.confidence:.0%} interval")
    if result.postprocess != "none":
        ax.plot(x, result.adjusted[:count], "o", color=MARKER_COLOR, label=result.postprocess)
    ax.set_xticks(x, plot_labels(est.labels[:count]), rotation=60, ha="right", fontsize=8)
    if len(result.edges) == count + 1:  # numeric histogram: each percentile where it falls inside its bar
        for pc in result.percentiles:
            if not pc.resolved:  # no point to mark: the interval spans too much of the range
                continue
            at = float(np.interp(pc.estimate, result.edges, np.arange(count + 1) - 0.5))
            ax.axvline(at, color=MARKER_COLOR, linestyle="--", linewidth=1)
            ax.text(at, 0.97 * ax.get_ylim()[1], f" p{pc.percentile:g}", color=MARKER_COLOR, ha="left", va="top", fontsize=8)
    ax.set_ylabel("reports" if result.counts_rows else "estimate")
    ax.set_title(f"{result.metric} v{result.version} · {result.days[0]} .. {result.days[-1]} · n = {result.n:,}")
    ax.legend(fontsize=8)
    save_figure(fig, path, dpi=120, what="plot")
