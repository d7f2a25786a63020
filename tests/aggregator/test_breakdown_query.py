"""Breakdown queries: ``--by``/``--where`` for every kind, per-group intervals within their theory bands, groups that
add up to the unbroken estimate, and clear errors (ldptel.aggregator.breakdowns)."""

from __future__ import annotations

import csv
import io
import json
import os
from typing import Any

import numpy as np
import pytest
import redis as redis_lib
from flask.testing import FlaskClient

from ldptel.aggregator.breakdowns import estimate_breakdown
from ldptel.aggregator.discover import DiscoverOptions, discover_metric
from ldptel.aggregator.query import estimate_metric
from ldptel.client import (
    CmsParams,
    GrrParams,
    HistogramParams,
    MeanParams,
    MetricSpec,
    PemParams,
    encode_batch,
    privatize_batch,
)
from ldptel.client.errors import InvalidParameterError
from ldptel.client.protocol.breakdown import ProfileSchema
from ldptel.storage import registry
from tests.aggregator.agg_helpers import OCTET, drain, run_cli
from tests.stats import Z, assert_close_normal

SCHEMA = ProfileSchema({"os": ("android", "ios", "web"), "channel": ("stable", "beta")})
# per os: (devices, the share of each grr value a, b, c): distributions that differ by group
FLEET = {"android": (3000, (0.6, 0.3, 0.1)), "ios": (2000, (0.2, 0.5, 0.3)), "web": (1000, (0.1, 0.1, 0.8)),
         "beos": (400, (0.34, 0.33, 0.33))}  # beos is not declared: counted as os=other


def _ingest(client: FlaskClient, token: str, spec: MetricSpec, values: list[Any], profile: str,
            rng: np.random.Generator, batch: int = 500) -> None:
    for lo in range(0, len(values), batch):
        b = privatize_batch(values[lo : lo + batch], spec.params, rng=rng)
        data = encode_batch(metric=spec.name, version=spec.version, batch_id=os.urandom(16), batch=b,
                            params=spec.params, profile=profile.encode())
        resp = client.post("/v1/reports", data=data, content_type=OCTET, headers={"Authorization": f"Bearer {token}"})
        assert resp.status_code == 202, resp.get_data(as_text=True)


def _grr_fleet(redis: redis_lib.Redis, client: FlaskClient, token: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    registry.set_profile(redis, SCHEMA)
    spec = registry.create_metric(redis, MetricSpec(name="choice", params=GrrParams(epsilon=2.0, domain=("a", "b", "c")),
                                                    breakdown=("os", "channel")), shards=2).current
    truth: dict[str, np.ndarray] = {}
    for os_name, (devices, shares) in FLEET.items():
        counts = np.round(np.array(shares) * devices).astype(int)
        values = [v for v, c in zip("abc", counts, strict=True) for _ in range(c)]
        rng.shuffle(values)
        half = len(values) // 3
        _ingest(client, token, spec, values[:half], f"os={os_name},channel=beta", rng)
        _ingest(client, token, spec, values[half:], f"os={os_name}", rng)  # no channel: other
        key = os_name if os_name in SCHEMA.dimensions["os"] else "other"
        truth[key] = truth.get(key, np.zeros(3, int)) + counts
    drain(redis, metrics=("choice",))
    return truth


def test_grr_by_os_each_group_within_its_theory_band_and_groups_add_up_to_the_total(
    redis: redis_lib.Redis, client: FlaskClient, app_token: str, rng: np.random.Generator
) -> None:
    truth = _grr_fleet(redis, client, app_token, rng)
    result = estimate_breakdown(redis, "choice", ["os"], selection="none")
    assert [g.values["os"] for g in result.groups] == ["android", "ios", "web", "other"]  # schema order, other last
    total = estimate_metric(redis, "choice", selection="none")
    assert result.total.n == total.n == sum(int(t.sum()) for t in truth.values())
    assert sum(g.n for g in result.groups) == total.n  # counts: exact
    summed = sum(g.result.estimate.counts for g in result.groups)
    np.testing.assert_allclose(summed, total.estimate.counts, rtol=1e-12, atol=1e-9)  # estimates: float rounding
    for g in result.groups:
        est = g.result.estimate
        assert g.n == int(truth[g.values["os"]].sum())
        for i, label in enumerate(est.labels):
            # the group's own stderr is the theory's (ldp-math: GRR variance at its n); 12 checks at z = 6
            assert_close_normal(float(est.counts[i]), float(truth[g.values["os"]][i]), float(est.stderr[i]), n=g.n,
                                z=Z, what=f"os={g.values['os']} {label}")
    # --where narrows to matching cells; by two dimensions gives the finer groups, adding up the same
    android = estimate_metric(redis, "choice", selection="none", where={"os": "android"})
    assert android.n == int(truth["android"].sum())
    fine = estimate_breakdown(redis, "choice", ["os", "channel"], selection="none")
    assert {tuple(g.values.values()) for g in fine.groups} == {
        (o, c) for o in ("android", "ios", "web", "other") for c in ("beta", "other")}
    assert sum(g.n for g in fine.groups) == total.n
    np.testing.assert_allclose(sum(g.result.estimate.counts for g in fine.groups), total.estimate.counts, rtol=1e-12,
                               atol=1e-9)
    sub = estimate_breakdown(redis, "choice", ["channel"], selection="none", where={"os": "web"})
    assert sum(g.n for g in sub.groups) == int(truth["web"].sum())


def test_where_and_by_are_checked_against_the_registry(
    redis: redis_lib.Redis, client: FlaskClient, app_token: str, rng: np.random.Generator
) -> None:
    _grr_fleet(redis, client, app_token, rng)
    with pytest.raises(InvalidParameterError, match="one of android, ios, web, other"):
        estimate_metric(redis, "choice", where={"os": "beos"})  # undeclared values are stored as other
    with pytest.raises(InvalidParameterError, match="dimensions of 'choice'.s breakdown: os, channel"):
        estimate_breakdown(redis, "choice", ["arch"])
    registry.create_metric(redis, MetricSpec(name="flat", params=GrrParams(epsilon=2.0, domain=("a", "b"))))
    with pytest.raises(InvalidParameterError, match="has no breakdown dimensions"):
        estimate_metric(redis, "flat", where={"os": "ios"})
    code, _, err = run_cli("estimate", "choice", "--where", "os=beos", "--redis-url", _url(redis))
    assert code != 0 and "one of android, ios, web, other" in err
    code, _, err = run_cli("estimate", "choice", "--by", "arch", "--redis-url", _url(redis))
    assert code != 0 and "os, channel" in err
    code, _, err = run_cli("estimate", "choice", "--where", "os", "--redis-url", _url(redis))
    assert code != 0 and "DIMENSION=VALUE" in err


def _url(r: redis_lib.Redis) -> str:
    kw = r.connection_pool.connection_kwargs
    return f"redis://{kw['host']}:{kw['port']}/{kw.get('db', 0)}"


def test_cli_table_json_csv_and_plot(
    redis: redis_lib.Redis, client: FlaskClient, app_token: str, rng: np.random.Generator, tmp_path: Any
) -> None:
    truth = _grr_fleet(redis, client, app_token, rng)
    url = _url(redis)
    code, out, err = run_cli("estimate", "choice", "--by", "os", "--format", "json", "--redis-url", url)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["by"] == ["os"] and doc["kind"] == "frequencies" and "not privatized" in doc["profile_note"]
    assert [g["os"] for g in doc["groups"]] == ["android", "ios", "web", "other"]
    assert [g["n"] for g in doc["groups"]] == [int(truth[k].sum()) for k in ("android", "ios", "web", "other")]
    assert doc["n"] == doc["total"]["n"] == sum(g["n"] for g in doc["groups"])
    code, out, err = run_cli("estimate", "choice", "--by", "os", "--format", "csv", "--redis-url", url)
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows[0].keys() >= {"os", "n", "value", "estimate", "stderr", "ci_low", "ci_high"}
    assert len(rows) == 4 * 3
    code, out, err = run_cli("estimate", "choice", "--by", "os", "--where", "channel=beta", "--redis-url", url,
                             "--plot", str(tmp_path / "by.png"))
    assert code == 0, err
    assert "by os where channel=beta" in out and "not privatized" in out and "android" in out
    assert (tmp_path / "by.png").stat().st_size > 1000


@pytest.mark.parametrize("kind", ["cms", "mean", "num-histogram", "pem"])
def test_every_kind_breaks_down_and_adds_up(
    redis: redis_lib.Redis, client: FlaskClient, app_token: str, rng: np.random.Generator, kind: str
) -> None:
    registry.set_profile(redis, SCHEMA)
    params: Any = {
        "cms": CmsParams(epsilon=4.0, k=16, m=64),
        "mean": MeanParams(epsilon=2.0, lo=0, hi=100),
        "num-histogram": HistogramParams(epsilon=4.0, edges=(0.0, 10.0, 50.0, 100.0)),
        "pem": PemParams(epsilon=4.0, k=32, m=256, max_bytes=9, hash_seed=4),
    }[kind]
    spec = registry.create_metric(redis, MetricSpec(name="k", params=params, breakdown=("os",)), shards=2).current
    numeric = kind in ("mean", "num-histogram")
    sent = {"android": 1500, "ios": 900}
    for os_name, n in sent.items():
        if numeric:
            values: list[Any] = list(rng.uniform(0, 100, n) if os_name == "android" else rng.uniform(0, 30, n))
        else:
            values = [f"w{i % (3 if os_name == 'android' else 5)}" for i in range(n)]
        _ingest(client, app_token, spec, values, f"os={os_name}", rng)
    drain(redis, metrics=("k",))
    if kind == "pem":
        result = estimate_breakdown(redis, "k", ["os"], DiscoverOptions(top=10), query=discover_metric)
        assert result.kind == "discovery"
        found = {g.values["os"]: set(g.result.result.estimate.labels) for g in result.groups}
        assert found["android"] <= {"w0", "w1", "w2"} and "w0" in found["android"]
    else:
        cands = [f"w{i}" for i in range(5)] if kind == "cms" else None
        result = estimate_breakdown(redis, "k", ["os"], candidates=cands, selection="none")
        total = result.total
        assert result.kind == total.kind
        if kind != "mean":  # counts (and a histogram's buckets): additive
            np.testing.assert_allclose(sum(g.result.estimate.counts for g in result.groups), total.estimate.counts,
                                       rtol=1e-9, atol=1e-6)
        else:  # the sum row is additive; each mean within its own band
            sums = [g.result.estimate.counts[list(g.result.estimate.labels).index("sum")] for g in result.groups]
            tot = total.estimate.counts[list(total.estimate.labels).index("sum")]
            assert sum(sums) == pytest.approx(tot, rel=1e-9)
    assert [g.values["os"] for g in result.groups] == ["android", "ios"]
    assert [g.n for g in result.groups] == [sent["android"], sent["ios"]]
    assert result.total.n == sum(sent.values())
    out = io.StringIO()
    from ldptel.aggregator.render import write_breakdown

    for fmt in ("table", "csv", "json"):
        write_breakdown(result, fmt, out, summary=kind == "num-histogram")
    assert "android" in out.getvalue()


def test_min_reports_withholds_each_combination_day_and_no_sum_differs_by_one(
    redis: redis_lib.Redis, rng: np.random.Generator
) -> None:
    """The threshold's unit is a (combination, day): a small one is in no sum, so the total, the groups and any
    where-query are sums of released units only (total − shown groups reveals nothing)."""
    from ldptel.aggregator.query import WithheldRangeError, estimate_by_day
    from ldptel.storage.append import BatchAppender

    registry.set_profile(redis, SCHEMA)
    spec = registry.create_metric(redis, MetricSpec(name="t", params=GrrParams(epsilon=2.0, domain=("a", "b")),
                                                    breakdown=("os",)), shards=2).current
    registry.set_min_reports(redis, "t", 100)
    appender = BatchAppender(redis)
    plan = {("2026-03-01", "android"): 1000, ("2026-03-01", "ios"): 600, ("2026-03-01", "web"): 30,
            ("2026-03-02", "android"): 50, ("2026-03-02", "ios"): 400}
    for (day, os_name), n in plan.items():
        b = privatize_batch(["a"] * n, spec.params, rng=rng)
        bid = os.urandom(16)
        data = encode_batch(metric="t", version=1, batch_id=bid, batch=b, params=spec.params,
                            profile=f"os={os_name}".encode())
        appender.append(metric="t", shards=2, batch_id=bid, version=1, n=n, data=data, day=day, dedupe_days=1,
                        cell=f"os={os_name}")
    drain(redis, metrics=("t",))
    result = estimate_breakdown(redis, "t", ["os"], selection="none")
    by = {g.values["os"]: g for g in result.groups}
    assert by["android"].n == 1000 and by["ios"].n == 1000  # android's 50 on 03-02 are in no sum
    assert by["web"].result is None and by["web"].n is None and "fewer than 100 reports" in str(by["web"].withheld)
    total = estimate_metric(redis, "t", selection="none")
    assert total.n == result.total.n == 2000 == sum(g.n for g in result.groups if g.n)  # nothing to difference
    np.testing.assert_allclose(sum(g.result.estimate.counts for g in result.groups if g.result),
                               total.estimate.counts, rtol=1e-12)
    assert {w.what for w in total.withheld} == {"os=web 2026-03-01", "os=android 2026-03-02"}
    with pytest.raises(WithheldRangeError, match="fewer than 100"):
        estimate_metric(redis, "t", where={"os": "web"})
    assert estimate_metric(redis, "t", where={"os": "android"}, day_from="2026-03-01", day_to="2026-03-01").n == 1000
    daily = estimate_by_day(redis, "t", selection="none")
    assert [res.n for res in daily.results] == [1600, 400]  # each day: its released combinations only
    code, out, err = run_cli("estimate", "t", "--by", "os", "--redis-url", _url(redis))
    assert code == 0, err
    assert "os=web: withheld: fewer than 100 reports" in out and "1 groups shown" not in out
