"""The Flask app factory of the ingest service: configuration, Redis client, per-process state, blueprints.

What the app answers lives in its blueprints: ``reports.py`` (``POST /v1/reports``), ``metrics.py`` (the
registry API under ``/v1/metrics``) and ``ops.py`` (health, readiness, Prometheus metrics, the OpenAPI
document); ``auth.py`` checks tokens, ``errors.py`` shapes every error, and ``fastpath.py`` answers the common
ingest request before Flask.
"""

from __future__ import annotations

import os
import threading

from flask import Flask
from redis.backoff import NoBackoff
from redis.retry import Retry

from ldptel.server import metrics, ops, reports
from ldptel.server.config import ServerConfig
from ldptel.server.cors import CorsMiddleware
from ldptel.server.errors import register_error_handlers
from ldptel.server.fastpath import FastIngest
from ldptel.server.prom import Telemetry
from ldptel.server.proxies import TrustedProxies, UndeclaredProxyCheck
from ldptel.server.ratelimit import SourceFailureLimiter, TokenRateLimiter
from ldptel.server.state import EXTENSION, IngestState, digest
from ldptel.storage.append import BatchAppender
from ldptel.storage.client import connect, parse_redis_url
from ldptel.storage.embedded import shared_embedded

__all__ = ["create_app"]


def create_app(config: ServerConfig | None = None) -> Flask:
    """Build the ingest app. ``config=None`` reads :meth:`ServerConfig.from_env`.

    When ``config.redis_url`` is None, a private embedded Redis (AOF on) is started for this process and
    stopped at exit (under gunicorn, ``deploy/gunicorn.conf.py`` starts one in the master instead, so all
    workers share it).
    """
    cfg = ServerConfig.from_env() if config is None else config
    redis_url = cfg.redis_url
    if redis_url is None:
        redis_url = shared_embedded(data_dir=cfg.data_dir).url
        cfg = cfg.with_redis_url(redis_url)
    target = parse_redis_url(redis_url)  # one Redis or a cluster (ldptel.storage.client)
    client = connect(
        target,
        socket_timeout=cfg.redis_timeout,
        socket_connect_timeout=min(1.0, cfg.redis_timeout),
        # One immediate retry heals a pooled connection that a Redis restart closed. Retrying the append
        # is safe: the script is idempotent per batch id.
        retry=Retry(NoBackoff(), 1),
    )
    # instance_path given explicitly: Flask cannot derive it for a module of the ``ldptel`` namespace package
    # (and the service keeps no instance files).
    here = os.path.dirname(os.path.abspath(__file__))
    app = Flask("ldptel.server", root_path=here, instance_path=os.path.join(here, "instance"))
    app.config["MAX_CONTENT_LENGTH"] = cfg.max_body_bytes
    state = app.extensions[EXTENSION] = IngestState(
        config=cfg,
        redis=client,
        appender=BatchAppender(client, wait_replicas=target.wait_replicas),
        limiter=None if cfg.rate_limit is None else TokenRateLimiter(client, rate=cfg.rate_limit, burst=cfg.rate_burst),
        failures=None if cfg.auth_failure_limit is None else SourceFailureLimiter(
            rate=cfg.auth_failure_limit, burst=cfg.auth_failure_burst),
        proxies=TrustedProxies(cfg.trusted_proxies),
        telemetry=Telemetry(),
        app_digests=frozenset(digest(t) for t in cfg.app_tokens),
        admin_digest=digest(cfg.admin_token),
        metrics_digest=None if cfg.metrics_token is None else digest(cfg.metrics_token),
        records={},
        recent={},
        records_lock=threading.Lock(),
    )
    app.extensions["redis"] = client
    for blueprint in (ops.bp, metrics.bp, reports.bp):
        app.register_blueprint(blueprint)
    register_error_handlers(app)
    # The common ingest request (a valid binary batch) skips Flask's per-request machinery; anything else,
    # including every error, is answered by the blueprints. See fastpath.py.
    app.wsgi_app = FastIngest(app.wsgi_app, state)  # type: ignore[method-assign]  # Flask's documented middleware hook
    # Outermost but CORS: a proxy in front that LDPTEL_TRUSTED_PROXIES does not declare is counted and logged once.
    app.wsgi_app = UndeclaredProxyCheck(  # type: ignore[method-assign]
        app.wsgi_app, state.proxies, state.telemetry.forwarded_from_undeclared_peer)
    if cfg.cors_origins:  # browsers (the web SDK): CORS on the report and spec routes only (cors.py)
        app.wsgi_app = CorsMiddleware(app.wsgi_app, cfg.cors_origins)  # type: ignore[method-assign]
    return app
