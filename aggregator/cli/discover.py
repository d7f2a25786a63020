"""``ldptel discover METRIC``: the frequent values of a discovery metric that nobody listed, ranked, with
estimates, stderr and intervals from the full-value sketch (:func:`~ldptel.aggregator.discover.discover_metric`),
printed as table, json or csv, optionally charted; each round's progress goes to stderr."""

from __future__ import annotations

import argparse
from typing import TextIO

from ldptel.aggregator.cli.common import EXIT_OK, comma_list, confidence, connected, day, positive_int
from ldptel.aggregator.cli.estimate import STDERR_MEANING
from ldptel.aggregator.cli.extras import install_hint
from ldptel.aggregator.cli.output import RESULT_FORMATS, no_data_as_empty, plot_result, write_result
from ldptel.aggregator.defaults import DISCOVER_ALPHA, DISCOVER_KEEP, DISCOVER_TOP, default_confidence

NAME = "discover"
EXTRA = "aggregator"
NEEDS = ("redis",)  # top-level modules the command imports beyond the SDK
DEFAULT_TOP, KEEP, ALPHA = DISCOVER_TOP, DISCOVER_KEEP, DISCOVER_ALPHA
FALSE_DISCOVERIES = (
    "False discoveries: a value is reported only when its estimate is at least THRESHOLD standard errors; by "
    "default THRESHOLD is the Bonferroni z for a family-wise ALPHA over every value the walk could test, so the "
    "chance of reporting any value nobody holds is at most ALPHA. At most KEEP prefixes survive each round. "
)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < 100:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 100), got {value}")
    return value


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="find frequent values nobody listed (discovery metrics)",
                       description="Sum a discovery metric's sketches over a day range and find its frequent values "
                                   "without a candidate list.", epilog=FALSE_DISCOVERIES + STDERR_MEANING)
    p.add_argument("metric", metavar="METRIC")
    p.add_argument("--version", type=positive_int, help="metric version (default: current)")
    p.add_argument("--from", dest="day_from", type=day, metavar="DAY", help="first UTC day, YYYY-MM-DD")
    p.add_argument("--to", dest="day_to", type=day, metavar="DAY", help="last UTC day, YYYY-MM-DD")
    p.add_argument("--day", type=day, metavar="DAY", help="one UTC day (same as --from DAY --to DAY)")
    p.add_argument("--top", type=positive_int, default=DEFAULT_TOP, metavar="K",
                   help=f"show the K largest discovered values (default {DEFAULT_TOP})")
    p.add_argument("--threshold", type=_positive_float, metavar="Z",
                   help="report values at least Z standard errors above 0 (default: from --alpha)")
    p.add_argument("--alpha", type=confidence, default=ALPHA, metavar="A",
                   help=f"family-wise chance of reporting any value nobody holds, in (0, 1) (default {ALPHA})")
    p.add_argument("--keep", type=positive_int, default=KEEP, metavar="K",
                   help=f"candidates kept per round: the cap on the walk (default {KEEP})")
    p.add_argument("--format", choices=RESULT_FORMATS, default="table")
    level = default_confidence()
    p.add_argument("--confidence", type=confidence, default=level, help=f"interval level (default {level})")
    p.add_argument("--plot", metavar="FILE.png", help=f"bar chart with error bars (needs {install_hint('plot')})")
    p.add_argument("--by", type=comma_list, metavar="DIM[,DIM]",
                   help="breakdown metrics: discover per combination of these profile dimensions' values (and over "
                        "all); groups below min_reports are withheld. Profile values are not privatized: docs/breakdowns.md")
    p.add_argument("--where", action="append", metavar="DIM=VALUE",
                   help="breakdown metrics: only reports whose profile has this value (repeatable)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ldptel.aggregator.discover import discover_metric

    day_from, day_to = args.day_from, args.day_to
    if args.day:
        day_from = day_to = args.day
    tty = bool(getattr(err, "isatty", lambda: False)())

    def progress(done: int, total: int) -> None:
        start, end = ("\r", "\n" if done == total else "") if tty else ("", "\n")
        err.write(f"{start}ldptel discover: round {done}/{total}{end}")
        err.flush()

    from ldptel.aggregator.breakdowns import parse_where

    where = parse_where(args.where or [])
    with connected(args.redis_url) as r, no_data_as_empty(args.format, out, err) as empty:
        if args.by:
            from ldptel.aggregator.breakdowns import estimate_breakdown, plot_breakdown
            from ldptel.aggregator.discover import DiscoverOptions
            from ldptel.aggregator.render import write_breakdown

            options = DiscoverOptions(version=args.version, day_from=day_from, day_to=day_to, top=args.top,
                                      keep=args.keep, threshold=args.threshold, alpha=args.alpha,
                                      confidence=args.confidence, where=where)
            broken = estimate_breakdown(r, args.metric, args.by, options, query=discover_metric)
            if args.plot:
                plot_breakdown(broken, args.plot)
            write_breakdown(broken, args.format, out)
            return EXIT_OK
        found = discover_metric(r, args.metric, version=args.version, day_from=day_from, day_to=day_to, top=args.top,
                                keep=args.keep, threshold=args.threshold, alpha=args.alpha,
                                confidence=args.confidence, progress=progress, where=where)
    if empty.written:
        return EXIT_OK
    if args.plot:
        plot_result(found, args.plot)
    write_result(found, args.format, out)
    return EXIT_OK
