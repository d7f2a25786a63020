"""``ldptel plan``: which mechanism, ε, k and m meet an error target, with the reports and days they need
(:func:`~ldptel.aggregator.plan.plan`), printed as table, json or csv. Needs numpy only: no Redis."""

from __future__ import annotations

import argparse
import csv
from typing import Any, TextIO

import numpy as np

from ldptel.aggregator.cli.common import EXIT_OK, UserError, confidence, positive_int
from ldptel.aggregator.cli.output import table, write_json
from ldptel.aggregator.plan import (
    DEFAULT_EPSILONS,
    DEFAULT_K,
    DEFAULT_M,
    MeanPlanRow,
    Plan,
    PlanRow,
    epsilon_range,
    plan,
    plan_mean,
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
Plan a metric: for every mechanism that fits the domain, each ε and (sketches) each k × m, the expected
± (half-width of the confidence interval of a frequency) for the top value and for the rarest value, bits
per report, sketch memory per shard and day, and the reports and days needed for --error.

Model. Without --top-share the domain's values are equally frequent (the fewest hash collisions possible).
With --top-share x the counts are Zipf-shaped, f(i) ∝ i^-s for the values ranked i = 1..d, with s solved so
that the top value holds x of the reports. Variance of an estimated count = the mechanism's randomization
variance + for sketches the hash-collision term (F2 − f²)/(k(m − 1)), F2 = Σ f(d)² from the model: a fixed
hash family turns it into a per-value bias that more reports never remove, so a sketch's ± has a floor and a
target below it is unreachable ("never"). ± = z·√Var / n.

Ranking: rows meeting the target with one day's reports first, then fewer days, lower ε, less memory,
fewer bits. '*' marks the mechanism recommended for (ε, d): grr when d < 3e^ε + 2, else oue-cms."""

EPILOG = """\
examples:
  ldptel plan --reports-per-day 1000000 --domain-size 10000 --top-share 15% --error 0.001 --epsilon 4
  ldptel plan --reports-per-day 50000 --domain-size 32 --error 1% --epsilon 1:8 --format json"""


def share(text: str) -> float:
    """A fraction in (0, 1), or a percentage ``15%``."""
    raw = text.strip()
    scale = 100.0 if raw.endswith("%") else 1.0
    try:
        value = float(raw.removesuffix("%")) / scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction like 0.15 or a percentage like 15%, got {text!r}") from None
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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, help="choose the mechanism, ε, k and m for an error target (no Redis)",
                       description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    volume = p.add_mutually_exclusive_group(required=True)
    volume.add_argument("--reports-per-day", type=positive_int, metavar="N", help="expected reports per day")
    volume.add_argument("--reports", type=positive_int, metavar="N", help="or: the total reports of a one-off collection")
    p.add_argument("--domain-size", type=positive_int, metavar="D", help="number of distinct values (categorical metrics)")
    p.add_argument("--range", type=float, nargs=2, metavar=("LO", "HI"),
                   help="numeric metrics instead: the declared value range; --error is then a share of HI - LO")
    typical = p.add_mutually_exclusive_group()
    typical.add_argument("--mean-guess", type=float, metavar="X",
                         help="--range: a guess of the mean; adds each mean variant's variance if every value were X "
                              "and picks the variant by it")
    typical.add_argument("--pilot", metavar="FILE",
                         help="--range: a file of typical values (one number per line, e.g. a pilot sample); adds each "
                              "mean variant's variance averaged over them and picks the variant by it")
    p.add_argument("--top-share", type=share, metavar="X",
                   help="share of reports the top value holds (0.15 or 15%%): Zipf model; default uniform")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--error", type=share, metavar="E", help="target ± of a frequency (0.01 or 1%%)")
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
    p.add_argument("--top", type=positive_int, metavar="N", help="print only the N best rows")
    p.add_argument("--format", choices=PLAN_FORMATS, default="table")
    p.set_defaults(func=run)


def _flat(groups: list[Any] | None, default: tuple[Any, ...]) -> tuple[Any, ...]:
    return default if not groups else tuple(v for group in groups for v in group)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.range is not None:
        return _run_mean(args, out)
    if args.mean_guess is not None or args.pilot is not None:
        raise UserError("--mean-guess and --pilot describe a numeric metric's values: use them with --range LO HI")
    if args.domain_size is None:
        raise UserError("plan needs --domain-size D (categorical metrics) or --range LO HI (numeric metrics)")
    result = plan(
        domain_size=args.domain_size,
        reports_per_day=args.reports_per_day,
        reports=args.reports,
        top_share=args.top_share,
        error=args.error,
        error_count=args.error_count,
        confidence=args.confidence,
        epsilon=_flat(args.epsilon, DEFAULT_EPSILONS),
        k=_flat(args.k, DEFAULT_K),
        m=_flat(args.m, DEFAULT_M),
        shards=args.shards,
    )
    rows = result.rows[: args.top] if args.top else result.rows
    if args.format == "json":
        write_json({**result.to_dict(), "rows": [row.to_dict() for row in rows]}, out)
    elif args.format == "csv":
        writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else repr(v) if isinstance(v, float) else v) for k, v in row.to_dict().items()})
    else:
        write_table(result, rows, out)
    return EXIT_OK


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
    rows = plan_mean(lo=lo, hi=hi, n=n, epsilons=_flat(args.epsilon, DEFAULT_EPSILONS), error=target,
                     confidence=args.confidence, typical=typical)
    if args.format == "json":
        write_json({"lo": lo, "hi": hi, "n": n, "error": target, "typical": described,
                    "rows": [r.to_dict() for r in rows]}, out)
    elif args.format == "csv":
        writer = csv.DictWriter(out, fieldnames=MEAN_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if v is None else repr(v) if isinstance(v, float) else v) for k, v in r.to_dict().items()})
    else:
        out.write(f"plan: mean of a value clipped to [{lo:g}, {hi:g}], n = {n:,} reports, {args.confidence:.0%} intervals"
                  + ("" if target is None else f", target ± {target:g}") + "\n")
        headers = ["mechanism", "shape", "ε", "effective ε", "bits/report", "worst Var_t", "± mean", "± sum", "reports for target"]
        if typical is not None:
            headers += ["typical Var_t", "± mean (typical)", "reports (typical)"]
        cells = []
        for r in rows:
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
