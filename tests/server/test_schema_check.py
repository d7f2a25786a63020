"""The response checker itself: each keyword the OpenAPI document uses can fail."""

from __future__ import annotations

import pytest

from tests.server.schema_check import SchemaViolation, validate
from tests.server.srv_helpers import cms_spec, grr_spec, rr_spec

PARAMS = {"$ref": "#/components/schemas/Params"}
SPEC = {"$ref": "#/components/schemas/MetricSpec"}


def test_real_specs_conform() -> None:
    for spec in (cms_spec(), rr_spec(), grr_spec()):
        validate(spec.to_dict(), SPEC)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"mechanism": "cms", "epsilon": 4.0, "m": 64}, "oneOf"),  # k missing
        ({"mechanism": "rr", "epsilon": 1.0, "k": 4}, "oneOf"),  # a field rr does not take
        ({"mechanism": "cms", "epsilon": 4.0, "k": 4, "m": 100}, "oneOf"),  # m not a power of two
        ({"mechanism": "rr", "epsilon": 31.0}, "oneOf"),  # above the maximum
        ({"mechanism": "grr", "epsilon": 1.0, "domain": ["a", "a"]}, "oneOf"),  # not unique
        ({"mechanism": "grr", "epsilon": 1.0, "domain": ["a", ""]}, "oneOf"),  # label too short
        ({"mechanism": "cms", "epsilon": 4.0, "k": 4, "m": 64, "prob_bits": "8"}, "oneOf"),  # neither int nor null
    ],
)
def test_each_keyword_can_fail(value: dict, fragment: str) -> None:
    with pytest.raises(SchemaViolation, match=fragment):
        validate(value, PARAMS)


def test_nullable_and_unknown_keywords() -> None:
    validate({"mechanism": "cms", "epsilon": 4.0, "k": 4, "m": 64, "prob_bits": None}, PARAMS)
    with pytest.raises(SchemaViolation, match="length"):
        validate("x" * 1001, {"type": "string", "maxLength": 1000})
    with pytest.raises(AssertionError, match="does not implement"):
        validate(1, {"type": "integer", "multipleOf": 2})
