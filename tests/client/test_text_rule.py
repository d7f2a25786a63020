"""The protocol's text rule (issue 22 §5): a ``str`` holding a lone surrogate code point (U+D800-U+DFFF) has no UTF-8
encoding; it is refused with the documented error (:class:`InvalidTextError`, an :class:`InvalidValueError` and a
``ValueError``), never repaired, never handed to mmh3 as a ``str`` (mmh3 5.3.1 crashes the interpreter on one).

Before the fix ``Reporter.report("x", "a\\ud800b")`` raised the encoder's raw ``UnicodeEncodeError`` into the app,
and so did an estimate with such a candidate.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ldptel.client import (
    CmsParams,
    GrrParams,
    HcmsParams,
    InvalidParameterError,
    InvalidTextError,
    InvalidValueError,
    MetricSpec,
    OueCmsParams,
    PemParams,
)
from ldptel.client.protocol.hashing import HashFamily, value_bytes
from ldptel.client.protocol.validate import lone_surrogate_at
from ldptel.client.sdk.reporter import Reporter

ROOT = Path(__file__).resolve().parents[2]
BROKEN = ["a\ud800b", "\udfff", "\ud83d\ude00", "x" * 20 + "\udced", "\ud800" * 3]  # Python never pairs two halves
SPECS = [
    MetricSpec(name="t.cms", params=CmsParams(epsilon=2.0, k=4, m=64), reports_per_day=100),
    MetricSpec(name="t.oue", params=OueCmsParams(epsilon=2.0, k=4, m=64), reports_per_day=100),
    MetricSpec(name="t.hcms", params=HcmsParams(epsilon=2.0, k=4, m=64), reports_per_day=100),
    MetricSpec(name="t.pem", params=PemParams(epsilon=4.0, k=8, m=64, max_bytes=8), reports_per_day=100),
    MetricSpec(name="t.grr", params=GrrParams(epsilon=2.0, domain=("a", "b", "\U0001f600")), reports_per_day=100),
]


@pytest.fixture
def rep(tmp_path: Path):  # type: ignore[no-untyped-def]
    reporter = Reporter("http://127.0.0.1:9", "t" * 40, tmp_path, start=False, specs=SPECS)
    yield reporter
    reporter.close(timeout=0)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("value", BROKEN, ids=range(len(BROKEN)))
def test_report_refuses_a_lone_surrogate_with_the_documented_error_and_spends_nothing(rep, spec, value) -> None:  # type: ignore[no-untyped-def]
    before = rep.stats()
    with pytest.raises(InvalidTextError) as info:
        rep.report(spec.name, value)
    assert isinstance(info.value, InvalidValueError) and isinstance(info.value, ValueError)
    assert "lone surrogate" in str(info.value) and "refused, not repaired" in str(info.value)
    assert value not in str(info.value)  # the value is never echoed
    assert rep.stats() == before  # nothing queued, nothing spent
    # a well-formed text of the same shape goes through
    good = "\U0001f600" if spec.mechanism == "grr" else value.encode("utf-8", "replace").decode()[:8] or "ok"
    assert rep.report(spec.name, good).queued


def test_the_hash_family_names_the_position_and_never_sees_a_str() -> None:
    with pytest.raises(InvalidTextError, match="index 1"):
        value_bytes("a\ud800b")
    h = HashFamily(k=4, m=64)
    with pytest.raises(InvalidTextError, match="value 3 of 3"):
        h.bases(["ok", "\U0001f600", "bad\udc80"])
    assert h.bases(["ok", "\U0001f600"]).shape == (2,)
    # every mmh3 call in the code base hashes value_bytes(...), never a str it was given
    for path in [*ROOT.glob("client/**/*.py"), *ROOT.glob("aggregator/**/*.py"), *ROOT.glob("server/**/*.py")]:
        for line in path.read_text().splitlines():
            if "mmh3.hash" in line and not line.lstrip().startswith(("#", "*", "``")) and "``" not in line:
                if path.name == "append.py" and "mmh3.hash_bytes(data, " in line:
                    continue  # the dedupe digest of a request body: `data: bytes`, checked below
                assert "mmh3.hash64(value_bytes(" in line, (path, line)
    # The one exception hashes a request body: typed bytes (mypy --strict checks every caller), never a str.
    import inspect

    from ldptel.storage.append import content_digest

    assert inspect.signature(content_digest).parameters["data"].annotation in (bytes, "bytes")
    with pytest.raises(TypeError):
        content_digest("a str")  # type: ignore[arg-type]


def test_a_process_reporting_a_lone_surrogate_survives(tmp_path: Path) -> None:
    """In a child process: were a str ever handed to mmh3 5.3.1 it would crash (SIGSEGV), not raise."""
    code = (
        "from ldptel.client import CmsParams, MetricSpec, InvalidTextError\n"
        "from ldptel.client.sdk.reporter import Reporter\n"
        "import sys\n"
        "spec = MetricSpec(name='x', params=CmsParams(epsilon=2.0, k=4, m=64), reports_per_day=9)\n"
        "rep = Reporter('http://127.0.0.1:9', 't' * 40, sys.argv[1], start=False, specs=[spec])\n"
        "for v in ('a\\ud800b', '\\udfff', '\\ud83d\\ude00'):\n"
        "    try:\n"
        "        rep.report('x', v)\n"
        "    except InvalidTextError:\n"
        "        print('refused')\n"
        "rep.close(timeout=0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["refused"] * 3


@given(st.text(alphabet=st.characters(codec=None), max_size=30))
def test_the_rule_is_exactly_the_surrogate_code_points(text: str) -> None:
    """Refused iff some code point is in U+D800-U+DFFF (then at the first one), else hashed as its UTF-8."""
    expected = next((i for i, c in enumerate(text) if 0xD800 <= ord(c) <= 0xDFFF), None)
    assert lone_surrogate_at(text) == expected
    if expected is None:
        assert value_bytes(text) == text.encode("utf-8")
    else:
        with pytest.raises(InvalidTextError, match=f"index {expected}"):
            value_bytes(text)


@pytest.mark.parametrize("make", [
    lambda: GrrParams(epsilon=2.0, domain=("a", "b\ud800")),
    lambda: MetricSpec(name="x", params=CmsParams(epsilon=2.0, k=4, m=64), description="d\udfff"),
    lambda: MetricSpec(name="x", params=CmsParams(epsilon=2.0, k=4, m=64), owner="\ud800"),
])
def test_a_spec_whose_text_has_a_lone_surrogate_is_invalid(make) -> None:  # type: ignore[no-untyped-def]
    """A served spec with such a label would make the device's fingerprint (UTF-8 of the params) raise."""
    with pytest.raises(InvalidParameterError, match="lone surrogate"):
        make()


def test_numpy_string_arrays_follow_the_same_rule() -> None:
    h = HashFamily(k=2, m=64)
    with pytest.raises(InvalidTextError):
        h.bases(np.array(["ok", "a\ud800"], dtype=object))
