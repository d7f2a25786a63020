"""The dashboard's breakdown view in real headless Chromium: a metric broken down by os gets a selector; "by os"
draws one panel per group (small multiples) with the CLI's numbers, a ``where`` narrows the page, withheld and
bad input are shown, and the JSON link returns the CLI's document."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import redis as redis_lib

from ldptel.client import GrrParams, MeanParams, MetricSpec, encode_batch, privatize_batch
from ldptel.client.protocol.breakdown import ProfileSchema
from ldptel.storage import registry
from ldptel.storage.append import BatchAppender
from tests.aggregator.agg_helpers import drain
from tests.aggregator.dashboard_data import running_dashboard
from tests.aggregator.test_dashboard_browser import TOKEN, assert_shown, chromium, cli_json, number, show  # noqa: F401

pytestmark = pytest.mark.slow
DAY = "2026-03-05"


def _append(r: redis_lib.Redis, spec: MetricSpec, values: list[Any], cell: str, rng: np.random.Generator) -> None:
    appender = BatchAppender(r)
    for lo in range(0, len(values), 500):
        batch = privatize_batch(values[lo : lo + 500], spec.params, rng=rng)
        bid = os.urandom(16)
        data = encode_batch(metric=spec.name, version=spec.version, batch_id=bid, batch=batch, params=spec.params,
                            profile=cell.encode())
        appender.append(metric=spec.name, shards=2, batch_id=bid, version=spec.version, n=batch.n, data=data, day=DAY,
                        dedupe_days=1, cell=cell)


@pytest.fixture(scope="module")
def site(redis_url: str) -> Iterator[str]:
    """One folded data set and one ``ldptel dashboard`` for the module (its tests only read)."""
    redis = redis_lib.Redis.from_url(redis_url)
    redis.flushdb()
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("LDPTEL_REDIS_URL", redis_url)
            rng = np.random.default_rng(29)
            registry.set_profile(redis, ProfileSchema({"os": ("android", "ios", "web")}))
            grr = registry.create_metric(redis, MetricSpec(name="platform", params=GrrParams(epsilon=2.0, domain=("a", "b", "c")),
                                                           breakdown=("os",)), shards=2).current
            mean = registry.create_metric(redis, MetricSpec(name="load", params=MeanParams(epsilon=2.0, lo=0, hi=100),
                                                            breakdown=("os",)), shards=2).current
            for os_name, n in (("android", 1500), ("ios", 800), ("web", 300)):
                _append(redis, grr, list(rng.choice(["a", "b", "c"], size=n, p=[0.5, 0.3, 0.2])), f"os={os_name}", rng)
                _append(redis, mean, list(rng.uniform(0, 100 if os_name == "android" else 40, n)), f"os={os_name}", rng)
            drain(redis, metrics=("platform", "load"))
            with running_dashboard(redis_url, TOKEN) as base:
                yield base
    finally:
        redis.flushdb()
        redis.close()


def _login(chromium: Any, base: str) -> Any:  # noqa: F811
    page = chromium.new_context(viewport={"width": 1366, "height": 900}).new_page()
    page.goto(f"{base}/login")
    page.fill("#token", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_selector("body[data-state=ready]")
    return page


def test_breakdown_selector_small_multiples_and_where(chromium: Any, site: str) -> None:  # noqa: F811
    base = site
    page = _login(chromium, base)
    show(page, f"{base}/metrics/platform")
    assert page.locator("#by-field").is_visible() and page.locator("#groups-card").is_hidden()
    assert "not privatized" in page.inner_text("[data-meta=breakdown]")
    page.select_option("select[name=by]", "os")
    page.click("#query button[type=submit]")
    page.wait_for_selector("body[data-state=ready]")
    assert page.inner_text("#error") == ""
    page.wait_for_selector("#groups-card:not([hidden])")
    want = cli_json("estimate", "platform", "--by", "os", "--format", "json")
    panels = page.locator("#groups .group")
    assert panels.count() == 3
    for i, group in enumerate(want["groups"]):
        panel = panels.nth(i)
        assert panel.get_attribute("data-group") == f"os={group['os']}"
        assert f"n = {group['n']:,}" in panel.locator("h3").inner_text()
        assert panel.locator("svg rect.bar").count() == 3  # a chart per group, one bar per label
    # the total above is the unbroken estimate, and the per-group note says they add up
    assert number(page.inner_text("[data-summary=n] .big")) == want["n"] == sum(g["n"] for g in want["groups"])
    assert "add up to the total" in page.inner_text("#groups-note")
    linked = page.evaluate("(u) => fetch(u).then(r => r.json())", page.get_attribute("#groups-json", "href"))
    assert linked == want  # the CLI's document
    # where narrows everything to one group
    page.fill("input[name=where]", "os=ios")
    page.select_option("select[name=by]", "")
    page.click("#query button[type=submit]")
    page.wait_for_selector("body[data-state=ready]")
    ios = cli_json("estimate", "platform", "--where", "os=ios", "--format", "json")
    assert number(page.inner_text("[data-summary=n] .big")) == ios["n"] == 800
    assert page.locator("#groups-card").is_hidden()
    # an undeclared value: the server's message, nothing drawn
    page.fill("input[name=where]", "os=beos")
    page.click("#query button[type=submit]")
    page.wait_for_selector("body[data-state=ready]")
    assert "one of android, ios, web, other" in page.inner_text("#error")


def test_a_numeric_breakdown_shows_each_groups_summary(chromium: Any, site: str) -> None:  # noqa: F811
    base = site
    page = _login(chromium, base)
    show(page, f"{base}/metrics/load?by=os")
    page.wait_for_selector("#groups-card:not([hidden])")
    want = cli_json("estimate", "load", "--by", "os", "--format", "json")
    for i, group in enumerate(want["groups"]):
        panel = page.locator("#groups .group").nth(i)
        for row in group["result"]["rows"]:
            assert_shown(panel.locator(f"[data-summary={row['value']}] .big").inner_text(), row["estimate"])
