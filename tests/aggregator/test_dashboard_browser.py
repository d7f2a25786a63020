"""The dashboard in a real browser: headless Chromium (Playwright driving the system's ``chromium``) against
``ldptel dashboard`` on a loopback port over a real Redis with folded data. The numbers the pages show must be
the CLI's ``--format json`` numbers (to the digits shown), and each chart's JSON link must return the CLI's
document. In CI (``CI=true``) a missing browser fails the test; elsewhere it is skipped, saying why."""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
import redis as redis_lib

from ldptel.aggregator.cli import main
from ldptel.client import MetricSpec, RrParams
from ldptel.storage import registry
from tests.aggregator.dashboard_data import Populated, day_list, populate, populate_more, running_dashboard

TOKEN = "browser-0123456789abcdef-ABCDEFGHIJ"
DAYS = day_list("2026-03-05", 5)
CHROMIUM_ENV = "LDPTEL_CHROMIUM"
# Headless Chromium (new headless is the whole browser) preloads its own omnibox-popup WebUIs in a renderer of their
# own, and isolates sites into processes; the dashboard is one origin and has no address bar. Without both: 35.6 s
# of CPU for this module (Chromium's processes 25.5 s of it) -> 22-24 s, the pages' behaviour unchanged.
CHROMIUM_ARGS = [
    "--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup,WebUIOmniboxFullPopup,site-per-process",
    "--disable-site-isolation-trials",
    "--renderer-process-limit=1",
]

pytestmark = pytest.mark.slow


def _browser_or_why() -> tuple[str | None, str]:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return None, "the playwright package is not installed (pip install '.[test]')"
    path = os.environ.get(CHROMIUM_ENV) or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        return None, f"no Chromium: apt-get install chromium (Debian), or set {CHROMIUM_ENV} to a Chromium binary"
    return path, ""


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    path, why = _browser_or_why()
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the browser test: {why}")
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def site(redis_url: str) -> Iterator[tuple[str, Populated]]:
    """The folded data and one ``ldptel dashboard`` for the whole module: no test writes to Redis (each gets its
    own browser context: cookies, localStorage), so one setup serves them all. ``wide``, a metric registered
    through the storage API, which (unlike the CLI and POST /v1/metrics) does not check the default policy, is
    part of it (test_metric_list_and_boolean_share)."""
    r = redis_lib.Redis.from_url(redis_url)
    r.flushdb()
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("LDPTEL_REDIS_URL", redis_url)  # the in-process CLI (cli_json) reads the same Redis
            data = populate(r, days=DAYS, per_day=2000)
            populate_more(r, days=DAYS, per_day=2000)
            registry.create_metric(r, MetricSpec(name="wide", params=RrParams(epsilon=6.0)))
            with running_dashboard(redis_url, TOKEN) as base:
                yield base, data
    finally:
        r.flushdb()
        r.close()


def cli_json(*argv: str) -> Any:
    out, err = io.StringIO(), io.StringIO()
    assert main(list(argv), stdout=out, stderr=err) == 0, err.getvalue()
    return json.loads(out.getvalue())


_SESSION_COOKIES: dict[str, list[Any]] = {}  # dashboard base URL -> the cookies of one login through its form


def logged_in(chromium: Any, base: str, *, scheme: str = "light", login: bool = False) -> Any:
    """A page of a fresh browser context (no cookies but the session's, no localStorage) on /metrics/emoji.

    The first call for a dashboard (and every call with ``login``) logs in through the form, as a user does; later
    ones reuse that login's session cookie (the login page and its POST cost Chromium as much as a dashboard page;
    logins have their own tests below)."""
    context = chromium.new_context(viewport={"width": 1366, "height": 900}, color_scheme=scheme)
    page = context.new_page()
    if not login and base in _SESSION_COOKIES:
        context.add_cookies(_SESSION_COOKIES[base])
        show(page, f"{base}/metrics/emoji")
        return page
    page.goto(f"{base}/metrics/emoji")
    assert page.url.startswith(f"{base}/login?next=")  # the gate sends a browser to the login form
    page.fill("#token", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_selector("body[data-state=ready]")
    if not login:
        _SESSION_COOKIES[base] = context.cookies()
    return page


def show(page: Any, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-state=ready]")


def number(text: str) -> float:
    return float(text.replace(",", "").rstrip("%"))


def assert_shown(text: str, want: float, *, share: bool = False) -> None:
    """A count is shown with 1 decimal, a share as a percentage with 2: equal to the CLI's value to that digit."""
    got = number(text) / 100 if share else number(text)
    assert abs(got - want) <= (0.5e-4 if share else 0.05) + 1e-9, (text, want)


def table_rows(page: Any) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = page.eval_on_selector_all(
        "#rows tbody tr", "trs => trs.map(tr => Object.fromEntries([...tr.cells].map(td => [td.dataset.col, td.textContent])))"
    )
    return rows


def test_metric_page_shows_the_cli_numbers(chromium: Any, site: tuple[str, Populated]) -> None:
    base, data = site
    page = logged_in(chromium, base)
    candidates = list(data.candidates)
    query = "&".join(f"candidate={c}" for c in candidates)
    show(page, f"{base}/metrics/emoji?top=5&postprocess=norm-sub&from={DAYS[1]}&{query}")
    assert page.inner_text("#error") == ""
    args = [a for c in candidates for a in ("--candidate", c)] + ["--top", "5", "--postprocess", "norm-sub", "--from", DAYS[1]]
    want = cli_json("estimate", "emoji", *args, "--format", "json")
    shown = table_rows(page)
    assert [r["value"] for r in shown] == [r["value"] for r in want["rows"]] and len(shown) == 5
    for got, exp in zip(shown, want["rows"], strict=True):
        for col in ("estimate", "stderr", "ci_low", "ci_high", "adjusted"):
            assert_shown(got[col], exp[col])
        for col in ("frequency", "adjusted_frequency"):
            assert_shown(got[col], exp[col], share=True)
    assert number(page.inner_text("[data-summary=n] .big")) == want["n"]
    # the central ε beside the local ε, as the CLI's JSON says (its value and δ, or why it does not apply)
    central, c = page.inner_text("[data-summary=central]"), want["central"]
    assert "local ε" in central
    if c["applicable"]:
        assert number(page.inner_text("[data-summary=central] .big")) == pytest.approx(c["epsilon"], abs=1e-4)
        assert c["basis"] in central
    else:
        assert c["reason"] in central
    assert page.locator("#estimates-chart svg rect.bar").count() == 5
    assert page.locator("#estimates-chart svg path.marker").count() == 5  # post-processed values drawn

    # per day: one dot per (day, value), and each chart's JSON link returns exactly the CLI's document
    daily = cli_json("estimate", "emoji", *args, "--by-day", "--format", "json")
    assert page.locator("#series-chart svg circle").count() == len(daily["rows"]) == 5 * (len(DAYS) - 1)
    for link, doc in (("#estimates-json", want), ("#series-json", daily)):
        href = page.get_attribute(link, "href")
        assert page.request.get(f"{base}{href}").json() == doc
    day_tip = page.locator("#reports-chart svg rect title").first.text_content()  # each day's own central ε
    one = daily["daily"][0]
    assert f"{one['day']}: {one['n']:,} reports · central ε " in day_tip
    assert (f"{one['central']['epsilon']:.4f}".rstrip("0").rstrip(".") if one["central"]["applicable"]
            else one["central"]["reason"]) in day_tip
    first = daily["rows"][0]
    tip = page.locator("#series-chart svg circle title").first.text_content()
    assert f"{first['value']} on {first['day']}" in tip and f"{100 * first['frequency']:.2f}%" in tip
    page.check("input[name=scale][value=count]")
    tip = page.locator("#series-chart svg circle title").first.text_content()
    assert f"{first['estimate']:,.1f}" in tip

    # both estimators: each value's plain row, then its collision-corrected row, as the CLI prints them
    show(page, f"{base}/metrics/emoji?top=3&estimator=both&{query}")
    both = cli_json("estimate", "emoji", *[a for c in candidates for a in ("--candidate", c)], "--top", "3",
                    "--estimator", "both", "--format", "json")
    shown = table_rows(page)
    assert [(r["value"], r["estimator"]) for r in shown] == [(r["value"], r["estimator"]) for r in both["rows"]]
    for got, exp in zip(shown, both["rows"], strict=True):
        assert_shown(got["estimate"], exp["estimate"])
        assert_shown(got["ci_high"], exp["ci_high"])
    assert page.locator("#estimates-chart svg rect.bar.corrected").count() == 3


def test_metric_list_and_boolean_share(chromium: Any, site: tuple[str, Populated]) -> None:
    base, _ = site  # with ``wide``, registered above the default policy (the site fixture)
    page = logged_in(chromium, base)
    show(page, f"{base}/")
    mark = "[data-mark=above_default_policy]"  # issue 22 §3: devices with the default policy refuse it
    assert page.locator(f"#metrics tr[data-metric=wide] {mark}").inner_text() == "above default policy"
    assert "maximum 4" in page.get_attribute(f"#metrics tr[data-metric=wide] {mark}", "title")
    assert page.locator(f"#metrics tr[data-metric=emoji] {mark}").count() == 0
    for name in ("dark_mode", "emoji", "platform"):
        record = cli_json("metrics", "show", name)
        row = page.locator(f"#metrics tr[data-metric={name}]")
        assert float(row.locator("[data-col=effective_epsilon]").inner_text()) == pytest.approx(
            record["current"]["effective_epsilon"], abs=5e-5)
        last = cli_json("estimate", name, "--day", DAYS[-1], "--format", "json", "--candidate", "x") if name == "emoji" \
            else cli_json("estimate", name, "--day", DAYS[-1], "--format", "json")
        assert row.locator("[data-col=last_day]").inner_text() == f"{last['n']:,} on {DAYS[-1]}"
        assert row.locator("[data-col=lag]").inner_text() == "0"
    show(page, f"{base}/metrics/dark_mode?day={DAYS[0]}")
    # issue 22 §1: what repeated reports disclose, level and change times (rr's permanent randomized response)
    assert "when the value changes is not" in page.inner_text("[data-meta=longitudinal]")
    want = cli_json("estimate", "dark_mode", "--day", DAYS[0], "--format", "json")
    assert_shown(page.inner_text("[data-summary=proportion] .big"), want["proportion"]["estimate"], share=True)
    # both uncertainties, labelled: the chart note names the table's (randomization), a card the population interval
    assert "stderr: randomization" in page.inner_text("#estimates-note")
    population = page.inner_text("[data-summary=population]")
    assert "population" in population and "sampling of the reporting devices" in population
    for got, exp in zip(table_rows(page), want["rows"], strict=True):
        assert got["value"] == exp["value"]
        assert_shown(got["estimate"], exp["estimate"])


def cells(page: Any, table: str) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = page.eval_on_selector_all(
        f"{table} tbody tr", "trs => trs.map(tr => Object.fromEntries([...tr.cells].map(td => [td.dataset.col, td.textContent])))"
    )
    return rows


def assert_links(page: Any, base: str, links: dict[str, Any]) -> None:
    for link, doc in links.items():
        href = page.get_attribute(link, "href")
        assert page.request.get(f"{base}{href}").json() == doc, link


def test_mean_page_shows_the_cli_summaries(chromium: Any, site: tuple[str, Populated]) -> None:
    base, _ = site
    page = logged_in(chromium, base)
    show(page, f"{base}/metrics/load_ms?from={DAYS[1]}")
    assert page.inner_text("#error") == ""
    want = cli_json("estimate", "load_ms", "--from", DAYS[1], "--format", "json")
    for row in want["rows"]:  # mean, sum: each a card with its interval; count: exact, in reports (issue 31 §3)
        card = page.locator(f"[data-summary={row['value']}]")
        if row["value"] == "count":
            assert row["stderr"] == 0 and card.locator(".big").inner_text() == f"{int(row['estimate']):,} reports"
            assert "interval" not in card.locator(".small").inner_text() and "exact" in card.locator(".small").inner_text()
            continue
        assert card.locator(".label").inner_text() == f"{row['value']} · in the value's unit"
        assert_shown(card.locator(".big").inner_text(), row["estimate"])
        low, high = card.locator(".small").inner_text().split("interval ")[1].split(" · ")[0].split(" – ")
        assert_shown(low, row["ci_low"])
        assert_shown(high, row["ci_high"])
    assert page.inner_text("[data-summary=note] .small") == want["note"] and "clipped to [0, 5000]" in want["note"]
    assert page.locator("#estimates-card").is_hidden() and page.locator("#scale-toggle").is_hidden()
    assert [r["value"] for r in table_rows(page)] == ["mean", "sum", "count"] and "frequency" not in table_rows(page)[0]
    daily = cli_json("estimate", "load_ms", "--from", DAYS[1], "--by-day", "--format", "json")
    means = [r for r in daily["rows"] if r["value"] == "mean"]
    assert page.locator("#series-chart svg circle").count() == len(means) == len(DAYS) - 1  # the mean of each day
    assert f"{means[0]['estimate']:,.1f}" in page.locator("#series-chart svg circle title").first.text_content()
    assert_links(page, base, {"#series-json": daily})


def test_histogram_page_shows_buckets_and_percentiles(chromium: Any, site: tuple[str, Populated]) -> None:
    from playwright.sync_api import expect

    base, _ = site
    page = logged_in(chromium, base)
    show(page, f"{base}/metrics/load_hist?postprocess=norm-sub")  # p50, p90, p99 unless asked otherwise
    assert page.inner_text("#error") == ""
    args = ["--postprocess", "norm-sub", "--percentiles", "50,90,99"]
    want = cli_json("estimate", "load_hist", *args, "--format", "json")
    shown = cells(page, "#percentiles")
    assert [r["percentile"] for r in shown] == ["p50", "p90", "p99"]
    for got, exp in zip(shown, want["percentiles"], strict=True):
        for col in ("estimate", "ci_low", "ci_high"):
            assert_shown(got[col], exp[col])
    rows = table_rows(page)
    assert [r["value"] for r in rows] == [r["value"] for r in want["rows"]]  # every bucket, in order
    for got, exp in zip(rows, want["rows"], strict=True):
        for col in ("estimate", "ci_low", "ci_high", "adjusted"):
            assert_shown(got[col], exp[col])
    chart = page.locator("#estimates-chart svg")
    assert chart.locator("rect.bar").count() == chart.locator("path.marker").count() == len(want["rows"])
    assert chart.locator("line.pline").count() == 3 and chart.locator("text.plabel").all_text_contents() == ["p50", "p90", "p99"]
    daily = cli_json("estimate", "load_hist", *args, "--by-day", "--format", "json")
    assert page.locator("#series-chart svg circle").count() == 3 * len(DAYS)  # each day's percentiles
    assert_links(page, base, {"#estimates-json": want, "#percentiles-json": want, "#series-json": daily})

    # other levels: the form's percentiles field
    page.fill("#query input[name=percentiles]", "75, 95")
    page.click("#query button[type=submit]")
    expect(page.locator("#percentiles tbody tr")).to_have_count(2)  # the page's CSP allows no eval
    other = cli_json("estimate", "load_hist", "--postprocess", "norm-sub", "--percentiles", "75,95", "--format", "json")
    shown = cells(page, "#percentiles")
    assert [r["percentile"] for r in shown] == ["p75", "p95"]
    for got, exp in zip(shown, other["percentiles"], strict=True):
        assert_shown(got["estimate"], exp["estimate"])
    assert_links(page, base, {"#percentiles-json": other})


def test_discovery_page_shows_the_discovered_values(chromium: Any, site: tuple[str, Populated]) -> None:
    base, _ = site
    page = logged_in(chromium, base, scheme="dark")
    show(page, f"{base}/metrics/typed")
    assert page.inner_text("#error") == ""
    assert page.locator("#candidates-field").is_hidden()  # nothing to paste: the values are discovered
    want = cli_json("discover", "typed", "--format", "json")
    rows = table_rows(page)
    assert [r["value"] for r in rows] == [r["value"] for r in want["rows"]] and {"ok", "日本語", "😀"} <= {r["value"] for r in rows}
    for got, exp in zip(rows, want["rows"], strict=True):
        for col in ("estimate", "ci_low", "ci_high"):
            assert_shown(got[col], exp[col])
    stages = cells(page, "#stages")
    assert [int(s["examined"].replace(",", "")) for s in stages] == [s["examined"] for s in want["discovery"]["stages"]]
    assert number(page.inner_text("[data-summary=found] .big")) == want["discovery"]["found"]
    assert page.locator("#estimates-chart svg rect.bar").count() == len(want["rows"])
    found = [a for r in want["rows"] for a in ("--candidate", r["value"])]
    daily = cli_json("estimate", "typed", *found, "--by-day", "--format", "json")
    assert_links(page, base, {"#estimates-json": want, "#discovery-json": want, "#series-json": daily})


def test_errors_are_shown_and_dark_mode_applies(chromium: Any, site: tuple[str, Populated]) -> None:
    base, _ = site
    page = logged_in(chromium, base, scheme="dark")
    page.evaluate("localStorage.clear()")
    show(page, f"{base}/metrics/emoji?candidate=x&from={DAYS[-1]}&to={DAYS[0]}")  # a range that ends before it starts
    assert page.inner_text("#error").strip() != "" and page.locator("#empty-state").is_hidden()
    assert page.locator("#estimates-card").is_hidden()
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(20, 23, 28)"  # --bg of prefers-color-scheme: dark


def test_a_session_is_per_login_expires_and_ends_at_logout(chromium: Any, site: tuple[str, Populated]) -> None:
    """Issue 22 §4: each login its own random cookie with an expiry (8 h by default); after "Log out" the old
    cookie, replayed in another browser context, is refused; other sessions live on. Before: one HMAC of the
    token for every login, accepted forever, after logout too."""
    import time

    base, _ = site
    first = logged_in(chromium, base, login=True)  # two logins of their own: the first one is logged out below
    second = logged_in(chromium, base, login=True)
    (cookie,) = [c for c in first.context.cookies() if c["name"] == "ldptel_dashboard"]
    (other,) = [c for c in second.context.cookies() if c["name"] == "ldptel_dashboard"]
    assert cookie["value"] != other["value"] and TOKEN not in cookie["value"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and not cookie["secure"]  # plain http on loopback
    assert abs(cookie["expires"] - (time.time() + 8 * 3600)) < 300
    first.click("header form[action='/logout'] button")
    first.wait_for_url(f"{base}/login")
    replay = chromium.new_context().new_page()
    replay.context.add_cookies([cookie])
    replay.goto(f"{base}/metrics/emoji")
    assert replay.url.startswith(f"{base}/login?next=")  # the revoked session is not accepted
    second.goto(f"{base}/metrics/emoji")
    second.wait_for_selector("body[data-state=ready]")  # the other login still works


def test_failed_logins_are_limited(chromium: Any, site: tuple[str, Populated], redis_url: str) -> None:
    with running_dashboard(redis_url, TOKEN) as base:  # its own process: the limit it reaches would refuse the others
        _failed_logins_are_limited(chromium, base)


def _failed_logins_are_limited(chromium: Any, base: str) -> None:
    page = chromium.new_context().new_page()
    for _ in range(10):
        page.goto(f"{base}/login")
        page.fill("#token", "wrong-0123456789abcdef-ABCDEFGHIJ")
        page.click("button[type=submit]")
        assert "not the dashboard's token" in page.inner_text("#login-error")
    page.goto(f"{base}/login")
    page.fill("#token", TOKEN)  # the right token, from an address over its limit: refused like a wrong one
    page.click("button[type=submit]")
    assert "too many failed logins" in page.inner_text("body")
    assert not [c for c in page.context.cookies() if c["name"] == "ldptel_dashboard"]


# ------------------------------------------------------------------------------- issue 31 §3: rough edges
def test_a_sketch_page_without_candidates_explains_how_to_load_them(chromium: Any, site: tuple[str, Populated],
                                                                     tmp_path: Any) -> None:
    """It opened on a red "candidates must be a non-empty list … got None": now an empty state offers the shipped
    lists, a file, and the discovery metrics; loading one runs the query."""
    from ldptel.aggregator.dashboard.candidates import shipped_candidates

    base, data = site
    page = logged_in(chromium, base)  # a fresh browser context: no candidates stored for the metric
    show(page, f"{base}/metrics/emoji")
    assert page.inner_text("#error") == "" and page.locator("#empty-state").is_visible()
    assert page.locator("#estimates-card").is_hidden() and page.locator("#summary .stat").count() == 0
    lists = {c.name: c for c in shipped_candidates()}
    assert {"emoji", "words"} <= set(lists)
    page.wait_for_selector("#shipped-lists button[data-list=emoji]")  # the lists and the links fill in together
    assert page.locator("#discovery-links a").all_inner_texts() == ["typed"]  # the discovery metric of the fixture
    page.click("#shipped-lists button[data-list=emoji]")
    page.wait_for_selector("#estimates-card:not([hidden])")
    page.wait_for_selector("body[data-state=ready]")
    assert page.inner_text("#error") == "" and page.locator("#empty-state").is_hidden()
    assert page.input_value("textarea[name=candidates]").split("\n") == list(lists["emoji"].values)
    # a file: one value per line (a TSV's first column), comments skipped
    picked = [c for c in data.candidates[:3]]
    upload = tmp_path / "mine.tsv"
    upload.write_text("# my values\n" + "\n".join(f"{v}\t1" for v in picked) + "\n", encoding="utf-8")
    show(page, f"{base}/metrics/emoji")  # the stored candidates now run the query at once
    assert page.locator("#empty-state").is_hidden()
    page.fill("textarea[name=candidates]", "")
    page.click("#query button[type=submit]")
    page.wait_for_selector("#empty-state:not([hidden])")
    page.set_input_files("#candidates-file", str(upload))
    page.wait_for_selector("#table-card:not([hidden]) #rows tbody tr")
    assert page.input_value("textarea[name=candidates]").split("\n") == picked


def test_post_processing_default_names_what_was_used_and_fits(chromium: Any, site: tuple[str, Populated]) -> None:
    """The select read "default (norm-sub" (cut off) while the chart said "none": it names the default the
    query used, and its text fits the select."""
    base, data = site
    page = logged_in(chromium, base)
    query = "&".join(f"candidate={c}" for c in data.candidates[:3])
    fits = ("s => { const c = document.createElement('canvas').getContext('2d'); c.font = getComputedStyle(s).font;"
            " return c.measureText(s.options[s.selectedIndex].text).width + 24 <= s.clientWidth; }")
    for name, extra, used in (("emoji", query, "none"), ("load_hist", "", "norm-sub")):
        show(page, f"{base}/metrics/{name}?{extra}")
        assert page.inner_text("#error") == ""
        text = page.eval_on_selector("select[name=postprocess]", "s => s.options[s.selectedIndex].text")
        assert text == f"default ({used})" and f"post-processing: {used}" in page.inner_text("#estimates-note")
        assert page.eval_on_selector("select[name=postprocess]", fits), name


def test_the_overview_table_fits_a_1400px_window(chromium: Any, site: tuple[str, Populated]) -> None:
    """Days and lag were cut off (scrolled out of the card) at 1,400 px; and again with a metric above the
    default policy, whose second badge widened the status column (the ``wide`` metric of the site fixture)."""
    base, _ = site
    page = logged_in(chromium, base)
    page.set_viewport_size({"width": 1400, "height": 900})
    show(page, f"{base}/")
    wrap = page.locator("#metrics").locator("xpath=..")
    assert wrap.evaluate("w => w.scrollWidth <= w.clientWidth")
    right = wrap.bounding_box()["x"] + wrap.bounding_box()["width"]
    for col in ("lag", "last_day"):
        for box in (c.bounding_box() for c in page.locator(f"#metrics td[data-col={col}]").all()):
            assert box is not None and box["x"] + box["width"] <= right + 0.5, col
