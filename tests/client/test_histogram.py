"""The numeric histogram mechanism (ldptel.client.mechanisms.histogram) against its closed forms.

ε exact from the inner thresholds and a smaller budget refused; the encoding chosen by d < 3e^ε + 2; the
single and batch paths against the exact output distribution (chi-square, α = 1e-6); per-bucket counts
within z = 6 of the truth and their variance over 7,201 repetitions within ±10% of
n·q(1−q)/(p−q)² + c(1−p−q)/(p−q); prefix-sum variances the same way; bucketing and edges.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from ldptel.client import estimate, fold, privatize, privatize_batch
from ldptel.client.errors import InvalidParameterError, InvalidValueError
from ldptel.client.mechanisms.histogram import HISTOGRAM, HistogramBatch, HistogramParams, bucket_edges
from ldptel.client.mechanisms.state import SketchState
from ldptel.client.protocol.specs import params_from_dict
from tests.stats import assert_chi_square, assert_close_normal, assert_variance_ratio

REPS = 7201


@pytest.mark.parametrize("eps,d,encoding", [(4.0, 32, "grr"), (2.0, 32, "oue"), (1.0, 64, "oue"), (8.0, 64, "grr")])
def test_encoding_follows_d_and_epsilon_and_epsilon_is_exact(eps: float, d: int, encoding: str) -> None:
    p = HistogramParams(epsilon=eps, edges=bucket_edges(0, 1000, d))
    assert p.encoding == encoding == ("grr" if d < 3 * math.exp(eps) + 2 else "oue")
    two_b = 1 << p.inner.prob_bits  # type: ignore[operator]
    if encoding == "grr":
        t = p.inner.keep_threshold  # type: ignore[union-attr]
        ratio = Fraction(t * (d - 1), two_b - t)
    else:
        t = p.inner.cold_threshold  # type: ignore[union-attr]
        ratio = Fraction(two_b - t, t)
    exact = math.log(ratio.numerator) - math.log(ratio.denominator)
    assert p.effective_epsilon == pytest.approx(exact, rel=1e-12)
    assert p.effective_epsilon <= eps
    assert p.satisfies(p.effective_epsilon) and not p.satisfies(math.nextafter(p.effective_epsilon, 0.0))


def test_bucketing_clips_to_the_edges_and_log_edges_are_geometric() -> None:
    p = HistogramParams(epsilon=4, edges=(0.0, 10.0, 20.0, 50.0))
    assert p.buckets_of(np.array([-5, 0, 9.99, 10, 19, 20, 50, 1e12])).tolist() == [0, 0, 0, 1, 1, 2, 2, 2]
    assert p.labels == ("[0, 10)", "[10, 20)", "[20, 50]")
    log = bucket_edges(0, 1000, 4, scale="log")
    assert log[0] == 0 and log[1] == pytest.approx(1.0) and log[-1] == pytest.approx(1000)
    assert np.allclose(np.diff(np.log(log[1:])), math.log(10))
    assert np.allclose(np.diff(bucket_edges(5, 15, 10)), 1.0)


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"edges": (0.0, 1.0)}, "edges"),
        ({"edges": (0.0, 2.0, 1.0)}, "edges"),
        ({"edges": (0.0, 1.0, float("nan"))}, "edges"),
        ({"edges": (0.0, 1.0, 2.0), "encoding": "rappor"}, "encoding"),
        ({"edges": (0.0, 1.0, 2.0), "encoding": "grr", "prob_bits": 8}, "prob_bits"),
    ],
)
def test_bad_params_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        HistogramParams(epsilon=2, **kwargs)  # type: ignore[arg-type]
    assert info.value.parameter == field
    with pytest.raises(InvalidParameterError):
        bucket_edges(-1, 10, 8, scale="log")


def test_params_round_trip_with_the_encoding_stored() -> None:
    for eps in (1.0, 4.0):
        p = HistogramParams(epsilon=eps, edges=bucket_edges(0, 10_000, 64, scale="log"))
        assert params_from_dict(p.to_dict()) == p


@pytest.mark.parametrize("bad", ["1", None, True, float("nan")])
def test_values_that_are_not_numbers_raise_the_typed_error(bad: object) -> None:
    p = HistogramParams(epsilon=4, edges=bucket_edges(0, 100, 8))
    with pytest.raises(InvalidValueError):
        privatize(bad, p)
    with pytest.raises(InvalidValueError):
        privatize_batch([3.0, bad], p)


def test_grr_single_and_batch_paths_follow_the_exact_distribution() -> None:
    p = HistogramParams(epsilon=2, edges=bucket_edges(0, 100, 8))
    assert p.encoding == "grr"
    probs = np.full(8, p.q)
    probs[3] = p.p  # 40 is in [37.5, 50)
    rng = np.random.default_rng(4)
    n = 20_000
    batch = privatize_batch(np.full(n, 40.0), p, rng=rng).cols
    single = np.concatenate([privatize(40.0, p, rng=rng).cols for _ in range(n)])  # type: ignore[misc]
    for sample, what in ((batch, "batch"), (single, "single")):
        assert_chi_square(np.bincount(sample, minlength=8), probs, what=f"grr histogram {what}")


def test_oue_rows_have_a_fair_hot_bit_and_q_elsewhere() -> None:
    p = HistogramParams(epsilon=1, edges=bucket_edges(0, 100, 16))
    assert p.encoding == "oue"
    n = 40_000
    rng = np.random.default_rng(6)
    for bits in (privatize_batch(np.full(n, 40.0), p, rng=rng).bits,
                 np.concatenate([privatize(40.0, p, rng=rng).bits for _ in range(4000)])):  # type: ignore[misc]
        assert bits is not None
        ones = np.unpackbits(bits, axis=1).sum(axis=0)
        rows = bits.shape[0]
        assert_close_normal(float(ones[6]), rows / 2, math.sqrt(rows / 4), n=rows, what="hot bit")
        cold = float(np.delete(ones, 6).sum())
        cells = rows * 15
        assert_close_normal(cold, cells * p.q, math.sqrt(cells * p.q * (1 - p.q)), n=cells, what="cold bits")


def _rep_counts(p: HistogramParams, values: np.ndarray, reps: int, seed: int) -> list[SketchState]:
    n = values.size
    batch = privatize_batch(np.tile(values, reps), p, rng=np.random.default_rng(seed))
    states = []
    for r in range(reps):
        part = HistogramBatch(n=n, cols=None if batch.cols is None else batch.cols[r * n : (r + 1) * n],
                              bits=None if batch.bits is None else batch.bits[r * n : (r + 1) * n])
        states.append(fold(p, [part]))
    return states


@pytest.mark.slow
@pytest.mark.parametrize("eps,d", [(4.0, 16), (1.0, 16)])
def test_bucket_counts_are_unbiased_with_the_closed_form_variance(eps: float, d: int) -> None:
    p = HistogramParams(epsilon=eps, edges=bucket_edges(0, 1000, d))
    values = np.clip(np.random.default_rng(1).lognormal(math.log(120), 0.8, 160), 0, 1000)
    true = np.bincount(p.buckets_of(values), minlength=d).astype(np.float64)
    n = values.size
    states = _rep_counts(p, values, REPS, seed=int(eps))
    counts = np.array([estimate(p, s).counts for s in states])
    prefix = np.array([HISTOGRAM.prefix_sums(p, c, n)[0] for c in counts])
    var = HISTOGRAM.variance(p, true, n)
    _, prefix_var = HISTOGRAM.prefix_sums(p, true, n)
    true_prefix = np.concatenate(([0.0], np.cumsum(true)))
    for i in (0, 1, 3, d - 1):  # the largest, a middle and the empty last bucket
        assert_close_normal(float(counts[:, i].mean()), true[i], math.sqrt(var[i] / REPS), n=REPS, what=f"bucket {i}")
        assert_variance_ratio(counts[:, i], float(var[i]), what=f"bucket {i} variance (ε={eps}, {p.encoding})")
    for j in (2, d // 2, d - 3):
        assert_close_normal(float(prefix[:, j].mean()), true_prefix[j], math.sqrt(prefix_var[j] / REPS), n=REPS, what=f"S_{j}")
        assert_variance_ratio(prefix[:, j], float(prefix_var[j]), what=f"S_{j} variance (ε={eps}, {p.encoding})")
