"""The gunicorn settings every ldptel service shares: ``deploy/gunicorn.conf.py`` (the ingest) and
``deploy/gunicorn-dashboard.conf.py`` (the dashboard) both start from :func:`shared_settings`.

A gunicorn configuration file is a Python file gunicorn runs on its own and reads by name, so each of ours takes
these with ``globals().update(shared_settings())`` and then sets what is its own (the app, bind, workers, worker
class, timeout, process name, the ingest's hooks and request limits). They live here, in the installed package,
so every place that runs a configuration file finds them the same way (the Docker image copies only the ingest's
file; the systemd units read ``/opt/ldptel/deploy``; the tests run the files where they are).

The environment is read at each call: a configuration loaded again (a gunicorn reload, a test with another
environment) sees the environment of then.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ldptel.server.proxies import parse_trusted_proxies

__all__ = ["ACCESS_LOG_FORMAT", "shared_settings"]

# The request line without its query string, the status, the size and the duration: no client address, user agent,
# referer or query string (AnonymousLogger refuses to print the address atoms anyway).
ACCESS_LOG_FORMAT = '"%(m)s %(U)s" %(s)s %(B)s %(M)sms'


def shared_settings(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """The settings both services share, from ``environ`` (default: the process environment):
    ``LDPTEL_TRUSTED_PROXIES``, ``LDPTEL_ACCESS_LOG`` (empty: no access log) and ``LDPTEL_LOG_LEVEL``."""
    env = os.environ if environ is None else environ
    return {
        # No client address in any log line, at any level: gunicorn's own "Invalid request from ip=..." warnings
        # and every access-log atom included (ldptel.server.gunicorn_logger).
        "logger_class": "ldptel.server.gunicorn_logger.AnonymousLogger",
        # The proxies whose forwarding headers are believed: the same LDPTEL_TRUSTED_PROXIES the app reads for the
        # client address (ldptel.server.proxies), here for X-Forwarded-Proto & co. (wsgi.url_scheme). Unset: no
        # peer, not even gunicorn's default 127.0.0.1 (a header is trusted only from a proxy the operator declared).
        # Parsed by the app's own parser and handed on normalised: gunicorn's stricter one refuses "10.0.0.5/24"
        # (host bits set) and a trailing comma that the app accepts, and would then not start.
        "forwarded_allow_ips": ",".join(str(n) for n in parse_trusted_proxies(env.get("LDPTEL_TRUSTED_PROXIES", ""))),
        "accesslog": env.get("LDPTEL_ACCESS_LOG", "-") or None,
        "access_log_format": ACCESS_LOG_FORMAT,
        "errorlog": "-",
        "loglevel": env.get("LDPTEL_LOG_LEVEL", "info"),
        "keepalive": 5,
        "graceful_timeout": 20,
    }
