"""Exact count-level simulation of a folded pem state (shared by tests/client/test_discovery.py and
tests/bench/bench_discovery_coverage.py).

A folded oue-cms cell is a sum of independent bits: O[r, a] = Binomial(F[r, a], p) + Binomial(n_r − F[r, a], q),
with F[r, a] the reports of row r whose hot bit is a and n_r the reports of row r. Drawing that directly has
the distribution of ``fold(privatize_batch(values))`` (rows uniform over L·k, the hot cell the row hash of the
report's group key) without materializing m bits per report, so coverage sweeps can afford many repetitions.
"""

from __future__ import annotations

import numpy as np

from ldptel.client import PemParams
from ldptel.client.mechanisms._sketch import family_of
from ldptel.client.mechanisms.discovery import _pad, key_bases
from ldptel.client.mechanisms.state import SketchState


def zipf_with_top(rng: np.random.Generator, *, n: int, top_share: float, distinct: int, max_len: int,
                  exponent: float = 1.1) -> tuple[list[str], np.ndarray]:
    """Distinct random lowercase strings of 1..max_len letters; the first holds ``top_share`` of n exactly, the
    rest share n − top by a multinomial draw with Zipf(exponent) weights over ranks 2..distinct."""
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    words: list[str] = []
    while len(words) < distinct:
        # One draw of letters for the whole batch (a row per word, padded with NULs past its length, which the
        # bytes dtype strips): a draw per word was half the cost of a repetition of the coverage test.
        lens = rng.integers(1, max_len + 1, 2 * distinct)
        table = letters[rng.integers(0, 26, (2 * distinct, max_len))]
        table[np.arange(max_len)[None, :] >= lens[:, None]] = 0
        fresh = [w.decode() for w in table.view(f"S{max_len}").ravel().tolist()]
        words = list(dict.fromkeys(words + fresh))
    words = words[:distinct]
    top = round(top_share * n)
    w = 1.0 / np.arange(2, distinct + 1) ** exponent
    rest = rng.multinomial(n - top, w / w.sum())
    return words, np.concatenate([[top], rest]).astype(np.int64)


def simulate_state(params: PemParams, words: list[str], counts: np.ndarray, rng: np.random.Generator) -> SketchState:
    """A pem state drawn exactly at the count level (module docstring)."""
    g, k, m = params.groups, params.k, params.m
    data = [w.encode() for w in words]
    lengths = np.fromiter(map(len, data), dtype=np.int64, count=len(data))
    width = 8 * params.lanes
    table = _pad(data, width)
    codes = np.repeat(np.arange(len(words)), counts)
    rows = rng.integers(0, g * k, codes.size)
    group, j = np.divmod(rows, k)
    # The hot cell depends on (value, group, row): hash each distinct (value, group key) once.
    pair = codes * g + group
    uniq, inverse = np.unique(pair, return_inverse=True)
    u_code, u_group = np.divmod(uniq, g)
    keylen = np.minimum(lengths[u_code] + 1, u_group + 1)
    keys = table[u_code]
    keys[np.arange(width)[None, :] >= keylen[:, None]] = 0
    bases = key_bases(keys, keylen, seed=params.hash_seed)
    hot = family_of(params.sketch).hash_rows(bases[inverse], j)
    f = np.bincount(rows * m + hot, minlength=g * k * m).reshape(g * k, m)
    n_r = np.bincount(rows, minlength=g * k)
    inner = params.sketch
    o = rng.binomial(f, inner.p) + rng.binomial(n_r[:, None] - f, inner.q)
    return SketchState(params.mechanism, o.astype(np.int64), n_r.astype(np.int64))
