"""Gunicorn's logger without client addresses: the ``logger_class`` of ``deploy/gunicorn.conf.py`` and the demo.

Gunicorn itself writes the client's IP into the error log for every malformed request (``Invalid request
from ip=<addr>: ...``, level warning) and offers it to the access log (``%(h)s``, ``REMOTE_ADDR`` and
``REMOTE_PORT`` in the environ). :class:`AnonymousLogger` keeps every line but no address:

* a filter on gunicorn's error and access loggers replaces each IPv4/IPv6 address in a record's final
  message (with its port, when written ``addr:port`` or ``[addr]:port``) by ``<addr>``, at every level.
  The addresses gunicorn listens on are left alone (``Listening at: http://10.0.0.5:8000`` stays useful):
  they are the server's own, never a client's;
* the access log's atoms lose ``REMOTE_ADDR`` and ``REMOTE_PORT``, so no ``access_log_format``
  (``%(h)s``, ``%({remote_addr}e)s``, ``%({remote_port}e)s``) can print them, nor the headers that carry an
  address, a credential or the user agent (``%({x-forwarded-for}i)s``, ``%({authorization}i)s``,
  ``%({http_x_real_ip}e)s``, ...: :data:`_PRIVATE_HEADERS`); the user agent and referer
  (``%(a)s``, ``%(f)s``) are ``-`` and the request time (``%(t)s``) is the UTC day;
* error-log lines are dated with the UTC day only (``[2026-11-23 UTC]``), never the time of day: a line about
  a request must not tell when it came (issue 12: nothing finer than the day for anything tied to a batch).

The app's own logs carry no address either (:mod:`ldptel.server` never reads it; ``ldptel serve`` logs
``-`` in its place).
"""

from __future__ import annotations

import ipaddress
import logging
import re
import time
from collections.abc import Iterable
from typing import Any

from gunicorn.glogging import Logger  # type: ignore[import-untyped]

__all__ = ["AddressFilter", "AnonymousLogger", "scrub_addresses"]

REDACTED = "<addr>"
# Request headers no access-log atom may print: the client's address as a trusted proxy forwards it (the ingest
# reads it for the failed-authentication limit only: ldptel.server.proxies), credentials, the user agent.
_PRIVATE_HEADERS = ("x-forwarded-for", "x-real-ip", "forwarded", "authorization", "cookie", "user-agent", "referer")
# Candidates, validated by ipaddress: [v6](:port), v6 (incl. ::ffff:1.2.3.4), v4(:port).
_CANDIDATE = re.compile(
    r"\[(?P<b6>[0-9A-Fa-f:.]+)(?:%[\w.-]+)?\](?::\d+)?"
    r"|(?<![\w.:])(?P<v6>(?:[0-9A-Fa-f]{0,4}:){2,7}(?:\d{1,3}(?:\.\d{1,3}){3}|[0-9A-Fa-f]{1,4})?)(?:%[\w.-]+)?"
    r"|(?<![\w.])(?P<v4>\d{1,3}(?:\.\d{1,3}){3})(?::\d+)?(?![\w.])"
)


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def scrub_addresses(message: str, keep: frozenset[str] = frozenset()) -> str:
    """``message`` with every IP address not in ``keep`` (and its port) replaced by ``<addr>``."""

    def replace(m: re.Match[str]) -> str:
        host = m.group("b6") or m.group("v4") or m.group("v6") or ""
        tail = ""
        if m.group("v6") is not None and not _is_address(host):  # "ip=::1: ...": that colon is not the address's
            stripped = host.rstrip(":")
            host, tail = stripped, host[len(stripped):]
        if not _is_address(host) or host in keep:
            return m.group(0)
        return REDACTED + tail

    return _CANDIDATE.sub(replace, message)


class AddressFilter(logging.Filter):
    """Rewrites each record's message without IP addresses (see :func:`scrub_addresses`)."""

    def __init__(self, keep: Iterable[str] = ()) -> None:
        super().__init__()
        self.keep = frozenset(keep)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        scrubbed = scrub_addresses(message, self.keep)
        if scrubbed != message:
            record.msg, record.args = scrubbed, ()
        if record.exc_info and not record.exc_text:  # a traceback's text is formatted once, then cached
            record.exc_text = scrub_addresses(logging.Formatter().formatException(record.exc_info), self.keep)
        return True


def _listen_hosts(cfg: Any) -> set[str]:
    hosts = set()
    for address in getattr(cfg, "address", ()):
        if isinstance(address, tuple) and address and isinstance(address[0], str):
            hosts.add(address[0].strip("[]"))
    return hosts


class AnonymousLogger(Logger):  # type: ignore[misc]
    """Gunicorn's :class:`~gunicorn.glogging.Logger` that never writes a client address (see the module docs)."""

    datefmt = "[%Y-%m-%d UTC]"  # the day only (gunicorn's own: "[%Y-%m-%d %H:%M:%S %z]")

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            if handler.formatter is not None:
                handler.formatter.converter = time.gmtime
        for log in (self.error_log, self.access_log):
            for old in [f for f in log.filters if isinstance(f, AddressFilter)]:  # a reload re-runs setup
                log.removeFilter(old)
            log.addFilter(AddressFilter(_listen_hosts(cfg)))

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> dict[str, Any]:
        atoms: dict[str, Any] = super().atoms(resp, req, environ, request_time)
        atoms["h"] = atoms["a"] = atoms["f"] = "-"
        atoms["t"] = time.strftime("[%d/%b/%Y]", time.gmtime())
        atoms.pop("{remote_addr}e", None)
        atoms.pop("{remote_port}e", None)
        for header in _PRIVATE_HEADERS:  # %({x-forwarded-for}i)s and %({http_x_forwarded_for}e)s print "-"
            atoms.pop("{" + header + "}i", None)
            atoms.pop("{http_" + header.replace("-", "_") + "}e", None)
        return atoms
