"""Late retries (issue 12): one setting, the retry horizon in days, so that a batch is either deduplicated or
refused as too old, never counted twice.

Before: a retry arriving after the dedupe key's 24 h TTL was appended again. Now the client sends the day it
formed the batch (``X-Ldptel-Batch-Day``); the server refuses one formed more than ``retry_horizon_days`` ago
(422 ``batch_too_old``) and keeps every dedupe key until the end of its arrival day + the horizon.
"""

from __future__ import annotations

import itertools
from datetime import date, timedelta

import pytest
import redis as redis_lib

from ldptel.client.protocol.wire import BATCH_DAY_HEADER, decode_header
from ldptel.server.state import BatchDayError, dedupe_days
from ldptel.storage import keys
from ldptel.storage.append import utc_day
from tests.server.conftest import Api
from tests.server.srv_helpers import OCTET, cms_spec, make_batch, stream_entries

HORIZON = 3  # the default LDPTEL_RETRY_HORIZON_DAYS of the test app


def _day(offset: int) -> str:
    return (date.fromisoformat(utc_day()) + timedelta(days=offset)).isoformat()


def _post(api: Api, data: bytes, formed: str | None):  # type: ignore[no-untyped-def]
    headers = {} if formed is None else {BATCH_DAY_HEADER: formed}
    return api.request("POST", "/v1/reports", token=api.app_token, data=data, content_type=OCTET, headers=headers)


def test_a_retry_after_the_old_dedupe_expiry_is_refused_not_appended_twice(api: Api, redis: redis_lib.Redis, rng) -> None:  # type: ignore[no-untyped-def]
    """The batch was appended HORIZON + 1 days ago and its dedupe key has expired since; the device retries
    it now (a lost acknowledgement, then a long time offline). Before the fix it was appended a second time."""
    spec = cms_spec()
    assert api.create(spec).status_code == 201
    data, bid = make_batch(spec, 20, rng)
    formed = _day(-(HORIZON + 1))
    stream = keys.stream(spec.name, keys.shard_for(bid, 4))
    redis.xadd(stream, {"d": formed, "v": "1", "n": "20", "b": data})  # the first arrival; no dedupe key left
    response = _post(api, data, formed)
    assert response.status_code == 422 and response.json["error"] == "batch_too_old", response.json
    assert len(stream_entries(redis, spec.name, 4)) == 1  # counted once
    # within the horizon the same kind of retry is deduplicated by a key that is still there
    data2, _ = make_batch(spec, 20, rng)
    assert _post(api, data2, _day(-HORIZON)).json["duplicate"] is False
    assert _post(api, data2, _day(-HORIZON)).json["duplicate"] is True


@pytest.mark.parametrize(("formed", "status"), [("yesterday", 400), ("2026-02-30", 400), ("+2", 400)])
def test_an_invalid_formation_day_is_a_400(api: Api, redis: redis_lib.Redis, rng, formed: str, status: int) -> None:  # type: ignore[no-untyped-def]
    spec = cms_spec()
    assert api.create(spec).status_code == 201
    data, _ = make_batch(spec, 5, rng)
    response = _post(api, data, _day(2) if formed == "+2" else formed)
    assert response.status_code == status and response.json["error"] == "invalid_batch_day"
    assert stream_entries(redis, spec.name, 4) == []


def test_a_batch_without_the_header_counts_as_formed_today(api: Api, redis: redis_lib.Redis, rng) -> None:  # type: ignore[no-untyped-def]
    spec = cms_spec()
    assert api.create(spec).status_code == 201
    data, bid = make_batch(spec, 5, rng)
    assert _post(api, data, None).status_code == 202
    seen = keys.seen(spec.name, keys.shard_for(bid, 4), bid.hex())
    end = date.fromisoformat(utc_day()) + timedelta(days=HORIZON + 1)
    assert redis.execute_command("PEXPIRETIME", seen) == int(end.toordinal() - date(1970, 1, 1).toordinal()) * 86_400_000
    (_, _, fields), = stream_entries(redis, spec.name, 4)
    assert decode_header(fields[b"b"]).batch_id == bid


@pytest.mark.parametrize("horizon", [0, 1, 3])
def test_every_retry_is_either_deduplicated_or_refused(horizon: int) -> None:
    """Over every formation day F, first arrival A ≥ F − 1 (a device clock up to a day ahead) and retry day
    R ≥ A: a retry the server accepts arrives before its dedupe key expires."""
    base = date(2026, 11, 1)
    for f, a_off, r_off in itertools.product(range(-1, 6), range(-1, 6), range(0, 8)):
        formed, arrival = base + timedelta(days=f), base + timedelta(days=f + a_off)
        retry = arrival + timedelta(days=r_off)
        try:
            kept = dedupe_days(formed.isoformat(), arrival.isoformat(), horizon)
        except BatchDayError:
            continue  # the first upload itself was refused: nothing to double count
        key_end = arrival + timedelta(days=kept)  # the key lives through the end of this day
        try:
            dedupe_days(formed.isoformat(), retry.isoformat(), horizon)
        except BatchDayError as exc:
            assert exc.code == "batch_too_old" and exc.status == 422
            continue
        assert retry <= key_end, (formed, arrival, retry, kept)
