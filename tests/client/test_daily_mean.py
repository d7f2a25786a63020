"""daily-mean: α-point rounding with memoization (Ding et al. 2017) through rr's permanent randomized response.

* One report is exactly the onebit channel: PRR ∘ IRR composes to T_f/2^B (exact rationals), same ε_eff.
* Unbiased over devices: 20,000 devices (fresh secrets) report one value; the share of 1s is within z = 6 of
  f + (1 − 2f)·u/2^V and the estimated mean within z = 6 of the value.
* The longitudinal guarantee: a device's reports depend on its value only through c = 1[u + α ≥ 2^V]
  (identical output for values on the same side of its threshold, given the same IRR randomness), and
  averaging 4,000 reports of one device recovers only its memo bit (share of 1s within z = 6 of f₂ or
  1 − f₂, whatever the value); longitudinal ε = 2·ε∞ = 2·ln((1 − f₁)/f₁).
"""

from __future__ import annotations

import math
import sqlite3
from fractions import Fraction

import numpy as np
import pytest

from ldptel.client import MetricSpec, estimate, fold
from ldptel.client.errors import InvalidValueError
from ldptel.client.mechanisms.daily_mean import DAILY_MEAN, DailyMeanBatch, DailyMeanParams, rounded_bit
from ldptel.client.mechanisms.mean import VALUE_BITS
from ldptel.client.mechanisms.rr import rr_split
from ldptel.client.protocol.keyed import privatization_fingerprint
from ldptel.client.sdk.memo import longitudinal_epsilon, privatize_for_device
from tests.stats import assert_close_normal


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
def test_one_report_is_exactly_the_onebit_channel(eps: float) -> None:
    p = DailyMeanParams(epsilon=eps, lo=0, hi=3600)
    split = rr_split(p.rr)
    assert split.threshold == p.onebit.flip_threshold
    assert split.composed_flip() == Fraction(p.onebit.flip_threshold, 1 << p.prob_bits)
    assert p.effective_epsilon == p.onebit.effective_epsilon <= eps
    assert DAILY_MEAN.longitudinal_epsilon(p) == pytest.approx(2 * split.epsilon_inf)
    assert longitudinal_epsilon(MetricSpec(name="secs", params=p)) == DAILY_MEAN.longitudinal_epsilon(p)


def test_alpha_rounding_is_unbiased_over_devices() -> None:
    p = DailyMeanParams(epsilon=1, lo=0, hi=3600)
    x, devices = 1234.5, 20_000
    rng = np.random.default_rng(8)
    bits = np.array([
        DAILY_MEAN.privatize_permanent(x, p, secret=rng.bytes(32), metric="secs", fingerprint=privatization_fingerprint(p), rng=rng).bits[0] >> 7
        for _ in range(devices)
    ])
    u = int(p.onebit.quantize(np.array([x]))[0])
    f = p.onebit.flip_threshold / (1 << p.prob_bits)
    share = f + (1 - 2 * f) * u / (1 << VALUE_BITS)
    assert_close_normal(float(bits.mean()), share, math.sqrt(share * (1 - share) / devices), n=devices, what="share of 1s")
    batch = DailyMeanBatch(n=devices, bits=np.packbits(bits.astype(np.uint8)))
    est = estimate(p, fold(p, [batch]))
    assert_close_normal(float(est.counts[0]), x, float(est.stderr[0]), n=devices, what="mean over devices")


def _threshold_value(p: DailyMeanParams, secret: bytes) -> float:
    """The value at which this device's rounded bit switches (c = 1 from here up), by bisection on c."""
    lo, hi = p.lo, p.hi
    for _ in range(60):
        mid = (lo + hi) / 2
        if rounded_bit(mid, p, secret=secret, metric="secs", fingerprint=privatization_fingerprint(p)):
            hi = mid
        else:
            lo = mid
    return hi


def test_a_device_reveals_its_value_only_through_its_rounded_bit() -> None:
    p = DailyMeanParams(epsilon=1, lo=0, hi=3600)
    secret = bytes(range(32))
    cut = _threshold_value(p, secret)
    assert p.lo < cut < p.hi
    split = rr_split(p.rr)
    f2 = split.irr_num / split.irr_den
    reps = 4000
    for below, above in [(p.lo, cut * 0.999), (cut, p.hi)]:
        a = [DAILY_MEAN.privatize_permanent(below, p, secret=secret, metric="secs", fingerprint=privatization_fingerprint(p),
                                            rng=np.random.default_rng(i)).bits[0] for i in range(50)]
        b = [DAILY_MEAN.privatize_permanent(above, p, secret=secret, metric="secs", fingerprint=privatization_fingerprint(p),
                                            rng=np.random.default_rng(i)).bits[0] for i in range(50)]
        assert a == b  # same side of the device's threshold: the same report given the same fresh noise
    rng = np.random.default_rng(1)
    for x in (10.0, cut * 0.5, cut * 1.01, 3500.0):  # averaging many reports recovers only the memo bit
        ones = sum(int(DAILY_MEAN.privatize_permanent(x, p, secret=secret, metric="secs", fingerprint=privatization_fingerprint(p), rng=rng).bits[0]) >> 7
                   for _ in range(reps))
        share = ones / reps
        target = f2 if abs(share - f2) < abs(share - (1 - f2)) else 1 - f2
        assert_close_normal(share, target, math.sqrt(f2 * (1 - f2) / reps), n=reps, what=f"device average at x={x:.0f}")


def test_the_sdk_uses_the_permanent_path_and_types_are_checked() -> None:
    spec = MetricSpec(name="secs", params=DailyMeanParams(epsilon=1, lo=0, hi=3600))
    conn = sqlite3.connect(":memory:")
    batch, payload, memoized = privatize_for_device(conn, spec, 42.0, day=20000, secret=b"k" * 32)
    assert batch.n == 1 and len(payload) == 1 and not memoized
    with pytest.raises(InvalidValueError):
        privatize_for_device(conn, spec, "42", day=20000, secret=b"k" * 32)
