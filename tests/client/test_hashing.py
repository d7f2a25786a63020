"""The hash family: golden vectors pin version 1; vectorized and scalar paths agree; input types."""

import numpy as np
import pytest

from ldptel.client.errors import InvalidParameterError, InvalidValueError
from ldptel.client.protocol.hashing import HashFamily

# Pinned on 2026-11-22. Changing any of these numbers changes every deployed metric: bump hash_version.
GOLDEN = [
    (dict(k=8, m=1024, seed=0), "😀", [543, 626, 898, 453, 91, 539, 771, 111]),
    (dict(k=8, m=1024, seed=0), b"\x00\xff", [908, 267, 809, 494, 532, 464, 146, 478]),
    (dict(k=4, m=65536, seed=4242), "emoji:face-with-tears-of-joy", [54699, 35180, 44384, 4089]),
]


@pytest.mark.parametrize(("family", "value", "expected"), GOLDEN)
def test_golden_vectors(family: dict, value: object, expected: list[int]) -> None:
    fam = HashFamily(**family)
    assert [fam.hash_one(value, j) for j in range(fam.k)] == expected
    assert fam.matrix([value])[0].tolist() == expected


def test_golden_base_hashes() -> None:
    assert HashFamily(k=1, m=8, seed=0).base("😀") == 1544085228167910492
    assert HashFamily(k=1, m=8, seed=4242).base("") == 3533553805541624979


def test_vectorized_rows_match_scalar_path() -> None:
    fam = HashFamily(k=64, m=256, seed=7)
    values = [f"v{i}" for i in range(50)] + ["", "ü", "日本"]
    mat = fam.matrix(values)
    for i, v in enumerate(values):
        assert mat[i].tolist() == [fam.hash_one(v, j) for j in range(fam.k)]
    rows = np.arange(len(values)) % fam.k
    per_report = fam.hash_rows(fam.bases(values), rows)
    assert per_report.tolist() == [mat[i, r] for i, r in enumerate(rows)]


def test_str_hashes_as_its_utf8_bytes() -> None:
    fam = HashFamily(k=16, m=1024, seed=3)
    assert fam.matrix(["héllo"]).tolist() == fam.matrix(["héllo".encode()]).tolist()


@pytest.mark.parametrize("bad", [1, 1.5, None, ["a"], bytearray(b"a")])
def test_non_str_bytes_values_are_rejected(bad: object) -> None:
    fam = HashFamily(k=2, m=8)
    with pytest.raises(InvalidValueError, match="str or bytes"):
        fam.hash_one(bad, 0)


def test_rows_are_uniform_and_independent_across_rows() -> None:
    """Each row hash spreads 40,000 values uniformly over m (chi-square), and two rows are not copies."""
    from tests.stats import assert_chi_square

    fam = HashFamily(k=4, m=64, seed=11)
    mat = fam.matrix([f"item-{i}" for i in range(40000)])
    for j in range(fam.k):
        assert_chi_square(np.bincount(mat[:, j], minlength=64), np.full(64, 1 / 64), what=f"row {j}")
    # Pairs (h_0, h_1) uniform over 64×64 cells: rows behave as independent hashes.
    assert_chi_square(np.bincount(mat[:, 0] * 64 + mat[:, 1], minlength=4096), np.full(4096, 1 / 4096), what="rows 0,1")


@pytest.mark.parametrize(("kwargs", "param"), [(dict(k=0, m=8), "k"), (dict(k=1, m=12), "m"), (dict(k=1, m=8, seed=-1), "hash_seed"), (dict(k=1, m=8, version=2), "hash_version")])
def test_bad_family_parameters_name_the_parameter(kwargs: dict, param: str) -> None:
    with pytest.raises(InvalidParameterError, match=param):
        HashFamily(**kwargs)
