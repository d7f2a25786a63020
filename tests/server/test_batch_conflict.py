"""A batch id seen again: the same bytes are a retry (202 ``duplicate``), other bytes a conflict (409
``batch_id_conflict``), never a silent drop (issue 22 §5).

Before the fix the dedupe key held only "seen": a reused id with different content in one ``LDPU`` upload was
answered ``202 duplicate: true accepted: 70`` and its 70 reports were dropped without a word.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator

import mmh3
import numpy as np
import pytest
import redis as redis_lib

from ldptel.client.protocol.wire import encode_upload
from ldptel.storage import keys
from ldptel.storage.append import DAY_MS, BatchAppender, content_digest, utc_day
from tests.server.srv_helpers import cms_spec, make_batch, snapshot, stream_entries

BID = b"\x5a" * 16


_open: list[BatchAppender] = []


@pytest.fixture(autouse=True)
def _close_appenders() -> Iterator[None]:
    yield
    while _open:
        _open.pop().close()


def _appender(r: redis_lib.Redis) -> BatchAppender:
    _open.append(BatchAppender(r))
    return _open[-1]


def _metric_line(text: str, name: str, labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(f"{name}{{{labels}}} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_reused_id_with_other_content_in_one_upload_is_a_409_and_counted(api, redis, rng) -> None:  # type: ignore[no-untyped-def]
    """The reported case: one upload, two parts under one id with different reports, then the first again."""
    spec = cms_spec()
    assert api.create(spec).status_code == 201
    first, _ = make_batch(spec, 30, rng, batch_id=BID)
    other, _ = make_batch(spec, 70, rng, batch_id=BID)
    assert first != other
    response = api.post_batch(encode_upload([first, other, first]))
    assert response.status_code == 200
    parts = response.json["parts"]
    assert [p["http_status"] for p in parts] == [202, 409, 202]
    assert parts[1]["error"] == "batch_id_conflict" and parts[1]["batch_id"] == BID.hex()
    assert "different content" in parts[1]["message"]
    assert (parts[0]["duplicate"], parts[2]["duplicate"]) == (False, True)
    entries = stream_entries(redis, spec.name, 4)
    assert [fields[b"b"] for _, _, fields in entries] == [first]  # the first content, once
    text = api.admin("GET", "/metrics").get_data(as_text=True)
    labels = f'metric="{spec.name}",reason="batch_id_conflict"'
    assert _metric_line(text, "ldptel_reports_rejected_total", labels) == 70
    assert _metric_line(text, "ldptel_requests_rejected_total", labels) == 1
    assert f'ldptel_reports_accepted_total{{metric="{spec.name}"}} 30' in text


def test_across_requests_single_and_upload_alike(api, redis, rng) -> None:  # type: ignore[no-untyped-def]
    spec = cms_spec()
    assert api.create(spec).status_code == 201
    first, _ = make_batch(spec, 20, rng, batch_id=BID)
    other, _ = make_batch(spec, 20, rng, batch_id=BID)
    assert api.post_batch(first).status_code == 202  # through the WSGI fast path
    before = snapshot(redis)
    retry = api.post_batch(first)
    assert retry.status_code == 202 and retry.json["duplicate"] is True
    conflict = api.post_batch(other)
    assert conflict.status_code == 409 and conflict.json["error"] == "batch_id_conflict"
    assert conflict.json["batch_id"] == BID.hex()
    assert api.post_batch(encode_upload([other, first])).json["parts"][0]["http_status"] == 409
    assert snapshot(redis) == before  # nothing written by a retry or a conflict
    text = api.admin("GET", "/metrics").get_data(as_text=True)
    assert _metric_line(text, "ldptel_requests_rejected_total", f'metric="{spec.name}",reason="batch_id_conflict"') == 2


def test_the_json_form_of_the_same_batch_is_the_same_content(api, rng) -> None:  # type: ignore[no-untyped-def]
    from tests.server.srv_helpers import make_json_batch

    spec = cms_spec()
    assert api.create(spec).status_code == 201
    body = make_json_batch(spec, 10, rng, batch_id=BID)
    assert api.app("POST", "/v1/reports", json=body).status_code == 202
    again = api.app("POST", "/v1/reports", json=body)
    assert again.status_code == 202 and again.json["duplicate"] is True


def test_the_dedupe_key_holds_a_digest_and_expires_at_a_day_boundary(redis: redis_lib.Redis) -> None:
    """The value is b"d2:" + MurmurHash3-128 of the privatized bytes the stream entry holds (nothing more to tell);
    the expiry stays a day boundary (nothing finer than the day at rest)."""
    appender = _appender(redis)
    data = b"privatized-batch-bytes"
    assert not appender.append(metric="m", shards=1, batch_id=BID, version=1, n=1, data=data, day="2099-01-01",
                               dedupe_days=3).duplicate
    seen = keys.seen("m", 0, BID.hex())
    assert redis.get(seen) == content_digest(data) == b"d2:" + mmh3.hash_bytes(data, 0, True)
    assert int(redis.execute_command("PEXPIRETIME", seen)) == 4070908800000 + 4 * DAY_MS
    again = appender.append(metric="m", shards=1, batch_id=BID, version=1, n=1, data=data, day="2099-01-02",
                            dedupe_days=3)
    assert (again.duplicate, again.conflict) == (True, False)
    other = appender.append(metric="m", shards=1, batch_id=BID, version=1, n=1, data=data + b"!", day="2099-01-01",
                            dedupe_days=3)
    assert (other.duplicate, other.conflict) == (True, True)
    assert redis.xlen(keys.held("m", 0)) == 1
    assert int(redis.execute_command("PEXPIRETIME", seen)) == 4070908800000 + 4 * DAY_MS  # untouched


def test_a_dedupe_key_with_the_previous_releases_digest_stays_a_duplicate(redis: redis_lib.Redis) -> None:
    """A key written by the release that stored BLAKE2b digests (b"d1:") cannot be compared with this release's
    digest: the same bytes retried after an upgrade must stay a duplicate (not a 409), so any content is one."""
    seen = keys.seen("m", 0, BID.hex())
    data = b"privatized-batch-bytes"
    redis.set(seen, b"d1:" + hashlib.blake2b(data, digest_size=16).digest())
    appender = _appender(redis)
    for content in (data, data + b"!"):
        result = appender.append(metric="m", shards=1, batch_id=BID, version=1, n=1, data=content, day="2099-01-01",
                                 dedupe_days=3)
        assert (result.duplicate, result.conflict) == (True, False)
    assert redis.xlen(keys.held("m", 0)) == 0


def test_a_dedupe_key_written_before_digests_stays_a_duplicate(redis: redis_lib.Redis) -> None:
    """Keys of the previous release hold the entry id: any content under such an id is a duplicate, as it was
    (an upgrade must not turn in-flight retries into 409s)."""
    seen = keys.seen("m", 0, BID.hex())
    redis.set(seen, b"4070908800000-0")
    result = _appender(redis).append(metric="m", shards=1, batch_id=BID, version=1, n=1, data=b"anything",
                                         day=utc_day(), dedupe_days=3)
    assert (result.duplicate, result.conflict) == (True, False)
    assert redis.exists(keys.held("m", 0)) == 0


def test_a_conflict_is_found_across_a_shard_count_growth(redis: redis_lib.Redis) -> None:
    """A batch accepted before the metric grew from 1 to 4 shards: its id is looked up on the old shard, with
    its content compared there too."""
    appender = _appender(redis)
    bid = next(bytes([i]) * 16 for i in range(256) if keys.shard_for(bytes([i]) * 16, 4) != 0)
    appender.append(metric="g", shards=1, batch_id=bid, version=1, n=1, data=b"one", day=utc_day(), dedupe_days=3)
    kwargs = {"metric": "g", "shards": 4, "batch_id": bid, "version": 1, "n": 1, "day": utc_day(), "dedupe_days": 3,
              "earlier_shards": (1,)}
    same = appender.append(data=b"one", **kwargs)  # type: ignore[arg-type]
    other = appender.append(data=b"two", **kwargs)  # type: ignore[arg-type]
    assert (same.duplicate, same.conflict) == (True, False) and (other.duplicate, other.conflict) == (True, True)
    assert sum(redis.xlen(keys.held("g", s)) for s in range(4)) == 1


def test_racing_appends_of_one_id_store_exactly_one_content(redis: redis_lib.Redis) -> None:
    """16 threads, each appending one of two contents under one id, 20 times: one entry, and every answer agrees
    with it (its own content: appended or duplicate; the other: conflict)."""
    appender = _appender(redis)
    contents = [b"content-a" * 50, b"content-b" * 50]
    results: list[tuple[int, bool, bool]] = []
    lock = threading.Lock()

    def run(which: int) -> None:
        for _ in range(20):
            r = appender.append(metric="race", shards=1, batch_id=BID, version=1, n=1, data=contents[which],
                                day=utc_day(), dedupe_days=3)
            with lock:
                results.append((which, r.duplicate, r.conflict))

    threads = [threading.Thread(target=run, args=(i % 2,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = redis.xrange(keys.held("race", 0))
    assert len(entries) == 1
    stored = contents.index(entries[0][1][b"b"])
    assert [r for r in results if not r[1]] == [(stored, False, False)]  # appended once
    assert all(conflict == (which != stored) for which, duplicate, conflict in results if duplicate)
    assert np.sum([r[2] for r in results]) == 160  # every append of the other content was a conflict
