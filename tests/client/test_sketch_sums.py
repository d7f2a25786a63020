"""The fast paths of the sketch estimators (issue 26: 100,000 candidates on a year's state): candidate sums from
cached hashes, row-centred int32 sums and F̂2 from exact integer sums give the same estimates as the direct
formulas (the gather of every C × k hash in int64 and :meth:`Cells.f2` on the float cells), to float rounding."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from ldptel.client import CmsParams, SketchState, estimate
from ldptel.client.errors import InvalidValueError
from ldptel.client.mechanisms import _sketch
from ldptel.client.mechanisms.hcms import HcmsParams
from ldptel.client.mechanisms.oue_cms import OueCmsParams
from ldptel.client.mechanisms.registry import mechanism_of


def _reference_sums(matrix: np.ndarray, params: _sketch.SketchParams, candidates: list[str]) -> np.ndarray:
    fam = _sketch.HashFamily(k=params.k, m=params.m, seed=params.hash_seed)
    h = fam.matrix(candidates)  # C × k, hashed value by value with Python's mmh3 path
    return np.asarray(matrix, dtype=np.int64)[np.arange(params.k)[None, :], h].sum(axis=1).astype(np.float64)


def _state(params: _sketch.SketchParams, rng: np.random.Generator, per_row: int, signed: bool = False) -> SketchState:
    rows = rng.integers(per_row // 2, per_row, params.k).astype(np.int64)
    counts = rng.binomial(rows[:, None], 0.3, size=(params.k, params.m)).astype(np.int64)
    if signed:
        counts -= rows[:, None] * 3 // 10
    return SketchState(params.mechanism, counts, rows)


@pytest.mark.parametrize("scale", [1_000, 1 << 40], ids=["int32-sums", "int64-sums"])
def test_candidate_sums_of_every_path_are_the_exact_integer_sums(
    scale: int, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cached cell indexes (few candidates), the row-by-row loop with int32 sums of the centred rows, its int64
    fallback (rows too large for int32) and the two-thread split: all equal the int64 gather, exactly."""
    params = CmsParams(epsilon=2.0, k=64, m=256, hash_seed=7)
    state = _state(params, rng, scale)
    state.counts[3, 5] = -state.counts[3, 5]  # a negative cell: the centring is signed
    fam = _sketch.family_of(params)
    few = [f"/few/{i}" for i in range(300)]
    many = [f"/many/{i}" for i in range(5000)]
    assert _sketch.candidate_cells(fam, few) is not None
    np.testing.assert_array_equal(_sketch.candidate_sums(state.counts, fam, few), _reference_sums(state.counts, params, few))
    monkeypatch.setattr(_sketch, "_FLAT_CELLS", 0)  # force the row-by-row path
    monkeypatch.setattr(_sketch, "_ONE_SHOT_CELLS", 0)
    assert _sketch.candidate_cells(fam, many) is None
    z, offset = _sketch._centred(state.counts)
    assert z.dtype == (np.int32 if scale < 1 << 20 else np.int64)
    want = _reference_sums(state.counts, params, many)
    np.testing.assert_array_equal(_sketch.candidate_sums(state.counts, fam, many), want)
    monkeypatch.setattr(_sketch, "_THREADED_CELLS", 0)
    monkeypatch.setattr(_sketch, "_THREADS", 2)
    np.testing.assert_array_equal(_sketch.candidate_sums(state.counts, fam, many), want)


def _plain_reference(params: _sketch.SketchParams, state: SketchState, candidates: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The estimate and stderr as the direct formulas give them: S from the int64 gather, F̂2 from the float cells."""
    mech = mechanism_of(params)
    m, n = params.m, state.n
    if isinstance(params, HcmsParams):
        from ldptel.client.mechanisms.hcms import fwht

        s = _reference_sums(fwht(state.counts), params, candidates)
        est = m / (m - 1) * (params.effective_c * s - n / m)
    else:
        s = _reference_sums(state.counts, params, candidates)
        est = m / (m - 1) * ((s - params.q * n) / (params.p - params.q) - n / m)
    f2 = mech.cells(params, state).f2()
    var = mech.variance(params, est, n) + _sketch.collision_variance(params, f2=f2, counts=np.clip(est, 0, n))
    return est, np.sqrt(var)


@pytest.mark.parametrize("params", [CmsParams(epsilon=3.0, k=32, m=128), OueCmsParams(epsilon=3.0, k=32, m=128),
                                    HcmsParams(epsilon=3.0, k=32, m=128)], ids=["cms", "oue-cms", "hcms"])
def test_estimates_equal_the_direct_formulas(params: _sketch.SketchParams, rng: np.random.Generator) -> None:
    if isinstance(params, HcmsParams):  # hcms counts are signed ±1 sums
        rows = rng.integers(500, 1000, params.k).astype(np.int64)
        counts = rng.integers(-40, 40, size=(params.k, params.m)).astype(np.int64)
        state = SketchState(params.mechanism, counts, rows)
    else:
        state = _state(params, rng, 5_000)
    for candidates in ([f"v{i}" for i in range(50)], [f"w{i}" for i in range(3000)]):
        est = estimate(params, state, candidates=candidates)
        want, stderr = _plain_reference(params, state, candidates)
        np.testing.assert_array_equal(est.counts, want)  # the sums are exact integers either way
        np.testing.assert_allclose(est.stderr, stderr, rtol=1e-12, atol=0)
        assert est.labels == tuple(candidates)


def test_f2_of_a_year_sized_state_is_exact_to_float_rounding(rng: np.random.Generator) -> None:
    """At a year of reports (n ≈ 7·10^8, counts ≈ 4·10^4 a cell) Σy² is a difference of terms ~10^5 times larger:
    the integer path must still give F̂2 to ~1e-12 of its exact value (computed in rationals)."""
    params = CmsParams(epsilon=4.0, k=16, m=64)
    rows = rng.multinomial(730_000_000 // 128, np.full(params.k, 1 / params.k)).astype(np.int64)
    counts = rng.binomial(rows[:, None], params.q, size=(params.k, params.m)).astype(np.int64)
    counts[:, 0] += rows // 20  # one heavy value per row
    state = SketchState(params.mechanism, counts, rows)
    p, q = Fraction(params.p), Fraction(params.q)
    k, m, n = params.k, params.m, int(rows.sum())
    y = [[(Fraction(int(counts[j, a])) - int(rows[j]) * q) / (p - q) for a in range(m)] for j in range(k)]
    alpha, beta = q * (1 - q) / (p - q) ** 2, (1 - p - q) / (p - q)
    t = sum(v * v for row in y for v in row) - alpha * m * n - beta * sum(v for row in y for v in row)
    exact = (t - Fraction(n * (k - 1), k) - Fraction(n * n, k * m)) * k * m / (m - 1)
    from ldptel.client.mechanisms import cms

    assert math.isclose(cms._f2(params, state), float(exact), rel_tol=1e-12)


def test_the_hash_caches_follow_the_list_and_the_seed() -> None:
    """Cached hashes are keyed by the candidates' content and the family: a list changed in place, another seed or
    another (k, m) hashes again; cached arrays are read-only; a value that is not str/bytes still gets its error."""
    a = _sketch.family(16, 64, 1, 1)
    b = _sketch.family(16, 64, 2, 1)
    values = [f"x{i}" for i in range(10)]
    np.testing.assert_array_equal(_sketch.candidate_bases(a, values), a.bases(values))
    np.testing.assert_array_equal(_sketch.candidate_bases(b, values), b.bases(values))
    cells = _sketch.candidate_cells(a, values)
    assert cells is not None and not cells.flags.writeable
    values[3] = "changed"
    np.testing.assert_array_equal(_sketch.candidate_bases(a, values), a.bases(values))
    again = _sketch.candidate_cells(a, values)
    assert again is not None and (again[3] == a.matrix(["changed"])[0] + np.arange(16) * 64).all()
    wider = _sketch.candidate_cells(_sketch.family(16, 128, 1, 1), values)
    assert wider is not None and (wider // 128 == np.arange(16)).all()
    with pytest.raises(InvalidValueError):
        _sketch.candidate_bases(a, ["ok", ["not", "hashable"]])  # type: ignore[list-item]
    with pytest.raises(InvalidValueError):
        _sketch.candidate_bases(a, ["ok", 3])  # type: ignore[list-item]


def test_p_values_are_math_erfc_to_rounding() -> None:
    from ldptel.aggregator import selection

    z = np.linspace(-12.0, 12.0, 20_001)
    got = selection.p_values(z, np.ones_like(z))
    want = np.array([0.5 * math.erfc(v / math.sqrt(2.0)) for v in z])
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)
