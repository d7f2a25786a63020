"""``pem``: frequent strings found without a candidate list, by the prefix extending method (PEM; Wang, Li,
Jha, "Locally Differentially Private Heavy Hitter Identification", arXiv 1708.06674) over oue-cms sketches.

Values are strings of 1 to L = ``max_bytes`` raw UTF-8 bytes (emoji and non-Latin words included; no NUL).

Client: one report of exactly one oue-cms row. The report draws a group t uniform in [L] and a row j uniform
in [k] (sent as one row index t·k + j) and privatizes the group's key

    key_t(v) = (v ‖ 0x00)[: t+1]          (the first t+1 bytes of v, or all of v and a terminator)

into row j of group t's k×m oue-cms sketch (hot bit p = ½, cold bits q = 1/(e^ε + 1), integer thresholds).
The group and the row are drawn independently of the value, so they cost no ε: the whole budget goes to the
one oue-cms row, and a report is ε_eff-LDP with ε_eff = ln((2^B − T)/T), the oue-cms figure (the ε split
between the report's parts is all to the row, none to the group index). One report, one ledger entry of ε_eff.

Server: the state is the L group sketches stacked, (L·k) × m, folded exactly like oue-cms (the row index says
the group). A value v of b bytes is *complete* in every group t ≥ min(b, L−1): its key there is v‖0 (or v when
b = L), the same key in each of them, so its full-value estimate sums those groups' sketches,

    f̂(v) = (n/N_G)·f̂_G(v),    Var = (n/N_G)²·[V(f_G, N_G) + (F2_G − f_G²)/(k(m−1))] + f(n/N_G − 1)(n−f)/(n−1),

with N_G the reports in the groups G, f̂_G the oue-cms plain estimate in the summed sketch, V its randomization
variance, the collision term of :mod:`~ldptel.client.mechanisms._sketch`, and the last term the spread of how
many of v's f devices drew a group in G (hypergeometric given N_G).

Discovery (:meth:`Pem.discover`), round t = 0 … L−1:

1. extend each kept prefix (length t) by every byte 1–255 and estimate the extensions in group t alone;
2. keep the ``keep`` largest (the cap on candidates per round); they are the prefixes of round t+1;
3. test the complete values: each kept prefix p itself (key p‖0, groups t…L−1) and, in the last round, every
   extension (length L, group L−1); only valid UTF-8 is tested.

A value tested in round t was chosen using groups < t only, and is estimated from groups ≥ t: the test's noise
is independent of the selection. At most C = Σ_{t=1}^{L−1} s_t + 255·s_{L−1} values can be tested (s_0 = 1,
s_t = min(keep, 255·s_{t−1})), so reporting those with f̂ ≥ z·stderr, z = Φ⁻¹(1 − α/C) (Bonferroni), bounds
the chance of reporting any value nobody holds by α (normal approximation of each estimate).

That approximation fails for collisions with heavy hitters: one shared cell with a key held by thousands moves
an estimate by a jump, not by normal noise (on small sketches 76 of 200 runs reported a false value). So the
final estimates are made twice: the first finds the heavy keys (kept prefixes and complete values whose one
shared cell would move a null estimate by more than 1/8 of its stderr); the second estimates every value from
the rows where it shares no cell with a heavy key of its groups (:class:`Heavy`), rescaled by n/N over those
rows' reports (rows are drawn independently of values, so this stays unbiased), with F2 less the heavy keys'
share in the collision term. Those rows' cells are known to hold none of the heavy keys' reports, so the
background subtracted there is the rest of their reports, (n_j − H_j)/m with H_j the heavy keys' share of
those rows, not the even n_j/m (which biased every such value low by about H/(m−1): 68–77% coverage at
m = 256, ε = 4, issue 24). A kept prefix counts as heavy only on the rows where it shares no cell with a
heavy value or heavy prefix: a prefix kept *because* one of its cells is a heavy value's borrows that value's
mass, and would otherwise cost the value its own rows (with many such prefixes, all of them). A value left
with no row is estimated from all rows; a value whose groups hold no report is 0 ± ∞ (unknown).

Keys are hashed by a fixed-width function every part evaluates alike (Python integers on the device, numpy on
the server): the key zero-padded to 8·⌈L/8⌉ bytes is read as little-endian u64 lanes, h₀ = fmix64((seed·256 +
len) ⊕ φ), h_{i+1} = fmix64(h_i ⊕ lane_i) (fmix64: MurmurHash3's 64-bit finalizer, a bijection); the row
hashes are the sketches' multiply-shift family of :mod:`~ldptel.client.protocol.hashing` on that base.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Any, ClassVar

import numpy as np

from ldptel.client.errors import EmptyStateError, InvalidParameterError, InvalidValueError
from ldptel.client.mechanisms import cms
from ldptel.client.mechanisms._sketch import base_sums, concat_rows, family_of, sketch_params_schema
from ldptel.client.mechanisms.base import Column, Values
from ldptel.client.mechanisms.capabilities import Discovering, Mergeable, Sketch
from ldptel.client.mechanisms.cms import UnaryBatch
from ldptel.client.mechanisms.oue_cms import OueCmsParams
from ldptel.client.mechanisms.state import (
    DEFAULT_ALPHA,
    DEFAULT_KEEP,
    Discovery,
    DiscoveryStage,
    Estimate,
    SketchState,
    codes_for,
)
from ldptel.client.protocol.hashing import value_bytes
from ldptel.client.protocol.params import MAX_CELLS, MAX_K, ParamsBase
from ldptel.client.protocol.rng import check_rng, uniform_below
from ldptel.client.protocol.validate import check_int, check_number

MAX_VALUE_BYTES = 32  # longest value a pem metric may declare (one group per byte)
_BYTES = 255  # extensions of a prefix: bytes 1..255 (0 terminates a value)
_MASK = (1 << 64) - 1
_PHI = 0x9E3779B97F4A7C15
_F1, _F2 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53


# ---------------------------------------------------------------------------------------------- params
@dataclass(frozen=True, slots=True, kw_only=True)
class PemParams(ParamsBase):
    """Discovery of frequent strings of 1 to ``max_bytes`` UTF-8 bytes: one oue-cms report per device into
    one of ``max_bytes`` group sketches of k×m (module docstring). ε: all to the oue-cms row."""

    mechanism: ClassVar[str] = "pem"
    k: int
    m: int
    max_bytes: int
    hash_seed: int = 0
    hash_version: int = 1
    prob_bits: int | None = None  # None: chosen automatically (as oue-cms) and then stored explicitly

    def __post_init__(self) -> None:
        check_int("max_bytes", self.max_bytes, 1, MAX_VALUE_BYTES)
        sketch = OueCmsParams(epsilon=self.epsilon, k=self.k, m=self.m, hash_seed=self.hash_seed,
                              hash_version=self.hash_version, prob_bits=self.prob_bits)
        if self.k * self.max_bytes > MAX_K:
            raise InvalidParameterError("k*max_bytes", f"at most {MAX_K} sketch rows (k per byte)", self.k * self.max_bytes)
        if self.k * self.max_bytes * self.m > MAX_CELLS:
            raise InvalidParameterError("k*max_bytes*m", f"at most {MAX_CELLS} cells", self.k * self.max_bytes * self.m)
        object.__setattr__(self, "epsilon", sketch.epsilon)
        object.__setattr__(self, "prob_bits", sketch.prob_bits)

    @property
    def groups(self) -> int:
        """L: one group per prefix length 1..L."""
        return self.max_bytes

    @property
    def rows(self) -> int:
        """Sketch rows of the whole state: k per group."""
        return self.k * self.max_bytes

    @property
    def sketch(self) -> OueCmsParams:
        """One group's oue-cms sketch (k rows)."""
        return _sketch(self, self.k)

    @property
    def stacked(self) -> OueCmsParams:
        """The groups stacked as one oue-cms sketch of L·k rows (what fold and merge see)."""
        return _sketch(self, self.rows)

    @property
    def lanes(self) -> int:
        return (self.max_bytes + 7) // 8

    @property
    def effective_epsilon(self) -> float:
        return self.sketch.effective_epsilon


@lru_cache(maxsize=64)
def _sketch(params: PemParams, rows: int) -> OueCmsParams:
    return OueCmsParams(epsilon=params.epsilon, k=rows, m=params.m, hash_seed=params.hash_seed,
                        hash_version=params.hash_version, prob_bits=params.prob_bits)


def value_data(value: object, params: PemParams) -> bytes:
    """The UTF-8 bytes of a value, checked: 1 to max_bytes bytes, valid UTF-8, no NUL."""
    try:
        data = value_bytes(value)
        data.decode("utf-8")
    except UnicodeError:
        raise InvalidValueError("pem values must be valid UTF-8 text") from None
    if not 1 <= len(data) <= params.max_bytes:
        raise InvalidValueError(f"pem values must be 1 to {params.max_bytes} UTF-8 bytes, got {len(data)}")
    if 0 in data:
        raise InvalidValueError("pem values must not contain a NUL character")
    return data


# ------------------------------------------------------------------------------------------- key hashing
def _fmix(z: int) -> int:
    z ^= z >> 33
    z = (z * _F1) & _MASK
    z ^= z >> 33
    z = (z * _F2) & _MASK
    return z ^ (z >> 33)


def key_base(key: bytes, *, seed: int, lanes: int) -> int:
    """The 64-bit base hash of one key (Python integers; the device's path)."""
    h = _fmix(((seed << 8) | len(key)) ^ _PHI)
    padded = key.ljust(8 * lanes, b"\0")
    for i in range(lanes):
        h = _fmix(h ^ int.from_bytes(padded[8 * i : 8 * i + 8], "little"))
    return h


def _fmix_np(z: np.ndarray) -> np.ndarray:
    z ^= z >> np.uint64(33)
    z *= np.uint64(_F1)
    z ^= z >> np.uint64(33)
    z *= np.uint64(_F2)
    z ^= z >> np.uint64(33)
    return z


def key_bases(keys: np.ndarray, lengths: np.ndarray, *, seed: int) -> np.ndarray:
    """Base hashes of many keys: ``keys`` (N, 8·lanes) uint8, zero past each key's length; ``lengths`` (N,)."""
    words = np.ascontiguousarray(keys).view("<u8").astype(np.uint64, copy=False)
    h = (np.uint64(seed << 8) | lengths.astype(np.uint64)) ^ np.uint64(_PHI)
    h = _fmix_np(h)
    for i in range(words.shape[1]):
        h ^= words[:, i]
        h = _fmix_np(h)
    return h


def _pad(data: Sequence[bytes], width: int) -> np.ndarray:
    if not data:
        return np.zeros((0, width), dtype=np.uint8)
    return np.frombuffer(b"".join(d.ljust(width, b"\0") for d in data), dtype=np.uint8).reshape(len(data), width).copy()


# -------------------------------------------------------------------------------------- the mechanism
class Pem(Discovering[PemParams, UnaryBatch], Sketch[PemParams, UnaryBatch], Mergeable[PemParams, UnaryBatch]):
    """Prefix extending method over oue-cms group sketches (module docstring)."""

    name = "pem"
    code = 16
    params_type = PemParams
    batch_type = UnaryBatch

    # ---------------------------------------------------------------------------------- client half
    def value_key(self, value: object, params: PemParams) -> bytes:
        return value_data(value, params)

    def privatize(self, value: object, params: PemParams, *, rng: np.random.Generator | None = None) -> UnaryBatch:
        data = value_data(value, params) + b"\0"
        fam = family_of(params.sketch)
        k, seed, lanes = params.k, params.hash_seed, params.lanes

        def hot_of(row: int) -> int:
            group, j = divmod(row, k)
            return fam.hash_from_base(key_base(data[: group + 1], seed=seed, lanes=lanes), j)

        return self._named(cms.unary_report(params.sketch, params.rows, hot_of, rng=rng))

    def privatize_batch(self, values: Values, params: PemParams, *, rng: np.random.Generator | None = None) -> UnaryBatch:
        rng = check_rng(rng)
        codes, uniques = codes_for(values)
        if codes.size == 0:
            raise InvalidValueError("cannot privatize an empty batch")
        data = [value_data(u, params) for u in uniques]
        width = 8 * params.lanes
        table = _pad(data, width)
        lengths = np.fromiter(map(len, data), dtype=np.int64, count=len(data))
        rows = uniform_below(rng, params.rows, codes.size)
        group, j = np.divmod(rows, params.k)
        keylen = np.minimum(lengths[codes] + 1, group + 1)
        keys = table[codes]
        keys[np.arange(width)[None, :] >= keylen[:, None]] = 0
        bases = key_bases(keys, keylen, seed=params.hash_seed)
        hot = family_of(params.sketch).hash_rows(bases, j)
        return self._named(cms.unary_reports(params.sketch, rows, hot, rng=rng))

    def _named(self, batch: UnaryBatch) -> UnaryBatch:
        return UnaryBatch(mechanism=self.name, n=batch.n, rows=batch.rows, bits=batch.bits)

    # ---------------------------------------------------------------------------------- server half
    def state_shape(self, params: PemParams) -> tuple[tuple[int, int], int]:
        """counts: (L·k) × m, group t's sketch in rows t·k … t·k + k − 1; row_counts: reports per row."""
        return (params.rows, params.m), params.rows

    def fold(self, params: PemParams, batches: Sequence[UnaryBatch], state: SketchState) -> SketchState:
        return cms.fold(params.stacked, batches, state)

    def merge(self, batches: Sequence[UnaryBatch], *, out: np.ndarray | None = None) -> UnaryBatch:
        return cms.merge_by_row(batches, out=out)

    def merge_bytes(self, batches: Sequence[UnaryBatch]) -> int:
        return int(sum(b.n for b in batches) * batches[0].bits.shape[1])

    def merge_order(self, batches: Sequence[UnaryBatch]) -> np.ndarray:
        return cms.row_order(concat_rows(batches))

    def estimate(
        self, params: PemParams, state: SketchState, *, candidates: Sequence[object] | None = None, confidence: float = 0.95
    ) -> Estimate:
        """Full-value estimates of listed values (module docstring), stderr and intervals."""
        if candidates is None or isinstance(candidates, (str, bytes)) or len(candidates) == 0:
            raise InvalidParameterError("candidates", "a non-empty list of values to estimate (or use discovery)", candidates)
        data = []
        for c in candidates:
            try:
                data.append(value_data(c, params))
            except InvalidValueError as exc:
                raise InvalidParameterError("candidates", f"values a device can report ({exc})", c) from None
        est, se = _Sums(params, state).full(data)
        return Estimate(self.name, tuple(d.decode("utf-8") for d in data), est, se, state.n, confidence)

    def variance(self, params: PemParams, counts: np.ndarray, n: int) -> np.ndarray:
        """Randomization variance of the full-value estimate of a value of max_bytes bytes (one group: the
        worst case; shorter values are estimated from more groups), without the collision term."""
        g = params.groups
        f = np.clip(np.asarray(counts, dtype=np.float64), 0, n)
        inner = cms.variance(params.sketch, f / g, max(n // g, 1))
        out: np.ndarray = g * g * inner + f * (g - 1) * (n - f) / max(n - 1, 1)
        return out

    def discover(
        self,
        params: PemParams,
        state: SketchState,
        *,
        keep: int = DEFAULT_KEEP,
        threshold: float | None = None,
        alpha: float = DEFAULT_ALPHA,
        confidence: float = 0.95,
        progress: Callable[[int, int], None] | None = None,
    ) -> Discovery:
        """The values whose full-value estimate is at least ``threshold`` standard errors (default: the
        Bonferroni z for ``alpha`` over every value that can be tested), ranked by estimate (module docstring).
        ``progress(done, total)`` is called after each round."""
        state.check(params)
        if state.n == 0:
            raise EmptyStateError("no pem reports to discover from")
        check_int("keep", keep, 1, 1 << 20)
        check_number("alpha", alpha, 0, 1, open_interval=True)
        g = params.groups
        sizes = [1]
        for _ in range(1, g):
            sizes.append(min(keep, _BYTES * sizes[-1]))
        bound = sum(sizes[1:]) + _BYTES * sizes[-1]
        z = NormalDist().inv_cdf(1 - alpha / bound) if threshold is None else check_number("threshold", threshold, 0, 100)
        sums = _Sums(params, state)
        width = 8 * params.lanes
        prefixes = np.zeros((1, width), dtype=np.uint8)  # the empty prefix
        found: list[bytes] = []  # complete values to test
        heavy_keys, heavy_groups, heavy_counts = [], [], []  # kept prefixes: key, group, estimate
        stages = []
        ext = np.arange(1, _BYTES + 1, dtype=np.uint8)
        for t in range(g):
            tested = _utf8(prefixes, t) if t > 0 else []  # kept prefixes as complete values (key p‖0, groups t..)
            cands = np.repeat(prefixes, _BYTES, axis=0)
            cands[:, t] = np.tile(ext, prefixes.shape[0])
            kept = 0
            if t < g - 1:
                est_t = sums.group(t, cands, t + 1)
                top = np.sort(np.argsort(-est_t, kind="stable")[:keep])
                prefixes = cands[top]
                kept = prefixes.shape[0]
                heavy_keys.append(prefixes)
                heavy_groups.append(np.full(kept, t))
                heavy_counts.append(est_t[top])
            else:  # the last group: every extension is a complete value of L bytes
                tested += _utf8(cands, t + 1)
            found += tested
            stages.append(DiscoveryStage(round=t, prefix_bytes=t + 1, examined=int(cands.shape[0]), kept=kept,
                                         tested=len(tested)))
            if progress is not None:
                progress(t + 1, g)
        # Pass 1 finds the heavy complete values; pass 2 re-estimates every value away from the cells it
        # shares with heavy keys (kept prefixes and pass-1 values), whose collisions are not normal noise.
        est1, se1 = sums.full(found)
        heavy = sums.heavy(heavy_keys, heavy_groups, heavy_counts, found, np.where(est1 >= z * se1, est1, 0.0))
        est_all, se_all = sums.full(found, heavy)
        passed = np.flatnonzero(est_all >= z * se_all)
        order = passed[np.argsort(-est_all[passed], kind="stable")]
        labels = tuple(found[i].decode("utf-8") for i in order.tolist())
        result = Estimate(self.name, labels, est_all[order], se_all[order], state.n, confidence)
        return Discovery(estimate=result, threshold=z, alpha=None if threshold is not None else alpha, keep=keep,
                         bound=bound, stages=tuple(stages))

    def shape(self, params: PemParams) -> str:
        return f"k={params.k} m={params.m} L={params.max_bytes}"

    def params_schema(self) -> tuple[dict[str, Any], list[str]]:
        fields, required = sketch_params_schema()
        fields = {**fields, "max_bytes": {"type": "integer", "minimum": 1, "maximum": MAX_VALUE_BYTES}}
        return fields, [*required, "max_bytes"]

    def columns(self, params: PemParams) -> tuple[Column, ...]:
        return (Column("rows", "row", "index", 2, params.rows, "row index"), Column("bits", "bits", "bytes", params.m // 8))


def _utf8(keys: np.ndarray, length: int) -> list[bytes]:
    """The first ``length`` bytes of each key row that are valid UTF-8 (complete values to test)."""
    out = []
    for row in keys[:, :length]:
        data = row.tobytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        out.append(data)
    return out


class _Sums:
    """A pem state read for estimation: each group's sketch and the suffix sums of groups t..L−1."""

    def __init__(self, params: PemParams, state: SketchState) -> None:
        state.check(params)
        self.params = params
        self.n = state.n
        g, k, m = params.groups, params.k, params.m
        self.blocks = state.counts.reshape(g, k, m)
        self.block_rows = state.row_counts.reshape(g, k)
        self.fam = family_of(params.sketch)
        self._suffix: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}

    def group(self, t: int, keys: np.ndarray, length: int) -> np.ndarray:
        """Plain estimates of prefix keys of ``length`` bytes in group t alone (in that group's reports)."""
        inner = self.params.sketch
        bases = key_bases(keys, np.full(keys.shape[0], length, dtype=np.int64), seed=self.params.hash_seed)
        s = base_sums(self.blocks[t], self.fam, bases)
        n = int(self.block_rows[t].sum())
        return _plain(inner, s, n)

    def _block(self, t: int) -> tuple[np.ndarray, np.ndarray, float]:
        """(counts, row counts, F̂2) of the groups t..L−1 summed into one k×m oue-cms sketch."""
        hit = self._suffix.get(t)
        if hit is None:
            counts = self.blocks[t:].sum(axis=0)
            rows = self.block_rows[t:].sum(axis=0)
            inner = self.params.sketch
            f2 = cms.cells(inner, SketchState(inner.mechanism, counts, rows)).f2()
            hit = self._suffix[t] = (counts, rows, f2)
        return hit

    def heavy(
        self,
        prefixes: list[np.ndarray],
        groups: list[np.ndarray],
        counts: list[np.ndarray],
        values: Sequence[bytes],
        value_counts: np.ndarray,
    ) -> Heavy:
        """The keys whose one shared cell would move a null value's estimate by more than 1/8 of a null
        stderr: kept prefixes (their group estimate) and complete values (their estimate spread over their
        groups)."""
        params, inner = self.params, self.params.sketch
        g, k, n = params.groups, params.k, self.n
        # One collision adds count/k to a k-row sketch's cell sum; scaled by n/N (≥ 1) it must stay ≤ se0/8,
        # se0 = the null stderr of one group's sketch scaled by n/N: count ≤ k·sd0/8 in the group's units.
        n_one = max(n // g, 1)
        limit = k * math.sqrt(float(cms.variance(inner, np.zeros(1), n_one)[0])) / 8
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        keylen = np.minimum(lengths + 1, g)
        value_bases = key_bases(_pad(values, 8 * params.lanes), keylen, seed=params.hash_seed)
        per_value = value_counts / g
        big = per_value >= limit
        first = np.minimum(lengths, g - 1)
        parts_b, parts_g, parts_l, parts_c = [value_bases[big]], [first[big]], [np.full(int(big.sum()), g - 1)], [per_value[big]]
        for keys, grp, cnt in zip(prefixes, groups, counts, strict=True):
            if not (cnt >= limit).any():
                continue
            # A kept prefix that shares one cell with a heavy key borrows that key's mass (a phantom: chosen
            # because of the collision). Judge each prefix on the rows where it shares no cell with a heavy
            # complete value of its group, then also with the prefixes that pass that test; a phantom made
            # heavy by a value v would otherwise cost v the very rows it borrowed from (v's own mass).
            t = int(grp[0])
            bases = key_bases(keys, np.full(keys.shape[0], t + 1), seed=params.hash_seed)
            mine = big & (first <= t)
            sources, source_counts = value_bases[mine], per_value[mine]
            clean = self._clean(t, bases, sources, source_counts)
            again = clean >= limit
            clean = self._clean(t, bases, np.concatenate([sources, bases[again]]),
                                np.concatenate([source_counts, clean[again]]))
            heavy = clean >= limit
            parts_b.append(bases[heavy])
            parts_g.append(grp[heavy])
            parts_l.append(grp[heavy])
            parts_c.append(clean[heavy])
        return Heavy(np.concatenate(parts_b), np.concatenate(parts_g), np.concatenate(parts_l), np.concatenate(parts_c))

    def _clean(self, t: int, bases: np.ndarray, sources: np.ndarray, source_counts: np.ndarray) -> np.ndarray:
        """Plain estimates of keys in group t alone from the rows where a key shares no cell with another key
        of ``sources`` (counts ``source_counts`` in group t), rescaled by the group's reports over those rows'
        reports; 0 when no row is left. The background those rows' cells hold excludes the sources' mass
        (:func:`_plain`)."""
        inner, k = self.params.sketch, self.params.k
        counts, rows = self.blocks[t], self.block_rows[t]
        hashes = self.fam.row_hashes_matrix(bases)
        use = _apart(hashes, bases, self.fam.row_hashes_matrix(sources), sources)
        n_j = (use * rows[None, :]).sum(axis=1).astype(np.float64)
        total = float(rows.sum())
        away = _others_mass(bases, sources, source_counts) * n_j / max(total, 1.0)
        s = np.where(use, counts[np.arange(k)[None, :], hashes], 0).sum(axis=1).astype(np.float64)
        est = _plain(inner, s, n_j, away) * (total / np.maximum(n_j, 1))
        out: np.ndarray = np.where(n_j > 0, est, 0.0)
        return out

    def full(self, values: Sequence[bytes], heavy: Heavy | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Full-value estimates and stderrs of complete values (module docstring). With ``heavy``, each value
        skips the rows where it collides with a heavy key of its groups (:class:`Heavy`)."""
        params, inner = self.params, self.params.sketch
        g, width, n, k, m = params.groups, 8 * params.lanes, self.n, params.k, params.m
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        first = np.minimum(lengths, g - 1)
        keylen = np.minimum(lengths + 1, g)
        bases = key_bases(_pad(values, width), keylen, seed=params.hash_seed)
        est = np.zeros(len(values))
        var = np.zeros(len(values))
        for t in np.unique(first).tolist():
            sel = np.flatnonzero(first == t)
            counts, rows, f2 = self._block(t)
            hashes = self.fam.row_hashes_matrix(bases[sel])  # C × k
            cells = counts[np.arange(k)[None, :], hashes]
            use = np.ones(hashes.shape, dtype=bool)
            away = np.zeros(sel.size)
            if heavy is not None:
                hb, hc = heavy.in_block(t)
                f2 = max(f2 - float(np.sum(hc * hc)), 0.0)
                use = _apart(hashes, bases[sel], self.fam.row_hashes_matrix(hb), hb)
                away = _others_mass(bases[sel], hb, hc)
            n_j = (use * rows[None, :]).sum(axis=1).astype(np.float64)
            fallback = n_j <= 0
            use[fallback] = True  # every row shares a cell with a heavy key: estimate from all rows, never drop
            used = use.sum(axis=1)
            n_j = (use * rows[None, :]).sum(axis=1).astype(np.float64)
            ok = n_j > 0
            # The used rows' cells hold no heavy key's reports: their background is the rest of those rows'
            # reports, n_j less the heavy keys' share of them (rows are drawn independently of values).
            away = np.where(fallback, 0.0, away * n_j / max(float(rows.sum()), 1.0))
            s = np.where(use, cells, 0).sum(axis=1).astype(np.float64)
            f_j = np.where(ok, _plain(inner, s, n_j, away), 0.0)
            r = np.where(ok, n / np.maximum(n_j, 1), math.inf)
            v_j = np.where(ok, cms.variance(inner, f_j, n_j), math.inf)
            coll = used * np.maximum(f2 - f_j * f_j * (k / np.maximum(used, 1)) ** 2, 0.0) / (k * k * (m - 1))
            est_t = np.where(ok, r * np.where(ok, f_j, 0.0), 0.0)  # no report in these groups: 0 ± ∞ (unknown)
            f = np.clip(est_t, 0, n)
            est[sel] = est_t
            with np.errstate(invalid="ignore"):
                var[sel] = np.where(ok, r * r * (v_j + coll) + f * (r - 1) * (n - f) / max(n - 1, 1), math.inf)
        return est, np.sqrt(var)


@dataclass(frozen=True)
class Heavy:
    """Keys with large counts in some groups (base hash, group, count in that group), whose collisions a
    discovery's final estimates avoid: a value skips every row where it shares a cell with one of them."""

    bases: np.ndarray
    groups: np.ndarray  # first group the key is in (prefix keys: their only group)
    last: np.ndarray  # last group the key is in
    per_group: np.ndarray  # its count in each of its groups

    def in_block(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(base hashes, counts in the groups t..L−1 summed) of the keys present in those groups."""
        lo = np.maximum(self.groups, t)
        n_groups = np.maximum(self.last - lo + 1, 0)
        present = n_groups > 0
        return self.bases[present], (self.per_group * n_groups)[present]


def _apart(hashes: np.ndarray, bases: np.ndarray, other: np.ndarray, other_bases: np.ndarray) -> np.ndarray:
    """(C × k) True where key c shares its row-j cell with no key of ``other`` but itself (same base hash)."""
    use = np.ones(hashes.shape, dtype=bool)
    for x, hx in zip(other_bases.tolist(), other, strict=True):
        use &= (hashes != hx[None, :]) | (bases == np.uint64(x))[:, None]
    return use


def _plain(inner: OueCmsParams, s: np.ndarray, n: float | np.ndarray, away: float | np.ndarray = 0.0) -> np.ndarray:
    """The oue-cms plain estimate from cell sums S = Σ_j O[j, h_j] over rows holding n reports:
    m/(m−1)·((S − qn)/(p−q) − (n − H)/m), where H (``away``) is the mass of keys known to share none of the
    cells summed. A key of count f sees E[S] = qn + (p−q)(f + (n − f − H)/m) (every other report lands in
    its cell with probability 1/m, those of H never), so the estimate is unbiased; subtracting the even
    background n/m instead would bias it low by H/(m−1) — on a row set chosen to avoid a value holding 20% of
    reports at m = 256, about 0.8 of a stderr."""
    m, p, q = inner.m, inner.p, inner.q
    out: np.ndarray = m / (m - 1) * ((s - q * n) / (p - q) - (n - away) / m)
    return out


def _others_mass(bases: np.ndarray, other_bases: np.ndarray, other_counts: np.ndarray) -> np.ndarray:
    """For each key of ``bases``: the total of ``other_counts`` over the keys of ``other_bases`` that are not
    the key itself (same base hash)."""
    total = float(np.sum(other_counts))
    if other_bases.size == 0:
        return np.zeros(bases.size)
    order = np.argsort(other_bases, kind="stable")
    ob, oc = other_bases[order], np.asarray(other_counts, dtype=np.float64)[order]
    uniq, start = np.unique(ob, return_index=True)
    own = np.add.reduceat(oc, start)
    at = np.minimum(np.searchsorted(uniq, bases), uniq.size - 1)
    self_mass = np.where(uniq[at] == bases, own[at], 0.0)
    out: np.ndarray = total - self_mass
    return out


PEM = Pem()
