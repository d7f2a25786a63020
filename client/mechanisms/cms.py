"""Apple's count-mean sketch (``cms``), and the unary-row machinery it shares with ``oue-cms``.

Both send (j, y): a row j uniform in [k] and m bits y. With x the one-hot vector of h_j(value):

* cms:     y_a = x_a XOR flip_a, flip_a ~ Bernoulli(f), f = 1/(e^(ε/2)+1): p = 1 − f, q = f.
* oue-cms: y_a ~ Bernoulli(½) at the hot bit, Bernoulli(q) elsewhere, q = 1/(e^ε+1): p = ½.

(p, q) = P(y_a = 1 | x_a = 1), P(y_a = 1 | x_a = 0), effective (quantized) values from the params.

Fold: O[j, a] = number of reports in row j with y_a = 1, and n_j = reports in row j (exact integers).
Apple's debiased matrix is M[j, a] = k·(O[j, a] − n_j·q)/(p − q) (= k·(c_ε·O − n_j(c_ε−1)/2) for cms), and

    f̂(d) = m/(m−1) · ( (1/k)·Σ_j M[j, h_j(d)] − n/m )
         = m/(m−1) · ( (Σ_j O[j, h_j(d)] − q·n)/(p − q) − n/m )        since Σ_j n_j = n.

Variance (Apple, "Learning with Privacy at Scale", 2017, generalised to p ≠ 1 − q), with f = f(d): the
randomization variance given the hash family, averaged over hash families,

    (m/(m−1))² · [ (f + (n−f)/m)·p(1−p) + (n−f)(1 − 1/m)·q(1−q) ] / (p−q)²     (privacy noise)
      + (n − f)(k−1)/(k(m−1))                                                  (which row each report picked)

(:func:`variance`, ``Mechanism.variance``), and the hash-collision term (F2 − f²)/(k(m−1)), F2 = Σ_d' f(d')²:
a fixed bias for one fixed family, which the stderr includes as a variance over families
(:func:`~ldptel.client.mechanisms._sketch.collision_variance`, F2 estimated from the state by
:meth:`~ldptel.client.mechanisms._sketch.Cells.f2`). The stderr plugs f̂ clipped to [0, n] into both.

Cells (:func:`cells`): y_ja = (O[j, a] − n_j·q)/(p − q), with E[y_ja | rows] = F_j(a) (the row-j reports whose
value hashes to a) and Var(y_ja | rows) = [n_j·q(1−q) + F_j(a)·(p−q)(1−p−q)]/(p−q)², independent across cells.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ClassVar, TypeVar

import numpy as np

from ldptel.client.errors import EmptyStateError, WireFormatError
from ldptel.client.mechanisms._sketch import (
    Cells,
    SketchMechanism,
    SketchParams,
    candidate_sums,
    collision_variance,
    concat_rows,
    f2_from_sums,
    family_of,
    report_bases,
    square_sum,
)
from ldptel.client.mechanisms.base import Column, ReportBatch, Values
from ldptel.client.mechanisms.capabilities import Mergeable
from ldptel.client.mechanisms.state import Estimate, SketchState, labels_of
from ldptel.client.protocol.params import PLAUSIBILITY_FALSE_REJECTION, flip_epsilon, safe_flip_threshold
from ldptel.client.protocol.rng import (
    bernoulli_int,
    bernoulli_words,
    check_rng,
    draw_bytes,
    int_below,
    random_words,
    uniform_below,
)


# ---------------------------------------------------------------------------------------------- params
@dataclass(frozen=True, slots=True, kw_only=True)
class UnaryParams(SketchParams):
    """A k×m sketch whose report row holds m privatized unary bits (cms and oue-cms).

    ``noise_threshold``: every bit but the hot one is 1 with probability noise_threshold/2^prob_bits.
    ``fair_hot_bit``: the hot bit is a fresh fair coin (oue-cms); otherwise the hot bit is flipped like the
    rest (cms). (p, q) = P(y_a = 1 | x_a = 1), P(y_a = 1 | x_a = 0), effective (quantized) values.
    """

    fair_hot_bit: ClassVar[bool] = False

    @property
    def noise_threshold(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def p(self) -> float:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def q(self) -> float:  # pragma: no cover - overridden
        raise NotImplementedError


@dataclass(frozen=True, slots=True, kw_only=True)
class CmsParams(UnaryParams):
    """Apple's private count-mean sketch (CMS).

    A report picks row j uniformly in [k], builds the one-hot vector of length m at h_j(value) and flips
    every bit with probability 1/(e^(ε/2) + 1) (rounded up to T/2^prob_bits). Two inputs differ in at most
    two coordinates, each ε/2-private, so a report is ε-LDP: ε_eff = 2·ln((2^B − T)/T).
    Debias constant c_ε = (e^(ε/2)+1)/(e^(ε/2)−1) = 1/(p − q) with p = 1 − f, q = f.
    """

    mechanism: ClassVar[str] = "cms"

    def __post_init__(self) -> None:
        self._validate_sketch()
        self._resolve_prob_bits(self._eps_for_bits)

    def _eps_for_bits(self, bits: int) -> float:
        return flip_epsilon(safe_flip_threshold(self.flip_probability, bits, self.epsilon, 2.0), bits, 2.0)

    @property
    def flip_probability(self) -> float:
        """Nominal P(flip) = 1/(e^(ε/2) + 1)."""
        return 1.0 / (math.exp(self.epsilon / 2) + 1.0)

    @property
    def c_epsilon(self) -> float:
        """Nominal debias constant (e^(ε/2)+1)/(e^(ε/2)−1)."""
        e = math.exp(self.epsilon / 2)
        return (e + 1) / (e - 1)

    @property
    def flip_threshold(self) -> int:
        return safe_flip_threshold(self.flip_probability, self.bits, self.epsilon, 2.0)

    @property
    def noise_threshold(self) -> int:
        return self.flip_threshold

    @property
    def effective_flip(self) -> float:
        return self.flip_threshold / (1 << self.bits)

    @property
    def p(self) -> float:
        """Effective P(bit = 1 | true bit 1) = 1 − f."""
        return 1.0 - self.effective_flip

    @property
    def q(self) -> float:
        """Effective P(bit = 1 | true bit 0) = f."""
        return self.effective_flip

    @property
    def effective_epsilon(self) -> float:
        return flip_epsilon(self.flip_threshold, self.bits, 2.0)


@dataclass(frozen=True, eq=False, kw_only=True)
class UnaryBatch(ReportBatch):
    """cms / oue-cms reports: ``rows`` (the row j < k of each report, int64) and ``bits`` (n, m/8): each
    report's m bits packed MSB first."""

    rows: np.ndarray
    bits: np.ndarray


UP = TypeVar("UP", bound=UnaryParams)
_CHUNK_BYTES = 1 << 19  # privatize in chunks whose random planes stay in cache
_THREADS = min(2, os.cpu_count() or 1)
_FOLD_LANES = 255  # uint8 column sums of at most 255 reports never overflow
_FOLD_BLOCK_BYTES = 1 << 18  # fold at most this many unpacked bytes per numpy call (one 255-report chunk at m = 1024)
_THREADED_FOLD_BITS = 1 << 26  # fold in threads above this many report bits (64k reports at m = 1024)


def _children(rng: np.random.Generator | None, count: int) -> list[np.random.Generator | None]:
    """Independent generators of the same kind, seeded from ``rng`` (None stays the OS CSPRNG)."""
    if rng is None:
        return [None] * count
    seeds = rng.integers(0, 2**63, size=count)
    kind = type(rng.bit_generator)
    return [np.random.Generator(kind(int(seed))) for seed in seeds]


def privatize_batch(values: Values, params: UnaryParams, *, rng: np.random.Generator | None = None) -> UnaryBatch:
    rng = check_rng(rng)
    fam = family_of(params)
    bases = report_bases(values, fam)
    rows = uniform_below(rng, params.k, bases.size)
    return unary_reports(params, rows, fam.hash_rows(bases, rows), rng=rng)


def unary_reports(
    params: UnaryParams, rows: np.ndarray, hot: np.ndarray, *, rng: np.random.Generator | None
) -> UnaryBatch:
    """Reports whose rows are ``rows`` (int64, as sent) and whose hot bits are ``hot`` (int64 in [m]): the m
    noisy bits of each report around its hot bit (vectorized; the distribution of :func:`unary_report`)."""
    return UnaryBatch(mechanism=params.mechanism, n=hot.size, rows=rows, bits=unary_bits(hot, params, rng=rng))


def unary_bits(hot: np.ndarray, params: UnaryParams, *, rng: np.random.Generator | None) -> np.ndarray:
    """(n, m/8) packed rows, one per report: noise bits Bernoulli(q), the hot bit ``hot[i]`` kept (cms) or
    a fair coin (oue)."""
    n, nb = hot.size, params.m // 8
    # Whole reports per chunk, a multiple of 8 bytes, so each chunk is generated in place as uint64 words
    # and its hot bits are set while it is still in cache.
    chunk = max(8, _CHUNK_BYTES // nb // 8 * 8)
    bits = np.empty((n + (-n) % 8, nb), dtype=np.uint8)  # padded to whole words; trimmed below
    flat_words = bits.reshape(-1).view(np.uint64)
    threshold, prob_bits = params.noise_threshold, params.bits
    coins = None
    if params.fair_hot_bit:
        coins = np.unpackbits(random_words(rng, (n + 63) // 64).view(np.uint8), count=n).astype(bool)

    def fill(gen: np.random.Generator | None, starts: range) -> None:
        for lo in starts:
            hi = min(lo + chunk, n)
            whi = (hi + (-hi) % 8) * nb // 8
            bernoulli_words(gen, threshold, prob_bits, whi - lo * nb // 8, out=flat_words[lo * nb // 8 : whi])
            h = hot[lo:hi]
            flat = bits[lo:hi].reshape(-1)
            pos = np.arange(hi - lo) * nb + (h >> 3)
            mask = (0x80 >> (h & 7)).astype(np.uint8)
            if coins is None:
                flat[pos] ^= mask
            else:  # oue: the hot bit is a fresh fair coin, whatever the noise put there
                flat[pos] = np.where(coins[lo:hi], flat[pos] | mask, flat[pos] & ~mask)

    starts = range(0, n, chunk)
    if len(starts) < 2 * _THREADS or _THREADS == 1:
        fill(rng, starts)
    else:
        # Random generation dominates and releases the GIL (os.urandom and numpy's bit generators alike), so
        # the chunks are split over threads. Thread t takes chunks t, t+T, ...; with an injected generator it
        # draws from a child generator seeded from ``rng``: the result depends only on the seed.
        gens = _children(rng, _THREADS)
        with ThreadPoolExecutor(_THREADS) as pool:
            list(pool.map(fill, gens, [starts[t::_THREADS] for t in range(_THREADS)]))
    return bits[:n]


def privatize(value: object, params: UnaryParams, *, rng: np.random.Generator | None = None) -> UnaryBatch:
    """One report with one CSPRNG call and Python integers; same distribution as :func:`privatize_batch`."""
    fam = family_of(params)
    x = fam.base(value)
    return unary_report(params, params.k, lambda j: fam.hash_from_base(x, j), rng=rng)


def unary_report(
    params: UnaryParams, row_bound: int, hot_of: Callable[[int], int], *, rng: np.random.Generator | None
) -> UnaryBatch:
    """One report: a row uniform in [row_bound], its hot bit ``hot_of(row)`` and the m noisy bits around it,
    from one CSPRNG call (Python integers)."""
    rng = check_rng(rng)
    nb, m = params.m // 8, params.m
    prob_bits = params.bits
    raw = draw_bytes(rng, 9 + prob_bits * nb)
    j = int_below(rng, row_bound, int.from_bytes(raw[:8], "little"))
    hot_bit = 1 << (m - 1 - hot_of(j))  # bit a is byte a//8, MSB first
    y = bernoulli_int(params.noise_threshold, prob_bits, raw[9:], m)
    if params.fair_hot_bit:
        y = (y | hot_bit) if raw[8] & 1 else (y & ~hot_bit)
    else:
        y ^= hot_bit
    bits = np.frombuffer(y.to_bytes(nb, "big"), dtype=np.uint8).reshape(1, nb)
    return UnaryBatch(mechanism=params.mechanism, n=1, rows=np.array([j], dtype=np.int64), bits=bits)


def fold(params: UnaryParams, batches: Sequence[UnaryBatch], state: SketchState) -> SketchState:
    """Exact integer fold: order reports by row, then sum ≤ 255-report chunks of unpacked bits in uint8

    (a uint8 lane cannot overflow below 256 reports; measured ≈ 2–3 M reports/s at k = 2048, m = 1024).
    """
    if not batches:
        return state
    k, m = params.k, params.m
    rows = concat_rows(batches)
    bit_parts = [b.bits for b in batches]
    bits = bit_parts[0] if len(bit_parts) == 1 else np.concatenate(bit_parts)
    row_counts = np.bincount(rows, minlength=k)
    # A batch already ordered by row (see merge_by_row) is read in place; otherwise each chunk is gathered.
    presorted = len(bit_parts) == 1 and bool(np.all(rows[1:] >= rows[:-1]))
    order = None if presorted else row_order(rows)
    ends = np.cumsum(row_counts)
    counts = state.counts

    group = max(1, _FOLD_BLOCK_BYTES // (_FOLD_LANES * m))  # chunks unpacked together (short rows: several)

    def fold_rows(js: np.ndarray) -> None:
        lanes = np.empty(m, dtype=np.uint8)
        for j in js:
            s, hi = int(ends[j]) - int(row_counts[j]), int(ends[j])
            while s < hi:
                # The next chunk of row j's reports (≤ 255 × m/8 bytes, cache-resident): unpack, sum in uint8; or, for
                # short rows (m < 1024), g ≤ _FOLD_BLOCK_BYTES/(255·m) whole chunks at once, each summed in uint8
                # lanes and the g sums added in int64: the same exact integers with far fewer numpy calls.
                g = min(group, (hi - s) // _FOLD_LANES)
                e = s + g * _FOLD_LANES if g > 1 else min(s + _FOLD_LANES, hi)
                chunk = bits[s:e] if order is None else bits.take(order[s:e], axis=0)
                # (the unpacked bits are never bound to a name: freed at once, the next chunk reuses their memory)
                if g > 1:
                    sums = np.add.reduce(np.unpackbits(chunk.reshape(-1)).reshape(g, _FOLD_LANES, m), axis=1, dtype=np.uint8)
                    counts[j] += sums.sum(axis=0, dtype=np.int64)
                else:
                    np.add.reduce(np.unpackbits(chunk.reshape(-1)).reshape(-1, m), axis=0, out=lanes)
                    counts[j] += lanes
                s = e

    present = np.flatnonzero(row_counts)
    if _THREADS == 1 or rows.size * m < _THREADED_FOLD_BITS:
        fold_rows(present)
    else:  # threads own disjoint rows; numpy releases the GIL inside unpack and sum
        with ThreadPoolExecutor(_THREADS) as pool:
            list(pool.map(fold_rows, [present[t::_THREADS] for t in range(_THREADS)]))
    state.row_counts += row_counts
    return state


def row_order(rows: np.ndarray) -> np.ndarray:
    """The stable order of reports by row that :func:`merge_by_row` puts them in (k <= 65536: a radix sort)."""
    return np.argsort(rows.astype(np.uint16), kind="stable")


def merge_by_row(batches: Sequence[UnaryBatch], *, out: np.ndarray | None = None) -> UnaryBatch:
    """Every report of ``batches`` (cms or oue-cms, one metric version) in one batch, ordered by row.

    :func:`fold` then reads each row's reports contiguously instead of gathering them. Each report's bits are
    copied once, straight to their place (the alternative, concatenating and then gathering, copies twice
    and gathers at random from the whole array). The fold of the result equals the fold of ``batches``.
    ``out``: a 1-D uint8 array of at least n × m/8 bytes to hold the bits (the result is a view of it), so a
    caller can reuse one buffer instead of faulting in fresh memory for every merge.
    """
    rows = concat_rows(batches)
    nb = batches[0].bits.shape[1]
    order = row_order(rows)
    place = np.empty_like(order)
    place[order] = np.arange(order.size)
    size = rows.size * nb
    if out is None:
        out = np.empty(size, dtype=np.uint8)
    elif out.dtype != np.uint8 or out.ndim != 1 or out.size < size:
        raise ValueError(f"out must be a 1-D uint8 array of at least {size} bytes")
    out = out[:size].reshape(rows.size, nb)
    slots = out.view(f"V{nb}").reshape(-1)  # one item per report, so each assignment moves whole reports
    starts = np.concatenate([[0], np.cumsum([b.n for b in batches])])

    def place_batches(idx: range) -> None:
        for i in idx:
            lo, hi = int(starts[i]), int(starts[i + 1])
            slots[place[lo:hi]] = np.ascontiguousarray(batches[i].bits).view(f"V{nb}").reshape(-1)

    if _THREADS == 1 or rows.size * 8 * nb < _THREADED_FOLD_BITS:
        place_batches(range(len(batches)))
    else:  # disjoint targets; numpy releases the GIL while it copies
        with ThreadPoolExecutor(_THREADS) as pool:
            list(pool.map(place_batches, [range(t, len(batches), _THREADS) for t in range(_THREADS)]))
    return UnaryBatch(mechanism=batches[0].mechanism, n=int(rows.size), rows=rows[order], bits=out)


def estimate(params: UnaryParams, state: SketchState, *, candidates: Sequence[object], confidence: float = 0.95) -> Estimate:
    state.check(params)
    n = state.n
    if n == 0:
        raise EmptyStateError(f"no {params.mechanism} reports to estimate from")
    m, p, q = params.m, params.p, params.q
    s = candidate_sums(state.counts, family_of(params), candidates)
    est = m / (m - 1) * ((s - q * n) / (p - q) - n / m)
    var = variance(params, est, n) + collision_variance(params, f2=_f2(params, state), counts=np.clip(est, 0, n))
    return Estimate(params.mechanism, labels_of(candidates), est, np.sqrt(var), n, confidence)


def _f2(params: UnaryParams, state: SketchState) -> float:
    """:meth:`Cells.f2` of :func:`cells` without building the k·m float cells (a 16 MB copy and four passes over
    it at k = 2048, m = 1024). With c_j = round(n_j·q), z = O − c_j and d_j = n_j·q − c_j, the cells are
    y_ja = (z_ja − d_j)/(p − q), so Σy = (Σz − m·Σd)/(p − q) and Σy² = (Σz² − 2·Σ_j d_j·Z_j + m·Σd²)/(p − q)²
    (Z_j = Σ_a z_ja); Σz² = ΣO² − 2·Σ_j c_j·R_j + m·Σc_j² (R_j = Σ_a O_ja) is summed exactly in integers, so the
    large terms cancel without rounding."""
    k, m, p, q = params.k, params.m, params.p, params.q
    centre = np.rint(state.row_counts * q).astype(np.int64)
    d = state.row_counts * q - centre
    r = state.counts.sum(axis=1, dtype=np.int64)
    c, rl = centre.tolist(), r.tolist()  # k Python integers: exact products at any scale
    z2 = int(square_sum(state.counts)) - 2 * sum(a * b for a, b in zip(c, rl, strict=True)) + m * sum(a * a for a in c)
    zrow = (r - m * centre).astype(np.float64)
    sum_y = (float(zrow.sum()) - m * float(d.sum())) / (p - q)
    sum_y2 = (float(z2) - 2.0 * float(np.dot(d, zrow)) + m * float(np.dot(d, d))) / (p - q) ** 2
    alpha, beta = q * (1 - q) / (p - q) ** 2, (1 - p - q) / (p - q)
    return f2_from_sums(k, m, float(state.n), sum_y2, sum_y, alpha, beta)


_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)
# Set bits per byte: numpy ≥ 2's ufunc (~4x faster, measured at 1,000 reports of m = 1024: 35 µs against
# 130 µs), else a table (numpy 1.26 has no popcount).
_popcount: Callable[[np.ndarray], np.ndarray] = getattr(np, "bitwise_count", None) or functools.partial(np.take, _POPCOUNT)


@functools.lru_cache(maxsize=64)
def set_bits_range(m: int, p: float, q: float) -> tuple[int, int]:
    """[lo, hi]: the set bits of an honest unary row of m bits lie in it except with probability at most
    :data:`~ldptel.client.protocol.params.PLAUSIBILITY_FALSE_REJECTION` (half in each tail).

    The count is S = Bernoulli(p) (the value's bit) + Binomial(m − 1, q) (the others), as in ldp-math §8.2's
    "OUE bit counts follow Binomial(d−1, q) + Bernoulli(p)"; its exact distribution is summed from each tail.
    """
    i = np.arange(m, dtype=np.float64)  # successes among the m − 1 cold bits: 0 … m − 1
    log_choose = np.concatenate(([0.0], np.cumsum(np.log((m - i[1:]) / i[1:]))))
    cold = np.exp(log_choose + i * math.log(q) + (m - 1 - i) * math.log1p(-q))
    pmf = np.append(cold * (1 - p), 0.0)
    pmf[1:] += cold * p  # S = s: s − 1 cold bits and the hot one
    half = PLAUSIBILITY_FALSE_REJECTION / 2
    below = np.cumsum(pmf)  # P(S ≤ s)
    above = np.cumsum(pmf[::-1])[::-1]  # P(S ≥ s), summed from the tail
    lo = int(np.count_nonzero(below <= half))  # every s < lo has P(S ≤ s) ≤ half
    hi = int(m - np.count_nonzero(above[1:] <= half))  # every s > hi has P(S ≥ s) ≤ half
    return lo, hi


def cells(params: UnaryParams, state: SketchState) -> Cells:
    """y_ja = (O[j, a] − n_j·q)/(p − q); α = q(1−q)/(p−q)², β = (1−p−q)/(p−q)."""
    p, q = params.p, params.q
    rows = state.row_counts.astype(np.float64)
    y = state.counts.astype(np.float64)
    y -= rows[:, None] * q
    y /= p - q
    return Cells(y, state.row_counts, q * (1 - q) / (p - q) ** 2, (1 - p - q) / (p - q))


def variance(params: UnaryParams, counts: np.ndarray, n: int | np.ndarray) -> np.ndarray:
    """The randomization variance of the module docstring (privacy noise and row choice, averaged over hash
    families), with f the estimate clipped to [0, n]; the collision term is separate."""
    k, m, p, q = params.k, params.m, params.p, params.q
    f = np.clip(counts, 0, n)
    noise = ((f + (n - f) / m) * p * (1 - p) + (n - f) * (1 - 1 / m) * q * (1 - q)) / (p - q) ** 2
    var: np.ndarray = (m / (m - 1)) ** 2 * noise + (n - f) * (k - 1) / (k * (m - 1))
    return var


# ------------------------------------------------------------------------------------------- mechanisms
class Unary(SketchMechanism[UP, UnaryBatch], Mergeable[UP, UnaryBatch]):
    """A count-mean sketch with a unary row (cms, oue-cms): the code they share; subclasses name the params."""

    batch_type = UnaryBatch

    def columns(self, params: UP) -> tuple[Column, ...]:
        return (Column("rows", "row", "index", 2, params.k, "row index"), Column("bits", "bits", "bytes", params.m // 8))

    def privatize(self, value: object, params: UP, *, rng: np.random.Generator | None = None) -> UnaryBatch:
        return privatize(value, params, rng=rng)

    def privatize_batch(self, values: Values, params: UP, *, rng: np.random.Generator | None = None) -> UnaryBatch:
        return privatize_batch(values, params, rng=rng)

    def fold(self, params: UP, batches: Sequence[UnaryBatch], state: SketchState) -> SketchState:
        return fold(params, batches, state)

    def merge(self, batches: Sequence[UnaryBatch], *, out: np.ndarray | None = None) -> UnaryBatch:
        return merge_by_row(batches, out=out)

    def merge_bytes(self, batches: Sequence[UnaryBatch]) -> int:
        return int(sum(b.n for b in batches) * batches[0].bits.shape[1])

    def estimate_candidates(
        self, params: UP, state: SketchState, candidates: Sequence[object], confidence: float
    ) -> Estimate:
        return estimate(params, state, candidates=candidates, confidence=confidence)

    def check_plausible(self, batch: UnaryBatch, params: UP) -> None:
        """Refuse a report whose count of set bits lies in a tail of its honest distribution (see
        :func:`set_bits_range`): an all-ones row, say, which would add to every value's estimate."""
        lo, hi = set_bits_range(params.m, params.p, params.q)
        counts = _popcount(batch.bits).sum(axis=1, dtype=np.uint32)
        if batch.n and (int(counts.max()) > hi or int(counts.min()) < lo):
            bad = int(np.flatnonzero((counts > hi) | (counts < lo))[0])
            raise WireFormatError(
                f"report {bad} has {int(counts[bad])} of {params.m} bits set; honest {self.name} reports with these "
                f"parameters have {lo} to {hi} (all but {PLAUSIBILITY_FALSE_REJECTION:g} of them)"
            )

    def variance(self, params: UP, counts: np.ndarray, n: int) -> np.ndarray:
        return variance(params, counts, n)

    def cells(self, params: UP, state: SketchState) -> Cells:
        state.check(params)
        return cells(params, state)


class Cms(Unary[CmsParams]):
    """Apple's private count-mean sketch."""

    name = "cms"
    code = 3
    params_type = CmsParams


CMS = Cms()
