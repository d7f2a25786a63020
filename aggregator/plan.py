"""Planning a metric: which mechanism, ε, k and m give the error you want, with how many reports and days.

:func:`plan` takes the expected reports per day (or a total), the domain (its size d, and optionally the share
x of reports its top value holds), the target half-width of a frequency estimate at a confidence level, one or
more ε and a grid of sketch sizes, and returns one :class:`PlanRow` per (mechanism, ε, k, m): the effective ε,
the expected ± for the top (heavy) value and for the rarest value, bits per report on the wire, the sketch's
memory per shard and day, the reports and days needed for the target, and whether one day's reports meet it.

The population model (:func:`domain_model`). Without x the d values are equally frequent (uniform: the fewest
collisions a domain of d values can have). With x the counts are Zipf-shaped, f(i) ∝ i^(−s) for the values
ranked i = 1..d, with the exponent s ≥ 0 solved so that the top value holds the share x:
x = 1/H(s, d), H(a, d) = Σ_{i=1..d} i^(−a) (:func:`zipf_exponent`). Its second moment of the counts is
F2 = Σ_d f(d)² = n²·H(2s, d)/H(s, d)², the rarest value holds n·d^(−s)/H(s, d).

Variance of one estimated count f̂ of a value with true count f out of n reports:

* the mechanism's variance as ``Mechanism.variance(params, counts, n)`` gives it, evaluated at the model's
  counts (for sketches it includes which row each report picked);
* for sketches (k rows × m columns over a fixed hash family), plus the hash-collision variance
  (F2 − f²)/(k(m − 1)) (:meth:`Mechanism.collision_variance`, the term the estimator's stderr carries): averaged over hash families, the other values'
  counts that collide with the value (the collision term of the count-mean-sketch variance; Apple, "Learning
  with Privacy at Scale", 2017). For one fixed family it is a bias
  that stays put however many reports arrive, so a sketch's frequency error has a floor,
  z·√((F2/n² − (f/n)²)/(k(m − 1))), that more reports never remove: a target below the floor is unreachable.

The expected ± of a frequency is z·√Var/n (z the two-sided normal quantile of the confidence level). Every
mechanism variance is linear in n at fixed shares and the collision term quadratic, so ± falls with n towards
the floor; :func:`reports_needed` finds the fewest reports (n, an integer) whose ± meets the target for both
the top and the rarest value.

Rows are ranked: those meeting the target with one day's reports first, then fewer days needed, lower ε (more
privacy), less memory per shard-day, fewer bits per report, and a smaller ±.

Nothing here names a mechanism: each registered one is asked for its params (:func:`params_from_dict` over the
fields its params type declares), its variance, its wire size (``payload_size``) and its state shape.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms import mechanism_of, mechanisms, recommend_mechanism
from ldptel.client.mechanisms.base import Mechanism
from ldptel.client.mechanisms.state import z_value
from ldptel.client.protocol.params import ParamsBase, check_epsilon
from ldptel.client.protocol.specs import params_from_dict
from ldptel.client.protocol.validate import check_int, check_number

AnyMechanism = Mechanism[Any, Any]

DEFAULT_EPSILONS: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
DEFAULT_K: tuple[int, ...] = (256, 1024, 2048)
DEFAULT_M: tuple[int, ...] = (256, 1024)
MAX_DOMAIN_SIZE = 1 << 62
MAX_REPORTS = 1 << 62
INT32_COUNTS = (1 << 31) - 1  # a shard-day's counters are stored as int32 while every count fits
_EXACT_TERMS = 4096  # H(a, d): terms summed exactly before the Euler–Maclaurin tail


# ------------------------------------------------------------------------------------ the domain model
def zipf_power_sum(*, a: float, d: int) -> float:
    """H(a, d) = Σ_{i=1..d} i^(−a) for a ≥ 0.

    The first 4096 terms are summed exactly; the rest by Euler–Maclaurin from A = 4096 to d with
    g(x) = x^(−a): Σ_{i=A..d} g(i) = ∫_A^d g + (g(A) + g(d))/2 + (g′(d) − g′(A))/12 − (g‴(d) − g‴(A))/720,
    whose next term is below 10⁻²⁰ of the sum.
    """
    a = check_number("a", a, 0.0, math.inf)
    d = check_int("d", d, 1, MAX_DOMAIN_SIZE)
    exact = min(d, _EXACT_TERMS)
    head = float(np.sum(np.arange(1, exact + 1, dtype=np.float64) ** -a))
    if d <= _EXACT_TERMS:
        return head
    lo, hi = float(_EXACT_TERMS), float(d)
    span = math.log(hi / lo)
    if abs(1.0 - a) * span < 1e-12:
        integral = math.pow(lo, 1.0 - a) * span
    else:
        integral = math.pow(lo, 1.0 - a) * math.expm1((1.0 - a) * span) / (1.0 - a)

    def g(x: float) -> float:
        return math.pow(x, -a)

    def g1(x: float) -> float:
        return -a * math.pow(x, -a - 1.0)

    def g3(x: float) -> float:
        return -a * (a + 1.0) * (a + 2.0) * math.pow(x, -a - 3.0)

    tail = integral + (g(lo) + g(hi)) / 2 + (g1(hi) - g1(lo)) / 12 - (g3(hi) - g3(lo)) / 720
    return head - g(lo) + tail  # the exact head ends at A, the tail starts there


def zipf_exponent(*, d: int, top_share: float) -> float:
    """The s ≥ 0 with 1/H(s, d) = ``top_share``: the Zipf exponent whose top value holds that share.

    1/H(s, d) rises from 1/d (s = 0, uniform) towards 1 as s grows, so bisection finds s to 1e-12.
    """
    d = check_int("d", d, 2, MAX_DOMAIN_SIZE)
    x = check_number("top_share", top_share, 1.0 / d, 1.0)
    if x >= 1.0:
        raise InvalidParameterError("top_share", f"a share in [1/d, 1) = [{1.0 / d:.3g}, 1)", top_share)
    target = 1.0 / x  # H(s, d) must equal this; H falls from d to 1 as s grows
    if zipf_power_sum(a=0.0, d=d) <= target:
        return 0.0
    lo, hi = 0.0, 1.0
    while zipf_power_sum(a=hi, d=d) > target:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = (lo + hi) / 2
        if zipf_power_sum(a=mid, d=d) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True, slots=True, kw_only=True)
class DomainModel:
    """The assumed population: d values with Zipf-shaped shares f(i)/n = i^(−s)/H(s, d) (s = 0: uniform).

    top_share: the top value's share 1/H(s, d); rare_share: the rarest value's d^(−s)/H(s, d);
    f2_share: F2/n² = Σ_i (f(i)/n)² = H(2s, d)/H(s, d)².
    """

    d: int
    exponent: float
    top_share: float
    rare_share: float
    f2_share: float

    @property
    def uniform(self) -> bool:
        return self.exponent == 0.0

    def describe(self) -> str:
        if self.uniform:
            return (f"uniform over {self.d:,} values (each {self.top_share:.3g} of reports; "
                    f"F2/n² = {self.f2_share:.3g}, the fewest collisions for d values)")
        return (f"Zipf over {self.d:,} values, f(i) ∝ i^-{self.exponent:.4f}: top value {self.top_share:.2%} of reports, "
                f"rarest {self.rare_share:.3g}, F2/n² = {self.f2_share:.4g}")

    def to_dict(self) -> dict[str, Any]:
        return {"model": "uniform" if self.uniform else "zipf", "d": self.d, "exponent": self.exponent,
                "top_share": self.top_share, "rare_share": self.rare_share, "f2_share": self.f2_share}


def domain_model(*, d: int, top_share: float | None = None) -> DomainModel:
    """Uniform over d values when ``top_share`` is None, else the Zipf whose top value holds ``top_share``."""
    d = check_int("domain_size", d, 2, MAX_DOMAIN_SIZE)
    s = 0.0 if top_share is None else zipf_exponent(d=d, top_share=top_share)
    h1 = zipf_power_sum(a=s, d=d)
    h2 = zipf_power_sum(a=2.0 * s, d=d)
    return DomainModel(d=d, exponent=s, top_share=1.0 / h1, rare_share=math.pow(d, -s) / h1, f2_share=h2 / (h1 * h1))


# ----------------------------------------------------------------------------------------- the request
def _epsilons(value: float | Iterable[float]) -> tuple[float, ...]:
    values = (value,) if isinstance(value, (int, float)) else tuple(value)
    if not values:
        raise InvalidParameterError("epsilon", "at least one ε", value)
    return tuple(sorted({check_epsilon(v) for v in values}))


def _sizes(name: str, value: int | Iterable[int]) -> tuple[int, ...]:
    values = (value,) if isinstance(value, int) else tuple(value)
    if not values:
        raise InvalidParameterError(name, "at least one size", value)
    return tuple(sorted({check_int(name, v, 1, 1 << 16) for v in values}))


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRequest:
    """What :func:`plan` is asked: every field validated on construction.

    Exactly one of ``reports_per_day`` and ``reports`` (a total, for a one-off collection: then no days), and
    exactly one of ``error`` (the target half-width of a frequency, e.g. 0.01 for ±1 percentage point) and
    ``error_count`` (a half-width in reports of the n reports: read as the frequency error_count/n).
    """

    domain_size: int
    reports_per_day: int | None = None
    reports: int | None = None
    top_share: float | None = None
    error: float | None = None
    error_count: float | None = None
    confidence: float = 0.95
    epsilons: tuple[float, ...] = DEFAULT_EPSILONS
    ks: tuple[int, ...] = DEFAULT_K
    ms: tuple[int, ...] = DEFAULT_M
    shards: int = 1

    def __post_init__(self) -> None:
        check_int("domain_size", self.domain_size, 2, MAX_DOMAIN_SIZE)
        if (self.reports_per_day is None) == (self.reports is None):
            raise InvalidParameterError("reports_per_day", "given, or else reports (a total), not both", self.reports_per_day)
        if self.reports_per_day is not None:
            check_int("reports_per_day", self.reports_per_day, 1, MAX_REPORTS)
        if self.reports is not None:
            check_int("reports", self.reports, 1, MAX_REPORTS)
        if self.top_share is not None:
            d = self.domain_size
            check_number("top_share", self.top_share, 1.0 / d, 1.0)
            if self.top_share >= 1.0:
                raise InvalidParameterError("top_share", f"a share in [1/d, 1) = [{1.0 / d:.3g}, 1)", self.top_share)
        if (self.error is None) == (self.error_count is None):
            raise InvalidParameterError("error", "given (a frequency), or else error_count, not both", self.error)
        if self.error is not None:
            check_number("error", self.error, 0.0, 1.0, open_interval=True)
        if self.error_count is not None:
            check_number("error_count", self.error_count, 0.0, float(self.n), open_interval=True)
        check_number("confidence", self.confidence, 0.0, 1.0, open_interval=True)
        object.__setattr__(self, "epsilons", _epsilons(self.epsilons))
        object.__setattr__(self, "ks", _sizes("k", self.ks))
        object.__setattr__(self, "ms", _sizes("m", self.ms))
        check_int("shards", self.shards, 1, 1 << 16)

    @property
    def n(self) -> int:
        """The reports the expected ± are computed at: one day's, or the total."""
        n = self.reports_per_day if self.reports_per_day is not None else self.reports
        assert n is not None  # checked in __post_init__
        return n

    @property
    def target(self) -> float:
        """The target half-width as a frequency."""
        if self.error is not None:
            return self.error
        assert self.error_count is not None
        return self.error_count / self.n

    def to_dict(self) -> dict[str, Any]:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}


# ----------------------------------------------------------------------------------------- the answer
@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRow:
    """One (mechanism, ε, k, m): its errors as frequency half-widths at the request's n, and its costs.

    k, m: None for mechanisms without a sketch. heavy_error / rare_error: expected ± of the top / rarest
    value's frequency; floor: the sketch's ± as n → ∞ for the rarest value (collisions; 0 without a sketch).
    reports_needed / days_needed: None when the target is below the floor (unreachable); days_needed also
    None for a total (no daily rate). memory_per_shard_day: bytes of the shard-day state's counters (int32
    while every count fits, which the store then uses; int64 beyond); memory_per_day: × shards.
    """

    mechanism: str
    epsilon: float
    effective_epsilon: float
    k: int | None
    m: int | None
    recommended: bool
    heavy_error: float
    rare_error: float
    floor: float
    bits_per_report: int
    memory_per_shard_day: int
    memory_per_day: int
    reports_needed: int | None
    days_needed: int | None
    meets_target: bool

    @property
    def shape(self) -> str:
        return "-" if self.k is None else f"{self.k}×{self.m}"

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """The ranked rows of a request, the model they assume, and z of the confidence level."""

    request: PlanRequest
    model: DomainModel
    z: float
    recommended: dict[float, str] = field(default_factory=dict)  # ε → recommend_mechanism(ε, d)
    rows: tuple[PlanRow, ...] = ()

    def describe(self) -> str:
        """One paragraph: the reports, the model and the target."""
        req = self.request
        volume = f"{req.reports_per_day:,} reports/day" if req.reports_per_day is not None else f"{req.reports:,} reports"
        return (f"{volume}; domain: {self.model.describe()}; target ±{req.target:.4g} (frequency) at "
                f"{req.confidence:.0%} confidence for the top and the rarest value")

    def to_dict(self) -> dict[str, Any]:
        return {
            "request": self.request.to_dict(),
            "target": self.request.target,
            "n": self.request.n,
            "z": self.z,
            "model": self.model.to_dict(),
            "recommended": {str(eps): name for eps, name in self.recommended.items()},
            "rows": [row.to_dict() for row in self.rows],
        }


# ------------------------------------------------------------------------------------------ the planner
def _variance(mech: AnyMechanism, params: ParamsBase, shares: np.ndarray, f2_share: float, n: int) -> np.ndarray:
    """Var of the estimated counts of values with these ``shares`` at n reports: the mechanism's, plus the
    collision term for sketches."""
    counts = shares * n
    var = np.asarray(mech.variance(params, counts, n), dtype=np.float64)
    out: np.ndarray = var + mech.collision_variance(params, f2=f2_share * float(n) * n, counts=counts)
    return out


def half_widths(
    *, mechanism: AnyMechanism, params: ParamsBase, model: DomainModel, n: int, z: float
) -> tuple[float, float]:
    """Expected ± (z·√Var/n, as frequencies) of the top and the rarest value at n reports."""
    shares = np.array([model.top_share, model.rare_share])
    var = _variance(mechanism, params, shares, model.f2_share, n)
    top, rare = (z * np.sqrt(var) / n).tolist()
    return float(top), float(rare)


def collision_floor(*, params: ParamsBase, model: DomainModel, z: float) -> float:
    """The ± of the rarest value's frequency as n → ∞: z·√((F2/n² − share²)/(k(m − 1))); 0 without a sketch."""
    share = np.array([model.rare_share])
    return float(z * np.sqrt(mechanism_of(params).collision_variance(params, f2=model.f2_share, counts=share))[0])


def reports_needed(*, mechanism: AnyMechanism, params: ParamsBase, model: DomainModel, target: float, z: float) -> int | None:
    """The fewest reports whose ± meets ``target`` for both the top and the rarest value; None if none does.

    ± falls as n grows (mechanism variance ∝ n, collisions ∝ n²), so: None when the collision floor of
    either value is at or above the target, else double n until it meets the target, then bisect.
    """
    shares = np.array([model.top_share, model.rare_share])
    floor = z * np.sqrt(mechanism.collision_variance(params, f2=model.f2_share, counts=shares))
    if float(floor.max()) >= target:
        return None

    def meets(n: int) -> bool:
        var = _variance(mechanism, params, shares, model.f2_share, n)
        return bool(z * math.sqrt(float(var.max())) / n <= target)

    hi = 1
    while not meets(hi):
        if hi >= MAX_REPORTS:
            return None
        hi *= 2
    lo = hi // 2  # does not meet (or 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _memory(mech: AnyMechanism, params: ParamsBase, reports_per_shard_day: int) -> int:
    (rows, cols), nrows = mech.state_shape(params)
    width = 4 if reports_per_shard_day <= INT32_COUNTS else 8
    return int((rows * cols + nrows) * width)


def _rank(row: PlanRow) -> tuple[Any, ...]:
    """Meeting the target first; those that do not by days needed (reports needed for a total), unreachable
    last; then lower ε, less memory, fewer bits, smaller ±."""
    if row.meets_target:
        wait: float = 0
    elif row.reports_needed is None:
        wait = math.inf
    else:
        wait = row.days_needed if row.days_needed is not None else row.reports_needed
    return (not row.meets_target, wait, row.epsilon, row.memory_per_shard_day, row.bits_per_report,
            max(row.heavy_error, row.rare_error))


def evaluate(*, request: PlanRequest) -> Plan:
    """The ranked plan of a validated :class:`PlanRequest` (see the module docstring)."""
    model = domain_model(d=request.domain_size, top_share=request.top_share)
    z = z_value(request.confidence)
    n, target, d = request.n, request.target, request.domain_size
    recommended = {eps: recommend_mechanism(eps, d) for eps in request.epsilons}
    rows: list[PlanRow] = []
    for mech in mechanisms():
        for eps in request.epsilons:
            # what to compare, as the mechanism says (Mechanism.plan_candidates: the (k, m) grid for a sketch,
            # one params over d labels for a declared domain, none when it cannot carry d values)
            for candidate in mech.plan_candidates(eps, d, ks=request.ks, ms=request.ms):
                params = candidate.params
                heavy, rare = half_widths(mechanism=mech, params=params, model=model, n=n, z=z)
                needed = reports_needed(mechanism=mech, params=params, model=model, target=target, z=z)
                days = None
                if needed is not None and request.reports_per_day is not None:
                    days = max(1, math.ceil(needed / request.reports_per_day))
                memory = _memory(mech, params, n)
                rows.append(PlanRow(
                    mechanism=mech.name,
                    epsilon=eps,
                    effective_epsilon=params.effective_epsilon,
                    k=candidate.k,
                    m=candidate.m,
                    recommended=recommended[eps] == mech.name,
                    heavy_error=heavy,
                    rare_error=rare,
                    floor=collision_floor(params=params, model=model, z=z),
                    bits_per_report=mech.payload_size(params, 8),  # 8 reports take this many bytes: bits per report
                    memory_per_shard_day=memory,
                    memory_per_day=memory * request.shards,
                    reports_needed=needed,
                    days_needed=days,
                    meets_target=needed is not None and needed <= n,
                ))  # fmt: skip
    return Plan(request=request, model=model, z=z, recommended=recommended, rows=tuple(sorted(rows, key=_rank)))


def plan(
    *,
    domain_size: int,
    reports_per_day: int | None = None,
    reports: int | None = None,
    top_share: float | None = None,
    error: float | None = None,
    error_count: float | None = None,
    confidence: float = 0.95,
    epsilon: float | Iterable[float] = DEFAULT_EPSILONS,
    k: int | Iterable[int] = DEFAULT_K,
    m: int | Iterable[int] = DEFAULT_M,
    shards: int = 1,
) -> Plan:
    """Plan a metric: every registered mechanism that fits the domain, at each ε and (for sketches) each k × m.

    ``epsilon``, ``k``, ``m``: one value or several. See :class:`PlanRequest` for the rest and the module
    docstring for the model, the variances and the ranking.
    """
    request = PlanRequest(
        domain_size=domain_size, reports_per_day=reports_per_day, reports=reports, top_share=top_share,
        error=error, error_count=error_count, confidence=confidence, epsilons=_epsilons(epsilon),
        ks=_sizes("k", k), ms=_sizes("m", m), shards=shards,
    )  # fmt: skip
    return evaluate(request=request)


def epsilon_range(text: str) -> tuple[float, ...]:
    """``"4"`` → (4,); ``"1:8"`` → (1, 2, …, 8); ``"0.5:2:0.5"`` → (0.5, 1, 1.5, 2) (inclusive, step 1 by default)."""
    parts = text.split(":")
    try:
        nums = [float(p) for p in parts]
    except ValueError:
        raise InvalidParameterError("epsilon", "a number, or a range LO:HI or LO:HI:STEP", text) from None
    if len(nums) == 1:
        return (check_epsilon(nums[0]),)
    if len(nums) not in (2, 3):
        raise InvalidParameterError("epsilon", "a number, or a range LO:HI or LO:HI:STEP", text)
    lo, hi = check_epsilon(nums[0]), check_epsilon(nums[1])
    step = nums[2] if len(nums) == 3 else 1.0
    if not (math.isfinite(step) and step > 0) or hi < lo:
        raise InvalidParameterError("epsilon", "a range LO:HI[:STEP] with LO <= HI and STEP > 0", text)
    count = math.floor((hi - lo) / step + 1e-9) + 1
    if count > 1000:
        raise InvalidParameterError("epsilon", "a range of at most 1000 values", text)
    return tuple(round(lo + i * step, 10) for i in range(count))


__all__ = [
    "DEFAULT_EPSILONS",
    "DEFAULT_K",
    "DEFAULT_M",
    "DomainModel",
    "Plan",
    "PlanRequest",
    "PlanRow",
    "collision_floor",
    "domain_model",
    "epsilon_range",
    "evaluate",
    "half_widths",
    "plan",
    "reports_needed",
    "zipf_exponent",
    "zipf_power_sum",
]


# ------------------------------------------------------------------------------------- numeric metrics
@dataclass(frozen=True, kw_only=True)
class MeanPlanRow:
    """One (mechanism, ε) for the mean of a number clipped to [lo, hi]: its worst-case ± at n reports."""

    mechanism: str
    shape: str
    epsilon: float
    effective_epsilon: float
    bits_per_report: float
    worst_var_t: float  # per report, in t = 2(x − lo)/(hi − lo) − 1 units, over the values
    mean_error: float  # z·√Var of the mean at n, value units (worst case over where the mean lies)
    reports_needed: int | None  # for ``error`` (value units), or None without a target
    typical_var_t: float | None = None  # per report, averaged over the typical values given (t units)
    typical_mean_error: float | None = None  # z·√Var of the mean at n for the typical values
    typical_reports_needed: int | None = None
    chosen: bool = False  # the variant of ``mean`` to create at this ε: by the typical variance when given

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _choice_key(row: MeanPlanRow) -> float:
    return row.worst_var_t if row.typical_var_t is None else row.typical_var_t


def plan_mean(
    *, lo: float, hi: float, n: int, epsilons: Sequence[float] = DEFAULT_EPSILONS, error: float | None = None,
    confidence: float = 0.95, typical: Sequence[float] | np.ndarray | None = None,
) -> tuple[MeanPlanRow, ...]:
    """Every mechanism whose estimate is a mean (kind ``summary``, params from lo and hi; once per variant it plans,
    :meth:`~ldptel.client.mechanisms.base.Mechanism.plan_variants`: ``mean``'s onebit and dhm), at each ε: the worst case of its own ``variance`` over where
    the mean lies (a 257-point grid), as the ± of the mean at n reports and the reports a ± of ``error``
    (value units) needs. The sum's ± is n times.

    ``typical``: values of a typical distribution (a pilot sample, or one guessed mean: every device at it),
    clipped to [lo, hi]. The variance of a mean estimate is the average over the devices of each device's
    report variance, which depends on its own value: for onebit C² − t², largest at the centre; for dhm larger
    at the ends. So on skewed data onebit can beat dhm though dhm has the smaller worst case (issue 24:
    544 vs 660 sd at ε = 4). Each row then also has the typical variance, ±, and reports; ``chosen`` marks,
    per ε, the ``mean`` variant with the smaller typical variance (the smaller worst case without ``typical``).
    A guessed mean alone gives an upper bound for onebit (E[t²] ≥ mean(t)²) and only a guess for dhm."""
    check_int("n", n, 1, 1 << 62)
    z = z_value(confidence)
    half = (hi - lo) / 2.0
    points: np.ndarray | None = None
    if typical is not None:
        raw = np.asarray(typical, dtype=np.float64).reshape(-1)
        if raw.size == 0 or not np.all(np.isfinite(raw)):
            raise InvalidParameterError("typical", "a non-empty list of finite numbers (a pilot sample or a guessed mean)", typical)
        # 1,001 quantiles stand for a large pilot (each quantile's share is equal: the average is kept)
        points = np.clip(raw if raw.size <= 1001 else np.quantile(raw, np.linspace(0, 1, 1001)), lo, hi)
    rows = []
    chooses: set[str] = set()  # mechanisms planned in several variants: one is marked chosen per ε
    for mech in mechanisms():
        if mech.kind != "summary":
            continue
        variants = mech.plan_variants()
        if len(variants) > 1:
            chooses.add(mech.name)
        for eps in epsilons:
            for variant in variants:
                spec: dict[str, Any] = {"mechanism": mech.name, "epsilon": check_epsilon(eps), "lo": lo, "hi": hi, **variant}
                try:
                    params = params_from_dict(spec)
                except InvalidParameterError:
                    continue
                grid = np.linspace(lo, hi, 257)
                per_report = max(float(mech.variance(params, np.array([m, 0.0, 1.0]), 1)[0]) for m in grid)
                needed = None if error is None else max(1, math.ceil(z * z * per_report / (error * error)))
                typ = typ_err = typ_needed = None
                if points is not None:
                    per = float(np.mean([float(mech.variance(params, np.array([v, 0.0, 1.0]), 1)[0]) for v in points]))
                    typ, typ_err = per / (half * half), z * math.sqrt(per / n)
                    typ_needed = None if error is None else max(1, math.ceil(z * z * per / (error * error)))
                rows.append(MeanPlanRow(
                    mechanism=mech.name, shape=mech.shape(params), epsilon=eps, effective_epsilon=params.effective_epsilon,
                    bits_per_report=mech.payload_size(params, 8), worst_var_t=per_report / (half * half),
                    mean_error=z * math.sqrt(per_report / n), reports_needed=needed, typical_var_t=typ,
                    typical_mean_error=typ_err, typical_reports_needed=typ_needed,
                ))  # fmt: skip
    for eps in epsilons:  # per ε and mechanism with variants, the variant to create
        for name in chooses:
            same = [i for i, r in enumerate(rows) if r.mechanism == name and r.epsilon == eps]
            if same:
                best = min(same, key=lambda i: _choice_key(rows[i]))
                rows[best] = replace(rows[best], chosen=True)
    return tuple(rows)
