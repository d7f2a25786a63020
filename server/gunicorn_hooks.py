"""Gunicorn server hooks used by ``deploy/gunicorn.conf.py``.

``on_starting`` runs once in the master before any worker forks: it validates the configuration (a missing
token stops gunicorn at once, not in every worker) and, when ``LDPTEL_REDIS_URL`` is unset, starts one
embedded Redis and exports its URL, so every worker (each calls ``create_app()``) writes to the same server.
It also prepares Prometheus's multiprocess mode (:mod:`ldptel.server.prom`): ``PROMETHEUS_MULTIPROC_DIR``
(a fresh private directory unless set; a given one is emptied, since files of a previous run would add to
this run's counters) is exported before any worker imports ``prometheus_client``. ``child_exit`` tells
prometheus_client a worker is gone (its counter files stay: they are part of the totals); ``on_exit``
removes a directory ``on_starting`` created.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ldptel.server.config import ServerConfig
from ldptel.storage.embedded import shared_embedded, stop_shared_embedded

__all__ = ["child_exit", "on_exit", "on_starting"]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # = ldptel.server.prom.MULTIPROC_ENV (not imported: see above)
_CREATED_DIR = "LDPTEL_PROMETHEUS_DIR_CREATED"


def _prepare_multiproc_dir() -> None:
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        directory = Path(given)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.db"):
            stale.unlink()
    else:
        os.environ[MULTIPROC_ENV] = tempfile.mkdtemp(prefix="ldptel-prometheus-")
        os.environ[_CREATED_DIR] = os.environ[MULTIPROC_ENV]


def on_starting(server: Any) -> None:
    _prepare_multiproc_dir()
    config = ServerConfig.from_env()
    if config.redis_url is None:
        embedded = shared_embedded(data_dir=config.data_dir)
        os.environ["LDPTEL_REDIS_URL"] = embedded.url
        server.log.info("ldptel: LDPTEL_REDIS_URL unset, started embedded Redis at %s", embedded.url)


def child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def on_exit(server: Any) -> None:
    stop_shared_embedded()
    created = os.environ.get(_CREATED_DIR)
    if created and created == os.environ.get(MULTIPROC_ENV):
        shutil.rmtree(created, ignore_errors=True)
