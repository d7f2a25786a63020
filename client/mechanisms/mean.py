"""Bounded mean and sum of a number: clip to [lo, hi] on the device, then a one-bit or a discrete hybrid report.

A value x is clipped to the metric's declared range [lo, hi] *on the device* (a value outside the range is
reported as the nearest bound, so the estimate is the mean of the clipped values: the range is part of the
spec and is printed with every estimate), quantized to u = ⌈(x − lo)/(hi − lo)·2^V⌉ ∈ [0, 2^V]
(V = :data:`VALUE_BITS`), and mapped to t = 2u/2^V − 1 ∈ [−1, 1]. Each variant outputs one symbol s with a
debias value y_s such that E[y | x] = t exactly; the estimate of the mean is lo + (hi − lo)(ȳ + 1)/2. The
quantization biases the mean by at most (hi − lo)·2^−(V+1) and costs no privacy.

* ``onebit``: 1BitMean (Ding, Kulkarni, Yekhanin, NeurIPS 2017), which is Duchi et al.'s one-dimensional
  mechanism (FOCS 2013) after an affine map: a value coin c = 1[r < u] (r a uniform V-bit integer), then
  randomized response that flips c with probability f = T_f/2^B (T_f rounded *up*: more noise).
  y = ±1/(1 − 2f), ε_eff = ln((2^B − T_f)/T_f). Symbols 0, 1 (the bit). A batch draws the coin and the
  flip as one comparison against their joint integer threshold (:func:`onebit_reports`: same distribution).
* ``dhm``: the discrete hybrid mechanism (ldptel's integer form of Wang et al.'s hybrid of the piecewise
  mechanism, ICDE 2019). With probability α = A/2^16 the report is the *discrete piecewise* output,
  else the one-bit output above (the flag is in the symbol). Piecewise: t is stochastically rounded to the
  grid point i ∈ {0..G} (t_i = −1 + 2i/G, adds at most 1/G² of variance), and the output cell
  j ∈ {0..G+w−1} falls in the window {i..i+w−1} with probability T_w/2^B (T_w rounded *down*), uniformly,
  else uniformly among the other G cells. y_j = a(j − (G+w−1)/2), a = 2/(G·w·(P_h − P_l)) with
  P_h = T_w/(2^B·w), P_l = (2^B − T_w)/(2^B·G); ε of the branch ln(T_w·G/(w(2^B − T_w))). The flag is sent,
  so the likelihood ratio of every symbol is that of its branch: ε_eff is the larger of the two branches'.
  (w, A) minimize the worst-case variance over the grid points; they are chosen once when the params are
  built and then stored in them, so the device and the aggregator never recompute them.

``variant="auto"`` (the default) takes whichever has the smaller worst-case variance (dhm from ε ≈ 0.61 up,
where the hybrid's α becomes positive). Every draw is an integer threshold or a rejection-sampled uniform
integer (Mironov, CCS 2012: no floating-point sampling); the report is a bit (onebit) or a cell index.

State: the exact integer count of each output symbol (1 × number of symbols): nothing is quantized after the
device, so the folded state is exact and additive; the estimate is linear in it.

Standard error: s/√n, with s² the sample variance of the n debiased outputs y (from the symbol counts). It
is the standard error of the mean of n i.i.d. reports, so it covers the privacy noise *and* the spread of the
devices' values (a sample of devices from a population); it exceeds the randomization-only stderr that the
categorical mechanisms report by the values' own spread (Σ t_k² ≥ n·t̄²), which is small beside the noise
at any ε ≤ 4. The sum is n times the mean (n = the number of reports, exact); the count is n, exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from ldptel.client.errors import EmptyStateError, InvalidParameterError, InvalidValueError
from ldptel.client.mechanisms.base import Column, ReportBatch, Values
from ldptel.client.mechanisms.capabilities import SUMMARY_LABELS, Summary
from ldptel.client.mechanisms.state import Estimate, SketchState
from ldptel.client.protocol.params import (
    SINGLE_DRAW_PROB_BITS,
    ParamsBase,
    check_epsilon,
    flip_epsilon,
    safe_flip_threshold,
)
from ldptel.client.protocol.rng import (
    below_threshold,
    bernoulli,
    check_rng,
    draw_bytes,
    int_below,
    random_words,
    uniform_below,
)
from ldptel.client.protocol.validate import check_choice, check_int, check_number

VALUE_BITS = 32  # V: the fixed-point resolution of a clipped value, u ∈ [0, 2^V]
GRID = 256  # G: grid points − 1 of the piecewise branch
SHARE_BITS = 16  # α = A / 2^SHARE_BITS
MAX_ABS_BOUND = 1e15  # |lo|, |hi| (2^V steps of (hi − lo) stay far above float64 resolution)
# The narrowest range, hi − lo, in the metric's unit. Below about 2.4e-299, 2^V/(hi − lo) overflows float64 and the
# device's scaling turns a value into NaN (a served spec with lo = 0, hi = 5e-324 made report() raise); well above
# that, nothing measured needs a range narrower than 1e-12 of its unit: change the unit instead. Checked wherever
# a spec is built (MeanParams, so DailyMeanParams too; the registry, the CLI, the device's spec cache).
MIN_SPAN = 1e-12
MEAN_VARIANTS = ("auto", "onebit", "dhm")
MEAN_LABELS = SUMMARY_LABELS
_ALPHA_STEPS = 64  # the grid search over α uses multiples of 1/64


# ------------------------------------------------------------------------------------ exact thresholds
def _dpm_epsilon(t: int, w: int, bits: int) -> float:
    """ε of the piecewise branch: ln(P_h/P_l) = ln(T·G/(w·(2^B − T)))."""
    return math.log(t) + math.log(GRID) - math.log(w) - math.log((1 << bits) - t)


@lru_cache(maxsize=4096)
def dpm_threshold(epsilon: float, w: int, bits: int) -> int:
    """Largest T ≤ 2^B·w·e^ε/(w·e^ε + G) whose ε (from the integers) does not exceed ε (rounded down: more noise)."""
    e = math.exp(epsilon)
    t = math.floor((1 << bits) * w * e / (w * e + GRID))
    while t > 1 and _dpm_epsilon(t, w, bits) > epsilon:
        t -= 1
    return t


def _flip_threshold(epsilon: float, bits: int) -> int:
    return safe_flip_threshold(1.0 / (math.exp(epsilon) + 1.0), bits, epsilon, 1.0)


def _dpm_values(t: int, w: int, bits: int) -> tuple[np.ndarray, float, float]:
    """(y of each piecewise cell, P_h, P_l) for window w and threshold T."""
    full = float(1 << bits)
    p_h, p_l = t / (full * w), (full - t) / (full * GRID)
    a = 2.0 / (GRID * w * (p_h - p_l))
    cells = np.arange(GRID + w, dtype=np.float64)
    return a * (cells - (GRID + w - 1) / 2.0), p_h, p_l


def _dpm_second_moments(y: np.ndarray, w: int, p_h: float, p_l: float) -> np.ndarray:
    """E[y² | grid point i] for i = 0..G: P_l·Σ_all y² + (P_h − P_l)·Σ_{j ∈ window(i)} y²."""
    sq = np.concatenate(([0.0], np.cumsum(y * y)))
    window = sq[w : w + GRID + 1] - sq[: GRID + 1]
    out: np.ndarray = p_l * sq[-1] + (p_h - p_l) * window
    return out


_T_GRID = -1.0 + 2.0 * np.arange(GRID + 1) / GRID


@lru_cache(maxsize=256)
def choose_hybrid(epsilon: float, bits: int = SINGLE_DRAW_PROB_BITS) -> tuple[int, int, float]:
    """(w, A, worst-case Var_t over the grid points) of the dhm with the smallest worst case; A = 0: one-bit.

    A grid search over every window w ∈ [1, G] and α ∈ {0, 1/64, …, 1} (ldp-math-2 §1.2 reports the same
    optimum: w = 83, α ≈ .93 at ε = 4). The one-bit worst case, C² (t = 0), is the A = 0 column.
    """
    f = _flip_threshold(epsilon, bits) / (1 << bits)
    c2 = 1.0 / (1.0 - 2.0 * f) ** 2
    alphas = np.arange(_ALPHA_STEPS + 1) / _ALPHA_STEPS
    best = (1, 0, c2)  # onebit: worst case C² − 0² at t = 0
    for w in range(1, GRID + 1):
        t = dpm_threshold(epsilon, w, bits)
        if t * GRID <= w * ((1 << bits) - t):  # P_h ≤ P_l: the window carries nothing
            continue
        y, p_h, p_l = _dpm_values(t, w, bits)
        s = _dpm_second_moments(y, w, p_h, p_l)
        var = alphas[:, None] * s[None, :] + (1 - alphas[:, None]) * c2 - _T_GRID[None, :] ** 2
        worst = var.max(axis=1)
        k = int(worst.argmin())
        if worst[k] < best[2] - 1e-12:
            best = (w, k * ((1 << SHARE_BITS) // _ALPHA_STEPS), float(worst[k]))
    return best


# ---------------------------------------------------------------------------------------------- params
@dataclass(frozen=True, slots=True, kw_only=True)
class MeanParams(ParamsBase):
    """Bounded mean/sum of a number clipped to [lo, hi] (module docstring).

    ``variant``: ``"auto"`` (resolved when built, then stored), ``"onebit"`` or ``"dhm"``; ``window`` and
    ``pm_share`` (dhm: w and A, α = A/2^16) are chosen when None and stored explicitly.
    """

    mechanism: ClassVar[str] = "mean"
    lo: float
    hi: float
    variant: str = "auto"
    window: int | None = None
    pm_share: int | None = None
    prob_bits: int = SINGLE_DRAW_PROB_BITS

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        lo = check_number("lo", self.lo, -MAX_ABS_BOUND, MAX_ABS_BOUND)
        hi = check_number("hi", self.hi, -MAX_ABS_BOUND, MAX_ABS_BOUND)
        if not hi > lo:
            raise InvalidParameterError("hi", f"a number above lo = {lo:g}", self.hi)
        if not hi - lo >= MIN_SPAN:
            raise InvalidParameterError(
                "hi - lo", f"at least {MIN_SPAN:g} (a range too narrow for the device's 2^{VALUE_BITS}-step scaling "
                "in float64; use a smaller unit)", hi - lo)
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        check_int("prob_bits", self.prob_bits, SINGLE_DRAW_PROB_BITS, SINGLE_DRAW_PROB_BITS)
        variant = check_choice("variant", self.variant, MEAN_VARIANTS)
        if variant == "onebit" and (self.window is not None or self.pm_share is not None):
            raise InvalidParameterError("window", "unset (None) for the onebit variant", self.window)
        if variant != "onebit" and (self.window is None or self.pm_share is None):
            w, share, _worst = choose_hybrid(self.epsilon, self.prob_bits)
            if variant == "auto" and share == 0:
                variant = "onebit"
            elif variant == "dhm" and share == 0:
                share = (1 << SHARE_BITS) // _ALPHA_STEPS  # asked for dhm: the smallest piecewise share
            if variant != "onebit":
                object.__setattr__(self, "window", w if self.window is None else self.window)
                object.__setattr__(self, "pm_share", share if self.pm_share is None else self.pm_share)
        if variant == "auto":
            variant = "dhm"
        object.__setattr__(self, "variant", variant)
        if variant == "dhm":
            w = check_int("window", self.window, 1, GRID)
            check_int("pm_share", self.pm_share, 0, 1 << SHARE_BITS)
            t = self.window_threshold
            if t * GRID <= w * ((1 << self.prob_bits) - t):
                raise InvalidParameterError("window", "narrow enough that epsilon survives rounding", w)

    @property
    def flip_threshold(self) -> int:
        """T_f: the one-bit flip probability 1/(e^ε + 1) rounded up to T_f/2^B."""
        return _flip_threshold(self.epsilon, self.prob_bits)

    @property
    def window_threshold(self) -> int:
        """T_w (dhm): P(cell in the window) rounded down to T_w/2^B; 0 for onebit."""
        return 0 if self.window is None else dpm_threshold(self.epsilon, self.window, self.prob_bits)

    @property
    def alpha(self) -> float:
        """P(piecewise branch): A/2^16 (0 for onebit)."""
        return 0.0 if self.pm_share is None else self.pm_share / (1 << SHARE_BITS)

    @property
    def symbols(self) -> int:
        """Output symbols: the bit (0, 1), then dhm's G + w piecewise cells."""
        return 2 if self.window is None else 2 + GRID + self.window

    @property
    def effective_epsilon(self) -> float:
        eps = []
        if self.alpha < 1.0:
            eps.append(flip_epsilon(self.flip_threshold, self.prob_bits))
        if self.alpha > 0.0 and self.window is not None:
            eps.append(_dpm_epsilon(self.window_threshold, self.window, self.prob_bits))
        return max(eps)

    def debias_values(self) -> np.ndarray:
        """y of every output symbol (t units): E[y | x] = t for every x."""
        f = self.flip_threshold / (1 << self.prob_bits)
        c = 1.0 / (1.0 - 2.0 * f)
        bit = np.array([-c, c])
        if self.window is None:
            return bit
        y, _p_h, _p_l = _dpm_values(self.window_threshold, self.window, self.prob_bits)
        return np.concatenate((bit, y))

    def report_variance(self, t: np.ndarray | float) -> np.ndarray:
        """Var(y | x) in t units for quantized inputs t (exact, including the grid rounding of the piecewise
        branch): α·E_pm[y² | t] + (1 − α)·C² − t²."""
        tq = np.asarray(t, dtype=np.float64)
        f = self.flip_threshold / (1 << self.prob_bits)
        c2 = 1.0 / (1.0 - 2.0 * f) ** 2
        second = np.full(tq.shape, c2)
        if self.window is not None:
            y, p_h, p_l = _dpm_values(self.window_threshold, self.window, self.prob_bits)
            s = _dpm_second_moments(y, self.window, p_h, p_l)
            pos = (tq + 1.0) * GRID / 2.0
            i0 = np.minimum(np.floor(pos).astype(np.int64), GRID - 1)
            frac = pos - i0
            pm = (1.0 - frac) * s[i0] + frac * s[i0 + 1]
            second = self.alpha * pm + (1.0 - self.alpha) * c2
        out: np.ndarray = second - tq * tq
        return out

    def worst_case_variance(self) -> float:
        """max over the grid points of Var_t (t units)."""
        return float(self.report_variance(_T_GRID).max())

    def scaled(self, values: np.ndarray) -> np.ndarray:
        """v = (clip(x) − lo)/(hi − lo)·2^V ∈ [0, 2^V] (float64); a V-bit integer r has r < v iff r < ⌈v⌉."""
        x: np.ndarray = np.clip(values, self.lo, self.hi)
        x -= self.lo
        x *= (1 << VALUE_BITS) / (self.hi - self.lo)
        return x

    def quantize(self, values: np.ndarray) -> np.ndarray:
        """u = ⌈v⌉ as float64 integers in [0, 2^V] (exact in float64)."""
        # d·(2^V/d) may round one ulp above 2^V; the cap keeps u in its range (the sampling is the same).
        out: np.ndarray = np.minimum(np.ceil(self.scaled(values)), float(1 << VALUE_BITS))
        return out

    def quantize_one(self, x: float) -> int:
        """:meth:`quantize` of one value as an int: the same float64 operations on a Python float (bit-identical),
        without building arrays (one report's path)."""
        v = min(max(x, self.lo), self.hi)
        v -= self.lo
        v *= (1 << VALUE_BITS) / (self.hi - self.lo)
        return min(math.ceil(v), 1 << VALUE_BITS)

    def t_of(self, values: np.ndarray | Sequence[float]) -> np.ndarray:
        """The quantized t ∈ [−1, 1] a device reports for each value (what the estimate is unbiased for)."""
        out: np.ndarray = 2.0 * self.quantize(np.asarray(values, dtype=np.float64)) / (1 << VALUE_BITS) - 1.0
        return out


@dataclass(frozen=True, eq=False, kw_only=True)
class MeanBatch(ReportBatch):
    """mean reports: ``bits`` (onebit: one bit per report, packed) or ``cols`` (dhm: the symbol index)."""

    mechanism: str = "mean"


# ------------------------------------------------------------------------------------------- mechanism
def as_numbers(values: Values) -> np.ndarray:
    """Values as a float64 array: ints and floats (not bools, not NaN); the SDK's typed error otherwise."""
    bools = not isinstance(values, np.ndarray) and not {bool, np.bool_}.isdisjoint(set(map(type, values)))
    arr = np.asarray(values)
    if bools or arr.ndim != 1 or arr.dtype.kind not in "iuf":
        raise InvalidValueError("mean values must be numbers (int or float), not bool, str or None")
    out = arr.astype(np.float64, copy=False)
    if np.isnan(out).any():
        raise InvalidValueError("mean values must not be NaN")
    return out


def number_of(value: object) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidValueError(f"mean values must be numbers (int or float), got {type(value).__name__}")
    x = float(value)
    if math.isnan(x):
        raise InvalidValueError("mean values must not be NaN")
    return x


class BoundedMean(Summary[MeanParams, MeanBatch]):
    """Bounded mean and sum: one bit (onebit) or one cell index (dhm) per report."""

    name = "mean"
    code = 8
    params_type = MeanParams
    batch_type = MeanBatch

    def plan_variants(self) -> tuple[dict[str, Any], ...]:
        """Both variants (not ``auto``): which is better depends on where the values lie (``ldptel plan --mean-guess``)."""
        return tuple({"variant": v} for v in MEAN_VARIANTS if v != "auto")

    def clips(self, value: object, params: MeanParams) -> bool:
        return not params.lo <= number_of(value) <= params.hi

    def estimate_note(self, params: MeanParams) -> str:
        return f"values clipped to [{params.lo:g}, {params.hi:g}] on the device; {params.variant} reports"

    def columns(self, params: MeanParams) -> tuple[Column, ...]:
        if params.window is None:
            return (Column("bits", "bit", "bit"),)
        return (Column("cols", "col", "index", 2, params.symbols, "mean output symbol"),)

    def privatize_batch(self, values: Values, params: MeanParams, *, rng: np.random.Generator | None = None) -> MeanBatch:
        rng = check_rng(rng)
        x = as_numbers(values)
        n = x.size
        if n == 0:
            raise InvalidValueError("cannot privatize an empty batch")
        # Unclipped, a value below lo gives v < 0 and one above hi v > 2^V, so the V-bit coin's comparison
        # saturates exactly as clipping would (one pass fewer over the batch); the dhm cells clip.
        if params.window is None:
            return MeanBatch(n=n, bits=np.packbits(onebit_reports(x, params, rng)))  # padding bits are 0
        v = (x - params.lo) * ((1 << VALUE_BITS) / (params.hi - params.lo))
        coin = random_words(rng, (n + 1) // 2).view(np.uint32)[:n]  # V = 32 uniform bits per report
        bit = coin < v  # P = ⌈v⌉/2^V = u/2^V
        symbol = (bit ^ bernoulli(rng, params.flip_threshold, params.prob_bits, n)).astype(np.int64)
        pm = bernoulli(rng, params.pm_share or 0, SHARE_BITS, n)
        k = int(np.count_nonzero(pm))
        if k:
            symbol[pm] = 2 + self._cells(params, np.ceil(np.clip(v[pm], 0, 1 << VALUE_BITS)), coin[pm], rng)
        return MeanBatch(n=n, cols=symbol)

    @staticmethod
    def _cells(params: MeanParams, u: np.ndarray, coin: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
        """Piecewise cells of quantized values u, with their own V-bit coins for the stochastic rounding."""
        w = params.window
        assert w is not None
        s = u.astype(np.int64) * GRID  # ≤ 2^40
        i = (s >> VALUE_BITS) + (coin.astype(np.int64) < (s & ((1 << VALUE_BITS) - 1)))
        n = u.size
        inside = bernoulli(rng, params.window_threshold, params.prob_bits, n)
        out = uniform_below(rng, GRID, n)
        out += w * (out >= i)  # uniform over the G cells outside the window
        within = i + uniform_below(rng, w, n)
        cells: np.ndarray = np.where(inside, within, out)
        return cells

    def privatize(self, value: object, params: MeanParams, *, rng: np.random.Generator | None = None) -> MeanBatch:
        """One report from one CSPRNG call; same distribution as :meth:`privatize_batch`."""
        x = number_of(value)
        rng = check_rng(rng)
        u = params.quantize_one(x)
        raw = draw_bytes(rng, 24)
        w0, w1, w2 = (int.from_bytes(raw[i : i + 8], "little") for i in (0, 8, 16))
        coin = w0 & 0xFFFFFFFF
        if params.window is None or not (w0 >> (64 - SHARE_BITS)) < (params.pm_share or 0):
            bit = (coin < u) != below_threshold(params.flip_threshold, params.prob_bits, w1)
            if params.window is None:
                return MeanBatch(n=1, bits=np.array([0x80 if bit else 0], dtype=np.uint8))
            return MeanBatch(n=1, cols=np.array([int(bit)], dtype=np.int64))
        w = params.window
        s = u * GRID
        i = (s >> VALUE_BITS) + (coin < (s & ((1 << VALUE_BITS) - 1)))
        if below_threshold(params.window_threshold, params.prob_bits, w1):
            cell = i + int_below(rng, w, w2)
        else:
            cell = int_below(rng, GRID, w2)
            cell += w * (cell >= i)
        return MeanBatch(n=1, cols=np.array([2 + cell], dtype=np.int64))

    def value_key(self, value: object, params: MeanParams) -> bytes:
        return params.quantize_one(number_of(value)).to_bytes(8, "little")

    def state_shape(self, params: MeanParams) -> tuple[tuple[int, int], int]:
        """counts[0, s]: reports of output symbol s; row_counts[0]: the number of reports."""
        return (1, params.symbols), 1

    def fold(self, params: MeanParams, batches: Sequence[MeanBatch], state: SketchState) -> SketchState:
        for batch in batches:
            if batch.bits is not None:
                ones = int(np.bitwise_count(batch.bits).sum(dtype=np.int64))
                state.counts[0, 1] += ones
                state.counts[0, 0] += batch.n - ones
            elif batch.cols is not None:
                state.counts[0] += np.bincount(batch.cols, minlength=params.symbols)
            state.row_counts[0] += batch.n
        return state

    def estimate(
        self, params: MeanParams, state: SketchState, *, candidates: Sequence[object] | None = None, confidence: float = 0.95
    ) -> Estimate:
        """Mean, sum and count (labels :data:`MEAN_LABELS`) with standard errors (module docstring)."""
        state.check(params)
        n = state.n
        if n == 0:
            raise EmptyStateError("no mean reports to estimate from")
        t_hat, var_t = symbol_moments(params, state.counts[0])
        half = (params.hi - params.lo) / 2.0
        mean = params.lo + half * (t_hat + 1.0)
        se = half * math.sqrt(var_t / n)
        counts = np.array([mean, n * mean, float(n)])
        stderr = np.array([se, n * se, 0.0])
        return Estimate(self.name, MEAN_LABELS, counts, stderr, n, confidence)

    def variance(self, params: MeanParams, counts: np.ndarray, n: int) -> np.ndarray:
        """Var of (mean, sum, count) at n reports if every device had the estimated mean (``counts[0]``)."""
        half = (params.hi - params.lo) / 2.0
        t = np.clip((float(counts[0]) - params.lo) / half - 1.0, -1.0, 1.0)
        var_mean = half * half * float(params.report_variance(t)) / n
        return np.array([var_mean, n * n * var_mean, 0.0])

    def shape(self, params: MeanParams) -> str:
        return f"[{params.lo:g}, {params.hi:g}] {params.variant}"

    def params_schema(self) -> tuple[dict[str, Any], list[str]]:
        bound = {"type": "number", "minimum": -MAX_ABS_BOUND, "maximum": MAX_ABS_BOUND}
        return {
            "lo": {**bound, "description": "values below are reported as lo (clipped on the device)"},
            "hi": {**bound, "description": f"values above are reported as hi (clipped on the device); hi - lo must "
                                           f"be at least {MIN_SPAN:g}"},
            "variant": {"type": "string", "enum": list(MEAN_VARIANTS)},
            "window": {"type": ["integer", "null"], "minimum": 1, "maximum": GRID, "description": "dhm; null: chosen"},
            "pm_share": {"type": ["integer", "null"], "minimum": 0, "maximum": 1 << SHARE_BITS,
                         "description": "dhm: P(piecewise) × 2^16; null: chosen"},
            "prob_bits": {"type": "integer", "minimum": SINGLE_DRAW_PROB_BITS, "maximum": SINGLE_DRAW_PROB_BITS},
        }, ["lo", "hi"]


_WORD_BITS = 32  # the fused one-bit draw compares 32-bit words, the low word only on a tie
_CHUNK = 1 << 15  # reports per chunk of the fused one-bit draw


def onebit_reports(x: np.ndarray, params: MeanParams, rng: np.random.Generator | None) -> np.ndarray:
    """One-bit reports of values ``x`` (float64, unclipped) in one fused draw each.

    The value coin (P = u/2^V) xor the flip (P = T_f/2^B) is 1 with probability
    f + (1 − 2f)·u/2^V = (T_f·2^V + (2^B − 2T_f)·u) / 2^(B+V): an integer threshold H·2^32 + L over B + V = 64
    bits, so the report is R < H·2^32 + L for a uniform 64-bit R = R_h·2^32 + R_l, decided by R_h < H unless
    R_h = H, and only then (probability ≤ 2^−32) by a drawn R_l < L. Exactly the distribution of the coin and
    the flip drawn apart (as :meth:`BoundedMean.privatize` does), from 4 random bytes per report instead of 8.
    """
    low_bits = params.prob_bits + VALUE_BITS - _WORD_BITS
    assert 0 < low_bits <= _WORD_BITS  # B + V ≤ 64: the threshold fits a uint64
    t_f = params.flip_threshold
    slope, base = np.uint64((1 << params.prob_bits) - 2 * t_f), np.uint64(t_f << VALUE_BITS)
    shift, mask = np.uint64(low_bits), np.uint64((1 << low_bits) - 1)
    scale = (1 << VALUE_BITS) / (params.hi - params.lo)
    n = x.size
    bit = np.empty(n, dtype=bool)
    size = min(n, _CHUNK)
    scaled, thr, high = np.empty(size), np.empty(size, dtype=np.uint64), np.empty(size, dtype=np.uint32)
    for start in range(0, n, _CHUNK):  # cache-sized chunks: the temporaries stay in L2
        m = min(_CHUNK, n - start)
        sv, st, sh = scaled[:m], thr[:m], high[:m]
        np.subtract(x[start : start + m], params.lo, out=sv)
        np.multiply(sv, scale, out=sv)  # v of MeanParams.scaled, computed in the same operations
        np.clip(sv, 0.0, float(1 << VALUE_BITS), out=sv)
        np.ceil(sv, out=sv)  # u = ⌈v⌉ of the clipped value, exact in float64
        st[...] = sv
        np.multiply(st, slope, out=st)
        np.add(st, base, out=st)  # the threshold, < 2^(B+V) (T_f ≤ 2^(B−1))
        np.right_shift(st, shift, out=st)
        sh[...] = st
        r = random_words(rng, (m + 1) // 2).view(np.uint32)[:m]
        out = bit[start : start + m]
        np.less(r, sh, out=out)
        tie = np.flatnonzero(r == sh)
        if tie.size:  # the low word decides (the threshold is recomputed for these few reports)
            u = sv[tie].astype(np.uint64)
            low = (u * slope + base) & mask
            out[tie] = (random_words(rng, tie.size) & mask) < low
    return bit


def symbol_moments(params: MeanParams, counts: np.ndarray) -> tuple[float, float]:
    """(ȳ, sample variance of y) from the symbol counts of n reports (t units)."""
    c = np.asarray(counts, dtype=np.float64)
    n = float(c.sum())
    y = params.debias_values()
    mean = float(c @ y) / n
    var = max(float(c @ (y * y)) - n * mean * mean, 0.0) / max(n - 1.0, 1.0)
    return mean, var


def clipped(values: Values, params: MeanParams) -> int:
    """How many values lie outside [lo, hi] (the device counts what it clips; the count never leaves it)."""
    x = as_numbers(values)
    return int(np.count_nonzero((x < params.lo) | (x > params.hi)))


MEAN = BoundedMean()
