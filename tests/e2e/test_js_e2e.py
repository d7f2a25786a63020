"""The TypeScript SDK end to end: Node devices and a headless Chromium page against real gunicorn ingest and
Redis; ``ldptel aggregate --once`` folds; ``ldptel estimate`` covers the truth.

* 100 Node devices (one FileStore namespace each) fetch their specs, report three metrics while the ingest is
  unreachable (an offline period: everything stays queued on disk), then are reopened (a restart) and deliver.
* 100 browser devices (one IndexedDB namespace each; ``LDPTEL_JS_BROWSER_DEVICES=1000`` for the 1,000-device run
  of issue 27: the same checks, whose tolerances are the estimates' own standard errors, so they hold at either
  n) in one page of a persistent Chromium profile, served from an origin the ingest's CORS allow-list names (real
  preflights): they report and commit, go offline (uploads fail), the page reloads mid-queue (the queue and the
  ledgers survive: a second report the same day is refused), a report inside the ≤ 1 s commit window is lost with
  its spend while a committed one survives, and back online every device delivers; a page that becomes hidden
  flushes by itself (fetch keepalive).
* Every report is counted once: the folded n equals the reports queued, and each estimate (cms counts, rr
  proportion, mean) of each SDK's own metrics (node.* and web.*) lies within z = 7 standard errors of the truth
  (the comment at NODE_DEVICES says why 7).
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ldptel.aggregator.cli.entry import main as cli_main
from ldptel.storage.embedded import EmbeddedRedis
from tests.js_sdk import JS, build, run_script
from tests.server.test_server_http import _free_port, _stop, _wait_http
from tests.stats import assert_close_normal

ROOT = Path(__file__).resolve().parents[2]
APP = "js-e2e-app-token-0123456789abcdefghij"
ADMIN = "js-e2e-admin-token-0123456789abcdefgh"
NODE_DEVICES = 100
# Every check below is exact (counts of queued, pending, delivered, refused reports: independent of n) or a z = 7
# band from the estimate's own standard error. Each estimate is a sum over n = 100 independent reports: the Node
# devices' node.* metrics and the browser devices' web.* ones are separate, so a fault of one SDK cannot hide in
# the other's reports. Each report lies within M of its mean: M/sd ≤ 3.1 (rr at ε = 2, cms at ε = 4: a debiased
# bit) and ≤ 3.3 (the dhm mean at ε = 2), sd the smallest per-report standard deviation. Bennett's inequality
# bounds a false failure by 2·exp(−(V/M²)·h(zM/√V)), h(u) = (1+u)·ln(1+u) − u, V ≥ n·sd²: at n = 100 and z = 7
# that is ≤ 5.2e-7 per check, ≤ 4.2e-6 for the run's 8 checks (z = 6 would prove only 1.7e-5 per check, 1.3e-4 per
# run; the pooled 500 of before had 1.3e-6 per check at z = 6); the exact tail of the rr count (a sum of two
# binomials) is far smaller. Power: all of one SDK's apple reports lost moves its estimate by n/2 = 50, 11 of its
# standard errors (≈ 0.43·√n): 4 beyond the band (missed with probability < 1e-4 even then).
Z = 7.0
BROWSER_DEVICES = int(os.environ.get("LDPTEL_JS_BROWSER_DEVICES", "100"))
pytestmark = pytest.mark.slow

SPECS = [  # node.* for the Node devices, web.* for the browser devices: each SDK's estimates are checked on their own
    spec
    for sdk in ("node", "web")
    for spec in (
        {"name": f"{sdk}.pages", "reports_per_day": 1, "params": {"mechanism": "cms", "epsilon": 4.0, "k": 16, "m": 256}},
        {"name": f"{sdk}.flag", "reports_per_day": 1, "params": {"mechanism": "rr", "epsilon": 2.0}},
        {"name": f"{sdk}.latency", "reports_per_day": 1,
         "params": {"mechanism": "mean", "epsilon": 2.0, "lo": 0.0, "hi": 100.0}},
    )
]


def values(i: int) -> tuple[str, bool, float]:
    page = "apple" if i % 2 == 0 else "pear" if i % 4 == 1 else f"page-{i}"
    return page, i % 10 < 3, float((i % 7) * 10)


def _request(port: int, method: str, path: str, body: dict[str, Any]) -> int:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=json.dumps(body).encode(),
                     headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


@pytest.fixture(scope="module")
def ingest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int, EmbeddedRedis]]:
    tmp = tmp_path_factory.mktemp("js-e2e")
    build()
    bundle = run_script("bundle")  # build/ldptel.min.js, the page's script (esbuild: ~0.1 s; fresh when run alone)
    assert bundle.returncode == 0, bundle.stdout + bundle.stderr
    with EmbeddedRedis(data_dir=tmp / "redis") as server:
        port, static_port = _free_port(), _free_port()
        log = tmp / "gunicorn.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LDPTEL_")}
        env.update(LDPTEL_APP_TOKENS=APP, LDPTEL_ADMIN_TOKEN=ADMIN, LDPTEL_REDIS_URL=server.url, LDPTEL_RATE_LIMIT="off",
                   LDPTEL_AUTH_FAILURE_LIMIT="off", LDPTEL_ACCESS_LOG="", LDPTEL_CORS_ORIGINS=f"http://127.0.0.1:{static_port}")
        # one worker (8 threads) serves these devices, which run one at a time; several workers sharing one ingest
        # are tests/server's subject (each more would only import the app again)
        cmd = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py"), "-w", "1", "-b",
               f"127.0.0.1:{port}"]
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            _wait_http(port, proc, log)
            for spec in SPECS:
                assert _request(port, "POST", "/v1/metrics", spec) in (200, 201)
            yield port, static_port, server
        finally:
            _stop(proc)
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


def _node(*args: str, timeout: float = 900) -> dict[str, Any]:
    res = subprocess.run(["node", *args], cwd=JS, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"node {args[0]} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def _cli(*argv: str) -> str:
    """``ldptel ARGV...`` through the CLI's entry point in this process (a Python start per command would only
    repeat the imports; estimate sets up no logging, signals or threads); its stdout."""
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(list(argv), stdout=out, stderr=err)
    assert code == 0, f"ldptel {' '.join(argv)} exited {code}:\n{err.getvalue()[-3000:]}"
    return out.getvalue()


def _estimate(server: EmbeddedRedis, metric: str, *extra: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(_cli("estimate", metric, "--format", "json", "--redis-url", server.url, *extra))
    return doc


def _rows(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rows = doc.get("rows") or doc.get("estimates") or doc.get("results")
    assert isinstance(rows, list), sorted(doc)
    return {str(r.get("value", r.get("label"))): r for r in rows}


@pytest.fixture
def offline_endpoint() -> Iterator[str]:
    """A loopback port held bound but not listening: every connection to it is refused (the network is down), and
    no other process can take the port while the test runs."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def _check_estimates(server: EmbeddedRedis, sdk: str, n: int, extra_true: int = 0) -> None:
    """``ldptel estimate`` of one SDK's three metrics covers the truth of devices 0..n−1 (+ ``extra_true`` reports
    of True to the flag); the mean's count is exact."""
    truth = [values(i) for i in range(n)]
    rows = _rows(_estimate(server, f"{sdk}.pages", "--candidate", "apple", "--candidate", "pear"))
    for page in ("apple", "pear"):
        want = sum(1 for t in truth if t[0] == page)
        assert_close_normal(float(rows[page]["estimate"]), want, float(rows[page]["stderr"]), n=n, z=Z,
                            what=f"{sdk} cms {page}")
    flag = _rows(_estimate(server, f"{sdk}.flag"))
    want_true = sum(1 for t in truth if t[1]) + extra_true
    assert_close_normal(float(flag["true"]["estimate"]), want_true, float(flag["true"]["stderr"]), n=n + extra_true,
                        z=Z, what=f"{sdk} rr true")
    lat = _rows(_estimate(server, f"{sdk}.latency"))
    assert_close_normal(float(lat["mean"]["estimate"]), sum(t[2] for t in truth) / n, float(lat["mean"]["stderr"]), n=n,
                        z=Z, what=f"{sdk} mean")
    assert int(float(lat["count"]["estimate"])) == n  # every report counted once: n is exact


def test_node_and_browser_devices_end_to_end(ingest: tuple[int, int, EmbeddedRedis], offline_endpoint: str,
                                             tmp_path: Path) -> None:
    port, static_port, server = ingest
    endpoint = f"http://127.0.0.1:{port}"
    devs = str(tmp_path / "node-devices")
    script = str(JS / "dist" / "test" / "e2e" / "node_devices.js")
    _node(script, "specs", endpoint, APP, devs, str(NODE_DEVICES))
    off = _node(script, "offline", offline_endpoint, APP, devs, str(NODE_DEVICES))
    assert off["statuses"] == {"queued": 3 * NODE_DEVICES}, off
    assert off["pending"] == 3 * NODE_DEVICES and off["delivered"] == 0, off
    on = _node(script, "online", endpoint, APP, devs, str(NODE_DEVICES))
    assert on["delivered"] == 3 * NODE_DEVICES and on["pending"] == 0, on

    b = _node(str(JS / "dist" / "test" / "e2e" / "browser.js"), endpoint, APP, str(BROWSER_DEVICES),
              str(tmp_path / "chromium-profile"), str(static_port), offline_endpoint, timeout=1800)
    n_b = BROWSER_DEVICES
    assert b["report"] == {"queued": 3 * n_b}, b["report"]
    assert b["offline"] == {"pending": 3 * n_b, "delivered": 0}, b["offline"]
    assert b["after_reload"] == {"pending": 3 * n_b, "statuses": {"budget_exceeded": n_b}}, b["after_reload"]
    assert b["window"] == {"window-lost": {"pending": 0, "remaining": 1}, "window-kept": {"pending": 1, "remaining": 0}}, b["window"]
    assert b["online"] == {"pending": 0, "delivered": 3 * n_b}, b["online"]
    assert b["lifecycle"] == {"status": "queued", "delivered": 1}, b["lifecycle"]  # hidden page: keepalive flush

    # aggregate as its own process: in this one it would leave the "ldptel.aggregator" logger set up for its stderr
    # (not propagating), which a later caplog test in this xdist worker would not see through
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LDPTEL_")}, "LDPTEL_REDIS_URL": server.url}
    res = subprocess.run([sys.executable, "-m", "ldptel.aggregator.cli", "aggregate", "--once", "--no-progress"],
                         env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    _check_estimates(server, "node", NODE_DEVICES)
    _check_estimates(server, "web", n_b, extra_true=1)  # + the lifecycle device's report of True


def test_readme_example_runs_verbatim(ingest: tuple[int, int, EmbeddedRedis], tmp_path: Path) -> None:
    """The docs' "Embedding in a web or Node app" example, copied as is, queues and delivers a report."""
    port, _, server = ingest
    text = (ROOT / "docs" / "embedding-web.md").read_text()
    start = text.index("<!-- js-example")
    code = text[text.index("```js\n", start) + 6: text.index("```", text.index("```js\n", start) + 6)]
    assert len(code.strip().splitlines()) <= 15
    spec = {"name": "app.page", "reports_per_day": 1, "params": {"mechanism": "cms", "epsilon": 4.0, "k": 4, "m": 64}}
    assert _request(port, "POST", "/v1/metrics", spec) in (200, 201)
    (tmp_path / "node_modules" / "@ldptel").mkdir(parents=True)
    (tmp_path / "node_modules" / "@ldptel" / "client").symlink_to(JS, target_is_directory=True)
    (tmp_path / "example.mjs").write_text(code)
    env = {**os.environ, "LDPTEL_URL": f"http://127.0.0.1:{port}", "LDPTEL_APP_TOKEN": APP}
    res = subprocess.run(["node", "example.mjs"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "queued"
    r = server.client()
    try:
        entries = sum(r.xlen(key) for key in r.scan_iter("ldp:v1:{app.page:*}:held"))
    finally:
        r.close()
    assert entries == 1  # delivered by close(), once
    assert (tmp_path / "ldptel-state" / "state.json").exists()
