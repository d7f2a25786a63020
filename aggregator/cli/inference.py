"""``ldptel test METRIC``: hypothesis tests whose null includes the privacy mechanism
(:mod:`~ldptel.aggregator.inference`), printed as a table or JSON.

A subcommand of its own rather than ``estimate --test``: a test has inputs an estimate does not (the null value,
a second group, the alternative, the stated effect, the correction) and prints a different shape (statistic,
p-value, effect, power), so half of either command's flags would not apply to the other.

* one-sample: ``--equals X`` / ``--above X`` / ``--below X`` (H₀: θ = X, θ ≤ X, θ ≥ X) for the share of each
  ``--value`` (rr: ``true`` by default; grr and numeric histograms: a label; sketches: a candidate) or ``--mean``;
* two-sample: ``--vs-from/--vs-to/--vs-day`` (another day range) and/or ``--vs-version`` (A is the main
  range and version, B the ``--vs`` one); ``--alternative`` greater/less for A above/below B;
* ``--chi2``: goodness of fit to ``--expect label=share,...`` (or ``uniform``), or with a ``--vs`` group the
  independence of the label and the group (categorical metrics: rr, grr, numeric histograms).
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any, TextIO

from ldptel.aggregator.cli.common import EXIT_OK, UserError, confidence, connected, day, positive_int
from ldptel.aggregator.json_api import versioned

NAME = "test"
EXTRA = "aggregator"
NEEDS = ("redis", "scipy")
UNCERTAINTY_HELP = (
    "population (default): the privacy noise plus the sampling of the reporting devices from the fleet, as a "
    "random sample of it (what holds in the fleet; a comparison of two date ranges compares different devices). "
    "randomization: the privacy noise only, given the devices that reported (what those devices hold; the "
    "meaning of ldptel estimate's stderr)"
)
EPILOG = (
    "Every test's null includes the mechanism: asymptotic tests use its exact variance at the null, Monte Carlo "
    "tests simulate it (privatize, fold, estimate; rr, grr and numeric histograms). Several --value tests are "
    "one family, corrected with --correction (default holm). " + UNCERTAINTY_HELP + "."
)


def _unit(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="hypothesis tests with the mechanism in the null",
                       description="Test a share, a frequency or a mean against a value, two groups against each "
                                   "other, or a categorical distribution (chi-square).", epilog=EPILOG)
    p.add_argument("metric", metavar="METRIC")
    p.add_argument("--version", type=positive_int, help="metric version of group A (default: current)")
    p.add_argument("--from", dest="day_from", type=day, metavar="DAY", help="group A: first UTC day")
    p.add_argument("--to", dest="day_to", type=day, metavar="DAY", help="group A: last UTC day")
    p.add_argument("--day", type=day, metavar="DAY", help="group A: one UTC day")
    p.add_argument("--value", action="append", metavar="LABEL",
                   help="the label or candidate whose share is tested (repeatable: one test each, corrected "
                        "together; rr default: true)")
    p.add_argument("--mean", action="store_true", help="test the mean (mean metrics; a numeric histogram's midpoint mean)")
    hyp = p.add_mutually_exclusive_group()
    hyp.add_argument("--equals", type=_number, metavar="X", help="one-sample H0: the quantity = X (two-sided)")
    hyp.add_argument("--above", type=_number, metavar="X", help="one-sample: is it above X? (H0: ≤ X)")
    hyp.add_argument("--below", type=_number, metavar="X", help="one-sample: is it below X? (H0: ≥ X)")
    p.add_argument("--vs-version", type=positive_int, metavar="V", help="group B: this version (two-sample)")
    p.add_argument("--vs-from", type=day, metavar="DAY", help="group B: first UTC day (two-sample)")
    p.add_argument("--vs-to", type=day, metavar="DAY", help="group B: last UTC day")
    p.add_argument("--vs-day", type=day, metavar="DAY", help="group B: one UTC day")
    p.add_argument("--alternative", choices=("two-sided", "greater", "less"), default="two-sided",
                   help="two-sample: greater = is A above B (H0: A ≤ B); less = below")
    p.add_argument("--chi2", action="store_true",
                   help="chi-square: goodness of fit to --expect, or with a --vs group the independence of label and group")
    p.add_argument("--expect", metavar="L=S,...|uniform", help="chi-square goodness of fit: the null shares")
    p.add_argument("--uncertainty", choices=("population", "randomization"), default="population", help=UNCERTAINTY_HELP)
    p.add_argument("--method", choices=("asymptotic", "monte-carlo"), default="asymptotic",
                   help="asymptotic (the mechanism's variance at the null) | monte-carlo (the null simulated through "
                        "the mechanism; rr, grr, numeric histograms; small n)")
    p.add_argument("--simulations", type=positive_int, default=999, metavar="R", help="Monte Carlo datasets (default 999)")
    p.add_argument("--seed", type=int, help="Monte Carlo seed (default: fresh randomness)")
    p.add_argument("--alpha", type=_unit, default=0.05, help="test level (default 0.05)")
    p.add_argument("--confidence", type=confidence, default=0.95, help="effect interval level (default 0.95)")
    p.add_argument("--effect", type=_number, metavar="D",
                   help="report the power against this effect (a difference in the quantity's units; chi-square: Cohen's w)")
    p.add_argument("--correction", choices=("holm", "bonferroni", "bh", "none"), default="holm",
                   help="multiple tests (several --value): holm (family-wise error, default) | bonferroni | bh (false "
                        "discovery rate) | none")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import numpy as np

    from ldptel.aggregator import inference as inf

    one_value = next((v for v in (args.equals, args.above, args.below) if v is not None), None)
    two = any(v is not None for v in (args.vs_version, args.vs_from, args.vs_to, args.vs_day))
    if args.chi2 and (one_value is not None or args.mean or args.value):
        raise UserError("--chi2 tests the whole distribution: drop --equals/--above/--below, --mean and --value")
    if not args.chi2 and (one_value is None) == (not two):
        raise UserError("give a one-sample hypothesis (--equals/--above/--below X) or a second group (--vs-from/--vs-to/"
                        "--vs-day/--vs-version), or --chi2")
    if args.chi2 and not two and args.expect is None:
        raise UserError("--chi2 without a --vs group is a goodness of fit: give --expect label=share,... or uniform")
    if args.mean and args.value:
        raise UserError("--mean and --value test different quantities: give one of them")
    rng = np.random.default_rng(args.seed)
    options: dict[str, Any] = {"uncertainty": args.uncertainty, "alpha": args.alpha, "confidence": args.confidence,
                               "effect": args.effect, "method": args.method, "simulations": args.simulations, "rng": rng}
    with connected(args.redis_url) as r:
        a = _group(r, args.metric, args.version, args.day_from, args.day_to, args.day, args.value)
        b = None
        if two:
            if args.vs_day is None and args.vs_from is None and args.vs_to is None:  # --vs-version: A's day range
                vs = (args.day_from, args.day_to, args.day)
            else:
                vs = (args.vs_from, args.vs_to, args.vs_day)
            b = _group(r, args.metric, args.vs_version or a[1], *vs, args.value)
            if b[1] == a[1] and set(a[2]) & set(b[2]):
                raise UserError("groups A and B share days of the same version (their reports overlap); give disjoint ranges")
    ga, gb = a[0], None if b is None else b[0]
    if args.chi2:
        if gb is not None:
            results = [inf.homogeneity([ga, gb], **options)]
        else:
            results = [inf.goodness_of_fit(ga, _expected(args.expect, ga.estimate.labels), **options)]
    else:
        quantities = _quantities(inf, ga, args)
        if gb is None:
            assert one_value is not None
            alternative: inf.Alternative = "greater" if args.above is not None else "less" if args.below is not None else "two-sided"
            results = [inf.one_sample(q, one_value, alternative=alternative, **options) for q in quantities]
        else:
            qb = _quantities(inf, gb, args)
            results = [inf.two_sample(x, y, alternative=args.alternative, **options) for x, y in zip(quantities, qb, strict=True)]
        results = inf.correct(results, args.correction)
    groups = [_group_dict(*a)] + ([] if b is None else [_group_dict(*b)])
    doc = {"metric": args.metric, "uncertainty": args.uncertainty,
           "uncertainty_meaning": inf.UNCERTAINTY_MEANING[args.uncertainty], "groups": groups,
           "tests": [t.to_dict() for t in results]}
    if args.format == "json":
        out.write(json.dumps(versioned("inference", doc), indent=2, allow_nan=True) + "\n")
    else:
        _table(doc, out)
    return EXIT_OK


def _group(r: Any, name: str, version: int | None, day_from: str | None, day_to: str | None, one_day: str | None,
           values: list[str] | None) -> tuple[Any, int, tuple[str, ...]]:
    from ldptel.aggregator.inference import Group
    from ldptel.aggregator.query import estimate_metric
    from ldptel.client.mechanisms import get_mechanism
    from ldptel.client.mechanisms.capabilities import candidate_role
    from ldptel.storage import registry

    if one_day:
        day_from = day_to = one_day
    record = registry.get_metric(r, name)
    version = record.current_version if version is None else version
    params = registry.spec_for(record, version).params
    required = candidate_role(get_mechanism(params.mechanism)) == "required"
    candidates = values if required else None
    if required and not values:
        raise UserError(f"{name} is a sketch metric: give the candidates to test with --value (repeatable)")
    res = estimate_metric(r, name, version=version, day_from=day_from, day_to=day_to, candidates=candidates,
                          postprocess="none")
    label = f"v{version} {res.days[0]}..{res.days[-1]}"
    return Group(label, params, res.estimate), version, res.days


def _group_dict(group: Any, version: int, days: tuple[str, ...]) -> dict[str, Any]:
    return {"name": group.name, "version": version, "days": [days[0], days[-1]], "n": group.n}


def _quantities(inf: Any, group: Any, args: argparse.Namespace) -> list[Any]:
    from ldptel.client.mechanisms import get_mechanism
    from ldptel.client.mechanisms.capabilities import proportion_label

    if args.mean:
        return [inf.mean_of(group)]
    values = args.value
    if not values:
        label = proportion_label(get_mechanism(group.params.mechanism))
        if label is None:
            raise UserError(f"give the label(s) to test with --value (one of {list(group.estimate.labels)[:10]}) or --mean")
        values = [label]
    return [inf.share_of(group, v) for v in values]


def _expected(text: str, labels: tuple[str, ...]) -> list[float]:
    if text.strip() == "uniform":
        return [1.0 / len(labels)] * len(labels)
    shares: dict[str, float] = {}
    for part in text.split(","):
        label, sep, share = part.rpartition("=")
        try:
            shares[label.strip()] = float(share)
        except ValueError:
            label = ""
        if not sep or not label.strip():
            raise UserError(f"--expect takes label=share pairs separated by commas (or uniform), got {part!r}")
    unknown = sorted(set(shares) - set(labels))
    missing = [x for x in labels if x not in shares]
    if unknown or missing:
        raise UserError(f"--expect must give a share for every label {list(labels)[:20]} and nothing else "
                        f"(unknown: {unknown[:5]}, missing: {missing[:5]})")
    total = sum(shares.values())
    if any(s <= 0 for s in shares.values()) or abs(total - 1.0) > 1e-6:
        raise UserError(f"--expect shares must be > 0 and sum to 1 (they sum to {total:g})")
    return [shares[x] / total for x in labels]


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _table(doc: dict[str, Any], out: TextIO) -> None:
    out.write(f"metric {doc['metric']}: " + "; ".join(
        f"{'AB'[i]} = {g['name']} (n={g['n']})" for i, g in enumerate(doc["groups"])) + "\n")
    out.write(f"uncertainty: {doc['uncertainty_meaning']}\n")
    tests = doc["tests"]
    out.write(f"method: {tests[0]['method']}\n")
    if tests[0]["p_adjusted"] is not None:
        out.write(f"correction: {tests[0]['correction']}\n")
    for t in tests:
        out.write("\n")
        out.write(f"{t['test']}: {t['hypothesis']}  (alternative: {t['alternative']})\n")
        stat = f"{t['statistic_name']} = {t['statistic']:.4g}" + (f", df = {t['df']}" if t["df"] is not None else "")
        p = f"p = {t['p_value']:.4g}" + (f", adjusted p = {t['p_adjusted']:.4g}" if t["p_adjusted"] is not None else "")
        out.write(f"  {stat}; {p}; {'reject' if t['reject'] else 'do not reject'} H0 at α = {t['alpha']:g}\n")
        e = t["effect"]
        ci = "" if e["ci_low"] is None else f" [{e['ci_low']:.4g}, {e['ci_high']:.4g}] ({e['confidence']:g} interval)"
        out.write(f"  effect: {e['name']} = {e['estimate']:.4g}{ci}\n")
        pw = t["power"]
        detect = next((v for k, v in pw.items() if k.startswith("detectable_effect_")), None)
        line = f"  power: {_fmt(pw['power'])} against an effect of {_fmt(pw['effect'])}" if pw["effect"] is not None \
            else "  power: give --effect D for the power against D"
        out.write(line + f"; 80%-power detectable effect: {_fmt(detect)}\n")
        for row in t.get("details", []):
            out.write(f"    {row['value']}: {row['what']} {row['difference']:.4g} "
                      f"[{row['ci_low']:.4g}, {row['ci_high']:.4g}] ({row['interval']})\n")
