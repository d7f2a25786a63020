"""The shipped deployment on loopback: gunicorn with deploy/gunicorn.conf.py, nginx with deploy/nginx.conf.

nginx runs the shipped file with only its ports and paths substituted (:func:`nginx_conf`). Tests that need
nginx call :func:`nginx_binary`: a CI run (``CI=true``) without nginx fails, elsewhere the test is skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.server.test_server_http import _env, _free_port, _stop, _wait_http

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NGINX_CANDIDATES = ("/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx")

__all__ = ["DEPLOY", "ROOT", "deploy_nginx_conf", "free_port", "gunicorn", "nginx", "nginx_binary", "nginx_conf",
           "worker_pids"]

free_port = _free_port


def worker_pids(master: int) -> list[int]:
    """The live child processes of ``master`` (gunicorn's workers; an embedded Redis is not one when a URL is given)."""
    try:
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    except OSError:
        return []
    return [int(pid) for pid in children]


def nginx_binary() -> str:
    found = shutil.which("nginx") or next((p for p in NGINX_CANDIDATES if os.access(p, os.X_OK)), None)
    if found is None:
        message = "nginx is not installed (.ci/run installs it with apt-get: `apt-get install nginx`)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def nginx_conf(*, listen: int, upstream: int, workdir: Path) -> str:
    """deploy/nginx.conf with the listening port, the upstream address and the pid/temp paths substituted."""
    return deploy_nginx_conf("nginx.conf", {"listen 8080;": f"listen 127.0.0.1:{listen};",
                                            "server ingest:8000;": f"server 127.0.0.1:{upstream};"}, workdir=workdir)


def deploy_nginx_conf(name: str, ports: dict[str, str], *, workdir: Path) -> str:
    """deploy/``name`` with ``ports`` (its listen/upstream lines → loopback test ports) and its pid and temp paths
    (→ ``workdir``) substituted; each text replaced must still be in the file."""
    text = (DEPLOY / name).read_text()
    substitutions = {**ports, "pid /tmp/ldptel-nginx.pid;": f"pid {workdir}/nginx.pid;",
                     "/tmp/ldptel-nginx-": f"{workdir}/tmp/"}
    for old, new in substitutions.items():
        assert old in text, f"deploy/{name} no longer contains {old!r}: update the test that runs it"
        text = text.replace(old, new)
    if os.geteuid() == 0:  # nginx's workers drop to `nobody`, which must reach the temp directories
        text = "user root;\n" + text
    return text


@contextmanager
def gunicorn(redis_url: str, log: Path, *, port: int | None = None, workers: int | None = None,
             extra_env: dict[str, str] | None = None) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """gunicorn with the shipped config (its worker count unless ``workers``), on loopback."""
    port = port or _free_port()
    cmd = [sys.executable, "-m", "gunicorn", "-c", str(DEPLOY / "gunicorn.conf.py"), "-b", f"127.0.0.1:{port}"]
    if workers is not None:
        cmd += ["-w", str(workers)]
    # A private Prometheus directory: a master killed by a test cannot remove the one it would create in /tmp.
    env = _env(redis_url) | {"PROMETHEUS_MULTIPROC_DIR": str(log.parent / f"prometheus-{port}")} | (extra_env or {})
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        _wait_http(port, proc, log)
        yield port, proc
    finally:
        _stop(proc)


@contextmanager
def nginx(upstream: int, workdir: Path) -> Iterator[tuple[int, Path]]:
    """nginx with the shipped config in front of ``upstream``; yields its port and its log (stdout + stderr)."""
    binary = nginx_binary()
    port = _free_port()
    (workdir / "tmp").mkdir(parents=True, exist_ok=True)
    conf = workdir / "nginx.conf"
    conf.write_text(nginx_conf(listen=port, upstream=upstream, workdir=workdir))
    log = workdir / "nginx.log"
    with log.open("ab") as out:
        proc = subprocess.Popen([binary, "-e", "stderr", "-p", str(workdir), "-c", str(conf), "-g", "daemon off;"],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_http(port, proc, log)  # type: ignore[arg-type]
        yield port, log
    finally:
        _stop(proc)  # type: ignore[arg-type]
