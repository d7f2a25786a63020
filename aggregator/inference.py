"""Hypothesis tests on privatized data whose error rates hold: the mechanism's variance is part of every test.

A naive test on LDP estimates (a binomial z-test on the debiased share, say) ignores the privacy noise and
rejects a true null far more often than its α (the JSM 2019 DP course §4.4, after Gaboardi et al. 2016).
Every test here builds its statistic's null distribution *with the mechanism in it*, one of two ways
(``method``):

* ``asymptotic``: a z or Wald χ² statistic whose variance is the mechanism's own exact variance formula
  (:meth:`~ldptel.client.mechanisms.base.Mechanism.variance`, ``bucket_covariance``) evaluated **at the null**
  (score-type: the variance the estimate would have if the null were true), plus the sampling term below;
* ``monte-carlo``: the statistic's null distribution simulated by running the mechanism's own
  ``privatize_batch`` → ``fold`` → ``estimate`` on devices drawn from the null (categorical metrics: rr, grr,
  numeric histograms; p = (1 + #{T* at least as extreme})/(R + 1), valid at any n).

Two kinds of uncertainty (``uncertainty``), both always named in the output:

* ``randomization``: the spread over the privacy noise only, given the devices that reported (today's
  ``stderr`` of ``ldptel estimate``). It answers "what did *these* devices hold".
* ``population`` (the default for tests): randomization plus the sampling of the reporting devices from the
  fleet, treating them as a random sample of it (the course's §5.1, "combined sample-DP uncertainty"):
  a share adds θ(1 − θ)/n, a mean the values' own variance σ²/n. It answers "what holds in the fleet", which
  is what a comparison of two date ranges or versions asks (different days are different devices).
  It is larger, so it never makes a test reject more often.

Quantities: the share of a label (rr, grr, a numeric histogram's bucket), a candidate's frequency (sketches,
with their collision term), the mean (``mean``; a numeric histogram's midpoint mean). Tests: one-sample
(= θ₀, ≥ or ≤ θ₀), two-sample between :class:`Group` s (a day range or version against another; a breakdown
cell is just another :class:`Group`), Wald χ² goodness of fit and homogeneity (the label is independent of
the group) for categorical metrics. Each :class:`TestResult` carries the statistic, the p-value, the method,
an effect size with its interval and the power for a stated effect (or the effect detectable with 80 %
power). :func:`correct` adjusts the p-values of a family of tests (Holm by default) and says how.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms import Categorical, mechanism_of
from ldptel.client.mechanisms.capabilities import SUMMARY_LABELS as MEAN_LABELS
from ldptel.client.mechanisms.capabilities import proportion_label, require
from ldptel.client.mechanisms.state import Estimate, SketchState
from ldptel.client.protocol.params import ParamsBase

Uncertainty = Literal["population", "randomization"]
UNCERTAINTIES: tuple[Uncertainty, ...] = ("population", "randomization")
DEFAULT_UNCERTAINTY: Uncertainty = "population"
Alternative = Literal["two-sided", "greater", "less"]
ALTERNATIVES: tuple[Alternative, ...] = ("two-sided", "greater", "less")
Method = Literal["asymptotic", "monte-carlo"]
METHODS: tuple[Method, ...] = ("asymptotic", "monte-carlo")
Correction = Literal["holm", "bonferroni", "bh", "none"]
CORRECTIONS: tuple[Correction, ...] = ("holm", "bonferroni", "bh", "none")
MC_MAX_REPORTS = 20_000_000  # Monte Carlo simulates n × R reports at most (asymptotics are accurate long before)

UNCERTAINTY_MEANING: dict[str, str] = {
    "randomization": "randomization only: the spread over the privacy noise of the reports, given the devices that "
                     "reported (what these devices hold)",
    "population": "population: the privacy noise plus the sampling of the reporting devices from the fleet, as a "
                  "random sample of it (what holds in the fleet)",
}
CORRECTION_MEANING: dict[str, str] = {
    "holm": "Holm step-down over the {m} tests: family-wise error rate ≤ α under any dependence",
    "bonferroni": "Bonferroni over the {m} tests: family-wise error rate ≤ α under any dependence",
    "bh": "Benjamini-Hochberg over the {m} tests: false discovery rate ≤ α (independent or positively dependent tests)",
    "none": "none: each of the {m} tests at level α on its own",
}
_N01 = NormalDist()
POWER_TARGET = 0.8


@lru_cache(maxsize=256)
def _quantile(p: float) -> float:
    """The standard normal quantile of ``p``, computed once per level (every test asks for the same few)."""
    return _N01.inv_cdf(p)


# ------------------------------------------------------------------------------------------- the inputs
@dataclass(frozen=True)
class Group:
    """The reports of one metric version in one group (a day range; a breakdown cell once those exist).

    ``estimate``: the raw (not post-processed) estimate of every label (rr, grr, numeric histograms: the whole
    domain, in order), of the candidates (sketches) or the mean mechanism's summaries.
    """

    name: str
    params: ParamsBase
    estimate: Estimate

    @property
    def n(self) -> int:
        return self.estimate.n


@dataclass(frozen=True)
class Quantity:
    """A scalar estimand of one :class:`Group`: a share, a frequency or a mean, with its variance model.

    ``variances(θ)`` is (randomization variance, sampling variance) of the estimate if the truth were θ.
    """

    group: Group
    what: str
    kind: Literal["share", "average"]
    estimate: float
    variances: Callable[[float], tuple[float, float]]
    label: str | None = None  # shares: the label or candidate

    def variance(self, theta: float, uncertainty: Uncertainty) -> float:
        rand, sampling = self.variances(theta)
        return rand + sampling if uncertainty == "population" else rand

    def stderr(self, uncertainty: Uncertainty) -> float:
        return math.sqrt(max(self.variance(self.estimate, uncertainty), 0.0))


def share_of(group: Group, label: str) -> Quantity:
    """The share of ``label`` (a label of the domain, or a sketch candidate) among the group's reports."""
    est, params = group.estimate, group.params
    mech = mechanism_of(params)
    if mech.kind == "summary":
        raise InvalidParameterError("quantity", f"the mean of a {mech.name} metric (its rows are not counts)", label)
    if label not in est.labels:
        raise InvalidParameterError("value", f"one of {list(est.labels)[:20]}", label)
    i = est.labels.index(label)
    n = est.n
    counts = est.counts.astype(np.float64)
    at_estimate = float(mech.variance(params, counts, n)[i])
    rest = float(est.stderr[i]) ** 2 - at_estimate  # sketches: the collision term (the same at any θ)

    def variances(theta: float) -> tuple[float, float]:
        moved = counts.copy()
        moved[i] = theta * n
        rand = max(rest + float(mech.variance(params, moved, n)[i]), 0.0) / n**2
        t = min(max(theta, 0.0), 1.0)
        return rand, t * (1.0 - t) / n

    return Quantity(group, f"share of {label!r}", "share", float(counts[i]) / n, variances, label)


def mean_of(group: Group) -> Quantity:
    """The mean: the ``mean`` mechanism's estimate, or a numeric histogram's midpoint mean."""
    from ldptel.client.mechanisms.bucketed import midpoint_mean_parts

    est, params = group.estimate, group.params
    mech = mechanism_of(params)
    n = est.n
    if mech.kind == "histogram":
        hm, mids, consistent = midpoint_mean_parts(params, est)  # consistent: the Norm-Sub counts
        m = float(mids @ consistent) / n
        spread = max(float(consistent @ (mids - m) ** 2) / n, 0.0)  # the values' variance (at bucket midpoints)
        rand = hm.stderr**2
        return Quantity(group, MEAN_LABELS[0], "average", hm.estimate, lambda _theta: (rand, spread / n))
    if mech.kind != "summary" or MEAN_LABELS[0] not in est.labels:
        raise InvalidParameterError("quantity", "a share (this metric's estimates are counts, not a mean)", mech.name)
    i = est.labels.index(MEAN_LABELS[0])
    total = float(est.stderr[i]) ** 2  # the mean mechanism's stderr: the sample variance of the reports

    at_estimate: list[float] = []  # the variance at the estimate, once

    def variances(theta: float) -> tuple[float, float]:
        like = np.array([theta, n * theta, float(n)])
        rand = float(mech.variance(params, like, n)[0])  # every device at θ (exact for equal values)
        if not at_estimate:
            at_estimate.append(float(mech.variance(params, est.counts, n)[0]))
        return rand, max(total - at_estimate[0], 0.0)

    return Quantity(group, MEAN_LABELS[0], "average", float(est.counts[i]), variances)


# ------------------------------------------------------------------------------------------- the outputs
@dataclass(frozen=True)
class Effect:
    """The effect size (a difference, in the quantity's units, or Cohen's w) with its interval."""

    name: str
    estimate: float
    ci_low: float | None
    ci_high: float | None
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "estimate": self.estimate, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "confidence": self.confidence}


@dataclass(frozen=True)
class Power:
    """The power the test had against ``effect`` (when one was stated) at level ``alpha``, and the smallest effect
    it detects with probability :data:`POWER_TARGET` (same units)."""

    alpha: float
    effect: float | None
    power: float | None
    detectable: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "effect": self.effect, "power": self.power,
                f"detectable_effect_{round(POWER_TARGET * 100)}": self.detectable}


@dataclass(frozen=True)
class TestResult:
    """One test: what was tested, the statistic and its p-value, how the null was obtained, the effect, the power."""

    test: str
    hypothesis: str
    alternative: Alternative
    statistic_name: str
    statistic: float
    df: int | None
    p_value: float
    method: str
    uncertainty: Uncertainty
    alpha: float
    effect: Effect
    power: Power
    p_adjusted: float | None = None
    correction: str = "none"
    details: tuple[dict[str, Any], ...] = field(default=())

    @property
    def reject(self) -> bool:
        p = self.p_value if self.p_adjusted is None else self.p_adjusted
        return p <= self.alpha

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "test": self.test, "hypothesis": self.hypothesis, "alternative": self.alternative,
            "statistic_name": self.statistic_name, "statistic": self.statistic, "df": self.df,
            "p_value": self.p_value, "p_adjusted": self.p_adjusted, "correction": self.correction,
            "alpha": self.alpha, "reject": self.reject, "method": self.method,
            "uncertainty": self.uncertainty, "uncertainty_meaning": UNCERTAINTY_MEANING[self.uncertainty],
            "effect": self.effect.to_dict(), "power": self.power.to_dict(),
        }
        if self.details:
            out["details"] = list(self.details)
        return out


# --------------------------------------------------------------------------------------------- helpers
def _check(alternative: str, uncertainty: str, method: str, alpha: float, confidence: float) -> None:
    if alternative not in ALTERNATIVES:
        raise InvalidParameterError("alternative", f"one of {list(ALTERNATIVES)}", alternative)
    if uncertainty not in UNCERTAINTIES:
        raise InvalidParameterError("uncertainty", f"one of {list(UNCERTAINTIES)}", uncertainty)
    if method not in METHODS:
        raise InvalidParameterError("method", f"one of {list(METHODS)}", method)
    for name, value in (("alpha", alpha), ("confidence", confidence)):
        if not isinstance(value, (int, float)) or not 0 < value < 1:
            raise InvalidParameterError(name, "a number in (0, 1)", value)


def _z_pvalue(z: float, alternative: Alternative) -> float:
    if alternative == "greater":
        return 1.0 - _N01.cdf(z)
    if alternative == "less":
        return _N01.cdf(z)
    return 2.0 * (1.0 - _N01.cdf(abs(z)))


def _z_power(delta: float, sd0: float, sd1: float, alpha: float, alternative: Alternative) -> float:
    """P(reject) when the truth is ``delta`` from the null: sd0 the statistic's sd under the null, sd1 under it."""
    if sd1 <= 0:
        return float("nan")
    if alternative == "two-sided":
        crit = _quantile(1 - alpha / 2) * sd0
        return _N01.cdf((delta - crit) / sd1) + _N01.cdf((-delta - crit) / sd1)
    crit = _quantile(1 - alpha) * sd0
    return _N01.cdf(((delta if alternative == "greater" else -delta) - crit) / sd1)


def _detectable(sd0: float, alpha: float, alternative: Alternative) -> float:
    tail = alpha / 2 if alternative == "two-sided" else alpha
    return (_quantile(1 - tail) + _quantile(POWER_TARGET)) * sd0


def _method_text(method: Method, what: str, simulations: int = 0) -> str:
    if method == "monte-carlo":
        return (f"Monte Carlo null: {simulations} datasets simulated through the mechanism (privatize, fold, "
                f"estimate) from the null, the statistic {what}")
    return f"asymptotic: {what}, the mechanism's variance evaluated at the null"


_SYMBOLS: dict[str, str] = {"two-sided": "=", "greater": "≤", "less": "≥"}


def _sym(alternative: Alternative) -> str:
    return _SYMBOLS[alternative]


# ---------------------------------------------------------------------------------------------- z tests
def one_sample(
    q: Quantity,
    value: float,
    *,
    alternative: Alternative = "two-sided",
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    alpha: float = 0.05,
    confidence: float = 0.95,
    effect: float | None = None,
    method: Method = "asymptotic",
    simulations: int = 999,
    rng: np.random.Generator | None = None,
) -> TestResult:
    """H₀: θ = ``value`` (two-sided), θ ≤ value (``greater``: the alternative is above) or θ ≥ value (``less``).

    z = (θ̂ − θ₀)/√Var₀, Var₀ the variance of θ̂ at θ₀. Effect: θ̂ − θ₀ with its interval (variance at θ̂).
    """
    _check(alternative, uncertainty, method, alpha, confidence)
    value = float(value)
    if q.kind == "share" and not 0.0 <= value <= 1.0:
        raise InvalidParameterError("value", "a share in [0, 1]", value)
    sd0 = math.sqrt(max(q.variance(value, uncertainty), 1e-300))
    z = (q.estimate - value) / sd0
    zc = _quantile(0.5 + confidence / 2)
    se = q.stderr(uncertainty)
    diff = q.estimate - value
    eff = Effect("difference", diff, diff - zc * se, diff + zc * se, confidence)
    if method == "monte-carlo":
        p = _mc_pvalue(
            [q.group], [_null_probs_share(q, value)], uncertainty, z, alternative, simulations, rng,
            lambda gs: (_requantify(q, gs[0]).estimate - value) / sd0,
        )
    else:
        p = _z_pvalue(z, alternative)
    power = _power_z(q, value, sd0, effect, alpha, alternative, uncertainty)
    hyp = f"{q.what} {_sym(alternative)} {value:g}"
    return TestResult(
        test="one-sample", hypothesis=f"{q.group.name}: {hyp}", alternative=alternative, statistic_name="z",
        statistic=z, df=None, p_value=p, uncertainty=uncertainty, alpha=alpha, effect=eff, power=power,
        method=_method_text(method, "z = (estimate − null)/sd at the null", simulations),
    )


def _power_z(q: Quantity, value: float, sd0: float, effect: float | None, alpha: float, alternative: Alternative,
             uncertainty: Uncertainty) -> Power:
    detectable = _detectable(sd0, alpha, alternative)
    if effect is None:
        return Power(alpha, None, None, detectable)
    sd1 = math.sqrt(max(q.variance(value + effect, uncertainty), 0.0))
    return Power(alpha, effect, _z_power(effect, sd0, sd1, alpha, alternative), detectable)


def two_sample(
    a: Quantity,
    b: Quantity,
    *,
    alternative: Alternative = "two-sided",
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    alpha: float = 0.05,
    confidence: float = 0.95,
    effect: float | None = None,
    method: Method = "asymptotic",
    simulations: int = 999,
    rng: np.random.Generator | None = None,
) -> TestResult:
    """H₀: θ_A = θ_B (two-sided), θ_A ≤ θ_B (``greater``) or θ_A ≥ θ_B (``less``), for independent groups
    (disjoint reports: different days or versions; a breakdown cell against another).

    z = (θ̂_A − θ̂_B)/√(Var_A(θ̄) + Var_B(θ̄)), θ̄ the pooled estimate (weighted by n). Effect: θ̂_A − θ̂_B with
    its interval (each variance at its own estimate).
    """
    _check(alternative, uncertainty, method, alpha, confidence)
    if a.what != b.what or a.kind != b.kind:
        raise InvalidParameterError("quantities", "the same quantity of both groups", f"{a.what} and {b.what}")
    na, nb = a.group.n, b.group.n
    pooled = (na * a.estimate + nb * b.estimate) / (na + nb)
    sd0 = math.sqrt(max(a.variance(pooled, uncertainty) + b.variance(pooled, uncertainty), 1e-300))
    diff = a.estimate - b.estimate
    z = diff / sd0
    zc = _quantile(0.5 + confidence / 2)
    se = math.sqrt(max(a.variance(a.estimate, uncertainty) + b.variance(b.estimate, uncertainty), 0.0))
    eff = Effect("difference (A − B)", diff, diff - zc * se, diff + zc * se, confidence)
    if method == "monte-carlo":
        probs = _pooled_probs([a.group, b.group])
        p = _mc_pvalue(
            [a.group, b.group], [probs, probs], uncertainty, z, alternative, simulations, rng,
            lambda gs: (_requantify(a, gs[0]).estimate - _requantify(b, gs[1]).estimate) / sd0,
        )
    else:
        p = _z_pvalue(z, alternative)
    detectable = _detectable(sd0, alpha, alternative)
    if effect is None:
        power = Power(alpha, None, None, detectable)
    else:
        sd1 = math.sqrt(max(a.variance(pooled + effect / 2, uncertainty) + b.variance(pooled - effect / 2, uncertainty), 0.0))
        power = Power(alpha, effect, _z_power(effect, sd0, sd1, alpha, alternative), detectable)
    return TestResult(
        test="two-sample", hypothesis=f"{a.what}: A ({a.group.name}) {_sym(alternative)} B ({b.group.name})",
        alternative=alternative, statistic_name="z", statistic=z, df=None, p_value=p, uncertainty=uncertainty,
        alpha=alpha, effect=eff, power=power,
        method=_method_text(method, "z = (A − B)/sd at the pooled estimate", simulations),
    )


# ------------------------------------------------------------------------------------------- χ² tests
def _categorical_mechanism(params: ParamsBase) -> Categorical[Any, Any]:
    """The mechanism of a categorical metric (every label of its domain estimated, with their covariance)."""
    what = "a categorical metric for a χ² test over its whole domain"
    return require(mechanism_of(params), Categorical, what)  # type: ignore[type-abstract]  # mypy#4717


def _categorical(group: Group) -> tuple[np.ndarray, int]:
    """The raw count estimates of every label, and n (categorical metrics only)."""
    _categorical_mechanism(group.params)
    return group.estimate.counts.astype(np.float64), group.n


def _freq_cov(group: Group, probs: np.ndarray, uncertainty: Uncertainty) -> np.ndarray:
    """Covariance of the estimated shares if the true shares were ``probs``."""
    return _share_cov(group.params, group.n, probs, uncertainty)


def _share_cov(params: ParamsBase, n: int, probs: np.ndarray, uncertainty: Uncertainty,
               sampling: np.ndarray | None = None) -> np.ndarray:
    """:func:`_freq_cov`; ``sampling``: diag(probs) − probs probsᵀ when the caller has it (one per n·cov)."""
    cov = _categorical_mechanism(params).bucket_covariance(params, probs * n, n) / float(n) ** 2
    if uncertainty == "population":
        cov = cov + (np.diag(probs) - np.outer(probs, probs) if sampling is None else sampling) / n
    out: np.ndarray = cov
    return out


def _freq_var(group: Group, probs: np.ndarray, uncertainty: Uncertainty) -> np.ndarray:
    """The diagonal of :func:`_freq_cov` (the same numbers), without building the sampling term's d × d matrix."""
    n, params = group.n, group.params
    var = np.diagonal(_categorical_mechanism(params).bucket_covariance(params, probs * n, n)) / float(n) ** 2
    if uncertainty == "population":
        var = var + (probs - probs * probs) / n
    return var


Pinv = tuple[np.ndarray, np.ndarray, int]  # (Vᵀ, λ) of the eigenpairs spanning a covariance's range, and its rank


def _pinv(cov: np.ndarray) -> Pinv:
    """The eigenpairs of ``cov`` above its numerical null space (what :func:`_wald` needs of it), and its rank."""
    w, v = np.linalg.eigh((cov + cov.T) / 2)
    keep = w > w.max() * 1e-10
    return v[:, keep].T, w[keep], int(np.count_nonzero(keep))


def _wald_with(d: np.ndarray, pinv: Pinv) -> float:
    """dᵀ cov⁺ d from :func:`_pinv` of cov (a cov reused for many d is decomposed once)."""
    vt, w, _ = pinv
    proj = vt @ d
    return float(np.sum(proj**2 / w))


def _wald(d: np.ndarray, cov: np.ndarray) -> tuple[float, int]:
    """dᵀ cov⁺ d and the rank of cov (the χ² degrees of freedom)."""
    pinv = _pinv(cov)
    return _wald_with(d, pinv), pinv[2]


_NULL_CACHE_MAX_LABELS = 128  # bounds the cache below to 16 × a few 128 × 128 matrices


@lru_cache(maxsize=16)
def _null_pinv_cached(params: ParamsBase, n: int, probs: bytes, uncertainty: Uncertainty) -> Pinv:
    vt, w, rank = _pinv(_share_cov(params, n, np.frombuffer(probs, dtype=np.float64), uncertainty))
    vt.flags.writeable = w.flags.writeable = False  # shared by every later test at this null
    return vt, w, rank


def _null_pinv(group: Group, probs: np.ndarray, uncertainty: Uncertainty) -> Pinv:
    """:func:`_pinv` of :func:`_freq_cov` at the null shares ``probs`` (float64, 1-D): kept for the last few nulls,
    as the same null is tested against group after group (days, versions, simulated datasets)."""
    if probs.size <= _NULL_CACHE_MAX_LABELS:
        try:
            hash(group.params)
        except TypeError:  # a params type outside this package that is not hashable: no cache
            pass
        else:
            return _null_pinv_cached(group.params, group.n, probs.tobytes(), uncertainty)
    return _pinv(_freq_cov(group, probs, uncertainty))


def _chi2_sf(x: float, df: int) -> float:
    from scipy.special import chdtrc  # type: ignore[import-untyped]  # scipy has no type information

    return float(chdtrc(df, x))


def _chi2_power(lam: float, df: int, alpha: float) -> float:
    from scipy.special import chdtri, chndtr

    return float(1.0 - chndtr(chdtri(df, alpha), df, lam))


@lru_cache(maxsize=256)
def _chi2_detectable_lambda(df: int, alpha: float) -> float:
    """The noncentrality at which the χ² test has :data:`POWER_TARGET` power (bisection)."""
    lo, hi = 0.0, 1.0
    while _chi2_power(hi, df, alpha) < POWER_TARGET:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _chi2_power(mid, df, alpha) < POWER_TARGET else (lo, mid)
    return hi


def goodness_of_fit(
    group: Group,
    probs: Sequence[float] | np.ndarray,
    *,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    alpha: float = 0.05,
    confidence: float = 0.95,
    effect: float | None = None,
    method: Method = "asymptotic",
    simulations: int = 999,
    rng: np.random.Generator | None = None,
) -> TestResult:
    """H₀: the shares of the labels are ``probs`` (in label order, summing to 1).

    Wald χ² = (f̂ − π₀)ᵀ Σ₀⁺ (f̂ − π₀), Σ₀ the covariance of the estimated shares at π₀ (mechanism, plus the
    multinomial sampling of the devices for ``population``), df = rank Σ₀ (d − 1 for grr, d for an OUE
    histogram, whose bucket estimates do not sum to n exactly). Effect: Cohen's w = √Σ(π − π₀)²/π₀ (the plug-in
    minus its noise bias) with its interval (:func:`_w_interval`), and simultaneous intervals (Bonferroni over the labels) on each label's difference
    in ``details``; power for a stated w in the direction of the observed difference.
    """
    _check("two-sided", uncertainty, method, alpha, confidence)
    counts, n = _categorical(group)
    pi0 = np.asarray(probs, dtype=np.float64)
    if pi0.shape != counts.shape or not np.isfinite(pi0).all() or (pi0 < 0).any() or not abs(float(pi0.sum()) - 1.0) <= 1e-9:
        raise InvalidParameterError("probs", f"{counts.size} shares ≥ 0 summing to 1, one per label", list(pi0))
    if (pi0 == 0).any():
        raise InvalidParameterError("probs", "shares > 0 (a zero share makes Cohen's w undefined)", list(pi0))
    pinv0 = _null_pinv(group, pi0, uncertainty)
    f = counts / n

    def stat(gs: Sequence[Group]) -> float:
        return _wald_with(gs[0].estimate.counts / gs[0].n - pi0, pinv0)

    diff = f - pi0
    w_stat, df = _wald_with(diff, pinv0), pinv0[2]
    if method == "monte-carlo":
        p = _mc_pvalue([group], [pi0], uncertainty, w_stat, "greater", simulations, rng, stat)
    else:
        p = _chi2_sf(w_stat, df)
    var_hat = _freq_var(group, f.clip(0, 1), uncertainty)
    raw = float(np.sum(diff**2 / pi0))
    w_hat = math.sqrt(max(raw - float(np.sum(var_hat / pi0)), 0.0))
    eff = Effect("Cohen's w (bias-corrected; per-label differences in details)", w_hat,
                 *_w_interval(w_stat, df, raw, confidence), confidence)
    details = _label_details(group.estimate.labels, diff, var_hat, confidence, "difference from the null share")
    power = _chi2_power_for(effect, raw, w_stat, df, alpha)
    return TestResult(
        test="chi-square goodness of fit", hypothesis=f"{group.name}: shares = " + _probs_text(group.estimate.labels, pi0),
        alternative="two-sided", statistic_name="chi2", statistic=w_stat, df=df, p_value=p, uncertainty=uncertainty,
        alpha=alpha, effect=eff, power=power, details=details,
        method=_method_text(method, "Wald χ² with the covariance of the shares at the null", simulations),
    )


def homogeneity(
    groups: Sequence[Group],
    *,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    alpha: float = 0.05,
    confidence: float = 0.95,
    effect: float | None = None,
    method: Method = "asymptotic",
    simulations: int = 999,
    rng: np.random.Generator | None = None,
) -> TestResult:
    """χ² test of independence of the label and the group (H₀: every group has the same shares), for two or
    more independent groups (day ranges, versions, breakdown cells) of a categorical metric.

    The differences D_g = f̂_g − f̂_1 (g ≥ 2) are stacked with their covariance at the pooled shares π̄ (each
    group's mechanism covariance / n_g², plus the sampling term for ``population``); Wald χ² = Dᵀ C⁺ D, df its
    rank. Effect: Cohen's w of the table (bias-corrected), per-label differences from group 1 in ``details``.
    """
    _check("two-sided", uncertainty, method, alpha, confidence)
    if len(groups) < 2:
        raise InvalidParameterError("groups", "two or more groups to compare", len(groups))
    labels = groups[0].estimate.labels
    for g in groups:
        _categorical(g)
        if g.estimate.labels != labels:
            raise InvalidParameterError("groups", "groups with the same labels (the same domain)", g.name)
    pooled = _pooled_probs(groups)
    # the multinomial term (times n_g) of every group's covariance, built once
    sampling = np.diag(pooled) - np.outer(pooled, pooled) if uncertainty == "population" else None
    covs = [_share_cov(g.params, g.n, pooled, uncertainty, sampling) for g in groups]

    def stacked(gs: Sequence[Group]) -> np.ndarray:
        fs = [g.estimate.counts / g.n for g in gs]
        return np.concatenate([fs[i] - fs[0] for i in range(1, len(fs))])

    d, k = len(labels), len(groups) - 1
    big = np.tile(covs[0] + 0.0, (k, k))  # block (i, j): covs[0], plus covs[i] on the diagonal
    for i in range(1, len(groups)):
        big[(i - 1) * d : i * d, (i - 1) * d : i * d] = covs[0] + covs[i]
    pinv = _pinv(big)
    w_stat, df = _wald_with(stacked(groups), pinv), pinv[2]
    if method == "monte-carlo":
        p = _mc_pvalue(list(groups), [pooled] * len(groups), uncertainty, w_stat, "greater", simulations, rng,
                       lambda gs: _wald_with(stacked(gs), pinv))
    else:
        p = _chi2_sf(w_stat, df)
    total = sum(g.n for g in groups)
    fs = [g.estimate.counts / g.n for g in groups]
    fbar = sum(g.n * f for g, f in zip(groups, fs, strict=True)) / total
    safe = np.where(fbar > 0, fbar, np.inf)
    # One row per group: Σ_labels (f_g − f̄)²/f̄ (the plug-in w²'s terms), and the noise bias of each term:
    # Var(f_g − f̄) = Σ_h (δ_gh − n_h/N)² Var f_h, summed over h in order (the same sums as one group at a time).
    deviations = ((np.array(fs) - fbar) ** 2 / safe).sum(axis=1).tolist()
    raw = sum(g.n / total * dev for g, dev in zip(groups, deviations, strict=True))
    hat_vars = [_freq_var(g, f.clip(0, 1), uncertainty) for g, f in zip(groups, fs, strict=True)]
    coef = np.array([[(float(gi == hi) - h.n / total) ** 2 for hi, h in enumerate(groups)] for gi in range(len(groups))])
    var_dev = 0 + coef[:, :1] * hat_vars[0]
    for hi in range(1, len(groups)):
        var_dev = var_dev + coef[:, hi : hi + 1] * hat_vars[hi]
    bias = 0.0
    for g, term in zip(groups, (var_dev / safe).sum(axis=1).tolist(), strict=True):
        bias += g.n / total * term
    w_hat = math.sqrt(max(raw - bias, 0.0))
    eff = Effect("Cohen's w (bias-corrected; per-label differences in details)", w_hat,
                 *_w_interval(w_stat, df, raw, confidence), confidence)
    details: list[dict[str, Any]] = []
    for gi in range(1, len(groups)):
        var = hat_vars[gi] + hat_vars[0]
        for row in _label_details(labels, fs[gi] - fs[0], var, confidence, f"{groups[gi].name} − {groups[0].name}",
                                  family=d * (len(groups) - 1)):
            details.append(row)
    power = _chi2_power_for(effect, raw, w_stat, df, alpha)
    names = ", ".join(g.name for g in groups)
    return TestResult(
        test="chi-square independence (label × group)", hypothesis=f"the shares are the same in {names}",
        alternative="two-sided", statistic_name="chi2", statistic=w_stat, df=df, p_value=p, uncertainty=uncertainty,
        alpha=alpha, effect=eff, power=power, details=tuple(details),
        method=_method_text(method, "Wald χ² of the differences, covariance at the pooled shares", simulations),
    )


def _w_interval(w_stat: float, df: int, raw_w2: float, confidence: float) -> tuple[float | None, float | None]:
    """Cohen's w interval by inverting the noncentral χ² in its noncentrality λ (λ = W·w²/ŵ²_plug-in: the
    direction of the difference taken as observed): the λ whose distribution puts W at its (1 ± level)/2 quantiles."""
    from scipy.special import chndtr, chndtrinc

    if raw_w2 <= 0 or w_stat <= 0:
        return None, None
    tail = (1 - confidence) / 2
    hi = float(chndtrinc(w_stat, df, tail))
    lo = float(chndtrinc(w_stat, df, 1 - tail)) if float(chndtr(w_stat, df, 0.0)) > 1 - tail else 0.0
    per_w2 = w_stat / raw_w2
    return math.sqrt(max(lo, 0.0) / per_w2), math.sqrt(max(hi, 0.0) / per_w2)


def _chi2_power_for(effect: float | None, raw_w2: float, w_stat: float, df: int, alpha: float) -> Power:
    """Power against Cohen's w = ``effect`` in the direction of the observed difference: the noncentrality
    scales with w² (λ = W·w²/ŵ²_plug-in); the detectable w is where λ gives :data:`POWER_TARGET`."""
    if raw_w2 <= 0 or w_stat <= 0:
        return Power(alpha, effect, None, None)
    per_w2 = w_stat / raw_w2
    detectable = math.sqrt(_chi2_detectable_lambda(df, alpha) / per_w2)
    if effect is None:
        return Power(alpha, None, None, detectable)
    return Power(alpha, effect, _chi2_power(per_w2 * effect**2, df, alpha), detectable)


def _label_details(labels: Sequence[str], diff: np.ndarray, var: np.ndarray, confidence: float, what: str,
                   family: int | None = None) -> tuple[dict[str, Any], ...]:
    m = family or len(labels)
    z = _quantile(1 - (1 - confidence) / (2 * m))
    interval = f"simultaneous {confidence:g} (Bonferroni over {m})"
    se = np.sqrt(np.where(var < 0.0, 0.0, var))  # √max(v, 0) per label (NaN stays NaN), as math.sqrt would give
    half = z * se
    return tuple(
        {"value": label, "what": what, "difference": dv, "stderr": sv, "ci_low": lo, "ci_high": hi, "interval": interval}
        for label, dv, sv, lo, hi in zip(labels, diff.tolist(), se.tolist(), (diff - half).tolist(),
                                         (diff + half).tolist(), strict=True)
    )


def _probs_text(labels: Sequence[str], probs: np.ndarray) -> str:
    """The first 8 labels' shares (the rest as …)."""
    parts = [f"{label}:{p:.4g}" for label, p in zip(labels[:8], probs[:8].tolist(), strict=True)]
    return ", ".join(parts) + (", …" if len(labels) > 8 else "")


# ------------------------------------------------------------------------------------ multiple tests
def correct(results: Sequence[TestResult], method: Correction = "holm") -> list[TestResult]:
    """The results with ``p_adjusted`` set for the family (``holm``: Holm's step-down, ``bonferroni``, ``bh``:
    Benjamini–Hochberg, ``none``) and ``correction`` saying how; a family of one is left as it is."""
    if method not in CORRECTIONS:
        raise InvalidParameterError("correction", f"one of {list(CORRECTIONS)}", method)
    m = len(results)
    if m <= 1:
        return list(results)
    adj = adjust([r.p_value for r in results], method)
    text = CORRECTION_MEANING[method].format(m=m)
    return [replace(r, p_adjusted=float(a), correction=text) for r, a in zip(results, adj.tolist(), strict=True)]


def adjust(pvalues: Sequence[float], method: Correction) -> np.ndarray:
    """Adjusted p-values (compare each with α)."""
    p = np.asarray(pvalues, dtype=np.float64)
    m = p.size
    if method == "none" or m == 0:
        return p.copy()
    if method == "bonferroni":
        out: np.ndarray = np.minimum(p * m, 1.0)
        return out
    order = np.argsort(p, kind="stable")
    ranked = p[order]
    if method == "holm":
        steps = np.maximum.accumulate(np.minimum(ranked * (m - np.arange(m)), 1.0))
    else:  # bh
        steps = np.minimum.accumulate((ranked * m / np.arange(1, m + 1))[::-1])[::-1]
        steps = np.minimum(steps, 1.0)
    result = np.empty(m)
    result[order] = steps
    return result


# ----------------------------------------------------------------------------------------- Monte Carlo
def _requantify(q: Quantity, g: Group) -> Quantity:
    """The same quantity of a simulated group."""
    if q.kind == "average":
        return mean_of(g)
    assert q.label is not None
    return share_of(g, q.label)


def _null_probs_share(q: Quantity, value: float) -> np.ndarray:
    """Shares of every label under H₀: θ = value for the tested label, the rest in proportion to its estimate."""
    from ldptel.aggregator.postprocess import norm_sub

    g = q.group
    counts, n = _categorical(g)
    if q.kind != "share":
        raise InvalidParameterError("method", "asymptotic for a mean (the Monte Carlo null needs a categorical metric)",
                                    "monte-carlo")
    assert q.label is not None
    i = g.estimate.labels.index(q.label)
    others = norm_sub(counts, total=float(n)) / n
    others[i] = 0.0
    rest = float(others.sum())
    d = counts.size
    others = others / rest if rest > 0 else np.where(np.arange(d) == i, 0.0, 1.0 / (d - 1))
    probs: np.ndarray = others * (1.0 - value)
    probs[i] = value
    return probs


def _pooled_probs(groups: Sequence[Group]) -> np.ndarray:
    from ldptel.aggregator.postprocess import norm_sub

    total = sum(g.n for g in groups)
    counts = sum(_categorical(g)[0] for g in groups)
    out: np.ndarray = norm_sub(np.asarray(counts, dtype=np.float64), total=float(total)) / total
    return out


def _values_of(group: Group, codes: np.ndarray) -> Any:
    """Device values whose labels are ``codes`` (the inverse of the metric's labelling)."""
    from ldptel.client.mechanisms.bucketed import bucket_edges

    mech = mechanism_of(group.params)
    if mech.kind == "histogram":
        edges = bucket_edges(group.params)
        return ((edges[:-1] + edges[1:]) / 2.0)[codes]
    if proportion_label(mech) is not None:
        return codes.astype(bool)  # labels (false, true)
    return [group.estimate.labels[c] for c in codes.tolist()]


def null_counts(n: int, probs: np.ndarray, uncertainty: Uncertainty, rng: np.random.Generator) -> np.ndarray:
    """Devices per label under the null: multinomial (``population``: the devices are a sample) or n·π rounded by
    largest remainders (``randomization``: the reporting devices' values are fixed)."""
    if uncertainty == "population":
        out: np.ndarray = rng.multinomial(n, probs / probs.sum())
        return out
    exact = probs * n
    base: np.ndarray = np.floor(exact).astype(np.int64)
    short = n - int(base.sum())
    base[np.argsort(-(exact - base), kind="stable")[:short]] += 1
    return base


def simulate_group(group: Group, counts: np.ndarray, rng: np.random.Generator) -> Group:
    """The group re-run through the mechanism (privatize_batch, fold, estimate) with ``counts`` devices per label."""
    params = group.params
    mech = mechanism_of(params)
    codes = np.repeat(np.arange(counts.size), counts)
    rng.shuffle(codes)
    batch = mech.privatize_batch(_values_of(group, codes), params, rng=rng)
    state = mech.fold(params, [batch], SketchState.empty(params))
    est = mech.estimate(params, state, confidence=group.estimate.confidence)
    return Group(group.name, params, est)


def _mc_pvalue(
    groups: Sequence[Group],
    probs: Sequence[np.ndarray],
    uncertainty: Uncertainty,
    observed: float,
    alternative: Alternative,
    simulations: int,
    rng: np.random.Generator | None,
    stat: Callable[[Sequence[Group]], float],
) -> float:
    if not isinstance(simulations, int) or isinstance(simulations, bool) or not 99 <= simulations <= 100_000:
        raise InvalidParameterError("simulations", "an integer in [99, 100000]", simulations)
    reports = simulations * sum(g.n for g in groups)
    if reports > MC_MAX_REPORTS:
        raise InvalidParameterError(
            "method", f"asymptotic at this n (Monte Carlo would simulate {reports:,} reports, over {MC_MAX_REPORTS:,}; "
            "the normal approximation is accurate long before that)", "monte-carlo",
        )
    for g in groups:
        _categorical(g)
    gen = rng if rng is not None else np.random.default_rng()
    sims = np.empty(simulations)
    for r in range(simulations):
        fake = [simulate_group(g, null_counts(g.n, pi, uncertainty, gen), gen) for g, pi in zip(groups, probs, strict=True)]
        sims[r] = stat(fake)
    if alternative == "greater":
        extreme = int(np.count_nonzero(sims >= observed - 1e-12))
    elif alternative == "less":
        extreme = int(np.count_nonzero(sims <= observed + 1e-12))
    else:
        extreme = int(np.count_nonzero(np.abs(sims) >= abs(observed) - 1e-12))
    return (1 + extreme) / (simulations + 1)


__all__ = [
    "ALTERNATIVES", "CORRECTIONS", "DEFAULT_UNCERTAINTY", "METHODS", "UNCERTAINTIES", "UNCERTAINTY_MEANING",
    "Alternative", "Correction", "Effect", "Group", "Method", "Power", "Quantity", "TestResult", "Uncertainty", "adjust",
    "correct", "goodness_of_fit", "homogeneity", "mean_of", "null_counts", "one_sample", "share_of", "simulate_group",
    "two_sample",
]
