"""Poisoning (issue 12, ldp-math §8.2): the mechanisms refuse reports no honest client produces.

cms and oue-cms: a report's count of set bits is Bernoulli(p) + Binomial(m − 1, q); one outside the range that
holds all but PLAUSIBILITY_FALSE_REJECTION of honest reports is refused (an all-ones row, which would add
m/(m−1)·((1 − q)/(p − q) − 1/m) to the estimate of every value at once, is the worst case). Mechanisms whose
every well-formed report can occur (rr, grr, hcms) refuse nothing more than their decoder does.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldptel.client import CmsParams, GrrParams, HcmsParams, OueCmsParams, RrParams, privatize_batch
from ldptel.client.errors import WireFormatError
from ldptel.client.mechanisms import mechanism_of
from ldptel.client.mechanisms.cms import UnaryBatch, set_bits_range
from ldptel.client.protocol.params import PLAUSIBILITY_FALSE_REJECTION
from tests.stats import assert_chi_square

UNARY = [
    OueCmsParams(epsilon=4.0, k=16, m=1024),
    OueCmsParams(epsilon=1.0, k=8, m=256),
    OueCmsParams(epsilon=4.0, k=8, m=64),
    CmsParams(epsilon=4.0, k=16, m=1024),
    CmsParams(epsilon=0.5, k=4, m=128),
]


def _with_set_bits(params: OueCmsParams | CmsParams, counts: list[int]) -> UnaryBatch:
    bits = np.zeros((len(counts), params.m), dtype=np.uint8)
    for i, c in enumerate(counts):
        bits[i, :c] = 1
    return UnaryBatch(mechanism=params.mechanism, n=len(counts), rows=np.zeros(len(counts), dtype=np.int64),
                      bits=np.packbits(bits, axis=1))


@pytest.mark.parametrize("params", UNARY, ids=lambda p: f"{p.mechanism}-eps{p.epsilon}-m{p.m}")
def test_the_range_is_the_exact_binomial_tail(params: OueCmsParams | CmsParams) -> None:
    """Against scipy's binomial: each tail outside [lo, hi] holds at most half the false-rejection rate, and
    widening by one more count would not (the range is as tight as the rate allows)."""
    stats = pytest.importorskip("scipy.stats")
    m, p, q = params.m, params.p, params.q
    lo, hi = set_bits_range(m, p, q)

    def above(s: int) -> float:  # P(S > s), S = Bernoulli(p) + Binomial(m − 1, q)
        return float(p * stats.binom.sf(s - 1, m - 1, q) + (1 - p) * stats.binom.sf(s, m - 1, q))

    def below(s: int) -> float:  # P(S < s)
        return 0.0 if s <= 0 else float(p * stats.binom.cdf(s - 2, m - 1, q) + (1 - p) * stats.binom.cdf(s - 1, m - 1, q))

    half = PLAUSIBILITY_FALSE_REJECTION / 2
    assert above(hi) <= half * (1 + 1e-6) and (hi == m or above(hi - 1) > half)
    assert below(lo) <= half * (1 + 1e-6) and (lo == 0 or below(lo + 1) > half)
    assert lo <= p + (m - 1) * q <= hi


@pytest.mark.parametrize("params", UNARY, ids=lambda p: f"{p.mechanism}-eps{p.epsilon}-m{p.m}")
def test_the_boundaries_are_accepted_and_one_past_them_refused(params: OueCmsParams | CmsParams) -> None:
    mech = mechanism_of(params)
    lo, hi = set_bits_range(params.m, params.p, params.q)
    mech.check_plausible(_with_set_bits(params, [lo, hi, (lo + hi) // 2]), params)
    if hi < params.m:
        with pytest.raises(WireFormatError, match=rf"report 1 has {hi + 1} of {params.m} bits set.*{lo} to {hi}"):
            mech.check_plausible(_with_set_bits(params, [lo, hi + 1]), params)
    if lo > 0:
        with pytest.raises(WireFormatError, match=rf"report 0 has {lo - 1} of"):
            mech.check_plausible(_with_set_bits(params, [lo - 1]), params)
    with pytest.raises(WireFormatError, match="bits set"):  # the all-ones row of the issue
        mech.check_plausible(_with_set_bits(params, [params.m]), params)


@pytest.mark.parametrize("params", UNARY, ids=lambda p: f"{p.mechanism}-eps{p.epsilon}-m{p.m}")
def test_honest_reports_pass_and_their_bit_counts_follow_the_model(params: OueCmsParams | CmsParams) -> None:
    """200,000 honest reports (all of one value: the hot bit is always in the row) pass the check (a false
    rejection has probability 2e-4 at most), and their set-bit counts fit Bernoulli(p) + Binomial(m−1, q)."""
    rng = np.random.default_rng(20261123)
    batch = privatize_batch(["x"] * 200_000, params, rng=rng)
    mechanism_of(params).check_plausible(batch, params)
    counts = np.unpackbits(batch.bits, axis=1).sum(axis=1)
    m, p, q = params.m, params.p, params.q
    cold = np.array([math.comb(m - 1, i) * q**i * (1 - q) ** (m - 1 - i) for i in range(m)])
    pmf = np.append(cold * (1 - p), 0.0)
    pmf[1:] += cold * p
    # cells with expected count ≥ 5; the rest pooled into the two tails
    expected = pmf * counts.size
    keep = np.flatnonzero(expected >= 5)
    lo_cell, hi_cell = int(keep[0]) + 1, int(keep[-1]) - 1
    edges = [lo_cell, *range(lo_cell + 1, hi_cell + 1), hi_cell + 1]
    observed = np.array([np.count_nonzero(counts < lo_cell)] + [np.count_nonzero(counts == s) for s in edges[:-1]]
                        + [np.count_nonzero(counts > hi_cell)])
    probs = np.array([pmf[:lo_cell].sum()] + [pmf[s] for s in edges[:-1]] + [pmf[hi_cell + 1:].sum()])
    assert_chi_square(observed, probs / probs.sum(), what=f"set bits of {params.mechanism}")


@pytest.mark.parametrize("params", [RrParams(epsilon=1.0), GrrParams(epsilon=2.0, domain=("a", "b", "c")),
                                    HcmsParams(epsilon=2.0, k=8, m=64)], ids=lambda p: p.mechanism)
def test_mechanisms_whose_every_report_can_occur_refuse_nothing_more(params: object) -> None:
    batch = privatize_batch(["a"] * 1000 if not isinstance(params, RrParams) else [True] * 1000, params,  # type: ignore[arg-type]
                            rng=np.random.default_rng(1))
    mechanism_of(params).check_plausible(batch, params)  # type: ignore[arg-type]


def test_both_popcounts_count_set_bits() -> None:
    """The ufunc (numpy ≥ 2) and the table (numpy 1.26) agree with unpackbits on every byte value."""
    from ldptel.client.mechanisms import cms

    every = np.arange(256, dtype=np.uint8).reshape(16, 16)
    expected = np.unpackbits(every, axis=1).reshape(16, 16, 8).sum(axis=2)
    assert (np.take(cms._POPCOUNT, every) == expected).all() and (cms._popcount(every) == expected).all()
