"""Count-mean sketches with a unary row: Apple's ``cms`` and our ``oue-cms``.

Both send (j, y): a row j uniform in [k] and m bits y. With x the one-hot vector of h_j(value):

* cms:     y_a = x_a XOR flip_a, flip_a ~ Bernoulli(f), f = 1/(e^(ε/2)+1): p = 1 − f, q = f.
* oue-cms: y_a ~ Bernoulli(½) at the hot bit, Bernoulli(q) elsewhere, q = 1/(e^ε+1): p = ½.

(p, q) = P(y_a = 1 | x_a = 1), P(y_a = 1 | x_a = 0), effective (quantized) values from the params.

Fold: O[j, a] = number of reports in row j with y_a = 1, and n_j = reports in row j (exact integers).
Apple's debiased matrix is M[j, a] = k·(O[j, a] − n_j·q)/(p − q) (= k·(c_ε·O − n_j(c_ε−1)/2) for cms), and

    f̂(d) = m/(m−1) · ( (1/k)·Σ_j M[j, h_j(d)] − n/m )
         = m/(m−1) · ( (Σ_j O[j, h_j(d)] − q·n)/(p − q) − n/m )        since Σ_j n_j = n.

Variance, averaged over the hash family (ldp-math.md §1.4, generalised to p ≠ 1 − q), with f = f(d):

    (m/(m−1))² · [ (f + (n−f)/m)·p(1−p) + (n−f)(1 − 1/m)·q(1−q) ] / (p−q)²
      + (n − f)(k−1)/(k(m−1))          (which row each report picked)
      + Σ_{d'≠d} f(d')² / (k(m−1))     (hash collisions: a bias for one fixed family; not in stderr)

The reported stderr plugs f̂ clipped to [0, n] into the first two terms.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ldptel.client.protocol.rng import bernoulli_int, bernoulli_words, check_rng, draw_bytes, int_below, random_words, uniform_below
from ldptel.client.errors import EmptyStateError
from ldptel.client.protocol.specs import CmsParams, OueCmsParams
from ldptel.client.protocol.wire import ReportBatch
from ldptel.client.mechanisms._sketch import candidate_sums, concat_rows, family_of, report_bases
from ldptel.client.mechanisms.base import Estimate, SketchState, labels_of

UnaryParams = CmsParams | OueCmsParams
_CHUNK_BYTES = 1 << 19  # privatize in chunks whose random planes stay in cache
_THREADS = min(2, os.cpu_count() or 1)
_FOLD_LANES = 255  # uint8 column sums of at most 255 reports never overflow
_THREADED_FOLD_BITS = 1 << 26  # fold in threads above this many report bits (64k reports at m = 1024)


def _children(rng: np.random.Generator | None, count: int) -> list[np.random.Generator | None]:
    """Independent generators of the same kind, seeded from ``rng`` (None stays the OS CSPRNG)."""
    if rng is None:
        return [None] * count
    seeds = rng.integers(0, 2**63, size=count)
    kind = type(rng.bit_generator)
    return [np.random.Generator(kind(int(seed))) for seed in seeds]


def privatize_batch(values: Sequence[object] | np.ndarray, params: UnaryParams, *, rng: np.random.Generator | None = None) -> ReportBatch:
    rng = check_rng(rng)
    fam = family_of(params)
    bases = report_bases(values, fam)
    n, nb = bases.size, params.m // 8
    rows = uniform_below(rng, params.k, n)
    hot = fam.hash_rows(bases, rows)
    # Whole reports per chunk, a multiple of 8 bytes, so each chunk is generated in place as uint64 words
    # and its hot bits are set while it is still in cache.
    chunk = max(8, _CHUNK_BYTES // nb // 8 * 8)
    bits = np.empty((n + (-n) % 8, nb), dtype=np.uint8)  # padded to whole words; trimmed below
    flat_words = bits.reshape(-1).view(np.uint64)
    oue = isinstance(params, OueCmsParams)
    threshold = params.cold_threshold if oue else params.flip_threshold  # type: ignore[union-attr]
    assert params.prob_bits is not None
    coins = np.unpackbits(random_words(rng, (n + 63) // 64).view(np.uint8), count=n).astype(bool) if oue else None

    def fill(gen: np.random.Generator | None, starts: range) -> None:
        for lo in starts:
            hi = min(lo + chunk, n)
            whi = (hi + (-hi) % 8) * nb // 8
            bernoulli_words(gen, threshold, params.prob_bits, whi - lo * nb // 8, out=flat_words[lo * nb // 8 : whi])  # type: ignore[arg-type]
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
    bits = bits[:n]
    return ReportBatch(mechanism=params.mechanism, n=n, rows=rows, bits=bits)


def privatize(value: object, params: UnaryParams, *, rng: np.random.Generator | None = None) -> ReportBatch:
    """One report with one CSPRNG call and Python integers; same distribution as :func:`privatize_batch`."""
    rng = check_rng(rng)
    fam = family_of(params)
    x = fam.base(value)
    nb, m = params.m // 8, params.m
    assert params.prob_bits is not None
    oue = isinstance(params, OueCmsParams)
    threshold = params.cold_threshold if oue else params.flip_threshold  # type: ignore[union-attr]
    raw = draw_bytes(rng, 9 + params.prob_bits * nb)
    j = int_below(rng, params.k, int.from_bytes(raw[:8], "little"))
    hot_bit = 1 << (m - 1 - fam.hash_from_base(x, j))  # bit a is byte a//8, MSB first
    y = bernoulli_int(threshold, params.prob_bits, raw[9:], m)
    if oue:
        y = (y | hot_bit) if raw[8] & 1 else (y & ~hot_bit)
    else:
        y ^= hot_bit
    bits = np.frombuffer(y.to_bytes(nb, "big"), dtype=np.uint8).reshape(1, nb)
    return ReportBatch(mechanism=params.mechanism, n=1, rows=np.array([j], dtype=np.int64), bits=bits)


def fold(params: UnaryParams, batches: Sequence[ReportBatch], state: SketchState) -> SketchState:
    """Exact integer fold: order reports by row, then sum ≤ 255-report chunks of unpacked bits in uint8

    (a uint8 lane cannot overflow below 256 reports; measured ≈ 2–3 M reports/s at k = 2048, m = 1024).
    """
    if not batches:
        return state
    k, m = params.k, params.m
    rows = concat_rows(batches)
    bit_parts = [b.bits for b in batches]
    bits = bit_parts[0] if len(bit_parts) == 1 else np.concatenate(bit_parts)  # type: ignore[arg-type]
    assert bits is not None
    row_counts = np.bincount(rows, minlength=k)
    # A batch already ordered by row (see merge_by_row) is read in place; otherwise each chunk is gathered.
    presorted = len(bit_parts) == 1 and bool(np.all(rows[1:] >= rows[:-1]))
    order = None if presorted else row_order(rows)
    ends = np.cumsum(row_counts)
    counts = state.counts

    def fold_rows(js: np.ndarray) -> None:
        lanes = np.empty(m, dtype=np.uint8)
        for j in js:
            hi = int(ends[j])
            for s in range(hi - int(row_counts[j]), hi, _FOLD_LANES):
                # This chunk of row j's reports (≤ 255 × m/8 bytes, cache-resident): unpack, sum in uint8.
                e = min(s + _FOLD_LANES, hi)
                chunk = bits[s:e] if order is None else bits.take(order[s:e], axis=0)
                np.add.reduce(np.unpackbits(chunk.reshape(-1)).reshape(-1, m), axis=0, out=lanes)
                counts[j] += lanes

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


def merge_by_row(batches: Sequence[ReportBatch], *, out: np.ndarray | None = None) -> ReportBatch:
    """Every report of ``batches`` (cms or oue-cms, one metric version) in one batch, ordered by row.

    :func:`fold` then reads each row's reports contiguously instead of gathering them. Each report's bits are
    copied once, straight to their place (the alternative, concatenating and then gathering, copies twice
    and gathers at random from the whole array). The fold of the result equals the fold of ``batches``.
    ``out``: a 1-D uint8 array of at least n × m/8 bytes to hold the bits (the result is a view of it), so a
    caller can reuse one buffer instead of faulting in fresh memory for every merge.
    """
    rows = concat_rows(batches)
    nb = batches[0].bits.shape[1]  # type: ignore[union-attr]
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
    return ReportBatch(mechanism=batches[0].mechanism, n=int(rows.size), rows=rows[order], bits=out)


def estimate(params: UnaryParams, state: SketchState, *, candidates: Sequence[object], confidence: float = 0.95) -> Estimate:
    state.check(params)
    n = state.n
    if n == 0:
        raise EmptyStateError(f"no {params.mechanism} reports to estimate from")
    k, m, p, q = params.k, params.m, params.p, params.q
    s = candidate_sums(state.counts, family_of(params), candidates)
    scale = m / (m - 1)
    est = scale * ((s - q * n) / (p - q) - n / m)
    f = np.clip(est, 0, n)
    noise = ((f + (n - f) / m) * p * (1 - p) + (n - f) * (1 - 1 / m) * q * (1 - q)) / (p - q) ** 2
    var = scale**2 * noise + (n - f) * (k - 1) / (k * (m - 1))
    return Estimate(params.mechanism, labels_of(candidates), est, np.sqrt(var), n, confidence)
