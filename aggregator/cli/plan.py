"""``ldptel plan``: which mechanism, ε, k and m meet an error target, with the reports and days they need
(:func:`~ldptel.aggregator.plan.plan`), printed as table, json or csv. Needs numpy only: no Redis."""

from __future__ import annotations

import argparse
import csv
from typing import Any, TextIO

import numpy as np

from ldptel.aggregator.cli.common import EXIT_OK, UserError, confidence, positive_int
from ldptel.aggregator.cli.output import table, write_json
from ldptel.aggregator.json_api import versioned
from ldptel.aggregator.plan import (
    DEFAULT_EPSILONS,
    DEFAULT_K,
    DEFAULT_M,
    MeanPlanRow,
    Plan,
    PlanRow,
    epsilon_range,
)
from ldptel.aggregator.plan_answer import (
    DEFAULT_BUCKETS,
    DEFAULT_MAX_BYTES,
    Answer,
    discovery_question,
    frequency_question,
    mean_question,
    percentile_question,
)
from ldptel.client.errors import LdpError
from ldptel.client.mechanisms import Permanent, get_mechanism
from ldptel.client.mechanisms.longitudinal import longitudinal_note

NAME = "plan"
EXTRA = "aggregator"
NEEDS: tuple[str, ...] = ()  # numpy only, which the SDK brings
PLAN_FORMATS = ("table", "json", "csv")
CSV_COLUMNS = tuple(PlanRow.__dataclass_fields__)

DESCRIPTION = """\
Plan a metric from the question you want answered: prints a one-line recommendation first (mechanism, params,
ε and what it means, the ± in your units and the days of data it takes), the assumptions it rests on, warnings
when the target cannot answer the question, then the ranked alternatives.

Questions (one of):
  --share                 the share of devices for which something is true (yes/no), ± in percentage points
  --top-k K               the K most frequent of many values (emoji, screens); --domain-size is optional
  --domain-size D         the share of each of D values
  --range LO HI           the mean of a number clipped to [LO, HI]; --error is a share of HI - LO
  --percentile P --range LO HI   a percentile from a bucketed histogram; --error in percentile points of rank
  --discover              frequent values without a list (free text); --min-share is the smallest share to find

ε bounds how much one report can change the odds of anything learned about its sender: by at most e^ε
(ε = 1: 2.7×, ε = 4: 55×, ε = 8: 2,981×).

Model (frequencies). Without --top-share the domain's values are equally frequent (the fewest hash collisions
possible); --top-k without --top-share assumes Zipf shares with exponent 1. With --top-share x the counts are
Zipf-shaped, f(i) ∝ i^-s for the values ranked i = 1..d, with s solved so that the top value holds x of the
reports. Variance of an estimated count = the mechanism's randomization variance + for sketches the
hash-collision term (F2 − f²)/(k(m − 1)), F2 = Σ f(d)² from the model: a fixed hash family turns it into a
per-value bias that more reports never remove, so a sketch's ± has a floor and a target below it is
unreachable ("never"). ± = z·√Var / n.

Ranking: rows meeting the target with one day's reports first, then fewer days, lower ε, less memory,
fewer bits. '*' marks the mechanism recommended for (ε, d): grr when d < 3e^ε + 2, else oue-cms.

--format json prints a versioned document (schema_version; keys in docs/json-output.md)."""

EPILOG = """\
examples:
  ldptel plan --daily-users 50000 --top-k 20 --error 1pp
  ldptel plan --daily-users 50000 --share --error 1pp
  ldptel plan --daily-users 50000 --range 0 600 --error 1%
  ldptel plan --daily-users 50000 --percentile 95 --range 0 600 --error 1pp
  ldptel plan --daily-users 50000 --discover --min-share 1%
  ldptel plan --reports-per-day 1000000 --domain-size 10000 --top-share 15% --error 0.001 --epsilon 4
  ldptel plan --reports-per-day 50000 --domain-size 32 --error 1% --epsilon 1:8 --format json

renamed: --top N (rows to print) is now --rows N; --top still works and prints a deprecation note."""

DEFAULT_TABLE_ROWS = 10
NUMBER_QUESTIONS = frozenset({"mean", "percentile"})  # the questions about a number (--range)


def share(text: str) -> float:
    """A fraction in (0, 1), a percentage ``15%``, or percentage points ``1pp``."""
    raw = text.strip().lower().replace(" ", "")
    unit = next((u for u in ("pp", "%") if raw.endswith(u)), "")
    scale = 100.0 if unit else 1.0
    try:
        value = float(raw.removesuffix(unit)) / scale
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a fraction like 0.01, a percentage like 1% or percentage points like 1pp, got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1) or a percentage in (0%, 100%), got {text!r}")
    return value


def epsilons(text: str) -> tuple[float, ...]:
    try:
        return epsilon_range(text)
    except LdpError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def sizes(text: str) -> list[int]:
    """``256`` or ``256,1024``."""
    try:
        values = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 256 or 256,1024, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected integers like 256 or 256,1024, got {text!r}")
    return values


class _DeprecatedTop(argparse.Action):
    """``--top N``: the old name of ``--rows N`` (it never meant the top values: that is ``--top-k``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        namespace.rows = values
        namespace.deprecated = [*getattr(namespace, "deprecated", []),
                                "--top N is deprecated: it is the rows to print, now --rows N "
                                "(to rank the K most frequent values ask --top-k K)"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, help="answer 'how much data and which ε for this question' (no Redis)",
                       description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    volume = p.add_mutually_exclusive_group(required=True)
    volume.add_argument("--daily-users", "--reports-per-day", dest="reports_per_day", type=positive_int, metavar="N",
                        help="devices reporting per day (one report each a day; --reports-per-day is the same)")
    volume.add_argument("--reports", type=positive_int, metavar="N", help="or: the total reports of a one-off collection")
    question = p.add_argument_group("the question (one of)")
    question.add_argument("--share", action="store_true", help="a yes/no share (d = 2)")
    question.add_argument("--top-k", type=positive_int, metavar="K",
                          help="rank the K most frequent values; --domain-size defaults to 1,000 (with the reason)")
    question.add_argument("--domain-size", type=positive_int, metavar="D", help="number of distinct values (categorical metrics)")
    question.add_argument("--range", type=float, nargs=2, metavar=("LO", "HI"),
                          help="numeric metrics instead: the declared value range; --error is then a share of HI - LO "
                               "(the metric's lo and hi)")
    question.add_argument("--lo", type=float, metavar="LO", help="with --hi: the same as --range LO HI (the TOML keys lo, hi)")
    question.add_argument("--hi", type=float, metavar="HI", help="with --lo: the same as --range LO HI")
    question.add_argument("--percentile", type=float, metavar="P", help="with --range: plan percentile P (0-100)")
    question.add_argument("--discover", action="store_true", help="find frequent values without a list (free text)")
    p.add_argument("--buckets", type=positive_int, default=None, metavar="D",
                   help="--percentile: histogram buckets over the range (default 32)")
    p.add_argument("--max-bytes", type=positive_int, default=None, metavar="L",
                   help="--discover: the longest value in UTF-8 bytes (default 16)")
    p.add_argument("--min-share", type=share, metavar="X", help="--discover: the smallest share a value must hold to be found")
    typical = p.add_mutually_exclusive_group()
    typical.add_argument("--mean-guess", type=float, metavar="X",
                         help="--range: a guess of the mean; adds each mean variant's variance if every value were X "
                              "and picks the variant by it")
    typical.add_argument("--pilot", metavar="FILE",
                         help="--range: a file of typical values (one number per line, e.g. a pilot sample); adds each "
                              "mean variant's variance averaged over them and picks the variant by it")
    p.add_argument("--top-share", type=share, metavar="X",
                   help="share of reports the top value holds (0.15 or 15%%): Zipf model; default uniform "
                        "(--top-k: Zipf with exponent 1)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--error", type=share, metavar="E",
                        help="target ± of a share: 1pp, 1%% or 0.01 all mean ±1 percentage point")
    target.add_argument("--error-count", type=float, metavar="C",
                        help="or: target ± in reports, read as the frequency C / n (n: reports per day, or --reports)")
    p.add_argument("--confidence", type=confidence, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--epsilon", type=epsilons, action="append", metavar="E|LO:HI[:STEP]",
                   help=f"ε per report: repeatable, or a range like 1:8 (default {', '.join(f'{e:g}' for e in DEFAULT_EPSILONS)})")
    p.add_argument("--k", type=sizes, action="append", metavar="K[,K...]",
                   help=f"sketch rows to consider (default {','.join(map(str, DEFAULT_K))})")
    p.add_argument("--m", type=sizes, action="append", metavar="M[,M...]",
                   help=f"sketch columns, powers of two (default {','.join(map(str, DEFAULT_M))})")
    p.add_argument("--shards", type=positive_int, default=1, help="stream shards: memory per day = shards × per shard-day")
    p.add_argument("--rows", type=int, metavar="N", default=None,
                   help=f"alternatives to print (table: default {DEFAULT_TABLE_ROWS}; json/csv: all; 0: all)")
    p.add_argument("--top", type=positive_int, metavar="N", action=_DeprecatedTop, dest="rows",
                   help="deprecated: the old name of --rows")
    p.add_argument("--format", choices=PLAN_FORMATS, default="table",
                   help="table (recommendation first), json (versioned: docs/json-output.md) or csv (the rows)")
    p.set_defaults(func=run, deprecated=[])


def _flat(groups: list[Any] | None, default: tuple[Any, ...]) -> tuple[Any, ...]:
    return default if not groups else tuple(v for group in groups for v in group)


def _question(args: argparse.Namespace) -> str:
    """Which question the flags ask (module help); a clear error when they ask none or two."""
    if args.lo is not None or args.hi is not None:  # one vocabulary with metrics create and the TOML: lo, hi
        if args.range is not None:
            raise UserError("give --range LO HI or --lo LO --hi HI, not both")
        if args.lo is None or args.hi is None:
            raise UserError("--lo and --hi go together (the value range; or --range LO HI)")
        args.range = [args.lo, args.hi]
    asked = [name for name, given in (("share", args.share), ("top-k", args.top_k is not None),
                                      ("percentile", args.percentile is not None), ("discovery", args.discover))
             if given]  # fmt: skip
    if not asked:
        asked = ["mean"] if args.range is not None else ["category"] if args.domain_size is not None else []
    if not asked:
        raise UserError("plan needs a question: --share (a yes/no share), --top-k K (the K most frequent values), "
                        "--domain-size D (each of D values), --range LO HI (a mean), --percentile P --range LO HI, "
                        "or --discover (free text)")
    if len(asked) > 1:
        raise UserError(f"plan answers one question at a time, got {' and '.join('--' + q.replace('discovery', 'discover') for q in asked)}")
    question = asked[0]
    if question == "percentile" and args.range is None:
        raise UserError("--percentile P needs --range LO HI (the values' range; the histogram's lo and hi)")
    if args.range is not None and question not in NUMBER_QUESTIONS:
        raise UserError(f"--range describes a number: it does not go with --{question.replace('discovery', 'discover')}")
    if args.range is None and (args.mean_guess is not None or args.pilot is not None):
        raise UserError("--mean-guess and --pilot describe a numeric metric's values: use them with --range LO HI")
    if question == "discovery":
        if args.min_share is None:
            raise UserError("--discover needs --min-share X: the smallest share a value must hold to be found (e.g. 1%)")
    elif args.error is None and args.error_count is None:
        raise UserError("plan needs a target: --error E (e.g. 1pp for ±1 percentage point) or --error-count C")
    return question


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    for note in args.deprecated:
        err.write(f"ldptel plan: note: {note}\n")
    question = _question(args)
    numeric = {"mean": _run_mean, "percentile": _run_percentile, "discovery": _run_discovery}.get(question)
    if numeric is not None:
        return numeric(args, out)
    result, answer = frequency_question(
        question=question, reports_per_day=args.reports_per_day, reports=args.reports, error=args.error,
        error_count=args.error_count, confidence=args.confidence, domain_size=args.domain_size, top_k=args.top_k,
        top_share=args.top_share, epsilon=_flat(args.epsilon, DEFAULT_EPSILONS), k=_flat(args.k, DEFAULT_K),
        m=_flat(args.m, DEFAULT_M), shards=args.shards,
    )  # fmt: skip
    rows = _limit(result.rows, args)
    if args.format == "json":
        write_json(versioned("plan", {"answer": answer.to_dict(), **result.to_dict(),
                    "rows": [row.to_dict() for row in rows]}), out)
    elif args.format == "csv":
        writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else repr(v) if isinstance(v, float) else v) for k, v in row.to_dict().items()})
    else:
        write_answer(answer, out)
        write_table(result, rows, out)
        _more(len(result.rows) - len(rows), out)
    return EXIT_OK


def _limit(rows: tuple[Any, ...], args: argparse.Namespace) -> tuple[Any, ...]:
    """--rows N (0: all); the table shows 10 by default, json and csv every row."""
    limit = args.rows if args.rows is not None else (DEFAULT_TABLE_ROWS if args.format == "table" else 0)
    if limit < 0:
        raise UserError(f"--rows must be 0 (all) or a positive number, got {limit}")
    return rows[:limit] if limit else rows


def _more(hidden: int, out: TextIO) -> None:
    if hidden > 0:
        out.write(f"({hidden} more rows: --rows 0 prints them all)\n")


def write_answer(answer: Answer, out: TextIO) -> None:
    """The recommendation line first, then the alternative, the assumptions and the warnings."""
    out.write(answer.line + "\n")
    if answer.alternative:
        out.write(answer.alternative + "\n")
    out.write(f"  create it with: {_create_flags(answer.params)}\n")
    for text in answer.assumptions:
        out.write(f"  assuming: {text}\n")
    for text in answer.warnings:
        out.write(f"warning: {text}\n")
    out.write("\n")


def _create_flags(params: dict[str, Any]) -> str:
    """``ldptel metrics create NAME`` with the params as flags (flag = TOML key with '-' for '_')."""
    parts = ["ldptel metrics create NAME"]
    if "lo" in params and "hi" in params:
        params = {**{k: v for k, v in params.items() if k not in ("lo", "hi")}, "range": f"{params['lo']:g} {params['hi']:g}"}
    for key, value in params.items():
        if key == "domain":
            parts.append(f"--domain-file FILE  # {value}")
            continue
        parts.append(f"--{key.replace('_', '-')} {value:g}" if isinstance(value, float) else f"--{key.replace('_', '-')} {value}")
    return " ".join(parts)


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def write_table(result: Plan, rows: tuple[PlanRow, ...], out: TextIO) -> None:
    """The plan's description, then one aligned line per row."""
    out.write(f"plan: {result.describe()}\n")
    per_day = result.request.reports_per_day is not None
    headers = ["mechanism", "ε", "eff. ε", "k×m", "± top", "± rare", "± floor", "bits/report",
               "memory/shard-day", "reports needed", "days" if per_day else "meets", ]
    cells = []
    for row in rows:
        needed = "never" if row.reports_needed is None else f"{row.reports_needed:,}"
        last = ("never" if row.days_needed is None else str(row.days_needed)) if per_day else ("yes" if row.meets_target else "no")
        cells.append([
            row.mechanism + (" *" if row.recommended else ""), f"{row.epsilon:g}", f"{row.effective_epsilon:.3f}",
            row.shape, f"{row.heavy_error:.5f}", f"{row.rare_error:.5f}", f"{row.floor:.5f}", str(row.bits_per_report),
            _bytes(row.memory_per_shard_day), needed, last,
        ])  # fmt: skip
    table(headers, cells, out)
    by_name: dict[str, list[str]] = {}
    for eps, name in result.recommended.items():
        by_name.setdefault(name, []).append(f"{eps:g}")
    picks = "; ".join(f"{name} at ε = {', '.join(eps)}" for name, eps in by_name.items())
    permanent = sorted({name for name in {row.mechanism for row in rows} if isinstance(get_mechanism(name), Permanent)})
    note = "" if not permanent else (  # issue 22 §1: say what the lifetime ε∞ covers and what it does not
        f" {', '.join(permanent)}: a permanent randomized response protects a value's level for life (ε∞), not the "
        "times it changes: each report costs the fresh noise's ε given the others, more than its own ε, and the "
        "daily budget charges that (docs/longitudinal.md)")
    out.write(f"* recommended for d = {result.model.d:,} (recommend_mechanism): {picks}. "
              f"± floor: a sketch's ± as reports → ∞ (collisions).{note}\n")


MEAN_COLUMNS = tuple(MeanPlanRow.__dataclass_fields__)


def _typical(args: argparse.Namespace) -> tuple[np.ndarray | None, str | None]:
    """The typical values asked for (``--mean-guess`` or ``--pilot``) and how to name them."""
    if args.mean_guess is not None:
        return np.array([args.mean_guess]), f"every value at the guessed mean {args.mean_guess:g}"
    if args.pilot is None:
        return None, None
    try:
        with open(args.pilot, encoding="utf-8") as fh:
            lines = [line.strip() for line in fh if line.strip() and not line.lstrip().startswith("#")]
    except OSError as exc:
        raise UserError(f"--pilot {args.pilot}: cannot read it ({exc.strerror or exc})") from None
    try:
        values = np.array([float(line) for line in lines])
    except ValueError:
        bad = next(line for line in lines if not _is_number(line))
        raise UserError(f"--pilot {args.pilot}: every line must be one number, got {bad[:40]!r}") from None
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise UserError(f"--pilot {args.pilot}: needs at least one finite number (one per line)")
    return values, f"the {values.size:,} pilot values of {args.pilot}"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _run_mean(args: argparse.Namespace, out: TextIO) -> int:
    """``--range``: the mean's worst-case ± at the reports given, and the reports for ``--error`` × (HI − LO)."""
    lo, hi = args.range
    n = args.reports or args.reports_per_day
    target = None if args.error is None else args.error * (hi - lo)
    if args.error_count is not None:
        raise UserError("--range plans a mean: give --error as a share of HI - LO, not --error-count")
    typical, described = _typical(args)
    assert target is not None  # _question requires --error
    rows, answer = mean_question(lo=lo, hi=hi, error=target, reports_per_day=args.reports_per_day, reports=args.reports,
                                 confidence=args.confidence, epsilon=_flat(args.epsilon, DEFAULT_EPSILONS), typical=typical)
    if args.format == "json":
        write_json(versioned("plan", {"answer": answer.to_dict(), "lo": lo, "hi": hi, "n": n,
                    "error": target, "typical": described, "rows": [r.to_dict() for r in _limit(rows, args)]}), out)
    elif args.format == "csv":
        writer = csv.DictWriter(out, fieldnames=MEAN_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if v is None else repr(v) if isinstance(v, float) else v) for k, v in r.to_dict().items()})
    else:
        write_answer(answer, out)
        out.write(f"plan: mean of a value clipped to [{lo:g}, {hi:g}], n = {n:,} reports, {args.confidence:.0%} intervals"
                  + ("" if target is None else f", target ± {target:g}") + "\n")
        headers = ["mechanism", "shape", "ε", "effective ε", "bits/report", "worst Var_t", "± mean", "± sum", "reports for target"]
        if typical is not None:
            headers += ["typical Var_t", "± mean (typical)", "reports (typical)"]
        cells = []
        for r in _limit(rows, args):
            row = [("* " if r.chosen else "") + r.mechanism, r.shape, f"{r.epsilon:g}", f"{r.effective_epsilon:.4f}",
                   str(r.bits_per_report), f"{r.worst_var_t:.4f}", f"{r.mean_error:.4g}", f"{n * r.mean_error:.4g}",
                   "-" if r.reports_needed is None else f"{r.reports_needed:,}"]
            if typical is not None:
                row += [f"{r.typical_var_t:.4f}", f"{r.typical_mean_error:.4g}",
                        "-" if r.typical_reports_needed is None else f"{r.typical_reports_needed:,}"]
            cells.append(row)
        table(headers, cells, out, left=(0, 1))
        basis = (f"the smaller variance for {described}" if typical is not None
                 else "the smaller worst case (what --variant auto picks; give --mean-guess or --pilot to choose by your data)")
        out.write(f"* the mean variant to create at each ε: {basis}; create it with --variant onebit|dhm\n")
        for r in rows:  # a permanent randomized response protects the level, not the change times: say so
            mech = get_mechanism(r.mechanism)
            if "lo" in mech.params_schema()[1]:
                make: Any = mech.params_type  # a numeric mechanism's params: epsilon, lo, hi
                params = make(epsilon=r.epsilon, lo=lo, hi=hi)
                if mech.permanent_channel(params) is not None:
                    out.write(f"{r.mechanism} at ε {r.epsilon:g}: {longitudinal_note(params)}\n")
    return EXIT_OK


def _run_percentile(args: argparse.Namespace, out: TextIO) -> int:
    """``--percentile P --range LO HI``: the rank ± of P from a bucketed histogram (percentile points)."""
    lo, hi = args.range
    if args.error is None:
        raise UserError("--percentile plans a rank: give --error in percentile points (e.g. 1pp), not --error-count")
    rows, answer = percentile_question(
        lo=lo, hi=hi, percentile=args.percentile, error=args.error, reports_per_day=args.reports_per_day,
        reports=args.reports, confidence=args.confidence, buckets=args.buckets or DEFAULT_BUCKETS,
        epsilon=_flat(args.epsilon, DEFAULT_EPSILONS),
    )  # fmt: skip
    shown = _limit(rows, args)
    if args.format == "json":
        write_json(versioned("plan", {"answer": answer.to_dict(), "rows": [r.to_dict() for r in shown]}), out)
    elif args.format == "csv":
        _csv(shown, out)
    else:
        write_answer(answer, out)
        out.write(f"plan: p{args.percentile:g} of a value over [{lo:g}, {hi:g}], {len(rows and rows[0:1]) and rows[0].buckets} "
                  f"buckets, {answer.reports_per_day or answer.reports:,} reports{'/day' if answer.reports_per_day else ''}, "
                  f"{args.confidence:.0%} intervals\n")
        cells = [[r.mechanism, f"{r.epsilon:g}", f"{r.effective_epsilon:.3f}", r.encoding, f"{r.rank_error * 100:.3g}",
                  f"{r.reports_needed:,}"] for r in shown]
        table(["mechanism", "ε", "eff. ε", "encoding", "± rank (percentile points)", "reports for target"], cells, out, left=(0, 3))
        _more(len(rows) - len(shown), out)
    return EXIT_OK


def _run_discovery(args: argparse.Namespace, out: TextIO) -> int:
    """``--discover --min-share X``: the smallest share found at each ε and k × m, and the reports for X."""
    rows, answer = discovery_question(
        min_share=args.min_share, reports_per_day=args.reports_per_day, reports=args.reports,
        max_bytes=args.max_bytes or DEFAULT_MAX_BYTES, epsilon=_flat(args.epsilon, DEFAULT_EPSILONS),
        k=_flat(args.k, (256, 1024)), m=_flat(args.m, (256, 1024)),
    )  # fmt: skip
    ordered = sorted(rows, key=lambda r: (r.reports_needed is None, r.reports_needed or 0, r.epsilon))
    shown = _limit(tuple(ordered), args)
    if args.format == "json":
        write_json(versioned("plan", {"answer": answer.to_dict(), "rows": [r.to_dict() for r in shown]}), out)
    elif args.format == "csv":
        _csv(shown, out)
    else:
        write_answer(answer, out)
        n = answer.reports_per_day or answer.reports or 0
        out.write(f"plan: discovery of values up to {args.max_bytes or DEFAULT_MAX_BYTES} bytes, {n:,} "
                  f"reports{'/day' if answer.reports_per_day else ''}, target: values holding ≥ {args.min_share:.3%}\n")
        cells = [[r.mechanism, f"{r.epsilon:g}", f"{r.effective_epsilon:.3f}", f"{r.k}×{r.m}", f"{r.min_share:.3%}",
                  "never" if r.reports_needed is None else f"{r.reports_needed:,}"] for r in shown]
        table(["mechanism", "ε", "eff. ε", "k×m", "smallest share found", "reports for target"], cells, out, left=(0,))
        _more(len(rows) - len(shown), out)
    return EXIT_OK


def _csv(rows: tuple[Any, ...], out: TextIO) -> None:
    if not rows:
        return
    writer = csv.DictWriter(out, fieldnames=list(rows[0].to_dict()), lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None else repr(v) if isinstance(v, float) else v) for k, v in r.to_dict().items()})
