"""Breakdowns by system profile: registry dimensions and caps, the wire profile, ingest's validation and
canonical cell, one state per (version, day, cell) folded exactly once (ldptel.client.protocol.breakdown)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import redis as redis_lib
from flask.testing import FlaskClient

from ldptel.client import CmsParams, GrrParams, MetricSpec, encode_batch, fold, privatize_batch
from ldptel.client.errors import InvalidParameterError, WireFormatError
from ldptel.client.protocol.breakdown import (
    MAX_COMBINATIONS,
    OTHER,
    ProfileSchema,
    cell_of,
    combinations,
    encode_profile,
    parse_cell,
)
from ldptel.client.protocol.wire import FLAG_PROFILE, decode_batch, decode_header
from ldptel.storage import keys, registry
from ldptel.storage import sketches as store
from tests.aggregator.agg_helpers import OCTET, drain

SCHEMA = ProfileSchema({"os": ("android", "ios", "web"), "app_version": ("1.0", "2.0")})


def _grr(name: str = "clicks", breakdown: tuple[str, ...] = ("os",)) -> MetricSpec:
    return MetricSpec(name=name, params=GrrParams(epsilon=2.0, domain=("a", "b", "c")), breakdown=breakdown)


def _post(client: FlaskClient, token: str, data: bytes) -> tuple[int, dict[str, object]]:
    resp = client.post("/v1/reports", data=data, content_type=OCTET, headers={"Authorization": f"Bearer {token}"})
    return resp.status_code, resp.get_json()


# -------------------------------------------------------------------------------------------- protocol
def test_wire_profile_round_trips_and_a_batch_without_one_is_unchanged(rng: np.random.Generator) -> None:
    spec = _grr()
    batch = privatize_batch(["a", "b"], spec.params, rng=rng)
    plain = encode_batch(metric="clicks", version=1, batch_id=b"\x01" * 16, batch=batch, params=spec.params)
    with_profile = encode_batch(metric="clicks", version=1, batch_id=b"\x01" * 16, batch=batch, params=spec.params,
                                profile=encode_profile({"os": "android"}, spec.breakdown, SCHEMA))
    assert decode_header(plain).profile == "" and int.from_bytes(plain[6:8], "little") == 0
    assert int.from_bytes(with_profile[6:8], "little") == FLAG_PROFILE
    header, _ = decode_batch(with_profile, spec.params)
    assert header.profile == "os=android"
    assert with_profile[header.payload_offset :] == plain[decode_header(plain).payload_offset :]
    # header, name, then u8 length + the profile: nothing else differs
    assert with_profile[: header.payload_offset] == plain[:6] + b"\x01\x00" + plain[8 : decode_header(plain).payload_offset] + b"\x0aos=android"


@pytest.mark.parametrize(
    ("profile", "message"),
    [(b"os", "not dimension=value"), (b"os=an droid", "not dimension=value"), (b"os=a,os=b", "twice"),
     (b"OS=x", "not dimension=value"), (b"os=\xff", "not ASCII")],
)
def test_a_malformed_wire_profile_is_a_wire_format_error(profile: bytes, message: str, rng: np.random.Generator) -> None:
    spec = _grr()
    batch = privatize_batch(["a"], spec.params, rng=rng)
    good = encode_batch(metric="clicks", version=1, batch_id=b"\x02" * 16, batch=batch, params=spec.params,
                        profile=b"os=ios")
    bad = good.replace(b"\x06os=ios", bytes([len(profile)]) + profile)
    with pytest.raises(WireFormatError, match=message):
        decode_batch(bad, spec.params)


def test_cells_are_canonical_with_unknown_and_missing_values_as_other() -> None:
    dims = ("os", "app_version")
    assert cell_of(b"os=android,app_version=2.0", dims, SCHEMA) == "os=android,app_version=2.0"
    assert cell_of(b"app_version=2.0,os=android", dims, SCHEMA) == "os=android,app_version=2.0"  # declared order
    assert cell_of(b"os=beos", dims, SCHEMA) == f"os={OTHER},app_version={OTHER}"
    assert cell_of(b"", dims, SCHEMA) == "os=other,app_version=other"
    assert parse_cell("os=ios,app_version=1.0") == {"os": "ios", "app_version": "1.0"}
    with pytest.raises(WireFormatError, match="channel not declared by the metric; declared: os, app_version"):
        cell_of(b"os=ios,channel=beta", dims, SCHEMA)
    assert combinations(dims, SCHEMA) == 4 * 3


# -------------------------------------------------------------------------------------------- registry
def test_registry_refuses_undeclared_dimensions_and_breakdowns_past_the_caps(redis: redis_lib.Redis) -> None:
    with pytest.raises(InvalidParameterError, match="dimensions of the profile schema"):
        registry.create_metric(redis, _grr())
    registry.set_profile(redis, SCHEMA)
    assert registry.get_profile(redis) == SCHEMA
    registry.create_metric(redis, _grr())
    # 8 MiB per cms state (k=2048, m=1024) × 4 os cells = 32 MiB: fine; 200 app versions × 4 = 804 cells: too big
    big = MetricSpec(name="big", params=CmsParams(epsilon=4.0, k=2048, m=1024), breakdown=("os", "app_version"))
    registry.set_profile(redis, ProfileSchema({**SCHEMA.dimensions, "app_version": [f"v{i}" for i in range(200)]}))
    with pytest.raises(InvalidParameterError, match=r"MiB of state per shard-day"):
        registry.create_metric(redis, big)
    wide = ProfileSchema({"a": [f"x{i}" for i in range(40)], "b": [f"y{i}" for i in range(40)]})
    registry.set_profile(redis, ProfileSchema({**SCHEMA.dimensions, **wide.dimensions}))
    with pytest.raises(InvalidParameterError, match=f"at most {MAX_COMBINATIONS} combinations"):
        registry.create_metric(redis, _grr("wide", ("a", "b")))
    # removing a dimension an active metric uses is refused, nothing written
    with pytest.raises(InvalidParameterError, match="dimensions of the profile schema"):
        registry.set_profile(redis, ProfileSchema({"app_version": ("1.0",)}))
    assert "os" in registry.get_profile(redis).dimensions
    # a breakdown change is a new version; growing the enumeration is not
    record = registry.create_metric(redis, _grr(breakdown=("os", "app_version")))
    assert record.current_version == 2
    registry.set_profile(redis, ProfileSchema({**registry.get_profile(redis).dimensions, "os": ("android", "ios", "web", "tv")}))
    grown = registry.get_metric(redis, "clicks")
    assert grown.current_version == 2  # the values are copied into the current spec in place
    assert dict(grown.current.profile)["os"] == ("android", "ios", "web", "tv")


# -------------------------------------------------------------------------------------- ingest and fold
def test_each_cell_gets_its_own_state_folded_exactly_once_and_cells_sum_to_the_total(
    redis: redis_lib.Redis, client: FlaskClient, app_token: str, rng: np.random.Generator
) -> None:
    registry.set_profile(redis, SCHEMA)
    record = registry.create_metric(redis, _grr(breakdown=("os", "app_version")), shards=2)
    spec = record.current
    sent: dict[str, list[object]] = {}
    profiles = [{"os": "android", "app_version": "2.0"}, {"os": "ios", "app_version": "1.0"},
                {"os": "beos", "app_version": "9.9"}, {"os": "web"}, {}]
    expected_cells = ["os=android,app_version=2.0", "os=ios,app_version=1.0", "os=other,app_version=other",
                      "os=web,app_version=other", "os=other,app_version=other"]
    for i, (profile, cell) in enumerate(zip(profiles * 3, expected_cells * 3, strict=True)):
        batch = privatize_batch(list(rng.choice(["a", "b", "c"], size=20 + i)), spec.params, rng=rng)
        wire = ",".join(f"{k}={v}" for k, v in profile.items()).encode()
        data = encode_batch(metric="clicks", version=1, batch_id=os.urandom(16), batch=batch, params=spec.params,
                            profile=wire)
        status, body = _post(client, app_token, data)
        assert status == 202, body
        assert _post(client, app_token, data)[1]["duplicate"] is True  # a retry: acknowledged, not appended
        sent.setdefault(cell, []).append(batch)
    drain(redis, metrics=("clicks",))
    cells: set[str] = set()
    for shard in range(2):
        cells |= {c.decode() for c in redis.smembers(keys.cells("clicks", shard))}
    assert cells == set(sent)
    total = None
    for cell, batches in sent.items():
        pairs = [(s, v, d) for s, members in
                 store.sketch_index(redis, "clicks", 2, cell=cell).items() for v, d in members]
        state, _ = store.sum_sketches(redis, "clicks", params=spec.params, pairs=pairs, cell=cell)
        assert state.equals(fold(spec.params, batches)), cell
        total = state if total is None else total + state
    assert total is not None and total.equals(fold(spec.params, [b for bs in sent.values() for b in bs]))
    assert store.sketch_index(redis, "clicks", 2) == {0: [], 1: []}  # nothing in the cell "" of a breakdown metric


@pytest.mark.parametrize("fast", [True, False])
def test_ingest_answers_400_invalid_profile_and_writes_nothing(
    redis: redis_lib.Redis, client: FlaskClient, app_token: str, rng: np.random.Generator, fast: bool
) -> None:
    registry.set_profile(redis, SCHEMA)
    registry.create_metric(redis, _grr(breakdown=("os",)), shards=1)
    plain = registry.create_metric(redis, _grr("plain", breakdown=()), shards=1)
    spec = registry.get_metric(redis, "clicks").current
    batch = privatize_batch(["a"], spec.params, rng=rng)
    for metric, params, profile, needle in [
        ("clicks", spec.params, b"os=ios,channel=beta", "channel not declared by the metric; declared: os"),
        ("plain", plain.current.params, b"os=ios", "declared: none"),
    ]:
        data = encode_batch(metric=metric, version=1, batch_id=os.urandom(16), batch=batch, params=params,
                            profile=profile)
        if fast:
            status, body = _post(client, app_token, data)
        else:  # the Flask route alone, through a multi-part upload (never the fast path)
            from ldptel.client.protocol.wire import encode_upload

            status, outer = _post(client, app_token, encode_upload([data]))
            assert status == 200
            parts = outer["parts"]
            assert isinstance(parts, list)
            body = parts[0]
            status = body["http_status"]
        assert status == 400, body
        assert body["error"] == "invalid_profile" and needle in str(body["message"]), body
    assert redis.xlen(keys.stream("clicks", 0)) == 0 and redis.xlen(keys.stream("plain", 0)) == 0


# -------------------------------------------------------------------------------------------- sealing
def _append_cell(r: redis_lib.Redis, spec: MetricSpec, shards: int, values: list[str], rng: np.random.Generator, *,
                 day: str, cell: str, batch_size: int = 40) -> list[object]:
    from ldptel.storage.append import BatchAppender

    appender, batches = BatchAppender(r), []
    for lo in range(0, len(values), batch_size):
        batch = privatize_batch(values[lo : lo + batch_size], spec.params, rng=rng)
        bid = os.urandom(16)
        data = encode_batch(metric=spec.name, version=spec.version, batch_id=bid, batch=batch, params=spec.params,
                            profile=cell.encode())
        assert not appender.append(metric=spec.name, shards=shards, batch_id=bid, version=spec.version, n=batch.n,
                                   data=data, day=day, dedupe_days=1, cell=cell).duplicate
        batches.append(batch)
    return batches


def test_sealing_and_rollups_work_per_cell_and_read_back_exactly(redis: redis_lib.Redis, rng: np.random.Generator) -> None:
    import datetime as dt

    from ldptel.storage import sealed

    registry.set_profile(redis, SCHEMA)
    spec = registry.create_metric(redis, _grr(), shards=3).current
    sent: dict[str, list[object]] = {}
    days = ["2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04"]
    for i, day in enumerate(days):
        for cell in ("os=android", "os=ios", "os=other"):
            if cell == "os=ios" and i == 2:
                continue  # a cell with a gap
            sent.setdefault(cell, []).extend(
                _append_cell(redis, spec, 3, list(rng.choice(["a", "b", "c"], size=50 + 10 * i)), rng, day=day, cell=cell))
    drain(redis, metrics=("clicks",))
    before = {c: sealed.summed_state(redis, "clicks", params=spec.params, version=1, shards=3, cell=c).state
              for c in sent}
    report = sealed.seal_metric(redis, "clicks", horizon_days=3, today=dt.date(2026, 3, 30))
    assert report.days_sealed == 4 * 3 - 1 and report.late_states == [] and report.rollups_built > 0
    assert store.sketch_index(redis, "clicks", 3, cell="os=android") == {0: [], 1: [], 2: []}  # shard states removed
    assert set(store.cells(redis, "clicks", 3)) == set(sent)
    for cell, batches in sent.items():
        after = sealed.summed_state(redis, "clicks", params=spec.params, version=1, shards=3, cell=cell)
        assert after.state.equals(before[cell]) and after.state.equals(fold(spec.params, batches)), cell
        assert after.states <= 3  # a 4-day range from roll-ups: 1 (the 4-day block) … 3
        one = sealed.summed_state(redis, "clicks", params=spec.params, version=1, shards=3, cell=cell,
                                  day_from="2026-03-02", day_to="2026-03-02")
        assert one.days == ("2026-03-02",)
    assert sealed.read_view(redis, "clicks").through == sealed.day_number("2026-03-25")
    # a second pass seals nothing twice
    assert sealed.seal_metric(redis, "clicks", horizon_days=3, today=dt.date(2026, 3, 30)).days_sealed == 0


def test_an_entry_with_a_malformed_cell_is_dead_lettered_whole(redis: redis_lib.Redis, rng: np.random.Generator) -> None:
    registry.set_profile(redis, SCHEMA)
    spec = registry.create_metric(redis, _grr(), shards=1).current
    batch = privatize_batch(["a", "b"], spec.params, rng=rng)
    data = encode_batch(metric="clicks", version=1, batch_id=os.urandom(16), batch=batch, params=spec.params,
                        profile=b"os=ios")
    stream = keys.stream("clicks", 0)
    redis.xadd(stream, {"d": "2026-03-01", "v": 1, "n": 2, "b": data, "c": "os=ios"})
    redis.xadd(stream, {"d": "2026-03-01", "v": 1, "n": 2, "b": data, "c": "os:ios{x}"})
    drain(redis, metrics=("clicks",))
    dead = redis.xrange(keys.dead_letters("clicks", 0))
    assert len(dead) == 1
    fields = dead[0][1]
    assert fields[b"c"] == b"os:ios{x}" and fields[b"b"] == data and b"breakdown cell" in fields[b"error"]
    assert store.cells(redis, "clicks", 1) == ["os=ios"]  # the good entry was folded, the bad one made no key
