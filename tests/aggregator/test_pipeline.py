"""End to end with real Redis and the real Flask app: known true values → ingest → aggregate → estimates.

Every estimate must lie within z = 6 of its own reported standard error (tests/stats.py), and the folded
sketch must equal, exactly, the fold of the batches the app acknowledged.
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest
import redis as redis_lib
from flask.testing import FlaskClient

from ldptel.aggregator.query import EmptyRangeError, estimate_metric
from ldptel.aggregator.worker import LeaseLostError, Worker, WorkerConfig, shard_lag
from ldptel.client import CmsParams, GrrParams, HcmsParams, MetricSpec, OueCmsParams, RrParams
from ldptel.client.errors import InvalidParameterError
from ldptel.storage import keys, registry
from ldptel.storage import sketches as store
from ldptel.storage.append import utc_day
from tests.aggregator.agg_helpers import Ingested, append_reports, create, drain, post_reports
from tests.stats import assert_close_normal


def _stored_total(r: redis_lib.Redis, name: str) -> store.SketchState:  # type: ignore[name-defined]
    record = registry.get_metric(r, name)
    index = store.sketch_index(r, name, record.shards)
    pairs = [(s, v, d) for s, members in index.items() for v, d in members]
    state, _ = store.sum_sketches(r, name, params=record.current.params, pairs=pairs)
    return state


def _zipf_values(rng: np.random.Generator, labels: list[str], n: int) -> list[str]:
    weights = 1.0 / np.arange(1, len(labels) + 1) ** 1.1
    idx = rng.choice(len(labels), size=n, p=weights / weights.sum())
    return [labels[i] for i in idx]


@pytest.mark.slow
@pytest.mark.parametrize(
    "params",
    [CmsParams(epsilon=4.0, k=32, m=1024), OueCmsParams(epsilon=3.0, k=32, m=1024), HcmsParams(epsilon=3.0, k=32, m=1024)],
    ids=lambda p: p.mechanism,
)
def test_sketch_estimates_cover_the_true_counts(
    redis: redis_lib.Redis, client: FlaskClient, token: str, rng: np.random.Generator, params: CmsParams
) -> None:
    record = create(redis, MetricSpec(name="pages", params=params), shards=4)
    labels = [f"/page/{i}" for i in range(12)]
    sent = post_reports(client, token, record, _zipf_values(rng, labels, 20_000), rng)
    stats = drain(redis)
    assert stats.reports == sent.n and stats.dead == 0

    assert _stored_total(redis, "pages").equals(sent.expected_state())
    truth = Counter(sent.values)
    candidates = labels + ["/never/seen"]
    result = estimate_metric(redis, "pages", candidates=candidates)
    assert result.n == sent.n and result.days == (utc_day(),)
    for row in result.rows():
        assert_close_normal(row["estimate"], truth.get(row["value"], 0), row["stderr"], n=sent.n, what=row["value"])


@pytest.mark.slow
def test_grr_and_rr_through_the_app(redis: redis_lib.Redis, client: FlaskClient, token: str, rng: np.random.Generator) -> None:
    domain = ("red", "green", "blue", "cyan", "black")
    grr = create(redis, MetricSpec(name="color", params=GrrParams(epsilon=2.0, domain=domain)), shards=2)
    rr = create(redis, MetricSpec(name="opted-in", params=RrParams(epsilon=1.0)), shards=3)
    colors = post_reports(client, token, grr, _zipf_values(rng, list(domain), 30_000), rng)
    flags = post_reports(client, token, rr, list(rng.random(30_000) < 0.3), rng)
    drain(redis)

    result = estimate_metric(redis, "color", postprocess="norm-sub")
    assert result.labels == domain
    truth = Counter(colors.values)
    for row in result.rows():
        assert_close_normal(row["estimate"], truth[row["value"]], row["stderr"], n=colors.n, what=row["value"])
    assert (result.adjusted >= 0).all() and result.adjusted.sum() == pytest.approx(colors.n)

    prop = estimate_metric(redis, "opted-in").proportion
    assert prop is not None
    true_share = sum(flags.values) / flags.n
    assert_close_normal(prop.estimate, true_share, prop.stderr, n=flags.n, what="rr proportion")
    assert prop.ci_low < prop.estimate < prop.ci_high


def test_days_and_versions_are_kept_apart(redis: redis_lib.Redis, rng: np.random.Generator) -> None:
    record = create(redis, MetricSpec(name="color", params=GrrParams(epsilon=2.0, domain=("a", "b"))), shards=2)
    day1 = append_reports(redis, record, ["a"] * 300, rng, day="2026-03-01", batch_size=100)
    day2 = append_reports(redis, record, ["b"] * 500, rng, day="2026-03-02", batch_size=100)
    v2 = registry.create_metric(redis, MetricSpec(name="color", params=GrrParams(epsilon=3.0, domain=("a", "b"))))
    assert v2.current_version == 2
    later = append_reports(redis, v2, ["a"] * 200, rng, day="2026-03-02", batch_size=100)
    drain(redis)

    assert estimate_metric(redis, "color", version=1).n == day1.n + day2.n
    assert estimate_metric(redis, "color", version=1, day_from="2026-03-02").n == day2.n
    assert estimate_metric(redis, "color", version=1, day_to="2026-03-01").n == day1.n
    only_v2 = estimate_metric(redis, "color")
    assert only_v2.version == 2 and only_v2.n == later.n and only_v2.days == ("2026-03-02",)
    with pytest.raises(EmptyRangeError, match="2026-03-01 to 2026-03-02"):
        estimate_metric(redis, "color", version=1, day_from="2026-04-01")
    with pytest.raises(InvalidParameterError, match="day_from"):
        estimate_metric(redis, "color", day_from="2026-03-05", day_to="2026-03-01")


def test_poison_entries_are_dead_lettered_and_the_rest_counts_exactly(redis: redis_lib.Redis, rng: np.random.Generator) -> None:
    record = create(redis, MetricSpec(name="pages", params=CmsParams(epsilon=4.0, k=8, m=64)), shards=1)
    good = append_reports(redis, record, [f"v{i % 5}" for i in range(500)], rng, day="2026-03-01", batch_size=50)
    stream = keys.stream("pages", 0)
    redis.xadd(stream, {"d": "2026-03-01", "v": "1", "n": "3", "b": b"not a batch"})
    redis.xadd(stream, {"d": "2026-03-01", "v": "9", "n": "3", "b": b"x"})  # unknown version
    redis.xadd(stream, {"d": "yesterday", "v": "1", "n": "1", "b": b"x"})  # bad day
    redis.xadd(stream, {"only": "junk"})  # missing fields
    more = append_reports(redis, record, ["v1"] * 100, rng, day="2026-03-01", batch_size=50)

    stats = drain(redis, batch=3, checkpoint_every=4)
    assert stats.dead == 4 and stats.reports == good.n + more.n
    assert redis.xlen(keys.dead_letters("pages", 0)) == 4
    expected = good.expected_state()
    expected.add_inplace(more.expected_state())
    assert _stored_total(redis, "pages").equals(expected)
    assert shard_lag(redis, "pages", 0) == 0
    assert drain(redis).entries == 0  # nothing left, nothing re-counted


def _today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


def _folded_once(redis: redis_lib.Redis, rng: np.random.Generator, name: str) -> tuple[str, Ingested]:
    """A one-shard metric with 400 reports appended today (ids carry the day) and folded by one drain."""
    record = create(redis, MetricSpec(name=name, params=CmsParams(epsilon=4.0, k=8, m=64)), shards=1)
    sent = append_reports(redis, record, [f"v{i % 3}" for i in range(400)], rng, day=_today(), batch_size=40)
    assert drain(redis).reports == 400
    return keys.stream(name, 0), sent


def test_no_consumer_group_and_nothing_folded_twice(redis: redis_lib.Redis, rng: np.random.Generator) -> None:
    """Issue 12: the fold reads with XREAD after its checkpoint; no consumer group records delivery times."""
    stream, sent = _folded_once(redis, rng, "pages")
    assert redis.xinfo_groups(stream) == []
    assert drain(redis).entries == 0
    assert _stored_total(redis, "pages").equals(sent.expected_state())


@pytest.mark.parametrize("prefetch", [True, False])
def test_a_new_owner_folds_once_what_a_dropped_owner_did_not_commit(
    redis: redis_lib.Redis, rng: np.random.Generator, prefetch: bool
) -> None:
    """A worker commits some reads, folds more in memory (and reads one ahead), then loses its lease: the next
    owner reads from the committed checkpoint, so every report is counted exactly once."""
    record = create(redis, MetricSpec(name="pages", params=CmsParams(epsilon=4.0, k=8, m=64)), shards=1)
    sent = append_reports(redis, record, [f"v{i % 5}" for i in range(800)], rng, day=_today(), batch_size=40)
    first = Worker(redis, WorkerConfig(batch=4, checkpoint_every=8, checkpoint_seconds=60, prefetch=prefetch))
    first._heartbeat()
    first._rebalance()
    sh = first._owned[("pages", 0)]
    for _ in range(3):
        first._poll(sh, block_ms=None)
        first._maybe_commit(sh)
    assert sh.uncommitted == 4 and redis.get(keys.checkpoint("pages", 0)) is not None  # 8 committed, 4 not
    redis.set(keys.lease("pages", 0), "another-worker")  # its lease moved (a long pause)
    with pytest.raises(LeaseLostError):
        first._commit(sh)
    first._drop(sh, "lease lost")
    first.close()  # never run: its read connections are closed here
    redis.delete(keys.lease("pages", 0))
    stats = drain(redis, batch=4)
    assert stats.entries == 20 - 8 and stats.reports == 800 - 8 * 40
    assert _stored_total(redis, "pages").equals(sent.expected_state())
    assert shard_lag(redis, "pages", 0) == 0


def test_retention_counts_from_the_arrival_day(redis: redis_lib.Redis, rng: np.random.Generator) -> None:
    """Entry ids are "<start of the UTC day>-<seq>": folded entries of a day older than the retention go."""
    record = create(redis, MetricSpec(name="old", params=GrrParams(epsilon=2.0, domain=("a", "b"))), shards=1)
    append_reports(redis, record, ["a", "b"] * 50, rng, day="2026-03-01", batch_size=10)
    ids = [eid.decode() for eid, _ in redis.xrange(keys.held("old", 0))]
    assert {eid.split("-")[0] for eid in ids} == {str(1772323200000)}  # 2026-03-01T00:00:00Z, nothing finer
    drain(redis, retention_seconds=10**9)  # the shuffle stage released them: its blocks' ids carry the same day
    ids = [eid.decode() for eid, _ in redis.xrange(keys.stream("old", 0))]
    assert len(ids) == 10 and {eid.split("-")[0] for eid in ids} == {str(1772323200000)}
    drain(redis, retention_seconds=3600)
    assert redis.xlen(keys.stream("old", 0)) == 0
    assert estimate_metric(redis, "old").n == 100


def test_retention_zero_trims_what_was_folded(redis: redis_lib.Redis, rng: np.random.Generator) -> None:
    record = create(redis, MetricSpec(name="color", params=GrrParams(epsilon=2.0, domain=("a", "b"))), shards=2)
    append_reports(redis, record, ["a", "b"] * 500, rng, day=_today(), batch_size=10)
    drain(redis, retention_seconds=3600)
    assert sum(redis.xlen(keys.stream("color", s)) for s in range(2)) == 100  # today's entries: kept an hour at least
    drain(redis, retention_seconds=0)
    assert sum(redis.xlen(keys.stream("color", s)) for s in range(2)) == 0
    assert estimate_metric(redis, "color").n == 1000
