"""Gunicorn server hooks used by ``deploy/gunicorn.conf.py``.

``on_starting`` runs once in the master before any worker forks: it validates the configuration (a missing
token stops gunicorn at once, not in every worker) and, when ``LDPTEL_REDIS_URL`` is unset, starts one
embedded Redis and exports its URL, so every worker (each calls ``create_app()``) writes to the same server.
"""

from __future__ import annotations

import os
from typing import Any

from ldptel.server.config import ServerConfig
from ldptel.storage.embedded import shared_embedded, stop_shared_embedded

__all__ = ["on_exit", "on_starting"]


def on_starting(server: Any) -> None:
    config = ServerConfig.from_env()
    if config.redis_url is None:
        embedded = shared_embedded(data_dir=config.data_dir)
        os.environ["LDPTEL_REDIS_URL"] = embedded.url
        server.log.info("ldptel: LDPTEL_REDIS_URL unset, started embedded Redis at %s", embedded.url)


def on_exit(server: Any) -> None:
    stop_shared_embedded()
