"""Longitudinal protection: the PRR+IRR split is exactly the spec's channel, and repeats do not average out."""

from __future__ import annotations

import math
import os
import stat
from fractions import Fraction

import numpy as np
import pytest

from ldptel.client import CmsParams, GrrParams, MetricSpec, RrParams
from ldptel.client.errors import InvalidValueError, UnknownValueError
from ldptel.client.mechanisms.grr import grr_split, privatize_grr
from ldptel.client.mechanisms.rr import privatize_rr, rr_split
from ldptel.client.protocol.keyed import memo_key, prr_stream
from ldptel.client.sdk.memo import SECRET_BYTES, SecretError, load_or_create_secret
from ldptel.client.sdk.reporter import longitudinal_epsilon
from tests.stats import Z, assert_chi_square, assert_close_normal

FP, FP2 = b"\x01" * 32, b"\x02" * 32  # two privatization fingerprints

RR_CASES = [RrParams(epsilon=e, prob_bits=b) for e in (0.05, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0) for b in (32, 16, 10)]
GRR_CASES = [
    GrrParams(epsilon=e, domain=tuple(f"l{i}" for i in range(d)), prob_bits=b)
    for e, d in ((0.5, 2), (1.0, 3), (2.0, 10), (4.0, 300), (8.0, 5))
    for b in (32, 16)
]


# ------------------------------------------------------------------------------ exact composition (proof)
@pytest.mark.parametrize("params", RR_CASES, ids=lambda p: f"eps{p.epsilon}-B{p.prob_bits}")
def test_rr_prr_then_irr_is_exactly_the_spec_flip(params: RrParams) -> None:
    split = rr_split(params)
    assert split.composed_flip() == Fraction(params.flip_threshold, 1 << params.prob_bits)
    assert 1 <= split.prr_threshold <= split.threshold  # f₁ ≤ f: the permanent stage is the less noisy one
    assert 0 <= split.irr_num <= split.irr_den
    assert split.epsilon_one == pytest.approx(params.effective_epsilon, rel=1e-12)
    assert split.epsilon_inf >= split.epsilon_one


@pytest.mark.parametrize("params", GRR_CASES, ids=lambda p: f"eps{p.epsilon}-d{p.d}-B{p.prob_bits}")
def test_grr_prr_then_irr_is_exactly_the_spec_channel(params: GrrParams) -> None:
    split = grr_split(params)
    keep, other = split.composed()
    assert keep == Fraction(params.keep_threshold, 1 << params.prob_bits)
    assert other == (1 - keep) / (params.d - 1)
    assert keep + (params.d - 1) * other == 1
    assert 0 <= split.irr_num <= split.irr_den
    assert split.epsilon_one == pytest.approx(params.effective_epsilon, rel=1e-12)
    assert split.epsilon_inf >= split.epsilon_one


@pytest.mark.parametrize("params", RR_CASES[:12], ids=lambda p: f"eps{p.epsilon}-B{p.prob_bits}")
def test_rr_guarantees_match_the_rappor_formulas(params: RrParams) -> None:
    """RAPPOR's privacy bound (Erlingsson et al., CCS 2014) with its f = 2f₁, p = f₂, q = 1 − f₂ and one bit (h·(2 bits) → 1 bit)."""
    s = rr_split(params)
    f_r = 2 * s.prr_threshold / (1 << s.bits)
    p = s.irr_num / s.irr_den
    q = 1 - p
    q_star = 0.5 * f_r * (p + q) + (1 - f_r) * q
    p_star = 0.5 * f_r * (p + q) + (1 - f_r) * p
    eps_one = 0.5 * math.log(q_star * (1 - p_star) / (p_star * (1 - q_star)))
    eps_inf = math.log((1 - f_r / 2) / (f_r / 2))
    assert eps_one == pytest.approx(s.epsilon_one, rel=1e-9)
    assert eps_inf == pytest.approx(s.epsilon_inf, rel=1e-9)


def test_documented_longitudinal_figures() -> None:
    """The docstrings quote ε∞ ≈ 1.66·ε₁ at ε₁ = 1 and ≈ 1.34·ε₁ at ε₁ = 2 (rr, even split)."""
    one = MetricSpec(name="x", params=RrParams(epsilon=1.0))
    two = MetricSpec(name="x", params=RrParams(epsilon=2.0))
    assert longitudinal_epsilon(one) == pytest.approx(1.657, abs=2e-3)
    assert longitudinal_epsilon(two) / 2.0 == pytest.approx(1.344, abs=2e-3)
    sketch = MetricSpec(name="x", params=CmsParams(epsilon=4.0, k=4, m=64))
    assert longitudinal_epsilon(sketch) == sketch.effective_epsilon


# ------------------------------------------------------------------------------ statistics over devices
def test_rr_one_report_over_many_devices_has_the_spec_flip_rate() -> None:
    """Each simulated device has its own secret; the IRR draws come from a seeded generator."""
    params = RrParams(epsilon=1.0)
    rng = np.random.default_rng(2024)
    n = 15_000
    secrets = rng.bytes(32 * n)
    flipped = 0
    for i in range(n):
        batch = privatize_rr(True, params, secret=secrets[32 * i : 32 * i + 32], metric="m", fingerprint=FP, rng=rng)
        flipped += int(batch.bits[0]) >> 7 == 0
    f = params.effective_flip
    assert_close_normal(flipped / n, f, math.sqrt(f * (1 - f) / n), n=n, what="rr flip rate over devices")


def test_grr_one_report_over_many_devices_has_the_spec_distribution() -> None:
    params = GrrParams(epsilon=1.5, domain=("a", "b", "c", "d"))
    rng = np.random.default_rng(77)
    n = 12_000
    secrets = rng.bytes(32 * n)
    counts = np.zeros(4, dtype=np.int64)
    for i in range(n):
        batch = privatize_grr("c", params, secret=secrets[32 * i : 32 * i + 32], metric="m", fingerprint=FP, rng=rng)
        counts[int(batch.cols[0])] += 1
    probs = [params.q, params.q, params.p, params.q]
    assert_chi_square(counts, probs, what="grr report distribution over devices")


def test_rr_repeats_from_one_device_average_to_its_prr_not_to_the_value() -> None:
    """Averaging many reports of one value reveals at most the PRR bit (ε∞), never more."""
    params = RrParams(epsilon=1.0)
    split = rr_split(params)
    f2 = split.irr_num / split.irr_den
    rng = np.random.default_rng(5)
    n = 6_000
    for device in range(2):
        secret = rng.bytes(32)
        prr_flipped = prr_stream(secret, "m", FP, "rr", b"\x01").bits(split.bits) < split.prr_threshold
        prr_bit = not prr_flipped
        ones = sum(int(privatize_rr(True, params, secret=secret, metric="m", fingerprint=FP, rng=rng).bits[0]) >> 7 for _ in range(n))
        target = (1 - f2) if prr_bit else f2
        assert_close_normal(ones / n, target, math.sqrt(f2 * (1 - f2) / n), n=n, what=f"device {device} mean report")


def test_prr_depends_on_secret_metric_privatization_and_value() -> None:
    rng = np.random.default_rng(9)
    s1, s2 = rng.bytes(32), rng.bytes(32)
    base = prr_stream(s1, "m", FP, "rr", b"\x01").word()
    assert prr_stream(s1, "m", FP, "rr", b"\x01").word() == base  # deterministic
    for other in (
        prr_stream(s2, "m", FP, "rr", b"\x01"),
        prr_stream(s1, "n", FP, "rr", b"\x01"),
        prr_stream(s1, "m", FP2, "rr", b"\x01"),
        prr_stream(s1, "m", FP, "rr", b"\x00"),
    ):
        assert other.word() != base


def test_prr_stream_below_is_uniform() -> None:
    stream = prr_stream(b"k" * 32, "m", FP, "grr", b"x")
    counts = np.bincount([stream.below(7) for _ in range(70_000)], minlength=7)
    assert_chi_square(counts, [1 / 7] * 7, what="HMAC stream below(7)")


def test_memo_key_covers_metric_privatization_day_and_value() -> None:
    secret = bytes(range(32))
    key = memo_key(secret, "m", FP, 19_000, b"v")
    assert len(key) == 32
    assert key == memo_key(secret, "m", FP, 19_000, b"v")
    variants = [memo_key(secret, "m", FP, 19_001, b"v"), memo_key(secret, "m", FP2, 19_000, b"v"),
                memo_key(secret, "n", FP, 19_000, b"v"), memo_key(secret, "m", FP, 19_000, b"w"),
                memo_key(bytes(32), "m", FP, 19_000, b"v")]
    assert key not in variants and len(set(variants)) == len(variants)


def test_value_errors_do_not_echo_the_value() -> None:
    rr = RrParams(epsilon=1.0)
    grr = GrrParams(epsilon=1.0, domain=("a", "b"))
    with pytest.raises(InvalidValueError):
        privatize_rr("yes", rr, secret=bytes(32), metric="m", fingerprint=FP)
    with pytest.raises(UnknownValueError) as exc:
        privatize_grr("secret-label-xyz", grr, secret=bytes(32), metric="m", fingerprint=FP)
    assert "secret-label-xyz" not in str(exc.value)


# --------------------------------------------------------------------------------------- device secret
def test_secret_is_created_once_with_mode_0600(tmp_path) -> None:
    a = load_or_create_secret(tmp_path)
    assert len(a) == SECRET_BYTES
    assert load_or_create_secret(tmp_path) == a
    mode = stat.S_IMODE(os.stat(tmp_path / "device_secret").st_mode)
    assert mode == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left


def test_a_damaged_secret_is_refused_not_silently_replaced(tmp_path) -> None:
    (tmp_path / "device_secret").write_bytes(b"short")
    with pytest.raises(SecretError, match="refusing to replace"):
        load_or_create_secret(tmp_path)
    assert (tmp_path / "device_secret").read_bytes() == b"short"


def test_z_is_the_project_wide_value() -> None:
    assert Z == 6.0
