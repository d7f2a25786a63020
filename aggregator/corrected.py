"""Collision-corrected sketch estimates: least squares over a candidate list, plus one column for the rest.

The plain sketch estimate of a value carries a fixed bias for the metric's fixed hash family: its collisions
with the other values (:mod:`ldptel.client.mechanisms._sketch`). When a candidate list C covers most of the
reported mass, that bias can be removed: given the hash family and the row counts n_j, the sketch's debiased
cells y (:class:`~ldptel.client.mechanisms._sketch.Cells`) are linear in the counts,

    E[y_ja] = Σ_{c∈C} (n_j/n)·1[h_j(c) = a]·f(c) + (n_j/n)/m·R + (the uncovered values' collisions),

with R = n − Σ_C f the mass outside C spread evenly over each row (the uncovered values' deviation from even
is the residual collision term below). So the counts solve min ‖y − A·(f_C, R)‖₂ with
A[(j,a), c] = (n_j/n)·1[h_j(c) = a] and A[(j,a), R] = (n_j/n)/m (k·|C| + k·m nonzeros).

Solving it. With Ã_c = A_c − A_R (each candidate column centered within each row), A·(f, R) = Ã·f + A_R·(R + Σf):
the same column space, so the same least-squares f; Ã ⊥ A_R, so f = argmin ‖ỹ − Ã f‖ with ỹ = y centered
within each row, and R̂ = n − Σ f̂. ÃᵀÃ = s·(I + N) with s = Σ_j (n_j/n)²(1 − 1/m) and N a sparse random
matrix whose spectrum is Marchenko–Pastur with ratio γ = |C|/(k(m−1)): eigenvalues in [(1−√γ)², (1+√γ)²]
(condition ≈ 2 at |C| = 71,000, k = 2048, m = 1024, with no outlier: the centering removed the one the
uncentered columns share). ``scipy.sparse.linalg.lsqr`` on a LinearOperator (matvec: one scatter-add per
row, ``np.add.at``, which numpy ≥ 2 runs faster than ``bincount`` here; rmatvec: one gather per row; row hashes
recomputed on the fly, so no k·|C| table in memory) then gains a factor ≈ √γ per iteration (≈ 0.18 there).
Started from the plain estimates less the heavy values' expected collisions (:func:`solve`), it needs 2–4
iterations at |C| = 10⁴–10⁵, k = 2048, m = 1024 (8–10 at 256 × 256 with |C| = 10⁴, γ = 0.15).

Cost: O(k·|C|) per iteration (two passes over the k·|C| row hashes: ≈ 0.3 s at |C| = 71,000 on one core)
plus O(k·m) vector work; memory O(|C| + k·m). The iterations grow like log(precision)/log(1/√γ): with
γ = |C|/(k(m−1)), so with the ratio of candidates to cells, not with k or m alone. γ must stay below
:data:`MAX_GAMMA`.

Variance of f̂_c (the randomization variance, as for every estimate, plus the uncovered collisions). With
S_c = Σ_j y_{j,h_j(c)} and the cells' noise model Var(y_ja | rows) = α·n_j + β·F_j(a):

    Var(f̂_c) ≈ [ α·n·ρ + β·S_c⁺ + (1 − 1/k)·(S_c − f̂_c)⁺ ] / (1 − γ) + F̂2_out / (k(m−1)),

* α·n·ρ + β·S_c: the privacy noise of c's k cells (ρ = Σ_j d_j²n_j/((Σ_j d_j²)²·n) ≈ 1, d_j = n_j/n, for the
  weights least squares gives the rows; S_c⁺ = S_c clipped to [0, n]);
* (1 − 1/k)·(S_c − f̂_c): which row the reports of the values colliding with c picked (the model uses their
  expected share n_j/n; the candidate's own reports sum to f(c) over its rows exactly, so they add nothing);
* 1/(1 − γ): the diagonal of (ÃᵀÃ)⁻¹·s under Marchenko–Pastur, the noise of the other candidates' estimates
  that deflating them adds;
* F̂2_out/(k(m−1)): the collision term of the values outside C, F2_out = Σ_{d∉C} f(d)². It is estimated from
  the fit's residual r = ỹ − Ãf̂, which holds the outside values' collisions and the noise, less the part
  of both that the candidates' columns absorb: E‖r‖² ≈ (1 − γ)·s·F2_out + tr(Σ̃) − tr(PΣ̃), with
  tr(Σ̃) = (1 − 1/m)·Σ_{j,a} V̂_ja, tr(PΣ̃) ≈ Σ_c V̂_c/k, V̂_ja = α·n_j + (β + 1 − 1/k)·y_ja (noise and row
  choice) and V̂_c = Σ_j V̂_{j,h_j(c)}; clipped at 0. (F̂2 − Σ_C f̂² would do in expectation, but F̂2's noise
  from the heavy values' cells, 4F²V each, swamps a small F2_out; the residual has the heavy values removed.)

Values outside C (``outside``) are estimated by deflation: subtract A_C·f̂_C from y, then the plain estimator
with R̂ for n: f̂_o = m/(m−1)·(Σ_j y'_{j,h_j(o)} − R̂/m). y' is the least-squares residual, the projection of
the noise off the candidates' columns, so its noise along o's cells is (1 − γ) of the original: the variance
is (m/(m−1))² times the bracket above *times* (1 − γ), plus the same residual collision term.

Full dictionaries (``screen=True``). The fit refuses more than MAX_GAMMA·k(m−1) candidates (16,320 at
256 × 256): beyond that the design nears singular. With screening, a list longer than that is first ranked by
the plain estimates; the :data:`SCREEN_GAMMA`·k(m−1) largest are fitted by least squares and every other
candidate is estimated by deflation, as ``outside`` values (with their own stderr), in the order asked. The
screen uses the same reports, so the split is data-dependent: a value fitted because its plain estimate was
lucky keeps that noise (as any plain estimate does), and a small value screened out is estimated from a
residual its own noise helped place below the cut — the heavy values, the ones collision correction is for,
are far above the cut and unaffected. :func:`screen_size` says how many are fitted.

scipy is imported when a corrected estimate is asked for, never at import time (it is a dependency of the
``aggregator`` extra only).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from ldptel.client.errors import EmptyStateError, InvalidParameterError
from ldptel.client.mechanisms import Discovering, Estimate, Sketch, SketchState, mechanism_names, mechanism_of
from ldptel.client.mechanisms._sketch import Cells, SketchMechanism, SketchParams, family_of
from ldptel.client.mechanisms.state import labels_of
from ldptel.client.protocol.hashing import HashFamily
from ldptel.client.protocol.params import ParamsBase
from ldptel.client.protocol.validate import check_number

if TYPE_CHECKING:
    from scipy.sparse.linalg import LinearOperator  # type: ignore[import-untyped]  # scipy has no type information

MAX_GAMMA = 0.25  # |C| ≤ MAX_GAMMA·k(m−1): beyond it the fit nears singular, iterations gain little, variance grows
SCREEN_GAMMA = 0.125  # screening fits the SCREEN_GAMMA·k(m−1) largest plain estimates (variance × 1/(1 − γ) = 1.14)
TOLERANCE = 0.01  # RMS solver error ≤ TOLERANCE × the median randomization stderr (see solve())
SPECTRUM_MARGIN = 1.2
HEAVY = 128  # the warm start deflates the collisions of at most this many values ...
SIGNIFICANT = 4.0  # ... whose plain estimates exceed this many stderrs
ITERATION_LIMIT = 200
THREADS = min(2, os.cpu_count() or 1)
THREADED_CELLS = 1 << 22  # rows × candidates above which the passes run in threads
T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class Fit:
    """A least-squares fit over candidates: the estimates and what their variance needs."""

    counts: np.ndarray  # f̂_C, one per candidate
    iterations: int
    gamma: float  # |C|/(k(m−1))
    error: float  # a bound on the RMS distance of ``counts`` from the exact least-squares solution
    residual: float  # ‖ỹ − Ã·counts‖²


class Design:
    """Ã (centered candidate columns, row weights d_j = n_j/n) as matvec/rmatvec over row hashes.

    Rows are split between :data:`THREADS` threads (numpy releases the GIL in the hashing and the gathers).
    """

    def __init__(self, fam: HashFamily, bases: np.ndarray, weights: np.ndarray) -> None:
        self.fam, self.bases, self.weights = fam, bases, weights
        self.k, self.m, self.size = fam.k, fam.m, bases.size
        rows = np.flatnonzero(weights)
        parts = THREADS if rows.size * bases.size >= THREADED_CELLS else 1
        self.parts = [part.tolist() for part in np.array_split(rows, parts)]

    def _map(self, fn: Callable[[list[int]], T]) -> list[T]:
        if len(self.parts) == 1:
            return [fn(self.parts[0])]
        with ThreadPoolExecutor(len(self.parts)) as pool:
            return list(pool.map(fn, self.parts))

    def gather(self, matrix: np.ndarray) -> np.ndarray:
        """Σ_j matrix[j, h_j(c)] for every candidate c (float64)."""

        def part(rows: list[int]) -> np.ndarray:
            acc = np.zeros(self.size)
            idx = np.empty(self.size, dtype=np.uint64)
            buf = np.empty(self.size)
            for j in rows:
                self.fam.row_hash(self.bases, j, out=idx)
                np.take(matrix[j], idx.view(np.int64), mode="wrap", out=buf)  # every index < m by construction
                acc += buf
            return acc

        out: np.ndarray = np.sum(self._map(part), axis=0)
        return out

    def scatter(self, f: np.ndarray, *, centered: bool) -> np.ndarray:
        """The k × m matrix d_j·(Σ_c f_c·1[h_j(c) = a] − centered·Σf/m)."""
        out = np.zeros((self.k, self.m))
        shift = float(f.sum()) / self.m if centered else 0.0

        def part(rows: list[int]) -> None:
            idx = np.empty(self.size, dtype=np.uint64)
            for j in rows:
                self.fam.row_hash(self.bases, j, out=idx)
                row = out[j]
                np.add.at(row, idx.view(np.int64), f)  # numpy ≥ 2's fast path: faster than bincount here
                row -= shift
                row *= self.weights[j]

        self._map(part)
        return out

    def matvec(self, f: np.ndarray) -> np.ndarray:
        return self.scatter(np.ascontiguousarray(f, dtype=np.float64).reshape(-1), centered=True).reshape(-1)

    def rmatvec(self, r: np.ndarray) -> np.ndarray:
        rows = np.asarray(r, dtype=np.float64).reshape(self.k, self.m) * self.weights[:, None]
        out: np.ndarray = self.gather(rows) - float(rows.mean(axis=1).sum())
        return out

    def operator(self) -> LinearOperator:
        from scipy.sparse.linalg import LinearOperator

        return LinearOperator((self.k * self.m, self.size), matvec=self.matvec, rmatvec=self.rmatvec, dtype=np.float64)


def solve(design: Design, cells: Cells, *, start: np.ndarray, noise: np.ndarray, f2: float, tol: float = TOLERANCE) -> Fit:
    """f̂_C = argmin ‖ỹ − Ã f‖ by LSQR (module docstring), to an RMS error ≤ ``tol`` × the median stderr.

    ``start``: the plain estimates, ``noise``: their randomization variances, ``f2``: F̂2.

    LSQR is CG on ÃᵀÃ, whose spectrum lies in s·[(1 − r)², (1 + r)²], r = √γ (Marchenko–Pastur; r is taken
    :data:`SPECTRUM_MARGIN` times larger to be safe). So after t iterations ‖e_t‖ ≤ 2√κ·r^t·‖e_0‖, and after
    any iteration ‖x − f̂‖₂ ≤ ‖Ãᵀ(ỹ − Ãx)‖/λ_min. The first fact and an estimate of ‖e_0‖ give the number of
    iterations; the second, with LSQR's own ‖Ãᵀr‖, checks it, and LSQR goes on from where it stopped until
    the bound is met.

    The start. The plain estimates err by their collision bias, RMS √(F2/(k(m−1))), plus the deflation of the
    other candidates' noise, RMS √(γ/(1−γ)·mean Var). The first part is mostly the heavy values' collisions
    and has a structure that slows the first iterations (every value's error is correlated with its collision
    pattern with the top value, which sends a large gradient to the top value). So the heavy values' expected
    collisions are first subtracted from every plain estimate, with the heavy values' plain estimates:
    x₀ = x − (ÃᵀÃ_H·x_H/s − x_H) (the :data:`HEAVY` largest estimates above :data:`SIGNIFICANT` stderrs),
    which costs one gather and leaves √((F2 − Σ_H x²)/(k(m−1))) of the first part; done when the estimate of
    the iterations it saves is at least one.
    """
    from scipy.sparse.linalg import lsqr

    y = cells.y
    centered = (y - y.mean(axis=1, keepdims=True)).reshape(-1)
    size, cols = design.size, design.k * (design.m - 1)
    gamma = size / cols
    rate = min(SPECTRUM_MARGIN * math.sqrt(gamma), 0.9)
    s = float((design.weights**2).sum()) * (1 - 1 / design.m)
    low, high = s * (1 - rate) ** 2, s * (1 + rate) ** 2
    target = tol * math.sqrt(float(np.median(noise))) * math.sqrt(size)
    grow = 2 * math.sqrt(high / low)

    def iterations(error: float) -> int:
        return max(1, math.ceil(math.log(max(grow * error / target, 1.0)) / -math.log(rate)))

    coupling = gamma / (1 - gamma) * float(np.mean(noise))
    error = math.sqrt(size * (max(f2, 0.0) / cols + coupling))
    heavy = np.argsort(-start)[:HEAVY]
    heavy = heavy[start[heavy] > SIGNIFICANT * np.sqrt(noise[heavy])]
    lighter = math.sqrt(size * (max(f2 - float(start[heavy] @ start[heavy]), 0.0) / cols + coupling))
    op = design.operator()
    x = start
    if heavy.size and iterations(lighter) < iterations(error):
        part = Design(design.fam, design.bases[heavy], design.weights)
        shift = design.rmatvec(part.scatter(start[heavy], centered=True)) / s
        shift[heavy] -= start[heavy]
        x, error = start - shift, lighter
    used = 0
    while True:
        steps = min(iterations(error), ITERATION_LIMIT - used)
        result = lsqr(op, centered, atol=0.0, btol=0.0, iter_lim=steps, x0=x)
        x, used = np.asarray(result[0], dtype=np.float64), used + int(result[2])
        bound = float(result[7]) / low
        if bound <= target or used >= ITERATION_LIMIT or result[2] < steps:
            return Fit(x, used, gamma, bound / math.sqrt(size), float(result[3]) ** 2)
        error = bound


def corrected_estimate(
    params: ParamsBase,
    state: SketchState,
    *,
    candidates: Sequence[object],
    outside: Sequence[object] | None = None,
    confidence: float = 0.95,
    plain: Estimate | None = None,
    tol: float = TOLERANCE,
    screen: bool = False,
) -> Estimate:
    """Collision-corrected counts of ``candidates`` (least squares over them), then of ``outside`` (deflation).

    ``candidates`` should cover most of the reported mass (a dictionary, or the previous period's top list);
    the estimate of each is unbiased given the hash family up to the collisions with values outside them,
    which its stderr includes. Returns an :class:`Estimate` with ``estimator="corrected"`` whose labels are
    ``candidates`` then ``outside``. ``plain``: the plain estimate of the same state and candidates, when the
    caller has it (it starts the solver and gives each candidate's cell sums S_c; computed otherwise).
    ``screen``: more candidates than MAX_GAMMA·k(m−1) are allowed; the largest plain estimates are fitted and
    the rest deflated (module docstring). Without it such a list is refused.
    """
    mech = mechanism_of(params)
    if not isinstance(mech, SketchMechanism) or not isinstance(params, SketchParams):
        raise InvalidParameterError("params", f"params of a sketch mechanism ({', '.join(mechanism_names(having=Sketch, lacking=Discovering))})", params)
    check_number("confidence", confidence, 0, 1, open_interval=True)
    if isinstance(candidates, (str, bytes)) or len(candidates) == 0:
        raise InvalidParameterError("candidates", "a non-empty list of str or bytes values", candidates)
    extra: Sequence[object] = () if outside is None else outside
    if isinstance(extra, (str, bytes)):
        raise InvalidParameterError("outside", "a list of str or bytes values", outside)
    k, m = params.k, params.m
    unique = list(dict.fromkeys(candidates))
    if screen and len(unique) > MAX_GAMMA * k * (m - 1):
        return _screened(params, state, unique, list(candidates), extra, confidence=confidence, plain=plain, tol=tol)
    if len(unique) > MAX_GAMMA * k * (m - 1):
        raise InvalidParameterError(
            "candidates", f"at most {math.floor(MAX_GAMMA * k * (m - 1)):,} values for k={k}, m={m} (|C| ≤ {MAX_GAMMA}·k(m−1)), "
            "or screen=True (ldptel estimate --estimator corrected screens a longer list: the largest plain estimates "
            "fitted, the rest deflated)", f"{len(unique):,}"
        )
    cells = mech.cells(params, state)
    n = cells.n
    if n == 0:
        raise EmptyStateError(f"no {params.mechanism} reports to estimate from")

    labels = labels_of(unique)
    if plain is None or plain.labels != labels or plain.n != n or plain.mechanism != params.mechanism:
        plain = mech.estimate(params, state, candidates=unique, confidence=confidence)
    fam = family_of(params)
    weights = cells.row_counts.astype(np.float64) / n
    design = Design(fam, fam.bases(unique), weights)
    f2 = cells.f2()
    noise = mech.variance(params, plain.counts, n)  # randomization variance of the plain estimates
    fit = solve(design, cells, start=plain.counts, noise=noise, f2=f2, tol=tol)
    f = fit.counts
    s = (m - 1) / m * plain.counts + n / m  # S_c = Σ_j y_{j,h_j(c)}, from f̂ = m/(m−1)·(S − n/m)

    # Randomization variance of each estimate (module docstring).
    w2 = weights * weights
    rho = float((w2 * cells.row_counts).sum()) / float(w2.sum()) ** 2 / n
    one = 1.0 - 1.0 / k

    def randomization(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        noise = cells.alpha * n * rho + cells.beta * np.clip(sums, 0.0, n)
        rows = one * np.maximum(sums - counts, 0.0)
        out: np.ndarray = np.maximum(noise + rows, 0.0)
        return out

    # The values outside C: Σ_{d∉C} f(d)² from what the fit leaves (module docstring).
    grow = cells.beta + one
    left = (1 - 1 / m) * (cells.alpha * m * n + grow * float(cells.y.sum())) - (f.size * cells.alpha * n + grow * float(s.sum())) / k
    spread = float(w2.sum()) * (1 - 1 / m)
    uncovered = (fit.residual - left) / ((1.0 - fit.gamma) * spread)
    residual = max(uncovered, 0.0) / (k * (m - 1))
    var = randomization(s, f) / (1.0 - fit.gamma) + residual

    counts, variances = f, var
    if len(extra):
        obases = fam.bases(extra)
        outer = Design(fam, obases, weights)
        deflated = cells.y - design.scatter(f, centered=False)
        rest = n - float(f.sum())
        scale = m / (m - 1)
        fo = scale * (outer.gather(deflated) - rest / m)
        vo = scale * scale * randomization(outer.gather(cells.y), fo) * (1.0 - fit.gamma) + residual
        counts, variances = np.concatenate([f, fo]), np.concatenate([var, vo])

    position = {v: i for i, v in enumerate(unique)}
    order = np.array([position[v] for v in candidates] + list(range(len(unique), len(unique) + len(extra))), dtype=np.int64)
    labels = labels_of(list(candidates) + list(extra))
    return Estimate(params.mechanism, labels, counts[order], np.sqrt(variances[order]), n, confidence, "corrected")


def fit_limit(params: SketchParams) -> int:
    """The most candidates the least-squares fit takes without screening: MAX_GAMMA·k(m−1)."""
    return math.floor(MAX_GAMMA * params.k * (params.m - 1))


def screen_size(params: SketchParams) -> int:
    """How many of a screened list's candidates are fitted: SCREEN_GAMMA·k(m−1) (at least 1)."""
    return max(1, math.floor(SCREEN_GAMMA * params.k * (params.m - 1)))


def _screened(
    params: ParamsBase,
    state: SketchState,
    unique: list[object],
    asked: list[object],
    extra: Sequence[object],
    *,
    confidence: float,
    plain: Estimate | None,
    tol: float,
) -> Estimate:
    """A candidate list over the fit's limit: fit the largest plain estimates, deflate the rest (module docstring)."""
    assert isinstance(params, SketchParams)
    labels = labels_of(unique)
    if plain is None or plain.labels != labels or plain.n != state.n or plain.mechanism != params.mechanism:
        plain = mechanism_of(params).estimate(params, state, candidates=unique, confidence=confidence)
    keep = screen_size(params)
    order = np.argsort(-plain.counts, kind="stable")
    fitted = sorted(order[:keep].tolist())
    rest = sorted(order[keep:].tolist())
    fit_values = [unique[i] for i in fitted]
    rest_values = [unique[i] for i in rest]
    sub = Estimate(plain.mechanism, labels_of(fit_values), plain.counts[fitted], plain.stderr[fitted], plain.n, confidence)
    out = corrected_estimate(params, state, candidates=fit_values, outside=[*rest_values, *extra],
                             confidence=confidence, plain=sub, tol=tol)
    position = {v: i for i, v in enumerate([*fit_values, *rest_values])}
    index = np.array([position[v] for v in asked] + list(range(len(unique), len(unique) + len(extra))), dtype=np.int64)
    return Estimate(params.mechanism, labels_of(asked + list(extra)), out.counts[index], out.stderr[index], out.n,
                    confidence, "corrected")


__all__ = ["MAX_GAMMA", "SCREEN_GAMMA", "Design", "Fit", "corrected_estimate", "fit_limit", "screen_size", "solve"]
