"""The Reporter's system profile (breakdowns): given once, attached to each batch of a breakdown metric, values the
spec does not declare sent as ``other`` (never in clear), nothing for metrics without breakdown."""

from __future__ import annotations

import pytest
import redis as redis_lib

from ldptel.client import GrrParams, MetricSpec
from ldptel.client.errors import InvalidParameterError
from ldptel.client.protocol.breakdown import ProfileSchema
from ldptel.client.protocol.wire import decode_header
from ldptel.client.sdk.reporter import Reporter
from ldptel.storage import registry
from tests.client.conftest import OPEN_POLICY, FakeClock, LiveServer


def _entries(r: redis_lib.Redis, metric: str) -> list[dict[bytes, bytes]]:
    """Every stream entry holding a batch of ``metric`` (whatever stream ingest appends to)."""
    out = []
    for key in r.scan_iter(match=f"ldp:v1:{{{metric}:*}}:*".encode()):
        if r.type(key) == b"stream":
            out += [fields for _, fields in r.xrange(key)]
    return out


def test_the_profile_goes_with_each_batch_and_undeclared_values_leave_the_device_as_other(
    live: LiveServer, app_token: str, tmp_path, clock: FakeClock, redis: redis_lib.Redis
) -> None:
    registry.set_profile(redis, ProfileSchema({"os": ("android", "ios"), "app_version": ("2.0", "2.1")}))
    live.create(MetricSpec(name="b.grr", params=GrrParams(epsilon=2.0, domain=("x", "y")), reports_per_day=100,
                           breakdown=("os", "app_version")))
    live.create(MetricSpec(name="flat", params=GrrParams(epsilon=2.0, domain=("x", "y")), reports_per_day=100))
    served = registry.get_metric(redis, "b.grr").current
    assert served.profile == (("os", ("android", "ios")), ("app_version", ("2.0", "2.1")))
    devices = [({"os": "android", "app_version": "2.1", "channel": "beta"}, "os=android,app_version=2.1"),
               ({"os": "beos", "app_version": "2.1"}, "os=other,app_version=2.1"),  # beos never leaves the device
               ({"os": "ios", "app_version": "9.9-rare-build"}, "os=ios,app_version=other"),
               ({"os": "ios", "app_version": "not valid!"}, "os=ios,app_version=other"),
               (None, "os=other,app_version=other")]
    for i, (profile, _) in enumerate(devices):
        rep = Reporter(live.url, app_token, tmp_path / f"d{i}", start=False, clock=clock, sleep=clock.sleep,
                       policy=OPEN_POLICY, metrics=["b.grr", "flat"], profile=profile)
        assert rep.wait_for_specs(10)
        for _ in range(3):
            assert rep.report("b.grr", "x").queued and rep.report("flat", "y").queued
        assert rep.flush(timeout=10)
        rep.close()
    entries = _entries(redis, "b.grr")
    assert sorted(e[b"c"].decode() for e in entries) == sorted(cell for _, cell in devices)
    for e in entries:
        header = decode_header(e[b"b"])
        assert header.profile == e[b"c"].decode()  # the device sent the canonical cell itself
        assert b"beos" not in e[b"b"] and b"rare" not in e[b"b"] and b"beta" not in e[b"b"]
    flat = _entries(redis, "flat")
    assert len(flat) == len(devices) and all(b"c" not in e and decode_header(e[b"b"]).profile == "" for e in flat)


@pytest.mark.parametrize("bad", [{"OS": "x"}, ["os"], {"os name": "x"}])
def test_a_malformed_profile_is_refused_at_construction(tmp_path, bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="profile"):
        Reporter("http://127.0.0.1:9", "t", tmp_path, start=False, profile=bad)  # type: ignore[arg-type]
