"""An empirical lower bound on the ε between two value histories of one device, for any registered mechanism
(issue 22 §1): used by ``tests/client/test_longitudinal_adversarial.py`` and ``tests/bench/bench_longitudinal.py``.

A *history* is the values one device reports, in order, with the budget day of each report. Devices are
simulated the way the SDK protects repeated values (:mod:`ldptel.client.sdk.memo`), vectorized over devices:

* a mechanism with a permanent randomized response (its :meth:`~ldptel.client.mechanisms.base.Mechanism.permanent_channel`):
  each device draws its permanent answer for every label and its rounding offset α (daily-mean) once, and
  every report passes its label's permanent answer through fresh noise, with the channel's exact keep
  probabilities (the SDK derives the same draws from the device secret; ``test_memo.py`` checks that the
  stages compose to the spec's channel exactly);
* any other mechanism: the day's first report of a value is the mechanism's own ``privatize_batch`` over all
  devices, later reports of that value on that day repeat it.

The attack: a per-report score (the difference of the mean feature vectors of one report of the history's
two extreme values, features being the report's index columns one-hot, crossed with its bits), averaged over
each *group* of reports (the reports where the two histories carry the same pair of values), binned, and a
set of bins chosen on a training run to maximize the bound; then a fresh run of ``n`` devices per history
gives the 99.9% Clopper–Pearson lower bound ln(P̲(E | second)/P̄(E | first)) (and the same with the
histories swapped; the larger is reported). The event is fixed before the counted run, so the bound is valid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import betaincinv

from ldptel.client.mechanisms import mechanism_of
from ldptel.client.mechanisms.base import ReportBatch
from ldptel.client.mechanisms.longitudinal import PermanentChannel

CONFIDENCE = 0.999  # of the whole bound (each side one-sided at 1 − (1 − CONFIDENCE)/2)
BINS = 32  # most bins per group statistic


@dataclass(frozen=True)
class History:
    """One device's reports: ``values[t]`` reported on budget day ``days[t]``."""

    values: tuple[object, ...]
    days: tuple[int, ...]

    @classmethod
    def daily(cls, values: Sequence[object]) -> History:
        return cls(tuple(values), tuple(range(len(values))))


# ----------------------------------------------------------------------------------------- simulation
def _keep_other(labels: np.ndarray, keep: float, d: int, rng: np.random.Generator) -> np.ndarray:
    """"Keep the label with probability ``keep``, else a uniform other one of the d labels", elementwise."""
    other = rng.integers(0, d - 1, size=labels.shape)
    other = other + (other >= labels)
    out: np.ndarray = np.where(rng.random(labels.shape) < keep, labels, other)
    return out


def _permanent(channel: PermanentChannel, history: History, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, T) reported labels."""
    raw = np.array([channel.label(v) for v in history.values], dtype=np.int64)
    if channel.rounding_bits:
        alpha = rng.integers(0, 1 << channel.rounding_bits, size=(n, 1), dtype=np.int64)
        labels = (raw[None, :] + alpha >= 1 << channel.rounding_bits).astype(np.int64)
    else:
        labels = np.broadcast_to(raw, (n, raw.size))
    d = channel.d
    memo = _keep_other(np.broadcast_to(np.arange(d), (n, d)), float(channel.prr_keep), d, rng)  # b(ℓ) per device
    held = np.take_along_axis(memo, labels, axis=1)
    return _keep_other(held, float(channel.irr_keep), d, rng)


def features(batch: ReportBatch, mech: Any, params: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """Each report's features, the joint value of its index columns one-hot (``radix`` wide) crossed with
    [1, bits...], as (index (n,), extra (n, E), radix): never materialized (a dhm report has 447 symbols)."""
    n = batch.n
    index = np.zeros(n, dtype=np.int64)
    radix = 1
    bits: list[np.ndarray] = []
    for col in mech.columns(params):
        arr = getattr(batch, col.attr)
        if col.kind == "index":
            index = index * col.bound + np.asarray(arr, dtype=np.int64)
            radix *= col.bound
        elif arr.ndim == 1:
            bits.append(np.unpackbits(arr, count=n)[:, None])
        else:
            bits.append(np.unpackbits(np.asarray(arr, dtype=np.uint8), axis=1))
    extra = np.hstack([np.ones((n, 1), dtype=np.uint8), *bits]).astype(np.float64)
    return index, extra, radix


def mean_features(batch: ReportBatch, mech: Any, params: Any) -> np.ndarray:
    """The mean feature vector of a batch's reports, (radix·E,)."""
    index, extra, radix = features(batch, mech, params)
    out = np.zeros((radix, extra.shape[1]))
    np.add.at(out, index, extra)
    flat: np.ndarray = (out / batch.n).reshape(-1)
    return flat


def scores(batch: ReportBatch, mech: Any, params: Any, weights: np.ndarray) -> np.ndarray:
    """features · weights per report, (n,)."""
    index, extra, radix = features(batch, mech, params)
    out: np.ndarray = (weights.reshape(radix, -1)[index] * extra).sum(axis=1)
    return out


def simulate(params: Any, history: History, n: int, rng: np.random.Generator, weights: np.ndarray) -> np.ndarray:
    """(n, T) per-report scores (features · ``weights``) of n devices with this history (module docstring)."""
    mech = mechanism_of(params)
    channel = mech.permanent_channel(params)
    if channel is not None:
        labels = _permanent(channel, history, n, rng)
        out: np.ndarray = np.asarray(weights, dtype=np.float64)[labels]
        return out
    out = np.zeros((n, len(history.values)))
    first: dict[tuple[int, bytes], int] = {}
    for t, (value, day) in enumerate(zip(history.values, history.days, strict=True)):
        key = (day, mech.value_key(value, params))
        if key in first:
            out[:, t] = out[:, first[key]]  # the day's memo: the same payload again
            continue
        out[:, t] = scores(mech.privatize_batch([value] * n, params, rng=rng), mech, params, weights)
        first[key] = t
    return out


def single_reports(params: Any, value: object, n: int, rng: np.random.Generator) -> np.ndarray:
    """The mean features of n single reports of ``value`` (of the one-hot label under a permanent response)."""
    mech = mechanism_of(params)
    channel = mech.permanent_channel(params)
    if channel is not None:
        labels = _permanent(channel, History((value,), (0,)), n, rng)[:, 0]
        out: np.ndarray = np.bincount(labels, minlength=channel.d) / n
        return out
    return mean_features(mech.privatize_batch([value] * n, params, rng=rng), mech, params)


# ---------------------------------------------------------------------------------------------- attack
def clopper_pearson(k: int, n: int, side_confidence: float) -> tuple[float, float]:
    """One-sided (lower, upper) Clopper–Pearson bounds of a binomial proportion, each at ``side_confidence``."""
    a = 1.0 - side_confidence
    lower = 0.0 if k == 0 else float(betaincinv(k, n - k + 1, a))
    upper = 1.0 if k == n else float(betaincinv(k + 1, n - k, 1 - a))
    return lower, upper


def _bound(k_hi: int, k_lo: int, n: int, confidence: float = CONFIDENCE) -> float:
    side = 1 - (1 - confidence) / 2
    lower, _ = clopper_pearson(k_hi, n, side)
    _, upper = clopper_pearson(k_lo, n, side)
    return math.log(lower / upper) if lower > 0 else 0.0


@dataclass(frozen=True)
class Audit:
    """An empirical ε lower bound (``epsilon``) from ``n`` devices per history, and the counts behind it."""

    epsilon: float
    n: int
    hits_first: int
    hits_second: int


class _Attack:
    def __init__(self, params: Any, first: History, second: History, lo: object, hi: object, rng: np.random.Generator) -> None:
        pairs = [(mechanism_of(params).value_key(a, params), mechanism_of(params).value_key(b, params))
                 for a, b in zip(first.values, second.values, strict=True)]
        order = list(dict.fromkeys(pairs))
        if mechanism_of(params).permanent_channel(params) is None:  # fresh reports: equal values tell nothing
            order = [g for g in order if g[0] != g[1]] or order
        self.groups = [np.array([t for t, p in enumerate(pairs) if p == g]) for g in order]
        self.weights = single_reports(params, hi, 20_000, rng) - single_reports(params, lo, 20_000, rng)

    def cells(self, score: np.ndarray, edges: list[np.ndarray] | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
        stats = [score[:, g].mean(axis=1) for g in self.groups]
        if edges is None:  # every value when there are few (a mean of labels), else quantiles
            edges = [np.unique(s)[1:] if np.unique(s).size <= BINS else
                     np.unique(np.quantile(s, np.linspace(0, 1, BINS + 1)[1:-1])) for s in stats]
        cell = np.zeros(score.shape[0], dtype=np.int64)
        for s, e in zip(stats, edges, strict=True):
            cell = cell * (BINS + 1) + np.searchsorted(e, s, side="right")
        return cell, edges


def _best_event(c_first: np.ndarray, c_second: np.ndarray, n: int) -> np.ndarray:
    """The set of cells (sorted by training likelihood ratio, best prefix) most in favour of ``second``."""
    cells = np.union1d(c_first, c_second)
    a = np.bincount(np.searchsorted(cells, c_first), minlength=cells.size)
    b = np.bincount(np.searchsorted(cells, c_second), minlength=cells.size)
    order = np.argsort(-(b + 0.5) / (a + 0.5), kind="stable")
    best, best_k = -math.inf, 1
    ka = kb = 0
    for k, i in enumerate(order, start=1):
        ka += int(a[i])
        kb += int(b[i])
        value = _bound(kb, ka, n)
        if value > best:
            best, best_k = value, k
    chosen: np.ndarray = cells[order[:best_k]]
    return chosen


def audit(
    params: Any, first: History, second: History, *, lo: object, hi: object, n: int = 20_000, seed: int = 0,
    second_run: tuple[np.ndarray, np.ndarray] | None = None,
) -> Audit:
    """The empirical ε lower bound between ``first`` and ``second`` (module docstring). ``lo``/``hi``: two
    values that train the per-report score. ``second_run``: counted features (first, second) from elsewhere
    (the real Reporter), else simulated."""
    rng = np.random.default_rng(seed)
    attack = _Attack(params, first, second, lo, hi, rng)
    train = max(n // 2, 5_000)
    w = attack.weights
    c1, edges = attack.cells(simulate(params, first, train, rng, w))
    c2, _ = attack.cells(simulate(params, second, train, rng, w), edges)
    for_second, for_first = _best_event(c1, c2, train), _best_event(c2, c1, train)
    if second_run is None:
        f1, f2 = simulate(params, first, n, rng, w), simulate(params, second, n, rng, w)
    else:
        f1, f2 = (np.asarray(run, dtype=np.float64) @ w for run in second_run)
    t1, _ = attack.cells(f1, edges)
    t2, _ = attack.cells(f2, edges)
    m = t1.shape[0]
    results = []
    for event, hi_run, lo_run in ((for_second, t2, t1), (for_first, t1, t2)):
        k_hi, k_lo = int(np.isin(hi_run, event).sum()), int(np.isin(lo_run, event).sum())
        results.append(Audit(_bound(k_hi, k_lo, m), m, k_lo, k_hi))
    return max(results, key=lambda r: r.epsilon)
