"""The development server behind ``ldptel serve``: werkzeug's threaded server, embedded Redis if no URL."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from types import FrameType

from werkzeug.serving import WSGIRequestHandler, make_server

from ldptel.server.app import create_app
from ldptel.server.config import ServerConfig
from ldptel.storage.embedded import EmbeddedRedis

__all__ = ["serve"]

log = logging.getLogger("ldptel.server")


class _AnonymousHandler(WSGIRequestHandler):
    """werkzeug's request log line without the client address (we log no identifiers) and dated with the UTC
    day only (nothing finer than the day for anything tied to a batch)."""

    def address_string(self) -> str:
        return "-"

    def log_date_time_string(self) -> str:
        return time.strftime("%d/%b/%Y UTC", time.gmtime())

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        path = self.path.split("?", 1)[0]  # never log query strings
        self.log("info", '"%s %s" %s %s', self.command, path, code, size)


@contextlib.contextmanager
def _interrupted_by_signals() -> Iterator[None]:
    """Within the block SIGINT and SIGTERM raise KeyboardInterrupt in the main thread, so both stop the server
    the same graceful way (its embedded Redis too). SIGINT explicitly: a process started as a background job of
    a non-interactive shell (``ldptel serve &`` in a script, a CI loop) inherits SIGINT *ignored*, and Python
    then never raises KeyboardInterrupt; ``serve`` hung on SIGINT until killed. Not from other threads (only
    the main thread may install handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve(config: ServerConfig, *, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the ingest app until interrupted (Ctrl-C, SIGINT or SIGTERM). Starts an embedded Redis when
    ``config.redis_url`` is None and stops it on the way out. For production use gunicorn with ``deploy/gunicorn.conf.py`` behind nginx with
    ``deploy/nginx.conf`` (the buffering front that keeps slow clients from holding gunicorn's threads).
    """
    with _interrupted_by_signals():
        _serve(config, host=host, port=port)


def _serve(config: ServerConfig, *, host: str, port: int) -> None:
    embedded: EmbeddedRedis | None = None
    try:
        if config.redis_url is None:
            embedded = EmbeddedRedis(appendonly=True, data_dir=config.data_dir, appendfsync="always").start()
            config = replace(config, redis_url=embedded.url)
            print(f"ldptel: embedded Redis at {embedded.url} (data: {embedded.data_dir})", file=sys.stderr)
        app = create_app(config)
        server = make_server(host, port, app, threaded=True, request_handler=_AnonymousHandler)
        print(f"ldptel: ingest listening on http://{host}:{server.server_port}", file=sys.stderr)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    finally:
        if embedded is not None:
            embedded.stop()
