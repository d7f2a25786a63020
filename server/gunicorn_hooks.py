"""Gunicorn server hooks used by ``deploy/gunicorn.conf.py``.

``on_starting`` runs once in the master before any worker forks: it validates the configuration (a missing
or bad setting stops gunicorn at once with one log line and exit status 1, not a traceback in every worker) and, when ``LDPTEL_REDIS_URL`` is unset, starts one
embedded Redis and exports its URL, so every worker (each calls ``create_app()``) writes to the same server.
It also prepares Prometheus's multiprocess mode (:mod:`ldptel.server.prom`): ``PROMETHEUS_MULTIPROC_DIR``
(a fresh private directory unless set; a given one is emptied, since files of a previous run would add to
this run's counters) is exported before any worker imports ``prometheus_client``. ``child_exit`` tells
prometheus_client a worker is gone (its counter files stay: they are part of the totals); ``on_exit``
removes a directory ``on_starting`` created.

``post_worker_init`` starts a thread in each worker that watches its master: when the master is gone (kill -9,
OOM killer), gunicorn's own worker notices within a second but then waits up to ``graceful_timeout`` for open
connections, and a thread blocked reading a slow client keeps the process (and the listening port) alive for
good, so a restarted service could not bind. The watcher gives in-flight requests ``ORPHAN_GRACE_SECONDS``
and then ends the worker: the port is free within ``MASTER_POLL_SECONDS + ORPHAN_GRACE_SECONDS``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ldptel.server.config import ConfigError, ServerConfig
from ldptel.storage.embedded import shared_embedded, stop_shared_embedded

__all__ = ["child_exit", "on_exit", "on_starting", "post_worker_init"]

MASTER_POLL_SECONDS = 0.25
ORPHAN_GRACE_SECONDS = 2.0

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


EXIT_CONFIG = 1  # gunicorn's own status for an error before the workers start


def on_starting(server: Any) -> None:
    _prepare_multiproc_dir()
    try:
        config = ServerConfig.from_env()
    except ConfigError as exc:
        server.log.error("ldptel: %s", exc)
        on_exit(server)  # gunicorn does not call it when on_starting fails: remove the directory made above
        raise SystemExit(EXIT_CONFIG) from None
    if config.redis_url is None:
        embedded = shared_embedded(data_dir=config.data_dir)
        os.environ["LDPTEL_REDIS_URL"] = embedded.url
        server.log.info("ldptel: LDPTEL_REDIS_URL unset, started embedded Redis at %s", embedded.url)


def _watch_master(worker: Any) -> None:
    master = worker.ppid
    while os.getppid() == master:
        time.sleep(MASTER_POLL_SECONDS)
    worker.log.warning("ldptel: the gunicorn master (pid %s) is gone; worker %s exits within %.1f s",
                       master, os.getpid(), ORPHAN_GRACE_SECONDS)
    worker.alive = False  # stop accepting
    deadline = time.monotonic() + ORPHAN_GRACE_SECONDS
    while time.monotonic() < deadline and getattr(worker, "nr_conns", 0) > 0:  # gthread: connections open
        time.sleep(0.05)
    os._exit(0)  # not sys.exit: threads blocked on slow clients would keep the process alive


def post_worker_init(worker: Any) -> None:
    threading.Thread(target=_watch_master, args=(worker,), name="ldptel-master-watch", daemon=True).start()


def child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def on_exit(server: Any) -> None:
    stop_shared_embedded()
    created = os.environ.get(_CREATED_DIR)
    if created and created == os.environ.get(MULTIPROC_ENV):
        shutil.rmtree(created, ignore_errors=True)
