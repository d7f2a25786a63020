"""Numeric metrics end to end: Reporter → real HTTP ingest → Redis → fold worker → query, and ingest refusing
reports no honest client can produce. Nothing here names a code path special to numeric metrics: the same
Reporter, wire, ingest, worker and query serve them through the mechanism objects."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import redis as redis_lib
from flask.testing import FlaskClient

from ldptel.aggregator.query import estimate_metric
from ldptel.client import MetricSpec, privatize_batch
from ldptel.client.errors import InvalidParameterError, InvalidValueError
from ldptel.client.mechanisms.histogram import HistogramParams, bucket_edges
from ldptel.client.mechanisms.mean import MeanParams
from ldptel.client.protocol.wire import encode_batch
from ldptel.client.sdk.reporter import Reporter
from ldptel.storage import sketches as store
from ldptel.storage.registry import create_metric
from tests.aggregator.agg_helpers import create, drain, post_reports
from tests.client.conftest import OPEN_POLICY, LiveServer
from tests.stats import assert_close_normal

OCTET = "application/octet-stream"


@pytest.mark.slow
def test_reporter_report_of_a_number_reaches_the_estimate(live: LiveServer, app_token: str, tmp_path: Path) -> None:
    live.create(MetricSpec(name="load_ms", params=MeanParams(epsilon=4, lo=0, hi=10_000), reports_per_day=1000))
    values = np.random.default_rng(1).lognormal(math.log(300), 1.0, 400)
    # 400 reports from one device: the test policy lifts the default daily ceiling (one device stands in for 400)
    with Reporter(live.url, app_token, tmp_path, flush_interval=3600, metrics=["load_ms"], policy=OPEN_POLICY) as rep:
        assert rep.wait_for_specs(10)
        assert rep.report("load_ms", 231.5).queued
        for bad in ("231.5", None, True, float("nan")):
            with pytest.raises(InvalidValueError):
                rep.report("load_ms", bad)
        for v in values.tolist():
            assert rep.report("load_ms", v).queued
        assert rep.report("load_ms", 25_000).queued and rep.report("load_ms", -3).queued  # clipped: counted here
        assert rep.stats().clipped == 2 + int(np.count_nonzero(values > 10_000))
        assert rep.flush(timeout=30)
    drain(live.redis)
    res = estimate_metric(live.redis, "load_ms")
    assert res.n == 403
    assert [r["value"] for r in res.rows()] == ["mean", "sum", "count"]
    truth = float(np.clip(np.append(values, [231.5, 25_000, -3]), 0, 10_000).mean())
    assert_close_normal(float(res.estimate.counts[0]), truth, float(res.estimate.stderr[0]), n=403, what="mean")
    assert "clipped to [0, 10000]" in res.note
    assert math.isnan(res.rows()[0]["frequency"])  # a mean is not a share of the reports
    with pytest.raises(InvalidParameterError):
        estimate_metric(live.redis, "load_ms", postprocess="norm-sub")
    with pytest.raises(InvalidParameterError):
        estimate_metric(live.redis, "load_ms", percentiles=[50])


@pytest.mark.parametrize(
    "params",
    [
        MeanParams(epsilon=1, lo=0, hi=600, variant="onebit"),
        MeanParams(epsilon=4, lo=0, hi=600),
        HistogramParams(epsilon=4, edges=bucket_edges(0, 1000, 32, scale="log")),
        HistogramParams(epsilon=1, edges=bucket_edges(0, 1000, 64)),
    ],
    ids=["onebit", "dhm", "hist-grr", "hist-oue"],
)
def test_ingest_fold_and_query_are_exact_through_the_app(
    redis: redis_lib.Redis, client: FlaskClient, app_token: str, rng: np.random.Generator, params: object
) -> None:
    record = create(redis, MetricSpec(name="session", params=params), shards=2)  # type: ignore[arg-type]
    values = np.clip(rng.lognormal(math.log(120), 0.8, 3000), 0, 2000).tolist()
    sent = post_reports(client, app_token, record, values, rng, batch_size=700)
    drain(redis)
    pairs = [(s, v, d) for s, members in store.sketch_index(redis, "session", 2).items() for v, d in members]
    state, _ = store.sum_sketches(redis, "session", params=record.current.params, pairs=pairs)
    assert state.equals(sent.expected_state())  # the worker folded every report exactly once
    res = estimate_metric(redis, "session", percentiles=[50, 90] if isinstance(params, HistogramParams) else None)
    assert res.n == 3000
    if isinstance(params, HistogramParams):
        assert len(res.rows()) == params.d and [p.percentile for p in res.percentiles] == [50.0, 90.0]
        truth = float(np.quantile(np.clip(values, 0, 1000), 0.5))
        assert res.percentiles[0].ci_low <= truth <= res.percentiles[0].ci_high


def _post(client: FlaskClient, token: str, data: bytes) -> tuple[int, dict[str, object]]:
    resp = client.post("/v1/reports", data=data, content_type=OCTET, headers={"Authorization": f"Bearer {token}"})
    return resp.status_code, resp.get_json()


def test_ingest_refuses_reports_no_honest_client_produces(redis: redis_lib.Redis, client: FlaskClient, app_token: str) -> None:
    mean = create_metric(redis, MetricSpec(name="lat", params=MeanParams(epsilon=4, lo=0, hi=600)), shards=1).current
    onebit = create_metric(redis, MetricSpec(name="lat1", params=MeanParams(epsilon=1, lo=0, hi=600, variant="onebit")),
                           shards=1).current
    hist = create_metric(redis, MetricSpec(name="hist", params=HistogramParams(epsilon=4, edges=bucket_edges(0, 9, 9))),
                         shards=1).current
    rng = np.random.default_rng(0)

    def tampered(metric: str, params: object, values: list[float], tail: bytes) -> bytes:
        """A valid encoded batch whose last payload bytes are replaced (encode_batch itself refuses bad ones)."""
        data = encode_batch(metric=metric, version=1, batch_id=os.urandom(16),
                            batch=privatize_batch(values, params, rng=rng), params=params)  # type: ignore[arg-type]
        return data[: -len(tail)] + tail

    # a dhm symbol past the last cell (u16 little-endian)
    status, body = _post(client, app_token, tampered("lat", mean.params, [1.0, 2.0], mean.params.symbols.to_bytes(2, "little")))
    assert status == 400 and "out of range" in str(body), body
    # a histogram bucket that does not exist (9 buckets: indices 0..8)
    status, body = _post(client, app_token, tampered("hist", hist.params, [1.0], bytes([9])))
    assert status == 400 and "out of range" in str(body), body
    # one-bit reports with a set padding bit (3 reports in a byte: the 5 low bits must be 0)
    status, body = _post(client, app_token, tampered("lat1", onebit.params, [1.0, 2.0, 3.0], bytes([0b1010_0001])))
    assert status == 400 and "padding" in str(body), body
