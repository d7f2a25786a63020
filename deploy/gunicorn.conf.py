"""Gunicorn configuration of the ingest service: ``gunicorn -c deploy/gunicorn.conf.py``, behind nginx with
``deploy/nginx.conf``: a gthread worker gives a thread to each connection while it reads the request, so without
a buffering front a few slow clients hold every thread (tests/faults/test_slow_clients.py).

Every setting can be overridden on the command line (``-w 2 -b 127.0.0.1:9000``) or with the ``LDPTEL_*``
variables below; the service itself is configured by the ``LDPTEL_*`` variables of
:mod:`ldptel.server.config` (tokens are required).
"""

import os

from ldptel.server.gunicorn_hooks import (  # noqa: F401  (gunicorn looks these up by name)
    child_exit,
    on_exit,
    on_starting,
    post_worker_init,
)
from ldptel.server.gunicorn_settings import shared_settings

# Shared with the dashboard (ldptel.server.gunicorn_settings): the logger that writes no client address
# (logger_class), the access log without identifiers (accesslog from LDPTEL_ACCESS_LOG, access_log_format),
# errorlog, loglevel (LDPTEL_LOG_LEVEL), the proxies whose forwarding headers are believed (forwarded_allow_ips from
# LDPTEL_TRUSTED_PROXIES, the app's own list), keepalive = 5 and graceful_timeout = 20.
globals().update(shared_settings())

wsgi_app = "ldptel.server:create_app()"
bind = [os.environ.get("LDPTEL_BIND", "127.0.0.1:8000")]
# gthread keeps connections alive (the sync worker closes each one) and overlaps the Redis round trip
# with parsing the next request. On 2 cores with Redis on loopback, 8 threads per worker measured as well as
# or better than 2 or 4 (tests/bench/bench_ingest.py); more threads also hide a networked Redis's latency.
workers = int(os.environ.get("LDPTEL_WORKERS", os.cpu_count() or 2))
# gthread, whose own rejections (malformed request, request line or headers too large) answer JSON, not HTML.
worker_class = "ldptel.server.gunicorn_worker.JsonErrorThreadWorker"
threads = int(os.environ.get("LDPTEL_THREADS", "8"))
timeout = 30
# Request size limits of the HTTP layer; the body limit is LDPTEL_MAX_BODY_BYTES, enforced by the app.
limit_request_line = 4094
limit_request_fields = 50
limit_request_field_size = 8190
proc_name = "ldptel-ingest"
