"""Which estimated candidates are distinguishable from zero once the number of candidates is accounted for
(issue 24 §2).

Estimating K candidates and showing the top N is a selection: the largest of 400 noisy estimates of values
nobody holds sits near 2.9 stderr, so its marginal 95% interval excludes zero although nothing is there. Each
row is therefore tested for f > 0 with the one-sided normal p-value p = 1 − Φ(estimate / stderr), over **all K
candidates estimated** (not just the rows shown), by one of:

* ``bonferroni`` (default): p ≤ α/K, i.e. estimate ≥ z_{1−α/K}·stderr (3.66 at K = 400, α = 0.05). The chance
  that *any* candidate nobody holds is marked is at most α (family-wise, any dependence between estimates) —
  what ``discover`` already promises. A true value is marked with probability ≥ 1 − β once its count is
  (z_{1−α/K} + z_{1−β})·stderr, e.g. 5.3 stderr at K = 400 for 95%.
* ``bh`` (Benjamini–Hochberg): the k smallest p-values where k is the largest with p_(k) ≤ k·α/K. It controls
  the expected share of marked rows that are false (FDR ≤ α, for independent or positively dependent
  estimates), not the chance of one: more rows are marked when many values are real.

Simultaneous intervals (``simultaneous=True``): estimate ± z_{1−α/(2K)}·stderr, which all K cover their
truths together with probability ≥ 1 − α (Bonferroni), so they stay valid for whichever rows are shown.
A row with an infinite stderr (nothing known) is never marked; a zero stderr marks a positive estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any

import numpy as np

from ldptel.client.errors import InvalidParameterError
from ldptel.client.protocol.validate import check_number

METHODS = ("bonferroni", "bh")
DEFAULT_METHOD = "bonferroni"
DEFAULT_ALPHA = 0.05
_NORMAL = NormalDist()


def check_method(method: object) -> str:
    if method not in METHODS:
        raise InvalidParameterError("selection", f"one of {', '.join(METHODS)}", method)
    return str(method)


@dataclass(frozen=True, kw_only=True)
class Selection:
    """The test of every candidate (in the estimate's order): ``significant`` per candidate; ``threshold`` the
    z an estimate had to reach (Bonferroni: z_{1−α/K}; BH: the largest marked p-value's z, inf when none);
    ``low``/``high`` the simultaneous intervals when asked (else None)."""

    method: str
    alpha: float
    candidates: int
    significant: np.ndarray
    p_values: np.ndarray
    threshold: float
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    total_marked: int = -1  # marked among all candidates (set by :func:`select`; kept by :meth:`take`)

    def take(self, keep: np.ndarray) -> Selection:
        """The rows at ``keep`` (a top-N cut): the test stays the one over all :attr:`candidates`."""
        return replace(self, significant=self.significant[keep], p_values=self.p_values[keep],
                       low=None if self.low is None else self.low[keep], high=None if self.high is None else self.high[keep])

    @property
    def marked(self) -> int:
        """Candidates marked, among all of them (not only the rows a top-N cut kept)."""
        return self.total_marked if self.total_marked >= 0 else int(self.significant.sum())

    def describe(self) -> str:
        """One sentence for a table's header: that the rows were selected and how they were tested."""
        how = (f"Bonferroni, family-wise α = {self.alpha:g}: estimate ≥ {self.threshold:.2f} stderr"
               if self.method == "bonferroni" else f"Benjamini–Hochberg, false discovery rate α = {self.alpha:g}")
        simultaneous = (f"; intervals are simultaneous over all {self.candidates:,} (z = {self.z_simultaneous:.2f})"
                        if self.low is not None else "")
        return (f"rows selected from {self.candidates:,} candidates; * = distinguishable from zero after "
                f"{self.candidates:,} comparisons ({how}); {self.marked} of {self.candidates:,} marked{simultaneous}")

    @property
    def z_simultaneous(self) -> float:
        return simultaneous_z(self.alpha, self.candidates)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "alpha": self.alpha, "candidates": self.candidates, "marked": self.marked,
                "threshold_stderr": self.threshold if np.isfinite(self.threshold) else None,
                "simultaneous": self.low is not None, "note": self.describe()}


def simultaneous_z(alpha: float, candidates: int) -> float:
    """z_{1−α/(2K)}: the half-width in stderrs of K two-sided intervals holding together with 1 − α."""
    return _NORMAL.inv_cdf(1 - alpha / (2 * max(candidates, 1)))


def p_values(estimates: np.ndarray, stderr: np.ndarray) -> np.ndarray:
    """One-sided p-values of f > 0: 1 − Φ(estimate/stderr) (1 for an infinite stderr; 0 or 1 for a zero one)."""
    est = np.asarray(estimates, dtype=np.float64)
    se = np.asarray(stderr, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, est / se, np.where(est > 0, np.inf, -np.inf))
    z = np.where(np.isfinite(se), np.nan_to_num(z, nan=-np.inf), -np.inf)
    out: np.ndarray = _upper_tail(z).astype(np.float64)
    return out


def _upper_tail(z: np.ndarray) -> np.ndarray:
    """1 − Φ(z) = erfc(z/√2)/2, exact in the far tail: scipy's vectorized erfc (the aggregator extra's; imported
    here, not at import time), else math.erfc value by value (100,000 candidates: ~0.1 s)."""
    try:
        from scipy.special import erfc  # type: ignore[import-untyped]  # scipy has no type information
    except ModuleNotFoundError:
        slow: np.ndarray = _upper_tail_math(z)
        return slow
    out: np.ndarray = np.asarray(0.5 * erfc(np.asarray(z, dtype=np.float64) / math.sqrt(2.0)), dtype=np.float64)
    return out


_upper_tail_math = np.vectorize(lambda z: 0.5 * math.erfc(z / math.sqrt(2.0)), otypes=[np.float64])


def select(
    estimates: np.ndarray,
    stderr: np.ndarray,
    *,
    alpha: float = DEFAULT_ALPHA,
    method: str = DEFAULT_METHOD,
    simultaneous: bool = False,
) -> Selection:
    """Test every candidate for f > 0, accounting for their number (module docstring)."""
    method = check_method(method)
    alpha = check_number("alpha", alpha, 0.0, 1.0, open_interval=True)
    est = np.asarray(estimates, dtype=np.float64)
    se = np.asarray(stderr, dtype=np.float64)
    if est.shape != se.shape or est.ndim != 1:
        raise InvalidParameterError("stderr", f"one stderr per estimate ({est.shape})", se.shape)
    k = est.size
    p = p_values(est, se)
    if method == "bonferroni":
        cut = alpha / max(k, 1)
        significant = p <= cut
        threshold = _NORMAL.inv_cdf(1 - cut) if k else float("inf")
    else:
        order = np.argsort(p, kind="stable")
        passing = np.flatnonzero(p[order] <= alpha * np.arange(1, k + 1) / max(k, 1))
        significant = np.zeros(k, dtype=bool)
        threshold = float("inf")
        if passing.size:
            last = int(passing[-1])
            significant[order[: last + 1]] = True
            threshold = _NORMAL.inv_cdf(1 - alpha * (last + 1) / k)
    low = high = None
    if simultaneous:
        z = simultaneous_z(alpha, k)
        low, high = est - z * se, est + z * se
    return Selection(method=method, alpha=alpha, candidates=k, significant=significant, p_values=p,
                     threshold=float(threshold), low=low, high=high, total_marked=int(significant.sum()))
