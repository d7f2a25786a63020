"""Poisoning at ingest (issue 12): a batch holding a report no honest client produces is refused (400), on the
binary fast path and the JSON form alike, and nothing of it is stored."""

from __future__ import annotations

import json
import os

import numpy as np
import redis as redis_lib

from ldptel.client import MetricSpec, OueCmsParams, encode_batch, privatize_batch
from ldptel.client.mechanisms.cms import UnaryBatch
from ldptel.client.protocol.wire import batch_to_json
from tests.server.conftest import Api
from tests.server.srv_helpers import AUTH_JSON, stream_entries


def test_a_10000_report_all_ones_oue_cms_batch_is_refused(api: Api, redis: redis_lib.Redis) -> None:
    """Each all-ones report would add +2.04 to every value's estimate at ε = 4 (an honest one adds 1 to its
    own value). Before the fix the batch was accepted (202)."""
    spec = MetricSpec(name="app.oue", params=OueCmsParams(epsilon=4.0, k=16, m=1024))
    assert api.create(spec).status_code == 201
    n = 10_000
    crafted = UnaryBatch(mechanism="oue-cms", n=n, rows=np.arange(n, dtype=np.int64) % 16,
                         bits=np.full((n, 1024 // 8), 0xFF, dtype=np.uint8))
    data = encode_batch(metric=spec.name, version=1, batch_id=os.urandom(16), batch=crafted, params=spec.params)
    response = api.post_batch(data)
    assert response.status_code == 400 and response.json["error"] == "invalid_batch", response.json
    assert "report 0 has 1024 of 1024 bits set" in response.json["message"]
    as_json = batch_to_json(metric=spec.name, version=1, batch_id=os.urandom(16), batch=crafted)
    assert api.post_batch(json.dumps(as_json).encode(), content_type=AUTH_JSON).status_code == 400
    assert stream_entries(redis, spec.name, 4) == []
    honest = privatize_batch(["x"] * n, spec.params, rng=np.random.default_rng(7))
    data = encode_batch(metric=spec.name, version=1, batch_id=os.urandom(16), batch=honest, params=spec.params)
    assert api.post_batch(data).status_code == 202
