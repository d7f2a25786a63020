"""Print the tables of the docs' "Choosing ε, k and m" page (docs/choosing-epsilon.md), from the planner (ldptel.aggregator.plan).

    .venv/bin/python tests/bench/accuracy_table.py

Every number comes from :func:`ldptel.aggregator.plan.plan`: the mechanisms' variance formulas at ldptel's
effective probabilities plus, for sketches, the hash-collision variance (F2 − f²)/(k(m − 1)) of the
described population. ``tests/aggregator/test_plan.py`` checks that the page holds exactly this output.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ldptel.aggregator.plan import Plan, PlanRow, plan, plan_mean
from ldptel.client.mechanisms import mechanism_names

N = 1_000_000
D = 10_000
TOP = 0.15


def _pick(result: Plan, keep: Callable[[PlanRow], bool]) -> list[PlanRow]:
    """The rows ``keep`` selects, in reading order: mechanisms as registered, then larger k × m, then ε."""
    order = mechanism_names()
    rows = [r for r in result.rows if keep(r)]
    return sorted(rows, key=lambda r: (order.index(r.mechanism), -(r.k or 0) * (r.m or 0), r.epsilon))


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.2f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} B"


def _needed(row: PlanRow) -> str:
    return "never" if row.reports_needed is None else f"{row.reports_needed:,}"


def _shape(row: PlanRow) -> str:
    return "–" if row.k is None else f"{row.k} × {row.m}"


def _table(headers: Iterable[str], lines: Iterable[Iterable[str]]) -> list[str]:
    heads = list(headers)
    out = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    out += ["| " + " | ".join(cells) + " |" for cells in lines]
    return out


def rare_table() -> list[str]:
    """Uniform domain of D values (few collisions); d = 2 for rr. The rare-value ± at N and reports for ±1%."""
    sketch = plan(domain_size=D, reports_per_day=N, error=0.01, epsilon=(1, 2, 4, 8), k=(256, 2048), m=(256, 1024))
    keep = _pick(sketch, lambda r: (r.k, r.m) == (2048, 1024) or ((r.k, r.m) == (256, 256) and r.epsilon == 4))
    # d = 2: the mechanism made for it (recommend_mechanism names grr for every d this small)
    binary = plan(domain_size=2, reports_per_day=N, error=0.01, epsilon=(1, 4), k=2048, m=1024)
    keep += _pick(binary, lambda r: r.k is None and r.bits_per_report == 1)
    headers = ("mechanism", "d", "k × m", "ε", "effective ε", "bits/report", "memory/shard-day",
               "± rare at n = 10⁶", "reports for ±1%")  # fmt: skip
    lines = []
    for row in keep:
        d = D if row.k is not None else 2
        lines.append([row.mechanism, f"{d:,}", _shape(row), f"{row.epsilon:g}", f"{row.effective_epsilon:.3f}",
                      str(row.bits_per_report), _mib(row.memory_per_shard_day), f"{row.rare_error:.5f}", _needed(row)])
    return _table(headers, lines)


def heavy_table() -> list[str]:
    """Zipf over D values whose top value holds TOP: ± for the top and the rarest value, floor, reports for ±0.1%."""
    zipf = plan(domain_size=D, top_share=TOP, reports_per_day=N, error=0.001, epsilon=(4, 8), k=(256, 2048), m=(256, 1024))
    uniform = plan(domain_size=D, reports_per_day=N, error=0.001, epsilon=(4, 8), k=(256, 2048), m=(256, 1024))
    same = {(r.mechanism, r.epsilon, r.k, r.m): r for r in uniform.rows}

    def shown(r: PlanRow) -> bool:
        return (r.k, r.m) in (((2048, 1024), (256, 1024), (256, 256)) if r.epsilon == 4 else ((2048, 1024), (256, 256)))

    headers = ("mechanism", "k × m", "ε", "± top value", "± rare value", "± floor", "reports for ±0.1%",
               "uniform domain: ± rare, reports for ±0.1%")  # fmt: skip
    lines = []
    for row in _pick(zipf, shown):
        flat = same[(row.mechanism, row.epsilon, row.k, row.m)]
        lines.append([row.mechanism, _shape(row), f"{row.epsilon:g}", f"{row.heavy_error:.5f}", f"{row.rare_error:.5f}",
                      f"{row.floor:.5f}", _needed(row), f"{flat.rare_error:.5f}, {_needed(flat)}"])
    model = zipf.model
    caption = (f"**A heavy value.** The same {D:,} values, Zipf-shaped so that the top one holds {TOP:.0%} of the "
               f"reports (f(i) ∝ i^−{model.exponent:.3f}, F2 = {model.f2_share:.4f}·n²), n = 10⁶:")
    return [caption, "", *_table(headers, lines)]


def small_domain_table() -> list[str]:
    """d = 32 at ε = 1 and 4: grr against the sketches, and what recommend_mechanism picks."""
    result = plan(domain_size=32, reports_per_day=N, error=0.01, epsilon=(1, 4), k=2048, m=1024)
    headers = ("mechanism", "ε", "recommended", "bits/report", "memory/shard-day", "± any value at n = 10⁶", "reports for ±1%")
    lines = [[row.mechanism, f"{row.epsilon:g}", "yes" if row.recommended else "", str(row.bits_per_report),
              _mib(row.memory_per_shard_day), f"{max(row.heavy_error, row.rare_error):.5f}", _needed(row)]
             for row in _pick(result, lambda r: True)]  # fmt: skip
    caption = "**A small domain** (d = 32 values, uniform, 2048 × 1024 for the sketches), n = 10⁶:"
    return [caption, "", *_table(headers, lines)]


def mean_table() -> list[str]:
    """A number clipped to [0, 600] (seconds), n = 10⁵: the mean's worst-case ± and the reports for ±1 s."""
    rows = plan_mean(lo=0, hi=600, n=100_000, epsilons=(1, 2, 4, 8), error=1.0)
    headers = ("mechanism", "params", "ε", "effective ε", "bits/report", "worst Var_t", "± mean (s)", "± sum (s)",
               "reports for ±1 s")
    lines = [[r.mechanism, r.shape, f"{r.epsilon:g}", f"{r.effective_epsilon:.3f}", f"{r.bits_per_report:g}", f"{r.worst_var_t:.4f}",
              f"{r.mean_error:.2f}", f"{100_000 * r.mean_error:,.0f}", _needed_mean(r.reports_needed)] for r in rows]
    caption = ("**A bounded mean** (a value clipped to [0, 600] s, n = 10⁵ reports; ± is the worst case over where "
               "the mean lies; the sum's ± is n times the mean's):")
    return [caption, "", *_table(headers, lines)]


def _needed_mean(n: int | None) -> str:
    return "–" if n is None else f"{n:,}"


def markdown() -> str:
    caption = f"**A rare value.** {D:,} equally frequent values (d = 2 for the one-bit mechanism), n = 10⁶ reports:"
    parts = [caption, "", *rare_table(), "", *heavy_table(), "", *small_domain_table(), "", *mean_table()]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
