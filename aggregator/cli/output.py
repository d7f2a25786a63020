"""What the CLI prints: the renderers and formatting of :mod:`ldptel.aggregator.render` (re-exported here, where
the commands and older callers import them), and :func:`no_data_as_empty`, the CLI's answer to an empty range.

* :func:`write_result`, :func:`write_daily`, :func:`plot_result`: a result of any kind through the renderer of its
  ``kind`` (table, json, csv, chart).
* :func:`table`, :func:`write_json`, :func:`fmt_num`: the shared formatting.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

from ldptel.aggregator.json_api import versioned
from ldptel.aggregator.render import (
    DAILY_COLUMNS,
    ESTIMATE_COLOR,
    ESTIMATOR_COLUMN,
    LABEL_WIDTH,
    MARKER_COLOR,
    MIDPOINT_NOTE,
    RESULT_COLUMNS,
    RESULT_FORMATS,
    display_width,
    finite,
    fmt_num,
    interval_bars,
    json_text,
    new_figure,
    plot_labels,
    plot_result,
    save_figure,
    table,
    unresolved_note,
    write_daily,
    write_json,
    write_result,
)


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
            held = getattr(exc, "withheld", ())  # every day under min_reports: which, and why (never their counts)
            write_json(versioned("result", {"metric": exc.metric, "version": exc.version, "mechanism": exc.mechanism,
                                            "days": [], "n": 0, "rows": [], "message": str(exc),
                                            **({"withheld": [w.to_dict() for w in held]} if held else {})}), out)
        elif fmt == "csv":
            out.write(",".join(RESULT_COLUMNS) + "\n")
        else:
            raise
        err.write(f"ldptel: {exc}\n")
        state.written = True


__all__ = [
    "DAILY_COLUMNS", "ESTIMATE_COLOR", "ESTIMATOR_COLUMN", "LABEL_WIDTH", "MARKER_COLOR", "MIDPOINT_NOTE", "RESULT_COLUMNS",
    "RESULT_FORMATS", "NoData", "display_width", "finite", "fmt_num", "interval_bars", "json_text", "new_figure",
    "no_data_as_empty", "plot_labels", "plot_result", "save_figure", "table", "unresolved_note", "write_daily", "write_json", "write_result",
]
