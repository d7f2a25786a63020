"""``ldptel estimate METRIC``: debiased estimates with intervals over a day range
(:func:`~ldptel.aggregator.query.estimate_metric`), printed as table, json or csv, optionally charted;
``--by-day`` prints one row per day and value (:func:`~ldptel.aggregator.query.estimate_by_day`).

A numeric histogram prints a summary by default: count, mean (from the debiased buckets, at their midpoints),
sum and the percentiles (``--percentiles``, default 50,90,99) with intervals; ``--histogram`` prints the
buckets (raw estimates with stderr, and the Norm-Sub consistent column) instead.

``--estimator plain|corrected|both`` picks the sketch estimator (the plain count-mean-sketch estimate, the
collision-corrected least squares over the candidates, or both); the output says which one each row is.

Rows of counts are a selection from the candidates (or the domain): ``--selection`` marks with ``*`` the rows
distinguishable from zero after testing all of them (:mod:`~ldptel.aggregator.selection`), and the output says
the rows were selected and how; ``--simultaneous`` widens the intervals to hold over all the candidates."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any, TextIO

from ldptel.aggregator.cli.common import (
    EXIT_OK,
    UserError,
    check_texts,
    comma_list,
    confidence,
    connected,
    day,
    positive_int,
    read_values,
)
from ldptel.aggregator.cli.extras import install_hint
from ldptel.aggregator.cli.output import RESULT_FORMATS, no_data_as_empty, plot_result, write_daily, write_result
from ldptel.aggregator.defaults import default_confidence
from ldptel.aggregator.postprocess import POSTPROCESS_METHODS

NAME = "estimate"
EXTRA = "aggregator"
ESTIMATORS = ("plain", "corrected", "both")  # ldptel.aggregator.query.ESTIMATOR_CHOICES (not imported: --help stays light)
STDERR_MEANING = (
    "stderr: the spread of the estimated count over the randomness of the reports (privacy noise, and for "
    "sketches the row each report picked and the hash family's collisions), given the values of the devices "
    "that reported; it does not include sampling those devices from a larger population (--uncertainty population "
    "adds it: docs/inference.md). Intervals are "
    "estimate ± z·stderr. Numeric histograms: the mean assumes each value at its bucket's midpoint (it is "
    "unbiased for that midpoint mean, which is within midpoint_bound of the mean of the clipped values; the "
    "mean mechanism estimates the mean itself); percentile intervals come from inverting a test on the raw "
    "prefix sums (no stderr). The last line shows the local ε of one report beside the central (ε, δ) of the "
    "shuffled reports, or why that bound does not apply; a day with fewer reports than the metric's min_reports "
    "is withheld and left out of every total (docs/central-privacy.md)."
)
HISTOGRAM_VIEW_NEEDS = (
    "--histogram and --percentiles need a numeric histogram metric; create one with: ldptel metrics create NAME "
    "--mechanism num-histogram --range LO HI --buckets N [--scale log]"
)
NEEDS = ("redis",)  # top-level modules the command imports beyond the SDK


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="debiased estimates with intervals",
                       description="Sum a metric's sketches over a day range and debias them.", epilog=STDERR_MEANING)
    p.add_argument("metric", metavar="METRIC")
    p.add_argument("--version", type=positive_int, help="metric version (default: current)")
    p.add_argument("--from", dest="day_from", type=day, metavar="DAY", help="first UTC day, YYYY-MM-DD")
    p.add_argument("--to", dest="day_to", type=day, metavar="DAY", help="last UTC day, YYYY-MM-DD")
    p.add_argument("--day", type=day, metavar="DAY", help="one UTC day (same as --from DAY --to DAY)")
    p.add_argument("--candidates", metavar="FILE", help="sketch metrics: values to estimate, one per line ('-': stdin)")
    p.add_argument("--candidate", action="append", metavar="VALUE", help="a value to estimate (repeatable)")
    p.add_argument("--top", type=positive_int, metavar="N", help="keep the N largest estimates")
    p.add_argument("--format", choices=RESULT_FORMATS, default="table")
    level = default_confidence()
    p.add_argument("--confidence", type=confidence, default=level, help=f"interval level (default {level})")
    p.add_argument("--postprocess", choices=POSTPROCESS_METHODS,
                   help="none | clip (to [0, n]) | norm-sub (non-negative, sum n); raw values are kept too "
                        "(default: norm-sub for numeric histograms, else none)")
    p.add_argument("--estimator", choices=ESTIMATORS, default="plain",
                   help="sketches: plain (Apple's count-mean-sketch estimate; its stderr includes hash collisions) | "
                        "corrected (least squares over the candidates, removing their collisions: give candidates "
                        "that cover most of the reports) | both (each value's plain row, then its corrected row)")
    p.add_argument("--selection", choices=("bonferroni", "bh", "none"), default="bonferroni",
                   help="rows of counts are selected from many candidates: mark (*, 'significant') those "
                        "distinguishable from zero after testing all of them, by bonferroni (default: the chance "
                        "of marking any value nobody sent ≤ 1 − confidence) | bh (Benjamini–Hochberg: the expected "
                        "share of false marks ≤ 1 − confidence) | none")
    p.add_argument("--simultaneous", action="store_true",
                   help="intervals that hold together over all the candidates (Bonferroni), not one at a time")
    p.add_argument("--percentiles", type=comma_list, metavar="50,90,99",
                   help="numeric histogram metrics: these percentiles (0-100) with intervals (default in the "
                        "summary: 50,90,99; with --histogram: below the buckets)")
    p.add_argument("--histogram", action="store_true",
                   help="numeric histogram metrics: print the buckets (estimate, stderr, interval, Norm-Sub "
                        "consistent counts) instead of the summary (count, mean, sum, percentiles)")
    p.add_argument("--plot", metavar="FILE.png", help=f"bar chart with error bars, percentiles marked (needs {install_hint('plot')})")
    p.add_argument("--uncertainty", choices=("randomization", "population"), default="randomization",
                   help="what stderr and the intervals cover: randomization (default: the privacy noise, given the "
                        "devices that reported) | population (adds the sampling of those devices from the fleet; "
                        "counts of rr, grr and sketches)")
    p.add_argument("--by-day", action="store_true",
                   help="one row per UTC day and value (each day estimated on its own; --top keeps the same values "
                        "every day, ranked by their estimate summed over the days)")
    p.add_argument("--by", type=comma_list, metavar="DIM[,DIM]",
                   help="breakdown metrics: one estimate per combination of these profile dimensions' values (e.g. "
                        "os or os,app_version), each with its own intervals, and the total; groups below the metric's "
                        "min_reports are withheld. Profile values are not privatized: docs/breakdowns.md")
    p.add_argument("--where", action="append", metavar="DIM=VALUE",
                   help="breakdown metrics: only reports whose profile has this value (repeatable, e.g. --where "
                        "os=android); the names and values are checked against the registry")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ldptel.aggregator.query import QueryOptions, estimate_by_day, estimate_metric, metric_kind
    from ldptel.client.mechanisms.bucketed import DEFAULT_PERCENTILES

    if args.by_day and args.plot:
        raise UserError("--plot draws the estimates over the whole range; drop --by-day (the dashboard charts days)")
    if args.by_day and args.by:
        raise UserError("--by and --by-day cannot be combined: use --by with --day DAY, one day at a time")
    from ldptel.aggregator.breakdowns import parse_where

    where = parse_where(args.where or [])
    candidates: list[str] | None = None
    if args.candidates:
        candidates = read_values(args.candidates, what="candidates file")
    if args.candidate:
        check_texts(list(args.candidate), what="--candidate", label="value")  # argv may hold surrogate escapes
        candidates = (candidates or []) + list(args.candidate)
    day_from, day_to = args.day_from, args.day_to
    if args.day:
        day_from = day_to = args.day
    levels = None if args.percentiles is None else [_level(v) for v in args.percentiles]
    with connected(args.redis_url) as r, no_data_as_empty(args.format, out, err) as empty:
        mechanism, kind = metric_kind(r, args.metric, version=args.version)
        bucketed = kind == "histogram"
        if (args.histogram or levels is not None) and not bucketed:
            raise UserError(f"{args.metric} is a {mechanism} metric: {HISTOGRAM_VIEW_NEEDS}")
        summary = bucketed and not args.histogram and not args.by_day
        options = QueryOptions(
            version=args.version, day_from=day_from, day_to=day_to, candidates=candidates, top=args.top,
            confidence=args.confidence, estimator=args.estimator, selection=args.selection,
            simultaneous=args.simultaneous,
            postprocess=args.postprocess,  # None: the kind's default (norm-sub for a numeric histogram)
            percentiles=list(DEFAULT_PERCENTILES) if summary and levels is None else levels,
            where=where,
        )
        if args.by:
            return _breakdown(r, args, options, out, summary=summary)
        if args.by_day:
            daily = estimate_by_day(r, args.metric, options)
            if args.uncertainty == "population":
                daily = replace(daily, results=tuple(res.as_population() for res in daily.results))
            write_daily(daily, args.format, out)
            return EXIT_OK
        result = estimate_metric(r, args.metric, options)
        if args.uncertainty == "population":
            result = result.as_population()
    if empty.written:
        return EXIT_OK
    if args.plot:
        plot_result(result, args.plot)
    write_result(result, args.format, out, summary=summary)
    return EXIT_OK


def _breakdown(r: Any, args: argparse.Namespace, options: Any, out: TextIO, *, summary: bool) -> int:
    from ldptel.aggregator.breakdowns import estimate_breakdown, plot_breakdown
    from ldptel.aggregator.render import write_breakdown

    result = estimate_breakdown(r, args.metric, args.by, options)
    if args.uncertainty == "population":
        raise UserError("--uncertainty population is not available with --by yet; use it per group with --where")
    if args.plot:
        plot_breakdown(result, args.plot)
    write_breakdown(result, args.format, out, summary=summary)
    return EXIT_OK


def _level(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UserError(f"--percentiles takes numbers in (0, 100) separated by commas, got {text!r}") from None
