"""Privacy: ε computed exactly from the effective (integer-threshold) probabilities, the boundary, output
enumeration for small sketches, the samplers against the exact distribution, and the CSPRNG-only rule."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest

from ldptel.client import (
    CmsParams,
    GrrParams,
    HcmsParams,
    OueCmsParams,
    RrParams,
    estimate,
    fold,
    privatize,
    privatize_batch,
)
from ldptel.client.protocol.hashing import HashFamily
from tests.stats import assert_chi_square

EPSILONS = [0.5, 1.0, 2.0, 4.0, 8.0]


def _params(mech: str, eps: float):
    return {
        "rr": lambda: RrParams(epsilon=eps),
        "grr": lambda: GrrParams(epsilon=eps, domain=tuple("abcdefghij")),
        "cms": lambda: CmsParams(epsilon=eps, k=4, m=64),
        "oue-cms": lambda: OueCmsParams(epsilon=eps, k=4, m=64),
        "hcms": lambda: HcmsParams(epsilon=eps, k=4, m=64),
    }[mech]()


def _exact_ratio(params) -> Fraction:
    """The worst-case likelihood ratio of one report, from the integer thresholds alone."""
    two_b = 1 << params.prob_bits
    if params.mechanism in ("rr", "hcms"):
        t = params.flip_threshold
        return Fraction(two_b - t, t)
    if params.mechanism == "cms":
        t = params.flip_threshold
        return Fraction(two_b - t, t) ** 2
    if params.mechanism == "oue-cms":
        t = params.cold_threshold  # p = ½ exactly: ratio (½/q)·((1−q)/½)
        return Fraction(two_b - t, t)
    t = params.keep_threshold  # grr: p/q = T(d−1)/(2^B − T)
    return Fraction(t * (params.d - 1), two_b - t)


@pytest.mark.parametrize("mech", ["rr", "grr", "cms", "oue-cms", "hcms"])
@pytest.mark.parametrize("eps", EPSILONS)
def test_effective_epsilon_is_exact_and_never_above_the_request(mech: str, eps: float) -> None:
    params = _params(mech, eps)
    ratio = _exact_ratio(params)
    exact = math.log(ratio.numerator) - math.log(ratio.denominator)
    assert params.effective_epsilon == pytest.approx(exact, rel=1e-12, abs=1e-12)
    assert params.effective_epsilon <= eps
    assert ratio <= Fraction(math.exp(eps)) * (1 + Fraction(1, 10**12))
    # The boundary: the effective ε is met, a budget one ulp smaller is not.
    assert params.satisfies(params.effective_epsilon)
    assert not params.satisfies(math.nextafter(params.effective_epsilon, 0.0))
    assert not params.satisfies(params.effective_epsilon * (1 - 1e-9))


def test_rounding_goes_towards_more_noise() -> None:
    cms = CmsParams(epsilon=4, k=4, m=64)
    assert cms.effective_flip >= cms.flip_probability
    rr = RrParams(epsilon=1)
    assert rr.effective_flip >= rr.flip_probability
    grr = GrrParams(epsilon=1, domain=tuple("abc"))
    assert grr.p <= grr.keep_probability
    oue = OueCmsParams(epsilon=2, k=4, m=64)
    assert oue.q >= oue.cold_probability


# ------------------------------------------------------------------------ exact output distributions
def _bit_probs(params, hot: int) -> list[tuple[Fraction, Fraction]]:
    """Per bit a of an m=8 row: (P(y_a=0), P(y_a=1)) given the hot position."""
    two_b = 1 << params.prob_bits
    out = []
    for a in range(params.m):
        if params.mechanism == "cms":
            f = Fraction(params.flip_threshold, two_b)
            p1 = 1 - f if a == hot else f
        else:
            p1 = Fraction(1, 2) if a == hot else Fraction(params.cold_threshold, two_b)
        out.append((1 - p1, p1))
    return out


def _unary_distribution(params, fam: HashFamily, value: str) -> list[Fraction]:
    """P(row j, byte y) for m = 8: cell j*256 + y; y's bit a is (y >> (7 − a)) & 1."""
    dist = []
    for j in range(params.k):
        probs = _bit_probs(params, fam.hash_one(value, j))
        for y in range(256):
            p = Fraction(1, params.k)
            for a in range(8):
                p *= probs[a][(y >> (7 - a)) & 1]
            dist.append(p)
    return dist


def _hcms_distribution(params, fam: HashFamily, value: str) -> list[Fraction]:
    """P(row j, column l, bit) : cell (j*m + l)*2 + bit."""
    f = Fraction(params.flip_threshold, 1 << params.prob_bits)
    dist = []
    for j in range(params.k):
        h = fam.hash_one(value, j)
        for col in range(params.m):
            plus = bin(col & h).count("1") % 2 == 0
            p_one = (1 - f) if plus else f
            base = Fraction(1, params.k * params.m)
            dist += [base * (1 - p_one), base * p_one]
    return dist


def _family(params) -> HashFamily:
    return HashFamily(k=params.k, m=params.m, seed=params.hash_seed)


def _two_values_that_differ(fam: HashFamily) -> tuple[str, str]:
    for i in range(1000):
        a, b = f"x{i}", f"y{i}"
        if all(fam.hash_one(a, j) != fam.hash_one(b, j) for j in range(fam.k)):
            return a, b
    raise AssertionError("no separated pair found")


@pytest.mark.parametrize("factory", [lambda: CmsParams(epsilon=1, k=2, m=8), lambda: OueCmsParams(epsilon=1, k=2, m=8), lambda: HcmsParams(epsilon=1, k=2, m=8)])
def test_enumerated_likelihood_ratios_never_exceed_e_to_the_epsilon(factory) -> None:
    params = factory()
    fam = _family(params)
    a, b = _two_values_that_differ(fam)
    dist = _unary_distribution if params.mechanism != "hcms" else _hcms_distribution
    pa, pb = dist(params, fam, a), dist(params, fam, b)
    assert sum(pa) == 1 and sum(pb) == 1
    worst = max(max(x / y, y / x) for x, y in zip(pa, pb, strict=True))
    assert worst == _exact_ratio(params)  # attained: the bound is tight, not loose
    assert math.log(worst.numerator) - math.log(worst.denominator) <= params.epsilon
    assert math.log(worst.numerator) - math.log(worst.denominator) == pytest.approx(params.effective_epsilon, rel=1e-12)


# ----------------------------------------------------------- samplers against the exact distribution
def _cells(batch, params) -> np.ndarray:
    if params.mechanism == "hcms":
        return (batch.rows * params.m + batch.cols) * 2 + batch.bit_values()
    return batch.rows * 256 + batch.bits[:, 0]


@pytest.mark.parametrize(
    "factory",
    [lambda: CmsParams(epsilon=1, k=2, m=8), lambda: OueCmsParams(epsilon=0.5, k=2, m=8), lambda: HcmsParams(epsilon=1, k=2, m=8)],
)
def test_batch_and_single_report_paths_draw_from_the_exact_distribution(factory) -> None:
    params = factory()
    fam = _family(params)
    dist = _unary_distribution if params.mechanism != "hcms" else _hcms_distribution
    probs = np.array([float(p) for p in dist(params, fam, "value")])
    cells = len(probs)
    batch = privatize_batch(["value"] * 300_000, params, rng=np.random.default_rng(101))
    assert_chi_square(np.bincount(_cells(batch, params), minlength=cells), probs, what=f"{params.mechanism} batch")
    rng = np.random.default_rng(202)
    singles = [privatize("value", params, rng=rng) for _ in range(60_000)]
    cell_ids = np.concatenate([_cells(s, params) for s in singles])
    assert_chi_square(np.bincount(cell_ids, minlength=cells), probs, what=f"{params.mechanism} single")


def test_rr_and_grr_single_and_batch_match_their_exact_distributions() -> None:
    rr = RrParams(epsilon=1)
    f = rr.effective_flip
    batch = privatize_batch(np.ones(100_000, dtype=bool), rr, rng=np.random.default_rng(3))
    ones = int(batch.bit_values().sum())
    assert_chi_square([batch.n - ones, ones], [f, 1 - f], what="rr batch")
    rng = np.random.default_rng(4)
    single = sum(int(privatize(True, rr, rng=rng).bit_values()[0]) for _ in range(20_000))
    assert_chi_square([20_000 - single, single], [f, 1 - f], what="rr single")

    grr = GrrParams(epsilon=1, domain=tuple("abcde"))
    expected = [grr.q] * 5
    expected[2] = grr.p
    b = privatize_batch(["c"] * 100_000, grr, rng=np.random.default_rng(5))
    assert_chi_square(np.bincount(b.cols, minlength=5), expected, what="grr batch")
    rng = np.random.default_rng(6)
    s = np.array([privatize("c", grr, rng=rng).cols[0] for _ in range(20_000)])
    assert_chi_square(np.bincount(s, minlength=5), expected, what="grr single")


def test_default_randomness_is_the_os_csprng_and_never_random_or_numpy_random(monkeypatch) -> None:
    """Make every `random` / `numpy.random` module function raise; the default path must not notice."""

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("client code used a non-CSPRNG source")

    for name in ("random", "randint", "randrange", "getrandbits", "choice", "choices", "shuffle", "sample", "uniform", "seed", "randbytes"):
        monkeypatch.setattr(random, name, boom)
    for name in ("rand", "randn", "random", "randint", "random_sample", "choice", "bytes", "binomial", "seed", "default_rng", "RandomState", "Generator", "shuffle", "permutation", "uniform", "integers"):
        if hasattr(np.random, name):
            monkeypatch.setattr(np.random, name, boom)
    cases = [
        (RrParams(epsilon=1), [True, False, True]),
        (GrrParams(epsilon=1, domain=("a", "b", "c")), ["a", "c", "b"]),
        (CmsParams(epsilon=4, k=8, m=64), ["x", "y", "x"]),
        (OueCmsParams(epsilon=4, k=8, m=64), ["x", "y", "x"]),
        (HcmsParams(epsilon=4, k=8, m=64), ["x", "y", "x"]),
    ]
    for params, values in cases:
        single = privatize(values[0], params)
        many = privatize_batch(values if params.mechanism != "rr" else np.array(values), params)
        state = fold(params, [single, many])
        assert state.n == 4
        estimate(params, state, candidates=["x", "y"])


def test_two_default_draws_differ() -> None:
    """The CSPRNG path is not accidentally deterministic."""
    params = CmsParams(epsilon=0.5, k=64, m=1024)
    a, b = privatize("same", params), privatize("same", params)
    assert a.bits.tobytes() != b.bits.tobytes() or a.rows[0] != b.rows[0]


@pytest.mark.parametrize("factory", [lambda: CmsParams(epsilon=4, k=16, m=1024), lambda: OueCmsParams(epsilon=4, k=16, m=1024)])
def test_large_batches_split_over_threads_keep_exact_bit_rates_and_determinism(factory) -> None:
    """20,000 reports of m = 1024 bits span 40 chunks, so privatize_batch uses its thread pool."""
    from ldptel.client.mechanisms import cms as cms_module
    from tests.stats import assert_close_normal

    params = factory()
    n = 20_000
    assert n * params.m // 8 > 4 * cms_module._CHUNK_BYTES  # really the threaded path
    batch = privatize_batch(["v"] * n, params, rng=np.random.default_rng(8))
    again = privatize_batch(["v"] * n, params, rng=np.random.default_rng(8))
    assert np.array_equal(batch.bits, again.bits) and np.array_equal(batch.rows, again.rows)
    fam = _family(params)
    hot = fam.hash_rows(fam.bases(["v"])[np.zeros(n, dtype=np.int64)], batch.rows)
    unpacked = np.unpackbits(batch.bits, axis=1)
    hot_ones = int(unpacked[np.arange(n), hot].sum())
    cold_ones = int(unpacked.sum()) - hot_ones
    cold_n = n * (params.m - 1)
    assert_close_normal(hot_ones / n, params.p, math.sqrt(params.p * (1 - params.p) / n), n=n, what="hot bit rate")
    assert_close_normal(cold_ones / cold_n, params.q, math.sqrt(params.q * (1 - params.q) / cold_n), n=cold_n, what="cold bit rate")
    # Rows are uniform over the k rows.
    assert_chi_square(np.bincount(batch.rows, minlength=params.k), np.full(params.k, 1 / params.k), what="rows")
