"""Central (ε, δ) of shuffled reports: privacy amplification by shuffling (ldp-math-2 §5), and when it applies.

The calculator. n reports, each from the same ε₀-DP local randomizer, uniformly shuffled, are (ε, δ)-DP for the
numerical bound of Feldman, McMillan and Talwar ("Hiding among the clones", FOCS 2021), which reduces any such
mechanism to two distributions over pairs: with C ~ Bin(n − 1, e^{−ε₀}), A ~ Bin(C, ½), Δ ~ Bern(e^{ε₀}/(e^{ε₀} + 1)),

    P = (A + Δ, C − A + 1 − Δ)    and    Q = (A + 1 − Δ, C − A + Δ),

and ε is the smallest value with hockey-stick divergence D_{e^ε}(P ‖ Q) ≤ δ. For each c, P/Q is increasing in the first
coordinate k (the ratio is (p·k + (1 − p)(c + 1 − k)) / (p(c + 1 − k) + (1 − p)·k), p = e^{ε₀}/(e^{ε₀} + 1)), so the
divergence given c is exact with two binomial survival functions at the first k where P ≥ e^ε·Q:

    D_c(ε) = S_c(k − 1)·(p − e^ε(1 − p)) + S_c(k)·((1 − p) − e^ε·p),   S_c(j) = Pr[Bin(c, ½) ≥ j].

:func:`shuffle_epsilon` sums D_c over every c holding all but :data:`TAIL_MASS` of C's mass (the rest is added to
δ: D_c ≤ 1), in one vectorized evaluation per step, and finds ε on the fixed grid of multiples of :data:`GRID`
(never more than ε₀: D vanishes at ε₀). Past :data:`MAX_POINTS` values of c (n ≳ 2·10⁵ at ε₀ = 1) it sums blocks of
consecutive c, each block's mass times D at its first c: D_c never increases with c (one more clone is the same
random step applied to P and Q, which cannot increase their divergence), so this is an upper bound on δ and the ε
found is conservative; the table's n = 10⁶ figures are unchanged at 3 decimals. The answer is the smallest grid point whose divergence is ≤ δ, so it is
an upper bound within GRID of the exact one, and because the grid does not depend on n or ε₀ it is exactly
monotone wherever the divergence is. Where rounding keeps the computed divergence above δ all the way to ε₀ (ε₀ ≳ 19 with
10⁷–10⁹ reports), the answer is ε₀ itself: no amplification is claimed. It reproduces ldp-math-2 §5's table (Apple's 100,000 reports at ε₀ = 4,
δ = 10⁻⁶ → 0.170) to 3 decimals (``tests/aggregator/test_amplification.py``).

Why this module is in the aggregator and not in the mechanism package: the SDK only ever guarantees ε₀ on the
device; the central (ε, δ) is a claim the analysis side makes about data it holds after the shuffle stage
(§5 condition 5), it needs scipy (the aggregator's extra, not the SDK's numpy + mmh3), and what ε₀ a metric's
reports carry is already the mechanism's answer (:attr:`~ldptel.client.protocol.specs.MetricSpec.report_charge`).

Applicability (§5's conditions) is a typed result: :class:`Central` (the bound holds, with what it was computed
from) or :class:`NotApplicable` (which condition fails, and a one-line reason). :func:`central_for_n` is the bound for
a planned number of reports (``ldptel plan``, ``metrics plan``); :func:`central_for_day` judges one released day from
the shuffle stage's statistics; :func:`compose_days` is a range of days (basic composition: a range is several
releases of the same devices, so its ε is the sum of its days' ε and its δ the sum of their δ).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from ldptel.client.errors import InvalidParameterError

DEFAULT_DELTA = 1e-6  # Apple's published figure; lowered to 1/(10·n) for n > 10⁵ (:func:`default_delta`)
TAIL_MASS = 1e-13  # mass of C ~ Bin(n − 1, e^{−ε₀}) left out of the sum, and added to δ
GRID = 2.0**-24  # ε is returned as the smallest multiple of GRID (≈ 6·10⁻⁸) whose divergence is ≤ δ
MAX_POINTS = 256  # c values evaluated at most; past it, blocks of consecutive c (module docstring)
NO_GAIN = 1e-3  # a bound within this of ε₀ is no amplification: "too few reports"
MAX_EPSILON0 = 30.0  # beyond, e^{−ε₀}·n clones are none for any real n, and e^{ε₀} overflows nothing useful

Condition = Literal["too_few_reports", "mixed_versions", "not_shuffled", "not_separable", "no_report_epsilon"]
CONDITIONS: dict[Condition, str] = {  # §5's condition each reason is about
    "too_few_reports": "§5 condition 3: a released block of n ≥ n_min reports, enough to hide among",
    "mixed_versions": "§5 condition 3: one (metric, version, ε) per shuffled batch, ε never across versions",
    "not_shuffled": "§5 conditions 2–3: every report released by the trusted shuffler, in uniformly permuted blocks",
    "not_separable": "§5 condition 1: one report (one randomizer) per device per shuffled batch",
    "no_report_epsilon": "§5 setting: every report from the same ε₀-DP randomizer",
}
MEANING = (
    "central (ε, δ): what an observer of the shuffled reports (a database reader, the fold, anyone shown the "
    "estimates) learns about one device's value, given every other device's data, if ldp-math-2 §5's conditions "
    "hold (numerical bound of Feldman–McMillan–Talwar); the ingest and shuffler processes, which see uploads "
    "before the shuffle, still only have the local ε₀"
)


# --------------------------------------------------------------------------------------------- the bound
def _check(eps0: float, n: int, delta: float) -> tuple[float, int, float]:
    if isinstance(eps0, bool) or not isinstance(eps0, (int, float)) or not 0 < eps0 <= MAX_EPSILON0:
        raise InvalidParameterError("epsilon0", f"a number in (0, {MAX_EPSILON0:g}]", eps0)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InvalidParameterError("n", "a whole number of reports ≥ 1", n)
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not TAIL_MASS < delta < 1:
        raise InvalidParameterError("delta", f"a number in ({TAIL_MASS:g}, 1)", delta)
    return float(eps0), int(n), float(delta)


def _divergence(eps: float, eps0: float, c: np.ndarray, weight: np.ndarray) -> float:
    """Σ_c Pr[C = c]·D_c(ε): the hockey-stick divergence of P and Q (module docstring) over the summed c."""
    from scipy.special import bdtrc  # type: ignore[import-untyped]  # Pr[Bin(c, ½) > j]

    p = 1.0 / (1.0 + math.exp(-eps0))  # e^{ε₀}/(e^{ε₀} + 1), without overflow
    e = math.exp(eps)
    threshold = (c + 1) * (e * p - (1 - p)) / ((2 * p - 1) * (1 + e))  # P ≥ e^ε·Q exactly where k ≥ threshold
    k0 = np.ceil(threshold)
    # Pr[A ≥ k0 + j], A ~ Bin(c, ½), for j = -2 … 1: the optimal cut is k0, its neighbours guard the rounding
    ci = c.astype(np.int64)
    surv = {}
    for j in (-2, -1, 0, 1):
        k = k0 + j
        tail = bdtrc(np.clip(k - 1, 0, c).astype(np.int64), ci, 0.5)
        surv[j] = np.where(k <= 0, 1.0, np.where(k > c, 0.0, tail))
    a, b = p - e * (1 - p), (1 - p) - e * p  # D_c at cut k: S(k − 1)·a + S(k)·b
    best = np.zeros_like(weight)
    for j in (-1, 0, 1):
        best = np.maximum(best, surv[j - 1] * a + surv[j] * b)
    return float(np.dot(weight, best))


def _binomial() -> tuple[Any, Any, Any]:
    """(ppf, isf, pmf) of the binomial: the ufuncs ``scipy.stats.binom`` itself calls for these (Boost's), taken
    from ``scipy.special`` because importing ``scipy.stats`` costs 0.7 s of CPU in every process that prints a
    central ε (``ldptel plan``, the dashboard). They are private names: where a SciPy release moves them, the public
    ``scipy.stats.binom`` is used (``tests/aggregator/test_amplification.py`` checks both agree)."""
    try:
        from scipy.special._ufuncs import (  # type: ignore[import-untyped]
            _binom_isf,
            _binom_pmf,
            _binom_ppf,
        )
    except ImportError:  # pragma: no cover - a SciPy without them
        from scipy.stats import binom  # type: ignore[import-untyped]

        return binom.ppf, binom.isf, binom.pmf
    return _binom_ppf, _binom_isf, _binom_pmf


def _first_grid_point(ok: Callable[[int], bool], f: Callable[[float], float], top: int) -> int:
    """The smallest i in [1, top] with ok(i), for ok monotone (false, then true) and ok(top) true; f is a continuous
    function decreasing through 0 near the answer (f(i·GRID) ≤ 0 ⇔ ok(i) up to rounding) that guides the search.

    Illinois regula falsi on f over [0, top·GRID] to within a grid step, then the walk to the exact first grid point:
    ~10 evaluations where bisection of the index takes ~30. Written here, not ``scipy.optimize.brentq``, because
    importing ``scipy.optimize`` costs 0.4 s of CPU in every process that prints a central ε; the answer does not
    depend on the root finder (the walk makes it the first i with ok(i))."""
    a, b = 0.0, top * GRID
    fa, fb = f(a), f(b)
    side = 0
    for _ in range(200):
        if b - a <= GRID / 4:
            break
        x = (a * fb - b * fa) / (fb - fa) if fa != fb else (a + b) / 2
        if not a < x < b:
            x = (a + b) / 2
        fx = f(x)
        if fx > 0:
            a, fa = x, fx
            if side == -1:
                fb /= 2  # Illinois: the end that stayed twice in a row has its value halved
            side = -1
        else:
            b, fb = x, fx
            if side == 1:
                fa /= 2
            side = 1
    i = min(max(math.ceil(b / GRID), 1), top)
    while not ok(i):
        i += 1
    while i > 1 and ok(i - 1):
        i -= 1
    return i


def _clones(eps0: float, n: int, delta: float) -> tuple[np.ndarray, np.ndarray, float]:
    """(c, Pr[C = c], δ'): the values of C ~ Bin(n − 1, e^{−ε₀}) summed over (blocks past MAX_POINTS) and their
    weights, and the δ left for them once the mass outside is added (module docstring)."""
    ppf, isf, pmf = _binomial()
    q = math.exp(-eps0)
    lo_c = int(ppf(TAIL_MASS / 2, n - 1, q))
    hi_c = int(isf(TAIL_MASS / 2, n - 1, q))
    c = np.arange(lo_c, hi_c + 1, dtype=np.float64)
    weight = np.asarray(pmf(c, n - 1, q), dtype=np.float64)
    outside = float(max(0.0, 1.0 - weight.sum()))  # at most TAIL_MASS (plus rounding): every D_c ≤ 1
    if c.size > MAX_POINTS:  # blocks of w consecutive c, each at its first c: an upper bound (D_c falls with c)
        w = -(-c.size // MAX_POINTS)
        starts = np.arange(0, c.size, w)
        c, weight = c[starts], np.add.reduceat(weight, starts)
    return c, weight, delta - outside


@functools.lru_cache(maxsize=4096)
def _shuffle_epsilon(eps0: float, n: int, delta: float) -> float:
    c, weight, budget = _clones(eps0, n, delta)
    top = math.ceil(eps0 / GRID)  # D vanishes at ε₀: the answer is at most ε₀ (rounded up to the grid, capped below)
    if _divergence(0.0, eps0, c, weight) <= budget:
        return 0.0

    def f(x: float) -> float:  # log D − log δ': decreasing in ε, through 0 at the answer
        return math.log(max(_divergence(x, eps0, c, weight), 1e-300)) - math.log(budget)

    def ok(i: int) -> bool:
        return i >= top or _divergence(i * GRID, eps0, c, weight) <= budget

    return min(_first_grid_point(ok, f, top) * GRID, eps0)


def shuffle_epsilon(eps0: float, n: int, delta: float = DEFAULT_DELTA) -> float:
    """The central ε of ``n`` shuffled reports of one ε₀-DP randomizer at ``delta``: the numerical bound of
    ldp-math-2 §5 (module docstring), an upper bound within :data:`GRID`, never above ε₀. Cached per argument."""
    return _shuffle_epsilon(*_check(eps0, n, delta))


def shuffle_epsilons(eps0: float, ns: Sequence[int], delta: float = DEFAULT_DELTA) -> np.ndarray:
    """:func:`shuffle_epsilon` for several ``ns`` (each distinct n computed once)."""
    distinct = {int(n): shuffle_epsilon(eps0, int(n), delta) for n in set(int(x) for x in ns)}
    return np.array([distinct[int(n)] for n in ns], dtype=np.float64)


def fmt_closed_form(eps0: float, n: int, delta: float) -> float | None:
    """FMT Theorem 3.1's closed form (for comparison only: 2–5× looser), None where its condition
    ε₀ ≤ ln(n/(16 ln(2/δ))) fails."""
    if n <= 16 * math.log(2 / delta) or eps0 > math.log(n / (16 * math.log(2 / delta))):
        return None
    e = math.exp(eps0)
    return math.log1p((e - 1) / (e + 1) * (8 * math.sqrt(e * math.log(4 / delta)) / math.sqrt(n) + 8 * e / n))


def default_delta(n: int) -> float:
    """δ for a release of ``n`` reports: 10⁻⁶ (Apple's), and 1/(10·n) once that is smaller, so that δ stays well
    below 1/n (a δ of 1/n would allow one report in n to be released in the clear)."""
    return min(DEFAULT_DELTA, 0.1 / max(n, 1))


# ------------------------------------------------------------------------------------------ applicability
@dataclass(frozen=True, kw_only=True)
class Central:
    """The central (ε, δ) holds: ``epsilon`` at ``delta``, from ``epsilon0`` per randomizer hidden among ``n``
    randomizers; ``basis`` says in one line how ε₀ and n were chosen; ``days``: releases composed (1: one day)."""

    epsilon: float
    delta: float
    epsilon0: float
    n: int
    basis: str
    days: int = 1

    applicable: Literal[True] = True

    def to_dict(self) -> dict[str, Any]:
        return {"applicable": True, "epsilon": self.epsilon, "delta": self.delta, "epsilon0": self.epsilon0,
                "n": self.n, "days": self.days, "basis": self.basis, "meaning": MEANING}

    def line(self) -> str:
        return f"central ε {self.epsilon:.3f} at δ {self.delta:.0e} ({self.basis})"


@dataclass(frozen=True, kw_only=True)
class NotApplicable:
    """The bound does not apply: ``condition`` names which of §5's conditions fails, ``reason`` says why in one line."""

    condition: Condition
    reason: str

    applicable: Literal[False] = False

    def to_dict(self) -> dict[str, Any]:
        return {"applicable": False, "condition": self.condition, "reason": self.reason,
                "requires": CONDITIONS[self.condition]}

    def line(self) -> str:
        return f"central ε not applicable: {self.reason}"


CentralPrivacy = Central | NotApplicable


class SpecLike(Protocol):
    """What the bound needs of a metric version (a :class:`~ldptel.client.protocol.specs.MetricSpec`)."""

    @property
    def report_charge(self) -> float: ...

    @property
    def reports_per_day(self) -> int: ...

    @property
    def mechanism(self) -> str: ...


def randomizer(spec: SpecLike) -> tuple[float, int]:
    """(ε₀, r): the ε of the randomizer the bound counts and how many reports make one randomizer.

    ε₀ is the report's charge given every other report of its device (:attr:`MetricSpec.report_charge`): the
    effective ε of one report for fresh-noise mechanisms, including the sketches (cms, hcms, oue-cms: the whole
    report's ε, not cms's per-bit ε/2: the theorem needs the worst-case ratio of one report's distributions), and
    ε_irr for a permanent randomized response (one day's report given the device's other days: the day's release
    is then adaptive in earlier ones, which the theorem allows). With ``reports_per_day`` r > 1 a device's r
    reports of a day count as one r·ε₀ randomizer (§5 condition 1)."""
    r = int(spec.reports_per_day)
    return float(spec.report_charge) * r, r


def central_for_n(spec: SpecLike, n: int, *, delta: float | None = None, n_min: int = 1) -> CentralPrivacy:
    """The central (ε, δ) that ``n`` reports of ``spec`` in one shuffled block would have (``ldptel plan``):
    NotApplicable when n is below the shuffle's ``n_min`` or too small to amplify anything."""
    eps0, r = randomizer(spec)
    if not math.isfinite(eps0) or eps0 <= 0 or eps0 > MAX_EPSILON0:
        return NotApplicable(condition="no_report_epsilon",
                             reason=f"{spec.mechanism} reports have no finite ε₀ the bound can start from ({eps0:g})")
    devices = -(-int(n) // r)  # a device sends at most r reports a day: at least ⌈n / r⌉ devices
    if n < n_min:
        return NotApplicable(condition="too_few_reports",
                             reason=f"{n:,} reports is below the shuffle's release minimum n_min = {n_min:,}")
    if devices < 2:
        return NotApplicable(condition="too_few_reports", reason=f"{n:,} report(s): nobody to hide among")
    d = default_delta(devices) if delta is None else delta
    eps = shuffle_epsilon(eps0, devices, d)
    if eps >= eps0 - NO_GAIN:
        return NotApplicable(condition="too_few_reports",
                             reason=f"{devices:,} randomizers at ε₀ = {eps0:.4g} give no central bound below ε₀ at δ = {d:.0e}")
    how = (f"ε₀ = {eps0:.4g} per report among {devices:,} shuffled reports" if r == 1 else
           f"ε₀ = {r} × {eps0 / r:.4g} per device ({r} reports a day count as one randomizer) among ≥ {devices:,} devices")
    return Central(epsilon=eps, delta=d, epsilon0=eps0, n=devices, basis=how)


@dataclass(frozen=True)
class _Planned:
    """A planned metric for :func:`central_epsilon`: one report a day of ε₀ each."""

    report_charge: float
    reports_per_day: int = 1
    mechanism: str = "planned"


def central_epsilon(*, local_epsilon: float, n: int, delta: float | None = None, n_min: int = 1) -> float | None:
    """The central ε of ``n`` reports of ``local_epsilon`` each released in ONE shuffled block (``ldptel plan``: what a
    planned n gives; a day whose reports are released in several blocks gets its smallest block's), at
    :func:`default_delta`; None where the bound gives nothing (too few reports to amplify)."""
    out = central_for_n(_Planned(float(local_epsilon)), int(n), delta=delta, n_min=n_min)
    return out.epsilon if isinstance(out, Central) else None


PLAN_SIZES = (10_000, 100_000, 1_000_000)  # block sizes `metrics plan` shows the central ε of


def planned_line(spec: SpecLike, sizes: Sequence[int] = PLAN_SIZES) -> str:
    """One line for ``metrics plan``: the central (ε, δ) ``spec``'s reports would have in a shuffled block of each size."""
    eps0, r = randomizer(spec)
    parts = []
    for n in sizes:
        out = central_for_n(spec, n * r)
        parts.append(f"{n:,}: " + (f"{out.epsilon:.3g} (δ {out.delta:.0e})" if isinstance(out, Central) else "none"))
    per = f"ε₀ {eps0:.3g}" + ("" if r == 1 else f" per device ({r} reports/day)")
    return (f"central ε after shuffling ({per}; ldp-math-2 §5, only where its conditions hold), by devices per "
            f"released block: " + " · ".join(parts))


class ReleaseStatsLike(Protocol):
    """What the shuffle stage reports of one (metric, version, day) release (``ldptel.storage.shuffle``)."""

    @property
    def reports(self) -> int: ...

    @property
    def smallest_block(self) -> int: ...

    @property
    def n_min(self) -> int: ...


def central_for_day(spec: SpecLike, day: str, folded: int, stats: ReleaseStatsLike | None, *,
                    delta: float | None = None) -> CentralPrivacy:
    """One day's central (ε, δ) from what was folded (``folded`` reports) and what the shuffle released
    (``stats``; None: the stage has no record of the day). A database reader sees each released block apart, so a
    device hides only among its own block: n is the day's smallest block, not its total."""
    if stats is None:
        return NotApplicable(condition="not_shuffled", reason=f"reports not shuffled: the shuffle stage released none of {day}'s")
    if stats.reports < folded:
        return NotApplicable(condition="not_shuffled",
                             reason=f"reports not shuffled: {folded - stats.reports:,} of {day}'s {folded:,} reports did not pass the shuffle stage")
    unshuffled = int(getattr(stats, "unshuffled", 0) or 0)
    if unshuffled > 0:
        return NotApplicable(condition="not_shuffled",
                             reason=f"reports not shuffled: {unshuffled:,} of {day}'s reports were folded without the shuffle stage")
    if getattr(stats, "mixed_versions", False):
        return NotApplicable(condition="mixed_versions", reason=f"a released block of {day} mixed metric versions")
    below = int(getattr(stats, "below_n_min", 0) or 0)
    uploads = int(getattr(stats, "smallest_block_uploads", stats.smallest_block))
    if below > 0 or uploads < stats.n_min:
        return NotApplicable(condition="not_shuffled",
                             reason=f"reports not shuffled: a released block of {day} came from fewer than "
                                    f"n_min = {stats.n_min:,} uploads (released at the hold bound)")
    # δ well below 1/(the day's reports), not just below 1/(the block's): the day is the data set released
    out = central_for_n(spec, stats.smallest_block, delta=default_delta(max(folded, stats.reports)) if delta is None
                        else delta, n_min=stats.n_min)
    if isinstance(out, Central):
        return Central(epsilon=out.epsilon, delta=out.delta, epsilon0=out.epsilon0, n=out.n,
                       basis=out.basis.replace("shuffled reports", "reports (the day's smallest released block)"))
    return out


def compose_days(per_day: Mapping[str, CentralPrivacy]) -> CentralPrivacy:
    """A range of days: the same devices released once a day, so by basic composition the range is (Σ ε_d, Σ δ_d):
    what every day's shuffled blocks together disclose about one device's values over those days. Not applicable
    when any day is not (the reason names the first such day)."""
    if not per_day:
        return NotApplicable(condition="too_few_reports", reason="no day in the range has released reports")
    for day, one in per_day.items():
        if isinstance(one, NotApplicable):
            return NotApplicable(condition=one.condition, reason=f"day {day}: {one.reason}")
    days = [one for one in per_day.values() if isinstance(one, Central)]
    if len(days) == 1:
        return days[0]
    eps0 = max(one.epsilon0 for one in days)
    count = sum(one.days for one in days)
    return Central(epsilon=sum(one.epsilon for one in days), delta=sum(one.delta for one in days), epsilon0=eps0,
                   n=min(one.n for one in days), days=count,
                   basis=f"basic composition of {count} daily releases of the same devices (Σ ε_d, Σ δ_d; "
                         f"each day's smallest block ≥ {min(one.n for one in days):,})")




# ------------------------------------------------------------------------------------------------- stored days
def _release_stats(r: Any, record: Any, version: int, days: Sequence[str], cell: str) -> Mapping[str, Any]:
    """The shuffle stage's statistics of each day (``ldptel.storage.shuffle.release_stats``); {} without the stage."""
    try:
        from ldptel.storage import shuffle  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return {}
    stats = getattr(shuffle, "release_stats", None)
    if stats is None:
        return {}
    out: Mapping[str, Any] = stats(r, record.name, version=version, days=list(days), shards=record.shards, cell=cell)
    return out


def release_central(r: Any, record: Any, version: int, days: Sequence[str], *, cells: Sequence[str] = ("",),
                    delta: float | None = None) -> tuple[dict[str, CentralPrivacy], CentralPrivacy]:
    """Each released day's central (ε, δ) (:func:`central_for_day`, from the day's folded report count and the shuffle
    stage's statistics) and the range's (:func:`compose_days`), for ``record``'s ``version``. Over several breakdown
    ``cells`` (shuffled apart: a report hides only among its own cell's block) a day's is its worst cell's."""
    from ldptel.aggregator.withholding import day_counts

    if not days:
        return {}, compose_days({})
    spec = record.versions[version]
    per: dict[str, CentralPrivacy] = {}
    for cell in cells:
        folded = day_counts(r, record, version, days, (cell,))
        stats = _release_stats(r, record, version, days, cell)
        for day in days:
            if folded[day] == 0:
                continue
            one = central_for_day(spec, day, folded[day], stats.get(day), delta=delta)
            if cell and isinstance(one, NotApplicable):
                one = NotApplicable(condition=one.condition, reason=f"combination {cell}: {one.reason}")
            now = per.get(day)
            if now is None or isinstance(one, NotApplicable) or (isinstance(now, Central) and one.epsilon > now.epsilon):
                if not isinstance(now, NotApplicable):
                    per[day] = one
    return per, compose_days(per)


__all__ = [
    "CONDITIONS", "Central", "CentralPrivacy", "Condition", "DEFAULT_DELTA", "GRID", "MEANING", "NotApplicable",
    "PLAN_SIZES", "central_epsilon", "central_for_day", "central_for_n", "compose_days", "default_delta",
    "fmt_closed_form", "planned_line", "randomizer", "release_central", "shuffle_epsilon", "shuffle_epsilons",
]
