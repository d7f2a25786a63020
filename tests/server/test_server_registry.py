"""The metric registry on a real Redis: versions, idempotence, retirement, atomic concurrent changes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

import pytest
import redis as redis_lib

from ldptel.client import InvalidParameterError, LdpError, RrParams
from ldptel.storage import keys
from ldptel.storage.registry import (
    MetricRecord,
    RegistryConflictError,
    RegistryCorruptError,
    UnknownMetricError,
    UnknownVersionError,
    create_metric,
    get_metric,
    grow_shards,
    list_metrics,
    plan_change,
    register_metric,
    register_metrics,
    retire_metric,
    set_min_reports,
    set_retention,
    spec_for,
)
from tests.server.srv_helpers import cms_spec, grr_spec, rr_spec


def test_create_version_idempotent_and_old_versions_readable(redis) -> None:  # type: ignore[no-untyped-def]
    v1 = create_metric(redis, cms_spec().with_version(9))  # the given version is ignored
    assert (v1.current_version, v1.status, v1.shards) == (1, "active", 4)
    assert v1.current == cms_spec()
    assert create_metric(redis, cms_spec()) == v1  # identical: unchanged
    v2 = create_metric(redis, cms_spec(epsilon=2.0))
    assert v2.current_version == 2 and sorted(v2.versions) == [1, 2]
    assert spec_for(v2, 1) == cms_spec() and spec_for(v2, 2) == cms_spec(epsilon=2.0).with_version(2)
    back = create_metric(redis, cms_spec())  # going back to the old params is a new version, not a rollback
    assert back.current_version == 3 and back.current.params == cms_spec().params
    assert get_metric(redis, "app.feature") == back
    assert MetricRecord.from_dict(back.to_dict()) == back


def test_a_policy_change_is_a_version_a_metadata_change_is_not(redis) -> None:  # type: ignore[no-untyped-def]
    base = rr_spec()
    create_metric(redis, base)
    v2 = create_metric(redis, replace(base, reports_per_day=3))
    assert v2.current_version == 2
    # Regression: a description-only edit used to create version 3 (devices then restarted their permanent
    # randomization, and reports they had queued under v2 were refused with 409).
    edited, change = register_metric(redis, replace(base, reports_per_day=3, description="x"))
    assert change.kind == "metadata" and not change.new_version
    assert edited.current_version == 2 and sorted(edited.versions) == [1, 2]
    assert edited.current.description == "x" and edited.versions[1].description == base.description
    assert get_metric(redis, "app.flag") == edited


def test_metadata_fields_are_edited_in_place_and_round_trip(redis) -> None:  # type: ignore[no-untyped-def]
    base = cms_spec()
    create_metric(redis, base)
    meta = replace(base, description="emoji usage", owner="growth@example.com", expires="2027-01-31", notes="see RFC 12")
    record, change = register_metric(redis, meta)
    assert (change.kind, record.current_version) == ("metadata", 1)
    assert record.current == meta.with_version(1)
    assert MetricRecord.from_dict(record.to_dict()) == record
    assert register_metric(redis, meta)[1].kind == "unchanged"
    # Any params change is a version, metadata and all.
    record, change = register_metric(redis, replace(meta, params=cms_spec(k=32).params, owner="someone else"))
    assert (change.kind, record.current_version, record.current.owner) == ("version", 2, "someone else")
    assert record.versions[1].owner == "growth@example.com"


def test_plan_change_does_not_write(redis) -> None:  # type: ignore[no-untyped-def]
    assert plan_change(None, rr_spec()).kind == "create"
    record = create_metric(redis, rr_spec())
    assert plan_change(record, replace(rr_spec(), owner="x")).kind == "metadata"
    assert plan_change(record, replace(rr_spec(), reports_per_day=2)).kind == "version"
    assert get_metric(redis, "app.flag") == record


def test_unknown_metric_and_version(redis) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnknownMetricError) as info:
        get_metric(redis, "nope")
    assert isinstance(info.value, LdpError) and isinstance(info.value, KeyError)
    assert "nope" in str(info.value)
    with pytest.raises(UnknownMetricError):
        retire_metric(redis, "nope")
    record = create_metric(redis, grr_spec())
    with pytest.raises(UnknownVersionError, match="no version 5"):
        spec_for(record, 5)


SETTERS: dict[str, Callable[[redis_lib.Redis, str], MetricRecord]] = {
    "min_reports": lambda r, name: set_min_reports(r, name, 7),
    "retention": lambda r, name: set_retention(r, name, 30),
    "shards": lambda r, name: grow_shards(r, name, 6),
    "retire": retire_metric,
}


@pytest.mark.parametrize("setting", sorted(SETTERS))
def test_a_setting_of_an_unknown_metric_is_refused_and_a_repeated_one_writes_nothing(redis, setting: str) -> None:  # type: ignore[no-untyped-def]
    """Every single-setting change: UnknownMetricError for a name never registered (nothing written, no record
    created); applied once; the same change again returns the same record and leaves the registry untouched (a
    WATCH on it from another connection still holds)."""
    setter = SETTERS[setting]
    with pytest.raises(UnknownMetricError, match="nope"):
        setter(redis, "nope")
    assert not redis.exists(keys.registry())
    before = create_metric(redis, rr_spec())
    changed = setter(redis, "app.flag")
    assert changed != before and get_metric(redis, "app.flag") == changed
    with redis.pipeline(transaction=True) as pipe:
        pipe.watch(keys.registry())
        assert setter(redis, "app.flag") == changed
        pipe.multi()
        pipe.exists(keys.registry())
        assert pipe.execute() == [1]  # a write of the registry in between would raise WatchError here


def test_retire_and_reactivate(redis) -> None:  # type: ignore[no-untyped-def]
    create_metric(redis, rr_spec())
    retired = retire_metric(redis, "app.flag")
    assert retired.status == "retired" and not retired.active
    assert retire_metric(redis, "app.flag") == retired  # idempotent
    again, change = register_metric(redis, rr_spec())  # same privatization: revived under its version
    assert change.kind == "reactivate" and again.active and again.current_version == 1
    retire_metric(redis, "app.flag")
    changed = create_metric(redis, replace(rr_spec(), params=RrParams(epsilon=2.0)))
    assert changed.active and changed.current_version == 2


def test_shards(redis) -> None:  # type: ignore[no-untyped-def]
    assert create_metric(redis, cms_spec(), shards=16).shards == 16
    assert create_metric(redis, cms_spec(epsilon=3.0)).shards == 16  # kept
    with pytest.raises(RegistryConflictError):
        create_metric(redis, cms_spec(epsilon=1.0), shards=2)
    with pytest.raises(InvalidParameterError):
        create_metric(redis, cms_spec("other"), shards=0)


def test_list_sorted(redis) -> None:  # type: ignore[no-untyped-def]
    for spec in (rr_spec("b.metric"), cms_spec("a.metric"), grr_spec("c.metric")):
        create_metric(redis, spec)
    assert [m.name for m in list_metrics(redis)] == ["a.metric", "b.metric", "c.metric"]


def test_concurrent_changes_get_distinct_versions(redis) -> None:  # type: ignore[no-untyped-def]
    create_metric(redis, cms_spec())
    epsilons = [1.0 + i / 10 for i in range(12)]
    results: list[int] = []
    lock = threading.Lock()

    def change(eps: float) -> None:
        client = redis.__class__(connection_pool=redis.connection_pool)
        version = create_metric(client, cms_spec(epsilon=eps)).current_version
        with lock:
            results.append(version)

    threads = [threading.Thread(target=change, args=(eps,)) for eps in epsilons]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    record = get_metric(redis, "app.feature")
    assert sorted(results) == list(range(2, 14))  # no version handed out twice, none lost
    assert sorted(record.versions) == list(range(1, 14))
    assert sorted(s.params.epsilon for v, s in record.versions.items() if v > 1) == epsilons


def test_corrupt_registry_value_is_a_typed_error(redis) -> None:  # type: ignore[no-untyped-def]
    redis.hset(keys.registry(), "bad", b"{not json")
    with pytest.raises(RegistryCorruptError):
        get_metric(redis, "bad")
    redis.hset(keys.registry(), "bad", b'{"name": "bad"}')
    with pytest.raises(RegistryCorruptError):
        get_metric(redis, "bad")


def test_register_metrics_is_all_or_nothing(redis) -> None:  # type: ignore[no-untyped-def]
    create_metric(redis, rr_spec(), shards=2)
    before = redis.hgetall(keys.registry())
    with pytest.raises(RegistryConflictError):
        register_metrics(redis, [(cms_spec(), None), (replace(rr_spec(), owner="x"), 8)])
    assert redis.hgetall(keys.registry()) == before  # app.feature was not created
    with pytest.raises(InvalidParameterError, match="each metric once"):
        register_metrics(redis, [(cms_spec(), None), (cms_spec(), None)])
    done = register_metrics(redis, [(cms_spec(), None), (replace(rr_spec(), owner="x"), None)])
    assert [change.kind for _, change in done] == ["create", "metadata"]
    assert [rec.current_version for rec, _ in done] == [1, 1]


def test_an_earlier_shard_count_is_checked_while_its_dedupe_keys_can_exist() -> None:
    """A count replaced on day D (stored as D's start) is kept until the end of D + dedupe_days: the latest
    expiry (PXAT a day boundary) of a dedupe key written under it."""
    day = 1_795_392_000  # 2026-11-23T00:00Z
    record = MetricRecord(name="m", current_version=1, status="active", shards=6, versions={1: rr_spec()},
                          resharded=((2, day),))
    assert record.earlier_shards(2, now=day + 3 * 86_400 - 1) == (2,)  # the last second of D + 2
    assert record.earlier_shards(2, now=day + 3 * 86_400) == ()
