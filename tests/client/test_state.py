"""Sketch states: exact, additive, serializable; fold matches a per-report reference."""

import numpy as np
import pytest

from ldptel.client import (
    CmsParams,
    GrrParams,
    HcmsParams,
    OueCmsParams,
    RrParams,
    SketchState,
    estimate,
    fold,
    privatize_batch,
)
from ldptel.client.errors import EmptyStateError, InvalidParameterError, StateMismatchError, WireFormatError

PARAMS = [
    RrParams(epsilon=1),
    GrrParams(epsilon=1, domain=("a", "b", "c")),
    CmsParams(epsilon=4, k=16, m=64),
    OueCmsParams(epsilon=4, k=16, m=64),
    HcmsParams(epsilon=4, k=16, m=64),
]


def _values(params, n: int, offset: int = 0):
    if params.mechanism == "rr":
        return (np.arange(n) + offset) % 2 == 0
    if params.mechanism == "grr":
        return [("a", "b", "c")[(i + offset) % 3] for i in range(n)]
    return [f"v{(i + offset) % 11}" for i in range(n)]


def _reference(params, batches) -> np.ndarray:
    """Per-report reference fold with np.add.at (slow, obviously correct)."""
    if params.mechanism == "rr":
        return np.array([[sum(int(b.bit_values().sum()) for b in batches)]])
    if params.mechanism == "grr":
        return np.bincount(np.concatenate([b.cols for b in batches]), minlength=params.d)[None, :]
    ref = np.zeros((params.k, params.m), np.int64)
    for b in batches:
        if params.mechanism == "hcms":
            np.add.at(ref, (b.rows, b.cols), np.where(b.bit_values() == 1, 1, -1))
        else:
            np.add.at(ref, b.rows, np.unpackbits(b.bits, axis=1))
    return ref


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: p.mechanism)
def test_fold_is_exact_additive_and_round_trips(params) -> None:
    rng = np.random.default_rng(5)
    b1 = privatize_batch(_values(params, 700), params, rng=rng)
    b2 = privatize_batch(_values(params, 300, 1), params, rng=rng)
    whole = fold(params, [b1, b2])
    assert np.array_equal(whole.counts, _reference(params, [b1, b2]))
    assert whole.n == 1000
    parts = fold(params, [b1]) + fold(params, [b2])
    assert parts.equals(whole)
    into = fold(params, [b1])
    assert fold(params, [b2], into=into) is into and into.equals(whole)
    back = SketchState.from_bytes(whole.to_bytes(), params)
    assert back.equals(whole)
    summed = fold(params, [b1])
    summed.add_bytes(fold(params, [b2]).to_bytes(), params)
    assert summed.equals(whole)


def test_large_counts_serialize_as_int64() -> None:
    params = CmsParams(epsilon=4, k=2, m=8)
    state = SketchState.empty(params)
    state.counts[1, 3] = 3 * 2**31
    state.row_counts[1] = 3 * 2**31
    data = state.to_bytes()
    assert len(data) > 16 + 8 * 18 - 1
    assert SketchState.from_bytes(data, params).equals(state)
    small = SketchState.empty(params)
    assert len(small.to_bytes()) < len(data)  # int32 when everything fits


def test_state_mismatches_and_bad_bytes_are_typed_errors() -> None:
    a, b = CmsParams(epsilon=4, k=4, m=8), CmsParams(epsilon=4, k=8, m=8)
    with pytest.raises(StateMismatchError):
        SketchState.empty(a) + SketchState.empty(b)
    with pytest.raises(StateMismatchError):
        SketchState.from_bytes(SketchState.empty(a).to_bytes(), b)
    with pytest.raises(WireFormatError):
        SketchState.from_bytes(b"nonsense-bytes-here", a)
    with pytest.raises(WireFormatError):
        SketchState.from_bytes(SketchState.empty(a).to_bytes()[:-4], a)
    with pytest.raises(WireFormatError):
        SketchState.from_bytes(SketchState.empty(a).to_bytes()[:-1], a)  # not a whole number of counters
    with pytest.raises(WireFormatError):
        SketchState.empty(a).add_bytes(SketchState.empty(a).to_bytes()[:-1], a)
    with pytest.raises(StateMismatchError):
        fold(a, [], into=SketchState.empty(b))


def test_estimate_errors_and_rows() -> None:
    params = CmsParams(epsilon=4, k=4, m=8)
    with pytest.raises(EmptyStateError):
        estimate(params, SketchState.empty(params), candidates=["x"])
    state = fold(params, [privatize_batch(["x"] * 50, params, rng=np.random.default_rng(0))])
    with pytest.raises(InvalidParameterError, match="candidates"):
        estimate(params, state)
    with pytest.raises(InvalidParameterError, match="confidence"):
        estimate(params, state, candidates=["x"], confidence=1.5)
    est = estimate(params, state, candidates=["x", b"\xff"], confidence=0.9)
    rows = est.rows()
    assert [r["value"] for r in rows] == ["x", "ff"]
    assert rows[0]["ci_low"] < rows[0]["estimate"] < rows[0]["ci_high"]
    assert est.with_confidence(0.99).ci_high[0] > est.ci_high[0]


@pytest.mark.parametrize("params", [CmsParams(epsilon=4, k=16, m=64), OueCmsParams(epsilon=4, k=64, m=1024)], ids=lambda p: p.mechanism)
def test_merge_by_row_keeps_every_report_and_folds_the_same(params) -> None:
    """The aggregator merges a read's batches into one ordered by row; its fold must equal the batches' fold,
    on the serial path and on the threaded path (more than 2**26 report bits)."""
    from ldptel.client.mechanisms.cms import merge_by_row

    rng = np.random.default_rng(11)
    sizes = (700, 1, 300) if params.m == 64 else (40_000, 1, 30_000)
    batches = [privatize_batch(_values(params, n, i), params, rng=rng) for i, n in enumerate(sizes)]
    merged = merge_by_row(batches)
    assert merged.n == sum(sizes) and merged.mechanism == params.mechanism
    assert np.all(np.diff(merged.rows) >= 0)
    # the same multiset of (row, bits) reports, reordered
    def keyed(rows, bits):
        return sorted(zip(rows.tolist(), map(bytes, bits), strict=True))
    assert keyed(merged.rows, merged.bits) == keyed(
        np.concatenate([b.rows for b in batches]), np.concatenate([b.bits for b in batches])
    )
    assert fold(params, [merged]).equals(fold(params, batches))  # fold(batches) is checked against the reference above


def test_merge_by_row_into_a_given_buffer() -> None:
    from ldptel.client.mechanisms.cms import merge_by_row

    params = CmsParams(epsilon=4, k=16, m=64)
    rng = np.random.default_rng(3)
    batches = [privatize_batch(_values(params, n, n), params, rng=rng) for n in (50, 70)]
    buffer = np.full(120 * 8 + 5, 0xAB, dtype=np.uint8)
    merged = merge_by_row(batches, out=buffer)
    assert np.shares_memory(merged.bits, buffer) and merged.bits.shape == (120, 8)
    assert fold(params, [merged]).equals(fold(params, batches))
    with pytest.raises(ValueError, match="at least 960 bytes"):
        merge_by_row(batches, out=np.empty(959, np.uint8))
