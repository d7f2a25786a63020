"""The services the demo runs as real processes, and how it talks to them.

* the ingest service: gunicorn (gthread) when installed, else ``ldptel serve``, on a free loopback port,
  ready when ``/readyz`` answers (:func:`start_ingest`);
* the two metrics, created through the HTTP admin API and fetched back as an app would (:func:`create_metrics`);
* the fold worker, ``ldptel aggregate`` following the streams (:func:`start_worker`), and how many reports it
  has folded so far (:func:`folded_reports`).

Imports the server configuration (Flask, redis-py): loaded only once the demo's dependencies are checked.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ldptel.aggregator.cli.common import ENV_REDIS_URL
from ldptel.aggregator.demo.errors import DemoFailure
from ldptel.aggregator.demo.processes import Child, Children, free_port, log_tail
from ldptel.client.protocol.specs import MetricSpec
from ldptel.server.config import PREFIX as ENV_PREFIX
from ldptel.storage.registry import MetricRecord

if TYPE_CHECKING:
    import redis

CLI_MODULE = "ldptel.aggregator.cli"  # children run `python -m` this: the same interpreter and install
START_TIMEOUT = 30.0  # seconds for the ingest server to answer /readyz
START_ATTEMPTS = 3  # the probed port can be taken before the server binds it
HTTP_TIMEOUT = 5.0
GUNICORN_THREADS = 4
WORKER_RESCAN_SECONDS = 1  # the worker looks for the new metrics' shards this often


def service_env(*, redis_url: str, app_token: str, admin_token: str) -> dict[str, str]:
    """The children's environment: this one without the user's own ``LDPTEL_*`` settings, plus this run's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}  # never the user's own services
    env.update({
        ENV_REDIS_URL: redis_url,
        "LDPTEL_APP_TOKENS": app_token,
        "LDPTEL_ADMIN_TOKEN": admin_token,
        "LDPTEL_RATE_LIMIT": "off",  # the whole fleet shares one app token here
    })
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def http(
    method: str, url: str, *, token: str | None = None, body: object = None, timeout: float = HTTP_TIMEOUT
) -> tuple[int, object]:
    """One JSON request; returns the status and the decoded body (None if empty or not JSON)."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    req = urllib.request.Request(url, data=data, method=method)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, None


def _server_argv(kind: str, *, port: int, workers: int) -> tuple[str, list[str]]:
    if kind == "gunicorn":
        return "gunicorn", [
            sys.executable, "-m", "gunicorn",
            "--bind", f"127.0.0.1:{port}",
            "--workers", str(workers),
            "--worker-class", "gthread",
            "--threads", str(GUNICORN_THREADS),
            "--graceful-timeout", "3",
            "--log-level", "warning",
            "--access-logfile", "/dev/null",
            "--logger-class", "ldptel.server.gunicorn_logger.AnonymousLogger",
            "ldptel.server:create_app()",
        ]  # fmt: skip
    return "ldptel serve", [sys.executable, "-m", CLI_MODULE, "serve", "--host", "127.0.0.1", "--port", str(port)]


def start_ingest(children: Children, server: str, *, env: dict[str, str], logs: Path) -> tuple[Child, str, str]:
    """Start the ingest server (``server``: auto, gunicorn or werkzeug) and wait until it is ready; returns the
    child, its endpoint and a label for the status line."""
    kind = server
    if kind == "auto":
        kind = "gunicorn" if importlib.util.find_spec("gunicorn") is not None else "werkzeug"
    workers = max(1, min(4, (os.cpu_count() or 2) // 2))
    last = ""
    for _attempt in range(START_ATTEMPTS):
        port = free_port()
        label, argv = _server_argv(kind, port=port, workers=workers)
        child = children.start("ingest", argv, env=env, log_path=logs / "ingest.log")
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if child.proc.poll() is not None:
                break
            try:
                status, _ = http("GET", f"{endpoint}/readyz", timeout=1.0)
                if status == 200:
                    if kind == "gunicorn":
                        label = f"{label}, {workers} worker{'s' if workers > 1 else ''}"
                    return child, endpoint, label
            except OSError:
                pass
            time.sleep(0.1)
        children.stop(child)
        last = log_tail(child.log_path)
    raise DemoFailure(f"the ingest server did not start; its log ends with:\n{last}")


def create_metrics(endpoint: str, *, admin_token: str, app_token: str, specs: Sequence[MetricSpec]) -> tuple[MetricSpec, ...]:
    """Create the metrics through the admin API, then fetch them back as an app would (GET /v1/metrics/<name>)."""
    served = []
    for spec in specs:
        status, body = http("POST", f"{endpoint}/v1/metrics", token=admin_token, body=spec.to_dict())
        if status not in (200, 201):
            raise DemoFailure(f"creating metric {spec.name} failed: HTTP {status} {body}")
        status, body = http("GET", f"{endpoint}/v1/metrics/{spec.name}", token=app_token)
        if status != 200:
            raise DemoFailure(f"fetching metric {spec.name} failed: HTTP {status} {body}")
        served.append(MetricRecord.from_dict(body).current)
    return tuple(served)


DEMO_SHUFFLE_HOLD_SECONDS = 2.0  # the demo's few uploads would wait the production hold bound (docs/shuffle.md)


def start_worker(children: Children, *, redis_url: str, env: dict[str, str], logs: Path) -> Child:
    """``ldptel aggregate`` following every stream, quiet on its log."""
    return children.start(
        "aggregator",
        [sys.executable, "-m", CLI_MODULE, "aggregate", "--redis-url", redis_url,
         "--rescan", str(WORKER_RESCAN_SECONDS), "--no-progress", "--log-level", "warning",
         "--shuffle-hold", str(DEMO_SHUFFLE_HOLD_SECONDS)],
        env=env,
        log_path=logs / "aggregator.log",
    )  # fmt: skip


def folded_reports(r: redis.Redis, name: str, candidate: str | None) -> int:
    """Reports of ``name`` in its sketches so far (a sketch metric is asked for one ``candidate``)."""
    from ldptel.aggregator.query import EmptyRangeError, estimate_metric

    try:
        return estimate_metric(r, name, candidates=None if candidate is None else [candidate]).n
    except EmptyRangeError:
        return 0
