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
from ldptel.server.proxies import parse_trusted_proxies

wsgi_app = "ldptel.server:create_app()"
bind = [os.environ.get("LDPTEL_BIND", "127.0.0.1:8000")]
# gthread keeps connections alive (the sync worker closes each one) and overlaps the Redis round trip
# with parsing the next request. On 2 cores with Redis on loopback, 8 threads per worker measured as well as
# or better than 2 or 4 (tests/bench/bench_ingest.py); more threads also hide a networked Redis's latency.
workers = int(os.environ.get("LDPTEL_WORKERS", os.cpu_count() or 2))
# gthread, whose own rejections (malformed request, request line or headers too large) answer JSON, not HTML.
worker_class = "ldptel.server.gunicorn_worker.JsonErrorThreadWorker"
threads = int(os.environ.get("LDPTEL_THREADS", "8"))
keepalive = 5
timeout = 30
graceful_timeout = 20
# Request size limits of the HTTP layer; the body limit is LDPTEL_MAX_BODY_BYTES, enforced by the app.
limit_request_line = 4094
limit_request_fields = 50
limit_request_field_size = 8190
# No client address in any log line, at any level: gunicorn's own "Invalid request from ip=..." warnings
# and every access-log atom included (ldptel.server.gunicorn_logger).
logger_class = "ldptel.server.gunicorn_logger.AnonymousLogger"
# The proxies whose forwarding headers are believed: the same LDPTEL_TRUSTED_PROXIES the app reads for the client
# address (ldptel.server.proxies), here for X-Forwarded-Proto & co. (wsgi.url_scheme). Unset: no peer, not even
# gunicorn's default 127.0.0.1 (a header is trusted only from a proxy the operator declared).
# Parsed by the app's own parser and handed on normalised: gunicorn's stricter one refuses "10.0.0.5/24" (host bits
# set) and a trailing comma that the app accepts, and would then not start.
forwarded_allow_ips = ",".join(str(n) for n in parse_trusted_proxies(os.environ.get("LDPTEL_TRUSTED_PROXIES", "")))
# Access log without the client address, user agent, referer or query string: no identifiers in logs.
accesslog = os.environ.get("LDPTEL_ACCESS_LOG", "-") or None
access_log_format = '"%(m)s %(U)s" %(s)s %(B)s %(M)sms'
errorlog = "-"
loglevel = os.environ.get("LDPTEL_LOG_LEVEL", "info")
proc_name = "ldptel-ingest"

