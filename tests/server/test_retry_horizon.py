"""Late retries (issue 12): one setting, the retry horizon in days, so that a batch is either deduplicated or
refused as too old, never counted twice.

Before: a retry arriving after the dedupe key's 24 h TTL was appended again. Now the client sends the batch's
age (``X-Ldptel-Batch-Age-Days``, UTC days since it formed the batch, by its own clock); the server refuses one
older than ``retry_horizon_days`` (422 ``batch_too_old``) and keeps every dedupe key until the end of its
arrival day + the horizon + 1.
"""

from __future__ import annotations

import itertools
from datetime import date, timedelta

import pytest
import redis as redis_lib

from ldptel.client.protocol.wire import BATCH_AGE_HEADER, DEFAULT_RETRY_HORIZON_DAYS, encode_upload
from ldptel.server.state import BatchAgeError, check_batch_age
from ldptel.storage import keys
from ldptel.storage.append import utc_day
from tests.server.conftest import Api
from tests.server.srv_helpers import OCTET, cms_spec, make_batch, stream_entries

HORIZON = DEFAULT_RETRY_HORIZON_DAYS  # the test app's LDPTEL_RETRY_HORIZON_DAYS
DAY_S = 86_400


def _post(api: Api, data: bytes, age: str | None):  # type: ignore[no-untyped-def]
    headers = {} if age is None else {BATCH_AGE_HEADER: age}
    return api.request("POST", "/v1/reports", token=api.app_token, data=data, content_type=OCTET, headers=headers)


def test_a_retry_after_the_old_dedupe_expiry_is_refused_not_appended_twice(api: Api, redis: redis_lib.Redis, rng) -> None:  # type: ignore[no-untyped-def]
    """The batch was appended HORIZON + 1 days ago and its dedupe key has expired since; the device retries
    it now (a lost acknowledgement, then a long time offline). Before the fix it was appended a second time."""
    spec = cms_spec()
    assert api.create(spec).status_code == 201
    data, bid = make_batch(spec, 20, rng)
    stream = keys.held(spec.name, keys.shard_for(bid, 4))
    first = (date.fromisoformat(utc_day()) - timedelta(days=HORIZON + 1)).isoformat()
    redis.xadd(stream, {"d": first, "v": "1", "n": "20", "b": data})  # the first arrival; no dedupe key left
    response = _post(api, data, str(HORIZON + 1))
    assert response.status_code == 422 and response.json["error"] == "batch_too_old", response.json
    assert len(stream_entries(redis, spec.name, 4)) == 1  # counted once
    # within the horizon the same kind of retry is deduplicated by a key that is still there
    data2, _ = make_batch(spec, 20, rng)
    assert _post(api, data2, str(HORIZON)).json["duplicate"] is False
    assert _post(api, data2, str(HORIZON)).json["duplicate"] is True


@pytest.mark.parametrize("age", ["-1", "1.5", "two", "9999999", "٣"])
def test_an_invalid_age_is_a_400(api: Api, redis: redis_lib.Redis, rng, age: str) -> None:  # type: ignore[no-untyped-def]
    spec = cms_spec()
    assert api.create(spec).status_code == 201
    data, _ = make_batch(spec, 5, rng)
    response = _post(api, data, age)
    assert response.status_code == 400 and response.json["error"] == "invalid_batch_age"
    assert stream_entries(redis, spec.name, 4) == []


def test_the_dedupe_key_lives_through_the_horizon_plus_a_day(api: Api, redis: redis_lib.Redis, rng) -> None:  # type: ignore[no-untyped-def]
    spec = cms_spec()
    assert api.create(spec).status_code == 201
    data, bid = make_batch(spec, 5, rng)
    assert _post(api, data, None).status_code == 202  # no header (an older client): age 0
    seen = keys.seen(spec.name, keys.shard_for(bid, 4), bid.hex())
    end = date.fromisoformat(utc_day()) + timedelta(days=HORIZON + 2)
    assert redis.execute_command("PEXPIRETIME", seen) == (end - date(1970, 1, 1)).days * DAY_S * 1000


@pytest.mark.parametrize("horizon", [0, 1, 3])
def test_every_retry_is_either_deduplicated_or_refused(horizon: int) -> None:
    """Device clocks off by any constant (in 1/8 days, up to ±3 days), batches formed at any 1/8 day, first
    sent and retried any 1/8 days later: every retry the server accepts arrives while its key lives."""
    step = DAY_S // 8
    for skew, formed, first, retry in itertools.product(
            range(-24, 25, 3), range(0, 8), range(0, 40, 3), range(0, 48)):
        t_formed = formed * step
        t_first, t_retry = t_formed + first * step, t_formed + first * step + retry * step

        def age(t: int, skew: int = skew, t_formed: int = t_formed) -> str:
            return str((t + skew * step) // DAY_S - (t_formed + skew * step) // DAY_S)  # the device's day count

        try:
            check_batch_age(age(t_first), horizon)
        except BatchAgeError:
            continue  # the first upload was refused: nothing to count twice
        key_end = (t_first // DAY_S + horizon + 2) * DAY_S  # PXAT: the end of arrival day + horizon + 1
        try:
            check_batch_age(age(t_retry), horizon)
        except BatchAgeError as exc:
            assert exc.code == "batch_too_old" and exc.status == 422
            continue
        assert t_retry < key_end, (skew, formed, first, retry)


def test_a_multi_part_upload_older_than_the_horizon_is_refused_whole(api: Api, redis: redis_lib.Redis, rng) -> None:  # type: ignore[no-untyped-def]
    """An upload carries one age, its oldest part's: beyond the horizon the request gets 422 ``batch_too_old``
    and no part is stored (the SDK then sends the parts alone, each with its own age); within it, every part
    is stored."""
    spec = cms_spec()
    assert api.create(spec).status_code == 201
    parts = [make_batch(spec, 10, rng)[0] for _ in range(3)]
    refused = _post(api, encode_upload(parts), str(HORIZON + 1))
    assert refused.status_code == 422 and refused.json["error"] == "batch_too_old", refused.json
    assert stream_entries(redis, spec.name, 4) == []
    accepted = _post(api, encode_upload(parts), str(HORIZON))
    assert accepted.status_code == 200 and [p["http_status"] for p in accepted.json["parts"]] == [202, 202, 202]
    assert len(stream_entries(redis, spec.name, 4)) == 3
