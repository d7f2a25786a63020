"""``ldptel demo [ARGS]``: parse and check the arguments, check the dependencies, run, and map every outcome
to one exit status: 0 success, 1 a component failed, 2 a user error (one line on stderr), 130 interrupted
(Ctrl-C), 143 terminated (SIGTERM). Every process the run started is stopped before it returns."""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from typing import TextIO

from ldptel.aggregator.cli.common import UserError
from ldptel.aggregator.cli.demo import EXTRA, NAME
from ldptel.aggregator.cli.extras import require
from ldptel.aggregator.demo.config import parse_config
from ldptel.aggregator.demo.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USER, DemoFailure
from ldptel.aggregator.demo.signals import Terminated, sigterm_as_exception

NEEDS = ("redis", "flask")  # top-level modules a run imports beyond the SDK (both come with the server extra)


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """``ldptel demo [ARGS]``: returns the exit status (``ldptel demo`` calls ``main(args)``)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        config = parse_config(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except UserError as exc:
        err.write(f"ldptel demo: error: {exc}\n")
        return EXIT_USER
    try:
        with sigterm_as_exception():
            require(NAME, *NEEDS, extra=EXTRA)
            from ldptel.aggregator.demo.run import run

            return run(config, out=out, err=err)
    except UserError as exc:  # DemoUserError, a missing dependency, an unwritable chart
        err.write(f"ldptel demo: error: {exc}\n")
        return EXIT_USER
    except DemoFailure as exc:
        err.write(f"ldptel demo: failed: {exc}\n")
        return EXIT_FAILED
    except KeyboardInterrupt:
        err.write("\nldptel demo: interrupted; every process it started was stopped\n")
        return EXIT_INTERRUPTED
    except Terminated:
        err.write("ldptel demo: terminated; every process it started was stopped\n")
        return 128 + signal.SIGTERM
    except BrokenPipeError:
        return EXIT_OK
