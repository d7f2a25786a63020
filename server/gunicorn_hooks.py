"""Gunicorn server hooks used by ``deploy/gunicorn.conf.py``.

``on_starting`` runs once in the master before any worker forks: it validates the configuration (a missing
or bad setting stops gunicorn at once with one log line and exit status 1, not a traceback in every worker) and, when ``LDPTEL_REDIS_URL`` is unset, starts one
embedded Redis and exports its URL, so every worker (each calls ``create_app()``) writes to the same server.
"""

from __future__ import annotations

import os
from typing import Any

from ldptel.server.config import ConfigError, ServerConfig
from ldptel.storage.embedded import shared_embedded, stop_shared_embedded

__all__ = ["on_exit", "on_starting"]


EXIT_CONFIG = 1  # gunicorn's own status for an error before the workers start


def on_starting(server: Any) -> None:
    try:
        config = ServerConfig.from_env()
    except ConfigError as exc:
        server.log.error("ldptel: %s", exc)
        raise SystemExit(EXIT_CONFIG) from None
    if config.redis_url is None:
        embedded = shared_embedded(data_dir=config.data_dir)
        os.environ["LDPTEL_REDIS_URL"] = embedded.url
        server.log.info("ldptel: LDPTEL_REDIS_URL unset, started embedded Redis at %s", embedded.url)


def on_exit(server: Any) -> None:
    stop_shared_embedded()
