"""The demo's two expected failures and their exit statuses (``Ctrl-C`` and SIGTERM: :mod:`.signals`)."""

from __future__ import annotations

from ldptel.aggregator.cli.common import EXIT_OK, EXIT_USER, UserError
from ldptel.client.errors import LdpError

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USER", "DemoFailure", "DemoUserError"]

EXIT_FAILED = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C


class DemoUserError(UserError):
    """Bad arguments or environment: one line on stderr, exit status 2 (nothing was started)."""


class DemoFailure(LdpError, RuntimeError):
    """A component of the demo failed (a server did not start, reports were not folded): exit status 1."""
