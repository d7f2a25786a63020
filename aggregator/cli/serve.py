"""``ldptel serve``: the ingest service on werkzeug's development server (:func:`ldptel.server.serve`).

Configuration comes from ``LDPTEL_*`` variables (:class:`~ldptel.server.ServerConfig`); ``--redis-url`` or
``LDPTEL_REDIS_URL`` overrides the Redis URL, and without either an embedded Redis is started. Production
runs gunicorn with ``deploy/gunicorn.conf.py`` behind nginx with ``deploy/nginx.conf`` (a buffering front:
clients that send slowly would otherwise hold gunicorn's threads) instead.
"""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from ldptel.aggregator.cli.common import ENV_REDIS_URL, EXIT_OK

NAME = "serve"
EXTRA = "server"
NEEDS = ("flask", "redis")  # top-level modules the command imports beyond the SDK


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="run the ingest service (development server)",
                       description="Run the Flask ingest app; configuration from LDPTEL_* variables. Ctrl-C, "
                                   "SIGINT or SIGTERM stops it (and the embedded Redis it started), also when it "
                                   "runs as a background job.",
                       epilog="Development only. In production run gunicorn -c deploy/gunicorn.conf.py behind nginx "
                              "with deploy/nginx.conf (it buffers each request, so slow clients cannot hold "
                              "gunicorn's threads); deploy/docker-compose.yml runs both.")
    p.add_argument("--host", help="address to bind (default: loopback)")
    p.add_argument("--port", type=int, help="port to listen on (default: the development server's)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ldptel.server import ServerConfig, serve

    config = ServerConfig.from_env()
    url = args.redis_url or os.environ.get(ENV_REDIS_URL)
    if url:
        config = config.with_redis_url(url)
    given = {name: getattr(args, name) for name in ("host", "port") if getattr(args, name) is not None}
    serve(config, **given)
    return EXIT_OK
