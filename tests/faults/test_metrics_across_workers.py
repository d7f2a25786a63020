"""/metrics under ``gunicorn -w 2`` (deploy/gunicorn.conf.py): every scrape is the total over the workers, and
it never goes backwards, also when a worker is killed and replaced (prometheus_client's multiprocess mode)."""

from __future__ import annotations

import http.client
import os
import re
import signal
from pathlib import Path

import numpy as np
import pytest

from ldptel.storage.embedded import EmbeddedRedis
from tests.faults.slow import create_metric
from tests.faults.stack import gunicorn, worker_pids
from tests.server.srv_helpers import OCTET, cms_spec, make_batch
from tests.server.test_server_http import ADMIN_TOKEN, APP_TOKEN
from tests.wait import wait_until

pytestmark = pytest.mark.slow


def _request(port: int, method: str, path: str, body: bytes | None = None, token: str = APP_TOKEN) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)  # a new connection: any worker may answer
    try:
        conn.request(method, path, body=body, headers={"Authorization": f"Bearer {token}", "Content-Type": OCTET})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _accepted(port: int, metric: str) -> float:
    status, body = _request(port, "GET", "/metrics", token=ADMIN_TOKEN)
    assert status == 200
    match = re.search(rf'^ldptel_reports_accepted_total{{metric="{re.escape(metric)}"}} (\S+)$', body.decode(), re.M)
    return float(match.group(1)) if match else 0.0


def test_metrics_are_the_sum_over_workers_and_never_go_backwards(tmp_path: Path) -> None:
    spec = cms_spec()
    rng = np.random.default_rng(7)
    with EmbeddedRedis(data_dir=tmp_path / "redis") as redis_server, \
            gunicorn(redis_server.url, tmp_path / "gunicorn.log", workers=2) as (port, master):
        create_metric(port, spec)
        sent, seen = 0, 0.0
        for round_ in range(3):
            for _ in range(20):
                status, _ = _request(port, "POST", "/v1/reports", make_batch(spec, 10, rng)[0])
                assert status == 202
                sent += 10
            scrapes = [_accepted(port, spec.name) for _ in range(10)]
            assert scrapes == [float(sent)] * 10, (round_, sent, scrapes)
            assert min(scrapes) >= seen
            seen = max(scrapes)
            if round_ == 0:  # a worker dies; its replacement starts at zero, the totals must not
                os.kill(worker_pids(master.pid)[0], signal.SIGKILL)
                wait_until(lambda: len(worker_pids(master.pid)) >= 2, what="gunicorn to replace the killed worker")


def test_a_scrape_leaves_out_a_worker_file_that_is_not_sized_yet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: a worker makes its counter file empty and sizes it a moment later (prometheus_client's
    MmapedDict: open, then truncate). A scrape that listed the file in between raised struct.error reading it and
    GET /metrics answered 500 (the test above, once in a loaded full run). Now that file holds no value yet and the
    scrape is the sum of the others."""
    import json

    from prometheus_client.mmap_dict import MmapedDict

    from ldptel.server.prom import MULTIPROC_ENV, Telemetry

    telemetry = Telemetry()  # made before the variable is set: this process keeps its own counters
    worker = MmapedDict(str(tmp_path / "counter_101.db"))  # a worker that has counted 30 reports
    worker.write_value(json.dumps(["ldptel_reports_accepted", "ldptel_reports_accepted_total", {"metric": "m"},
                                   "Reports appended to Redis (duplicates excluded)."]), 30.0, 0.0)
    worker.close()
    (tmp_path / "counter_102.db").touch()  # another one, caught between creating its file and sizing it
    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))
    text = telemetry.render()
    assert re.search(r'^ldptel_reports_accepted_total\{metric="m"\} 30\.0$', text, re.M), text
