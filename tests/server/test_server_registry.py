"""The metric registry on a real Redis: versions, idempotence, retirement, atomic concurrent changes."""

from __future__ import annotations

import threading

import pytest

from ldptel.client import InvalidParameterError, LdpError
from ldptel.storage import keys
from ldptel.storage.registry import (
    MetricRecord,
    RegistryConflictError,
    RegistryCorruptError,
    UnknownMetricError,
    UnknownVersionError,
    create_metric,
    get_metric,
    list_metrics,
    retire_metric,
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


def test_policy_and_description_changes_are_versions(redis) -> None:  # type: ignore[no-untyped-def]
    base = rr_spec()
    create_metric(redis, base)
    from dataclasses import replace

    assert create_metric(redis, replace(base, reports_per_day=3)).current_version == 2
    assert create_metric(redis, replace(base, reports_per_day=3, description="x")).current_version == 3


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


def test_retire_and_reactivate(redis) -> None:  # type: ignore[no-untyped-def]
    create_metric(redis, rr_spec())
    retired = retire_metric(redis, "app.flag")
    assert retired.status == "retired" and not retired.active
    assert retire_metric(redis, "app.flag") == retired  # idempotent
    again = create_metric(redis, rr_spec())  # re-registering revives it under a new version
    assert again.active and again.current_version == 2


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


def test_an_earlier_shard_count_is_checked_while_its_dedupe_keys_can_exist() -> None:
    """A count replaced on day D (stored as D's start) is kept until the end of D + dedupe_days: the latest
    expiry (PXAT a day boundary) of a dedupe key written under it."""
    day = 1_795_392_000  # 2026-11-23T00:00Z
    record = MetricRecord(name="m", current_version=1, status="active", shards=6, versions={1: rr_spec()},
                          resharded=((2, day),))
    assert record.earlier_shards(2, now=day + 3 * 86_400 - 1) == (2,)  # the last second of D + 2
    assert record.earlier_shards(2, now=day + 3 * 86_400) == ()
