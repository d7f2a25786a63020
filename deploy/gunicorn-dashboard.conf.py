"""Gunicorn configuration of the dashboard: ``gunicorn -c deploy/gunicorn-dashboard.conf.py``, behind nginx with
``deploy/nginx-host.conf`` (its dashboard server), run by ``deploy/systemd/ldptel-dashboard.service``.

ONE worker process, always: login sessions live in the dashboard process's memory (docs/security.md, "Dashboard
sessions"); under several processes a login would be known only to the worker that made it. Threads serve
concurrent operators. The dashboard reads ``LDPTEL_DASHBOARD_TOKEN`` (else ``LDPTEL_ADMIN_TOKEN``),
``LDPTEL_REDIS_URL``, ``LDPTEL_DASHBOARD_SESSION_SECONDS`` and ``LDPTEL_TRUSTED_PROXIES``
(:mod:`ldptel.aggregator.dashboard.config`); a missing or weak token stops it at start-up with one line.
"""

import os

from ldptel.server.gunicorn_settings import shared_settings

# As for the ingest (ldptel.server.gunicorn_settings): no client address in any log line, the same access log,
# forwarding headers believed only from LDPTEL_TRUSTED_PROXIES, keepalive and graceful_timeout.
globals().update(shared_settings())

wsgi_app = "ldptel.aggregator.dashboard:create_dashboard()"
bind = [os.environ.get("LDPTEL_DASHBOARD_BIND", "127.0.0.1:8050")]
workers = 1  # never more: sessions are per process (see above)
worker_class = "gthread"
threads = int(os.environ.get("LDPTEL_DASHBOARD_THREADS", "8"))
# An estimate over a long range or a discovery over many candidates can take a while on a large deployment.
timeout = 120
proc_name = "ldptel-dashboard"
