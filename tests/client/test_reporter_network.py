"""The Reporter against real servers that misbehave on the network: one that closes idle keep-alive
connections (gunicorn with a short ``keepalive``), one that accepts connections and never answers."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib

from ldptel.client.sdk.reporter import Reporter, UploadError
from ldptel.storage.embedded import EmbeddedRedis
from ldptel.storage.registry import create_metric
from tests.client.conftest import OPEN_POLICY, FakeClock, LiveServer
from tests.client.test_reporter import cms
from tests.server.test_server_http import APP_TOKEN, ROOT, _env, _free_port, _stop, _wait_http

KEEPALIVE = 1  # seconds gunicorn keeps an idle connection open
REPORT_BOUND = 0.05  # seconds: report() never waits on the network (a generous bound for a loaded machine)


@pytest.fixture
def short_keepalive_gunicorn(tmp_path: Path) -> Iterator[tuple[str, redis_lib.Redis]]:
    """deploy/gunicorn.conf.py with ``--keep-alive 1`` and one worker, on a private embedded Redis."""
    with EmbeddedRedis(data_dir=tmp_path / "redis") as server:
        port = _free_port()
        log = tmp_path / "gunicorn.log"
        cmd = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py"),
               "-w", "1", "--keep-alive", str(KEEPALIVE), "-b", f"127.0.0.1:{port}"]
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, env=_env(server.url), stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        client = redis_lib.Redis.from_url(server.url)
        try:
            _wait_http(port, proc, log)
            yield f"http://127.0.0.1:{port}", client
        finally:
            client.close()
            _stop(proc)
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


@pytest.mark.slow
def test_connections_the_server_closed_while_idle_are_replaced_without_an_error(
        short_keepalive_gunicorn: tuple[str, redis_lib.Redis], tmp_path: Path) -> None:
    url, redis = short_keepalive_gunicorn
    for name in ("idle.a", "idle.b"):
        create_metric(redis, cms(name))
    errors: list[UploadError] = []
    rep = Reporter(url, APP_TOKEN, tmp_path / "device", start=False, on_error=errors.append, metrics=["idle.a"],
                   policy=OPEN_POLICY)
    assert rep.wait_for_specs(10)
    assert rep.report("idle.a", "x").queued
    assert rep.flush(timeout=10)  # the connection is now kept alive by both ends
    time.sleep(KEEPALIVE + 1.0)  # gunicorn closes it meanwhile
    assert rep.report("idle.b", "y").status == "no_spec"  # unknown yet: fetched in the background
    assert rep.wait_for_specs(10)  # the spec fetch went out on a fresh connection
    assert rep.report("idle.b", "y").queued
    assert rep.flush(timeout=10)
    time.sleep(KEEPALIVE + 1.0)
    for i in range(3):
        assert rep.report("idle.a", f"v{i}").queued
    assert rep.flush(timeout=10)  # the upload too
    assert errors == []
    st = rep.stats()
    assert (st.delivered, st.retries, st.pending, st.no_spec) == (5, 0, 0, 1)
    rep.close()


def test_report_never_waits_on_a_silent_server_and_succeeds_once_the_spec_arrives(
        live: LiveServer, app_token: str, tmp_path: Path, clock: FakeClock) -> None:
    live.create(cms())
    live.stop()
    silent = socket.socket()  # the kernel accepts connections; nothing ever answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    port = silent.getsockname()[1]
    errors: list[UploadError] = []
    rep = Reporter(f"http://127.0.0.1:{port}", app_token, tmp_path, clock=clock, timeout=1.0, flush_interval=3600,
                   on_error=errors.append, policy=OPEN_POLICY)
    try:
        for value in ("a", "b", "c"):  # the first requests the spec; the others come while its fetch hangs
            t0 = time.perf_counter()
            res = rep.report("app.page", value)
            assert time.perf_counter() - t0 < REPORT_BOUND
            assert res.status == "no_spec" and res.report is None
        assert not rep.wait_for_specs(10)  # the fetch timed out
        assert [e.metric for e in errors] == ["app.page"] and rep.budget_remaining("app.page") is None
        silent.close()
        live.port = port
        live.start()  # the server answers on the same port now
        assert rep.report("app.page", "d").status == "no_spec"  # a failed fetch is not retried for a minute
        clock.t += 61
        assert rep.report("app.page", "e").status == "no_spec"  # requested again
        assert rep.wait_for_specs(10)
        assert rep.report("app.page", "f").queued
        assert rep.flush(timeout=10)
        assert live.delivered("app.page")["total"] == 1  # nothing reported before the spec was known was kept
        assert rep.stats().no_spec == 5
    finally:
        rep.close()
        silent.close()


def test_declared_metrics_are_fetched_at_start_up(live: LiveServer, app_token: str, tmp_path: Path) -> None:
    live.create(cms("declared.a"))
    live.create(cms("declared.b"))
    with Reporter(live.url, app_token, tmp_path, flush_interval=3600, metrics=["declared.a", "declared.b"],
                  policy=OPEN_POLICY) as rep:
        assert rep.wait_for_specs(10)
        assert rep.report("declared.a", "x").queued and rep.report("declared.b", "y").queued
        assert rep.stats().no_spec == 0
        assert rep.flush(timeout=10)
    with Reporter(live.url, app_token, tmp_path, start=False, metrics=["declared.nope"], policy=OPEN_POLICY) as rep:
        assert not rep.wait_for_specs(10)  # no such metric: said, not waited for forever
        assert rep.report("declared.a", "z").queued  # the cached spec is used at once
