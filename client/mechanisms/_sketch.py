"""Helpers shared by the sketch mechanisms (cms, oue-cms, hcms): hashing reports and candidates."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numpy as np

from ldptel.client.errors import InvalidParameterError, InvalidValueError
from ldptel.client.protocol.hashing import HashFamily
from ldptel.client.protocol.specs import SketchParams
from ldptel.client.protocol.wire import ReportBatch
from ldptel.client.mechanisms.base import codes_for

_ONE_SHOT_CELLS = 1 << 18
_THREADED_CELLS = 1 << 24
_THREADS = min(2, os.cpu_count() or 1)


@lru_cache(maxsize=64)
def family(k: int, m: int, seed: int, version: int) -> HashFamily:
    return HashFamily(k=k, m=m, seed=seed, version=version)


def family_of(params: SketchParams) -> HashFamily:
    return family(params.k, params.m, params.hash_seed, params.hash_version)


def report_bases(values: Sequence[object] | np.ndarray, fam: HashFamily) -> np.ndarray:
    """Base hash of every value, hashing each distinct value once."""
    codes, uniques = codes_for(values)
    if codes.size == 0:
        raise InvalidValueError("cannot privatize an empty batch")
    return fam.bases(uniques)[codes]


def candidate_sums(matrix: np.ndarray, fam: HashFamily, candidates: Sequence[object]) -> np.ndarray:
    """S(d) = Σ_j matrix[j, h_j(d)] for every candidate d, as float64.

    One mmh3 call per candidate, then k vectorized passes (hash a row for all candidates, gather from that
    row, accumulate): no C·k Python calls. ``mode="wrap"`` skips numpy's bounds check; every index is < m
    by construction.
    """
    if isinstance(candidates, (str, bytes)) or len(candidates) == 0:
        raise InvalidParameterError("candidates", "a non-empty list of str or bytes values", candidates)
    bases = fam.bases(candidates)
    rows = np.ascontiguousarray(matrix, dtype=np.int64)
    if bases.size * fam.k <= _ONE_SHOT_CELLS:  # few candidates: all C×k hashes in one expression
        h = fam.row_hashes_matrix(bases)
        flat = h + (np.arange(fam.k, dtype=np.int64) * fam.m)[None, :]
        return rows.reshape(-1)[flat].sum(axis=1).astype(np.float64)
    def sums(part: np.ndarray) -> np.ndarray:
        acc = np.zeros(part.size, dtype=np.int64)
        idx = np.empty(part.size, dtype=np.uint64)
        buf = np.empty(part.size, dtype=np.int64)
        for j in range(fam.k):
            fam.row_hash(part, j, out=idx)
            np.take(rows[j], idx.view(np.int64), mode="wrap", out=buf)
            acc += buf
        return acc

    if _THREADS == 1 or bases.size * fam.k < _THREADED_CELLS:
        return sums(bases).astype(np.float64)
    # Halves of the candidates in two threads: numpy releases the GIL in each vector operation.
    with ThreadPoolExecutor(_THREADS) as pool:
        parts = list(pool.map(sums, np.array_split(bases, _THREADS)))
    return np.concatenate(parts).astype(np.float64)


def concat_rows(batches: Sequence[ReportBatch]) -> np.ndarray:
    parts = [b.rows for b in batches if b.rows is not None]
    return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.zeros(0, np.int64)
