"""``ldptel plan`` answers the question asked (issue 31 §2): one test per question type (boolean share, category
top-k, mean, percentile, discovery), the top-k tail warning, the default domain size with its reason, the
renamed flags and the versioned JSON. Deterministic arithmetic only: tolerances are floating-point ones."""

from __future__ import annotations

import io
import json
import math
from statistics import NormalDist

import pytest

from ldptel.aggregator.cli import main
from ldptel.aggregator.plan import zipf_power_sum
from ldptel.aggregator.plan_answer import (
    ANSWER_KEYS,
    SCHEMA_VERSION,
    discovery_question,
    frequency_question,
    mean_question,
    percentile_question,
    smallest_found,
    values_tested,
)
from ldptel.client.mechanisms import get_mechanism
from ldptel.client.protocol.specs import params_from_dict

Z95 = NormalDist().inv_cdf(0.975)


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["plan", *argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_boolean_share_in_percentage_points_with_the_odds_bound() -> None:
    """50,000 devices a day, a yes/no share within ±1 pp: randomized response at ε = 1 meets it in a day; its ±
    at a 50% share is Warner's z·√(p(1−p)/n)/(2p − 1)-style closed form (here through the mechanism's p)."""
    code, out, err = _cli("--daily-users", "50000", "--share", "--error", "1pp")
    assert (code, err) == (0, "")
    first = out.splitlines()[0]
    assert first.startswith("Recommendation: rr at ε = 1 ") and "e^1 ≈ 2.72×" in first and "with one day of data" in first
    _, answer = frequency_question(question="share", reports_per_day=50_000, reports=None, error=0.01)
    p = 1 / (1 + math.exp(-1.0))  # rr's keep probability at ε = 1 (exact at 1 bit of randomness? checked below)
    params = params_from_dict({"mechanism": "rr", "epsilon": 1.0})
    assert params.effective_epsilon == pytest.approx(1.0, abs=1e-3)
    var = (0.5 * p * (1 - p) * 2) / (2 * p - 1) ** 2  # per report, share 1/2: (p(1−p))/(2p−1)² for either value
    assert answer.error_one_day == pytest.approx(100 * Z95 * math.sqrt(var / 50_000), rel=2e-3)
    assert answer.unit == "pp" and answer.days == 1 and answer.odds_bound == pytest.approx(math.e, rel=2e-3)
    assert answer.params == {"mechanism": "rr", "epsilon": 1.0}
    # the central ε a day's reports would have in one shuffled block: h28a's bound, quoted in the line
    from ldptel.aggregator.amplification import central_for_n
    from ldptel.client import MetricSpec

    central = central_for_n(MetricSpec(name="x", params=params), 50_000)
    assert central.applicable and answer.central_epsilon == central.epsilon < 1 and answer.central_delta == central.delta
    assert f"central ε ≈ {central.epsilon:.3g} at δ = {central.delta:.0e}" in first


def test_top_k_defaults_the_domain_with_a_reason_and_warns_that_the_tail_is_not_resolved() -> None:
    """The issue's question: 50,000 daily users, top 20 emoji within ±1 pp. No --domain-size demanded; the 20th
    value of a Zipf(1) over 1,000 values holds 1/(20·H(1, 1000)) ≈ 0.67 %, the 21st 1/(21·H) — ±1 pp cannot
    rank it, and the warning says so with the ± that could (half the gap)."""
    code, out, err = _cli("--daily-users", "50000", "--top-k", "20", "--error", "1pp")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("Recommendation: ") and "top 20" in lines[0] and "pp" in lines[0]
    assert any(line.startswith("  assuming: assumed 1,000 distinct values (pass --domain-size D") for line in lines)
    warning = next(line for line in lines if line.startswith("warning: "))
    h = zipf_power_sum(a=1.0, d=1000)
    p20, p21 = 1 / (20 * h), 1 / (21 * h)
    assert f"20th value holds about {100 * p20:.2g} pp" in warning and f"21st {100 * p21:.2g} pp" in warning
    assert "cannot rank the tail" in warning and f"Ranking it needs ±{100 * (p20 - p21) / 2:.2g} pp" in warning
    _, answer = frequency_question(question="top-k", top_k=20, reports_per_day=50_000, reports=None, error=0.01)
    assert answer.extra["kth_share"] == pytest.approx(p20) and answer.extra["next_share"] == pytest.approx(p21)
    # ± of every top-20 share ≤ the target, and the largest rank it orders: gaps p1/(i(i+1)) above 2·±
    ranked = answer.extra["ranked_reliably"]
    gap = lambda i: (1 / i - 1 / (i + 1)) / h  # noqa: E731
    assert answer.error is not None and gap(ranked) / 2 > answer.error / 100 >= gap(ranked + 1) / 2
    # a coarse top 3 at ±0.2 pp needs no warning: the 3rd and 4th are 1/12 H apart
    _, easy = frequency_question(question="top-k", top_k=3, reports_per_day=50_000, reports=None, error=0.002)
    assert easy.warnings == () and easy.reachable


def test_category_needs_its_domain_and_recommends_grr_for_a_small_one() -> None:
    code, out, err = _cli("--daily-users", "50000", "--domain-size", "32", "--error", "1%", "--epsilon", "4")
    assert (code, err) == (0, "") and out.startswith("Recommendation: grr at ε = 4 ")
    assert "--domain-file FILE" in out
    code, _, err = _cli("--daily-users", "50000", "--error", "1pp")
    assert code == 2 and "plan needs a question: --share" in err and "--top-k K" in err


def test_mean_answer_in_value_units_and_days() -> None:
    """The chosen variant's worst-case ± is z·√(Var/n); when one day is short, the days are ⌈needed / per day⌉."""
    rows, answer = mean_question(lo=0, hi=600, error=1.0, reports_per_day=50_000, reports=None, epsilon=(4,))
    chosen = next(r for r in rows if r.chosen)
    assert answer.error_one_day == pytest.approx(chosen.mean_error)
    assert chosen.reports_needed is not None and answer.days == math.ceil(chosen.reports_needed / 50_000) > 1
    assert answer.error is not None and answer.error <= 1.0 and answer.unit == "value"
    assert answer.params == {"mechanism": "mean", "epsilon": 4, "lo": 0, "hi": 600, "variant": "dhm"}
    code, out, err = _cli("--daily-users", "50000", "--range", "0", "600", "--error", "1%")
    assert (code, err) == (0, "")
    assert out.startswith("Recommendation: mean (dhm) at ε = 1 ") and "of the range [0, 600]" in out
    assert "--range 0 600" in out.splitlines()[1]
    # one vocabulary with the TOML keys and metrics create: --lo/--hi are --range
    assert _cli("--daily-users", "50000", "--lo", "0", "--hi", "600", "--error", "1%")[1] == out
    code, _, err = _cli("--daily-users", "50000", "--lo", "0", "--error", "1%")
    assert code == 2 and "--lo and --hi go together" in err


def test_percentile_rank_error_is_the_prefix_variance() -> None:
    """p95 over 32 buckets: J = 30 buckets lie below it; for grr the prefix count's variance is
    (f·p1(1 − p1) + (n − f)·p0(1 − p0))/(p − q)² with p1 = p + (J − 1)q, p0 = J·q, f = n·J/d."""
    n, d, j = 50_000, 32, 30
    rows, answer = percentile_question(lo=0, hi=600, percentile=95, error=0.01, reports_per_day=n, reports=None,
                                       buckets=d, epsilon=(8,))
    row = rows[0]
    params = params_from_dict({"mechanism": "num-histogram", "epsilon": 8.0, "edges": [600 * i / d for i in range(d + 1)]})
    assert params.encoding == "grr"
    inner = params.inner if hasattr(params, "inner") else None
    p, q = (inner.p, inner.q) if inner is not None else (params.p, params.q)
    p1, p0, f = p + (j - 1) * q, j * q, n * j / d
    var = (f * p1 * (1 - p1) + (n - f) * p0 * (1 - p0)) / (p - q) ** 2
    assert row.rank_error == pytest.approx(Z95 * math.sqrt(var) / n, rel=1e-9)
    assert row.reports_needed == math.ceil(n * (row.rank_error / 0.01) ** 2)
    assert answer.unit == "percentile points" and answer.days == 1 and "bucket 18.75 wide" in answer.warnings[0]
    code, out, err = _cli("--daily-users", "50000", "--percentile", "95", "--range", "0", "600", "--error", "1pp")
    assert (code, err) == (0, "") and out.startswith("Recommendation: num-histogram over 32 buckets") and "p95 within ±" in out
    code, _, err = _cli("--daily-users", "50000", "--percentile", "95", "--error", "1pp")
    assert code == 2 and "--percentile P needs --range LO HI" in err


def test_discovery_smallest_share_solves_the_threshold_equation() -> None:
    """A value is found when its estimate clears z_C·sd with z_C = Φ⁻¹(1 − α/C), C the values a run can test
    (s_0 = 1, s_t = min(keep, 255·s_{t−1}), C = Σ_{t≥1} s_t + 255·s_{L−1}); at the 90% power share s,
    s·n = (z_C + z_0.9)·√Var(s·n)."""
    assert values_tested(2, keep=50) == 50 + 255 * 50 and values_tested(1, keep=50) == 255
    mech = get_mechanism("pem")
    params = params_from_dict({"mechanism": "pem", "epsilon": 4.0, "k": 256, "m": 1024, "max_bytes": 16})
    n = 200_000
    s = smallest_found(mech, params, n)
    zc = NormalDist().inv_cdf(1 - 0.05 / values_tested(16)) + NormalDist().inv_cdf(0.9)
    var = float(mech.variance(params, [s * n], n)[0])  # type: ignore[arg-type]
    assert s * n == pytest.approx(zc * math.sqrt(var), rel=1e-6)
    rows, answer = discovery_question(min_share=0.05, reports_per_day=50_000, reports=None, epsilon=(4,))
    assert answer.reachable and answer.days is not None
    best = next(r for r in rows if (r.k, r.m) == (answer.params["k"], answer.params["m"]))
    assert best.reports_needed is not None and smallest_found(mech, params_from_dict(answer.params), best.reports_needed) <= 0.05
    code, out, err = _cli("--daily-users", "50000", "--discover", "--min-share", "5%", "--epsilon", "4")
    assert (code, err) == (0, "") and out.startswith("Recommendation: pem ") and "held by ≥ 5 pp" in out
    assert _cli("--daily-users", "50000", "--discover", "--error", "1pp")[0] == 2


def test_top_is_a_deprecated_alias_of_rows() -> None:
    base = ("--daily-users", "50000", "--domain-size", "1000", "--error", "1pp", "--epsilon", "4")
    code, out, err = _cli(*base, "--top", "3")
    assert code == 0 and err.startswith("ldptel plan: note: --top N is deprecated") and "--rows N" in err
    assert out == _cli(*base, "--rows", "3")[1]
    table = out.split("\n\n", 1)[1].splitlines()
    assert len(table) == 3 + 3 + 2  # description, header, rule, 3 rows, the * note, "(N more rows ...)"
    assert table[-1].startswith("(") and "--rows 0" in table[-1]


@pytest.mark.parametrize(
    "argv",
    [
        ["--share", "--error", "1pp"],
        ["--top-k", "20", "--error", "1pp"],
        ["--range", "0", "600", "--error", "1%"],
        ["--percentile", "95", "--range", "0", "600", "--error", "1pp"],
        ["--discover", "--min-share", "5%", "--epsilon", "4"],
    ],
    ids=["share", "top-k", "mean", "percentile", "discovery"],
)
def test_json_is_versioned_with_the_documented_answer_keys(argv: list[str]) -> None:
    code, out, err = _cli("--daily-users", "50000", *argv, "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["schema_version"] == SCHEMA_VERSION and set(ANSWER_KEYS) <= set(doc["answer"])
    assert doc["answer"]["recommendation"].startswith("Recommendation: ") and doc["rows"]
    assert doc["answer"]["central_epsilon"] is None or doc["answer"]["central_epsilon"] > 0
