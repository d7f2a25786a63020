"""Permanent responses and memos are keyed by the privatization, not the metric version; new privatizations
are charged in the device's lifetime ledger and refused past the policy's ε∞ (issue 12: "a version bump
voids ε∞")."""

from __future__ import annotations

import math
import sqlite3
from dataclasses import replace

import numpy as np

from ldptel.client import CmsParams, GrrParams, MetricSpec, RrParams
from ldptel.client.mechanisms.rr import rr_split
from ldptel.client.protocol.keyed import privatization_fingerprint
from ldptel.client.sdk.memo import longitudinal_epsilon, privatize_for_device
from ldptel.client.sdk.policy import PolicyRefusal
from ldptel.client.sdk.queue import pack_report
from ldptel.client.sdk.reporter import Reporter, UploadError
from ldptel.client.sdk.store import DB_FILE
from tests.client.conftest import FakeClock, LiveServer
from tests.stats import ALPHA

DAY = 86_400
DEAD = "http://127.0.0.1:9"


def _versions(spec: MetricSpec, n: int) -> list[MetricSpec]:
    """``n`` versions of ``spec`` that differ only in metadata (version and description)."""
    return [replace(spec, version=v, description=f"edit {v}") for v in range(1, n + 1)]


def _lifetime(path) -> list[tuple[str, float]]:
    conn = sqlite3.connect(path / DB_FILE)
    try:
        return [(m, float(e)) for m, e in conn.execute("SELECT metric, epsilon FROM lifetime ORDER BY epsilon")]
    finally:
        conn.close()


def test_metadata_only_versions_share_the_permanent_response() -> None:
    """5 description-only versions: an observer averaging each version's reports finds the same PRR bit in
    all five (one ε∞ in all). On the version-keyed code, each version had a fresh PRR and the five bits
    differed for most devices (an observer intersects them: 96.8% of values recovered in the issue)."""
    spec = MetricSpec(name="flag", params=RrParams(epsilon=1.0))
    versions = _versions(spec, 5)
    assert len({privatization_fingerprint(v.params) for v in versions}) == 1
    split = rr_split(spec.params)  # type: ignore[arg-type]
    f2 = split.irr_num / split.irr_den
    reports, devices = 101, 40
    # A per-version majority of `reports` reports misreads the PRR bit with probability at most `miss`.
    miss = sum(math.comb(reports, j) * f2**j * (1 - f2) ** (reports - j) for j in range(reports // 2 + 1, reports + 1))
    assert miss * devices * len(versions) < ALPHA
    rng = np.random.default_rng(12)
    conn = sqlite3.connect(":memory:")
    differing = 0
    for _ in range(devices):
        secret = rng.bytes(32)
        bits = set()
        for version in versions:
            ones = sum(int(privatize_for_device(conn, version, True, day=1, secret=secret)[0].bits[0]) >> 7
                       for _ in range(reports))
            bits.add(ones > reports // 2)
        differing += len(bits) > 1
    assert differing == 0, f"{differing}/{devices} devices showed different PRR bits across metadata-only versions"


def test_metadata_only_versions_share_the_days_sketch_memo(tmp_path) -> None:
    """The day's memoized sketch report survives a description-only version (a new one would leak ε more)."""
    v1, v2 = _versions(MetricSpec(name="page", params=CmsParams(epsilon=4.0, k=16, m=64), reports_per_day=2), 2)
    clock = FakeClock()
    results = []
    for spec in (v1, v2):
        rep = Reporter(DEAD, "t", tmp_path, start=False, clock=clock, sleep=clock.sleep, specs=[spec])
        try:
            results.append(rep.report("page", "x"))
        finally:
            rep.close(timeout=0)
    assert [(r.status, r.memoized) for r in results] == [("queued", False), ("queued", True)]
    assert results[0].report is not None and results[1].report is not None
    assert pack_report(results[0].report, v1.params) == pack_report(results[1].report, v2.params)  # the same report


def test_a_privatization_change_is_charged_and_refused_past_the_lifetime_bound(
    live: LiveServer, app_token, tmp_path, clock: FakeClock
) -> None:
    """Served rr versions at ε = 1, 2, 4: ε∞ 1.66 + 2.69 fit the default policy's 8; 4.69 more would not."""
    errors: list[UploadError] = []
    rep = Reporter(live.url, app_token, tmp_path, start=False, clock=clock, sleep=clock.sleep, metrics=["life.rr"],
                   on_error=errors.append)
    charged: list[float] = []
    try:
        for eps in (1.0, 2.0):
            spec = live.create(MetricSpec(name="life.rr", params=RrParams(epsilon=eps)))
            rep.flush(timeout=5)  # a 409 (or the first fetch) brings the new version
            rep.wait_for_specs(5)
            result = rep.report("life.rr", True)
            assert result.queued and result.version == spec.version
            charged.append(longitudinal_epsilon(spec))
            for _ in range(3):  # repeats under the same privatization cost nothing more
                clock.t += DAY
                assert rep.report("life.rr", False).queued
            assert [e for _, e in _lifetime(tmp_path)] == sorted(charged)
            clock.t += DAY
        third = live.create(MetricSpec(name="life.rr", params=RrParams(epsilon=4.0)))
        rep.flush(timeout=5)
        assert sum(charged) + longitudinal_epsilon(third) > 8.0 >= sum(charged)
        result = rep.report("life.rr", True)
        assert result.status == "policy_refused" and result.version == third.version
        assert result.reason is not None and result.reason.startswith("longitudinal_epsilon")
        assert [e for _, e in _lifetime(tmp_path)] == sorted(charged)  # nothing recorded for the refused one
        assert rep.stats().refused_policy == 1 and rep.stats().pending == 0
        assert [e.reason.split(" ")[0] for e in errors if isinstance(e, PolicyRefusal)] == ["longitudinal_epsilon:"]
    finally:
        rep.close(timeout=0)


def test_fingerprints_follow_every_privatization_parameter() -> None:
    base = GrrParams(epsilon=1.0, domain=("a", "b", "c"))
    same = GrrParams(epsilon=1.0, domain=("a", "b", "c"))
    others = [GrrParams(epsilon=1.5, domain=("a", "b", "c")), GrrParams(epsilon=1.0, domain=("a", "c", "b")),
              GrrParams(epsilon=1.0, domain=("a", "b", "c", "d")), RrParams(epsilon=1.0)]
    fp = privatization_fingerprint(base)
    assert fp == privatization_fingerprint(same) and len(fp) == 32
    assert len({fp, *(privatization_fingerprint(p) for p in others)}) == 1 + len(others)
