"""Issue 29, on-device aggregation end to end: ``ldptel metrics create`` (CLI) → devices calling ``Reporter.count()``
→ real gunicorn ingest → embedded Redis → ``ldptel aggregate --once`` → ``ldptel estimate --json``.

The server files a report under the UTC day it arrives on, so the devices' clocks put their events on the days
before today (yesterday for event-count, the previous 7-day window for unique-devices) and their release on today;
``ldptel estimate --day <a day of the described period>`` reads today's reports. Each device is its own Reporter
and storage directory. The default device policy is asked at creation: a unique-devices spec whose lifetime
2·ε∞ is past it is refused.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis as redis_lib

from ldptel.client.sdk.reporter import Reporter
from ldptel.storage.embedded import EmbeddedRedis
from tests.aggregator.agg_helpers import ldptel
from tests.server.test_server_http import APP_TOKEN, ROOT, _env, _free_port, _stop, _wait_http
from tests.stats import assert_close_normal

DAY = 86_400
pytestmark = pytest.mark.slow


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(ingest URL, Redis URL): gunicorn with deploy/gunicorn.conf.py (2 workers) on a private embedded Redis."""
    with EmbeddedRedis(data_dir=tmp_path / "redis") as server:
        port = _free_port()
        log = tmp_path / "gunicorn.log"
        cmd = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py"), "-w", "2",
               "-b", f"127.0.0.1:{port}"]
        env = {**_env(server.url), "LDPTEL_REGISTRY_TTL": "0"}
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            _wait_http(port, proc, log)
            yield f"http://127.0.0.1:{port}", server.url
        finally:
            _stop(proc)
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


def _cli(*args: str, redis_url: str) -> str:
    proc = ldptel(*args, redis_url=redis_url)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_event_count_and_unique_devices_through_gunicorn_redis_and_the_cli(stack: tuple[str, str], tmp_path: Path) -> None:
    url, redis_url = stack
    refused = ldptel("metrics", "create", "u7.strong", "--mechanism", "unique-devices", "--window-days", "7",
                     "--epsilon", "4", redis_url=redis_url)
    assert refused.returncode != 0 and "longitudinal_epsilon" in refused.stderr  # 2·ε∞ = 9.39 > the default 8
    _cli("metrics", "create", "opens", "--mechanism", "event-count", "--hi", "20", "--epsilon", "2", redis_url=redis_url)
    _cli("metrics", "create", "weekly", "--mechanism", "unique-devices", "--window-days", "7", "--epsilon", "2",
         redis_url=redis_url)

    today = int(time.time() // DAY)
    week_start = (today // 7 - 1) * 7  # the 7-day window before today's
    devices = 60
    rng = np.random.default_rng(2929)
    opens = rng.poisson(5.0, devices) + 1  # events of each device yesterday (≥ 1: every device has a tally)
    active = rng.random(devices) < 0.4  # active in last week's window
    for i in range(devices):
        clock = [float((week_start - 1) * DAY + 3600)]
        with Reporter(url, APP_TOKEN, tmp_path / f"device{i}", metrics=["opens", "weekly"], start=False,
                      clock=lambda: clock[0]) as rep:  # noqa: B023 - used within the iteration
            assert rep.wait_for_specs(10)
            if active[i]:  # its tally starts in the window (nothing to report for the one before)
                clock[0] = float((week_start + i % 7) * DAY + 7200)
                assert rep.count("weekly", 2).status == "counted"
            else:  # counted the day before the window, never in it: it reports "no" for the window
                assert rep.count("weekly").status == "counted"
            clock[0] = float((today - 1) * DAY + 60)
            assert rep.count("opens", int(opens[i])).status == "counted"
            clock[0] = float(today * DAY + 60)  # today: both periods have ended
            assert rep.flush(timeout=30)
            assert rep.stats().delivered == 2, rep.stats()
    _cli("aggregate", "--once", redis_url=redis_url)

    yesterday = (dt.date(1970, 1, 1) + dt.timedelta(days=today - 1)).isoformat()
    ev = json.loads(_cli("estimate", "opens", "--day", yesterday, "--format", "json", redis_url=redis_url))
    rows = {row["value"]: row for row in ev["rows"]}
    assert ev["n"] == devices and ev["kind"] == "summary"
    truth = np.clip(opens, 0, 20)
    assert_close_normal(rows["mean"]["estimate"], float(truth.mean()), rows["mean"]["stderr"], n=devices, what="mean")
    assert_close_normal(rows["sum"]["estimate"], float(truth.sum()), rows["sum"]["stderr"], n=devices, what="total")
    assert rows["sum"]["ci_low"] < rows["sum"]["estimate"] < rows["sum"]["ci_high"]
    assert f"describe {yesterday}..{yesterday}" in ev["note"]

    a_day_of_last_week = (dt.date(1970, 1, 1) + dt.timedelta(days=week_start + 3)).isoformat()
    uq = json.loads(_cli("estimate", "weekly", "--day", a_day_of_last_week, "--format", "json", redis_url=redis_url))
    assert uq["n"] == devices
    true_row = next(row for row in uq["rows"] if row["value"] == "active")
    assert_close_normal(true_row["estimate"], float(active.sum()), true_row["stderr"], n=devices, what="unique devices")
    assert true_row["ci_low"] < true_row["estimate"] < true_row["ci_high"]
    assert "among the n devices that sent a report" in uq["note"]
    table = _cli("estimate", "weekly", "--day", a_day_of_last_week, redis_url=redis_url)
    assert "active" in table and "inactive" in table
    r = redis_lib.Redis.from_url(redis_url)
    try:
        assert r.ping()
    finally:
        r.close()
