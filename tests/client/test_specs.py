"""Metric specs: constants pinned to the published closed forms (to 6 decimals), validation errors, JSON round trips."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldptel.client import CmsParams, GrrParams, HcmsParams, MetricSpec, OueCmsParams, RrParams, recommend_mechanism
from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms import Permanent, mechanism_of
from ldptel.client.mechanisms.longitudinal import report_charge
from ldptel.client.protocol.specs import params_from_dict

# ε: (CMS flip, CMS c_ε, HCMS flip, HCMS c^H, RR γ, RR keep)  — closed forms, 6 decimals.
TABLE_9_1 = {
    0.5: (0.437823, 8.041623, 0.377541, 4.082988, 0.122459, 0.622459),
    1: (0.377541, 4.082988, 0.268941, 2.163953, 0.231059, 0.731059),
    2: (0.268941, 2.163953, 0.119203, 1.313035, 0.380797, 0.880797),
    4: (0.119203, 1.313035, 0.017986, 1.037315, 0.482014, 0.982014),
    8: (0.017986, 1.037315, 0.000335, 1.000671, 0.499665, 0.999665),
}


@pytest.mark.parametrize("eps", sorted(TABLE_9_1))
def test_constants_match_table_9_1(eps: float) -> None:
    cms_flip, cms_c, h_flip, h_c, gamma, keep = TABLE_9_1[eps]
    cms = CmsParams(epsilon=eps, k=16, m=1024)
    hcms = HcmsParams(epsilon=eps, k=16, m=1024)
    rr = RrParams(epsilon=eps)
    assert round(cms.flip_probability, 6) == cms_flip
    assert round(cms.c_epsilon, 6) == cms_c
    assert round(hcms.flip_probability, 6) == h_flip
    assert round(hcms.c_epsilon, 6) == h_c
    assert round(rr.gamma, 6) == gamma
    assert round(0.5 + rr.gamma, 6) == keep
    assert round(OueCmsParams(epsilon=eps, k=16, m=1024).cold_probability, 6) == h_flip  # OUE q = 1/(e^ε+1)


@pytest.mark.parametrize(("eps", "p", "q"), [(1, 0.002714, 0.000998), (2, 0.007342, 0.000994), (4, 0.051821, 0.000949)])
def test_grr_probabilities_match_table_9_1(eps: float, p: float, q: float) -> None:
    grr = GrrParams(epsilon=eps, domain=tuple(str(i) for i in range(1000)))
    assert round(grr.keep_probability, 6) == p
    assert round(grr.p, 6) == p and round(grr.q, 6) == q  # 32-bit thresholds: effective = nominal at 6 places


def test_hcms_constant_is_not_the_cms_constant() -> None:
    """The bug two public implementations shipped: debiasing hcms with (e^(ε/2)+1)/(e^(ε/2)−1)."""
    for eps in (1, 2, 4):
        h = HcmsParams(epsilon=eps, k=4, m=8)
        assert h.effective_c == pytest.approx((math.exp(eps) + 1) / (math.exp(eps) - 1), rel=1e-8)
        assert h.effective_c != pytest.approx(CmsParams(epsilon=eps, k=4, m=8).c_epsilon, rel=1e-3)


def test_rr_gamma_form() -> None:
    rr = RrParams.from_gamma(0.25)
    assert rr.epsilon == pytest.approx(math.log(3), abs=1e-12)  # γ = ¼ ⇔ ε = ln 3
    assert rr.gamma == pytest.approx(0.25, abs=1e-12)
    with pytest.raises(InvalidParameterError, match="gamma"):
        RrParams.from_gamma(0.5)


def test_recommend_mechanism_uses_3e_eps_plus_2() -> None:
    # threshold 3e + 2 = 10.15 at ε = 1; 165.8 at ε = 4
    assert recommend_mechanism(1.0, 10) == "grr"
    assert recommend_mechanism(1.0, 11) == "oue-cms"
    assert recommend_mechanism(4.0, 165) == "grr"
    assert recommend_mechanism(4.0, 166) == "oue-cms"


@pytest.mark.parametrize(
    ("factory", "param", "fragment"),
    [
        (lambda: CmsParams(epsilon=0, k=4, m=8), "epsilon", "[0.01, 30.0]"),
        (lambda: CmsParams(epsilon=float("nan"), k=4, m=8), "epsilon", "number"),
        (lambda: CmsParams(epsilon=True, k=4, m=8), "epsilon", "number"),
        (lambda: CmsParams(epsilon=4, k=0, m=8), "k", "[1, 65536]"),
        (lambda: CmsParams(epsilon=4, k=4, m=100), "m", "power of two"),
        (lambda: CmsParams(epsilon=4, k=65536, m=65536), "k*m", "cells"),
        (lambda: CmsParams(epsilon=4, k=4, m=8, hash_seed=2**32), "hash_seed", "4294967295"),
        (lambda: CmsParams(epsilon=4, k=4, m=8, hash_version=9), "hash_version", "[1]"),
        (lambda: GrrParams(epsilon=1, domain=("a",)), "domain", "2 to"),
        (lambda: GrrParams(epsilon=1, domain=("a", "a")), "domain", "distinct"),
        (lambda: GrrParams(epsilon=1, domain="ab"), "domain", "list"),
        (lambda: MetricSpec(name="Bad Name", params=RrParams(epsilon=1)), "name", "a-z"),
        (lambda: MetricSpec(name="abc\n", params=RrParams(epsilon=1)), "name", "a-z"),  # "$" matched before "\n"
        (lambda: MetricSpec(name="ok", params=RrParams(epsilon=1), reports_per_day=0), "reports_per_day", "[1, 10000]"),
    ],
)
def test_invalid_parameters_raise_a_typed_error_naming_parameter_range_and_value(factory, param: str, fragment: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        factory()
    assert info.value.parameter == param
    assert fragment in str(info.value)
    assert "got" in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "params",
    [
        RrParams(epsilon=1.5),
        GrrParams(epsilon=2, domain=("red", "green", "blue")),
        CmsParams(epsilon=4, k=2048, m=1024, hash_seed=9),
        OueCmsParams(epsilon=3, k=64, m=256),
        HcmsParams(epsilon=2, k=128, m=64, prob_bits=20),
    ],
)
def test_metric_spec_json_round_trip(params) -> None:
    spec = MetricSpec(name="m.1", params=params, version=3, reports_per_day=2, description="d")
    text = spec.to_json()
    back = MetricSpec.from_json(text)
    assert back == spec
    assert json.loads(text)["effective_epsilon"] == params.effective_epsilon
    # rr, grr: a permanent randomized response charges its fresh noise's ε_irr per report (issue 22 §1)
    assert back.daily_epsilon == pytest.approx(2 * report_charge(params))
    assert (report_charge(params) > params.effective_epsilon) == isinstance(mechanism_of(params), Permanent)


def test_auto_prob_bits_are_stored_explicitly() -> None:
    cms = CmsParams(epsilon=4, k=8, m=64)
    assert cms.prob_bits == 8  # fewest bits ≥ 8 within 1% of ε
    assert cms.to_dict()["prob_bits"] == 8
    assert params_from_dict(cms.to_dict()) == cms
    assert OueCmsParams(epsilon=4, k=8, m=64).prob_bits == 10  # q is smaller: more bits for 1%


def test_unknown_json_keys_and_mechanisms_are_rejected() -> None:
    with pytest.raises(InvalidParameterError, match="colour"):
        params_from_dict({"mechanism": "rr", "epsilon": 1, "colour": "red"})
    with pytest.raises(InvalidParameterError, match="mechanism"):
        params_from_dict({"mechanism": "olh", "epsilon": 1})
    with pytest.raises(InvalidParameterError, match=r"cms params with k and m \(missing\)"):
        params_from_dict({"mechanism": "cms", "epsilon": 1})
    with pytest.raises(InvalidParameterError, match="JSON"):
        MetricSpec.from_json("{nope")


def test_specs_are_frozen() -> None:
    cms = CmsParams(epsilon=4, k=8, m=64)
    with pytest.raises(AttributeError):
        cms.epsilon = 1.0  # type: ignore[misc]


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 70000) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=5),
    max_leaves=15,
)
_params_like = st.fixed_dictionaries(
    {"mechanism": st.sampled_from(["rr", "grr", "cms", "hcms", "oue-cms"]) | _json},
    optional={k: _json | st.integers(0, 4096) for k in ("epsilon", "k", "m", "domain", "hash_seed", "hash_version", "prob_bits", "gamma")},
)


@settings(max_examples=500, deadline=None)
@given(data=st.one_of(_json, _params_like, st.fixed_dictionaries({"name": _json | st.just("ok"), "params": _params_like}, optional={"version": _json, "reports_per_day": _json, "description": _json})))
def test_any_json_either_parses_or_raises_invalid_parameter_error(data) -> None:
    try:
        if isinstance(data, dict) and "name" in data:
            MetricSpec.from_dict(data)
        else:
            params_from_dict(data)
    except InvalidParameterError:
        pass
