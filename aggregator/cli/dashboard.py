"""``ldptel dashboard``: the read-only web dashboard (:mod:`ldptel.aggregator.dashboard`) on a threaded
werkzeug server, bound to loopback unless ``--host`` says otherwise, behind the operator token."""

from __future__ import annotations

import argparse
import socket
from typing import TextIO

from ldptel.aggregator.cli.common import EXIT_OK, UserError

NAME = "dashboard"
EXTRA = "dashboard"
NEEDS = ("flask", "redis")  # top-level modules the command imports beyond the SDK
TOKEN_HELP = ("the operator token: --token-file FILE, else $LDPTEL_DASHBOARD_TOKEN, else $LDPTEL_ADMIN_TOKEN "
              "(random, >= 128 bits: python3 -c 'import secrets; print(secrets.token_urlsafe(32))')")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="serve the read-only web dashboard",
                       description="Serve the web dashboard: metric list, estimates with intervals, per-day series, "
                                   "numeric metrics (mean cards; histogram buckets with percentiles), discovered "
                                   "values; each chart backed by a JSON endpoint that returns what `ldptel "
                                   "estimate` (or `ldptel discover`) prints with --format json.", epilog=TOKEN_HELP)
    p.add_argument("--host", default=None, help="address to bind (default: 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=None, help="port (default 8050; 0 picks a free one)")
    p.add_argument("--token-file", metavar="FILE", help="read the operator token from FILE")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from werkzeug.serving import WSGIRequestHandler, make_server

    class NoAddressHandler(WSGIRequestHandler):
        """werkzeug's request log without the client's address (no log line carries an IP address)."""

        def address_string(self) -> str:
            return "-"

    from ldptel.aggregator.cli.common import connected
    from ldptel.aggregator.dashboard import DashboardConfig, create_dashboard
    from ldptel.aggregator.dashboard.config import DEFAULT_HOST, DEFAULT_PORT

    config = DashboardConfig.from_env(token_file=args.token_file, redis_url=args.redis_url)
    with connected(config.redis_url):  # an unreachable Redis is one line now, not an error page later
        pass
    host = DEFAULT_HOST if args.host is None else args.host
    port = DEFAULT_PORT if args.port is None else args.port
    try:  # bound here: werkzeug would print its own lines and exit when the port is taken
        listener = socket.create_server((host, port))
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    with listener:
        server = make_server(host, port, create_dashboard(config), threaded=True, request_handler=NoAddressHandler,
                             fd=listener.fileno())
    if host not in ("127.0.0.1", "::1", "localhost"):
        err.write(f"ldptel dashboard: listening on {host}: serve it behind TLS, the login sends the token\n")
    out.write(f"ldptel dashboard: http://{host}:{server.port}/ (log in with the operator token; Ctrl-C stops)\n")
    out.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return EXIT_OK
