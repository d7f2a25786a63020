"""The ``ldptel`` command line: a thin shell over the library functions, one module per command.

    ldptel aggregate [--once] [--metric NAME ...]            fold stream shards into sketches   aggregate.py
    ldptel estimate METRIC [--from DAY --to DAY] ...         debiased estimates with intervals  estimate.py
    ldptel test METRIC --above X | --vs-day DAY | --chi2 ... hypothesis tests, mechanism inside inference.py
    ldptel metrics list|show|create|retire                   the metric registry                metrics.py
    ldptel status                                            per-shard length, lag              status.py
    ldptel plan --reports-per-day N --domain-size D ...      choose mechanism, ε, k and m       plan.py
    ldptel serve [--host H --port P]                         the ingest service (development)   serve.py
    ldptel demo ...                                          the end-to-end demo                demo.py
    ldptel dashboard [--host H --port P --token-file F]      the read-only web dashboard        dashboard.py

:mod:`~ldptel.aggregator.cli.entry` assembles the parser and holds :func:`main`; :mod:`~ldptel.aggregator.cli.common`
the shared plumbing (Redis connection, :class:`UserError`, argument types); :mod:`~ldptel.aggregator.cli.extras`
which extra brings which optional dependency; :mod:`~ldptel.aggregator.cli.output` tables, JSON, CSV and
charts (shared with the demo).

``--redis-url`` falls back to ``LDPTEL_REDIS_URL``, then ``redis://127.0.0.1:6379/0``. User errors (unknown
metric, empty range, bad file, Redis unreachable, bad arguments, a missing optional dependency) print one line
to stderr and exit 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ldptel.client._lazy import lazy_exports

_EXPORTS = {
    "build_parser": "ldptel.aggregator.cli.entry",
    "main": "ldptel.aggregator.cli.entry",
    "UserError": "ldptel.aggregator.cli.common",
    "RESULT_COLUMNS": "ldptel.aggregator.cli.output",
    "plot_result": "ldptel.aggregator.cli.output",
    "write_result": "ldptel.aggregator.cli.output",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from ldptel.aggregator.cli.common import UserError as UserError
    from ldptel.aggregator.cli.entry import build_parser as build_parser
    from ldptel.aggregator.cli.entry import main as main
    from ldptel.aggregator.cli.output import (
        RESULT_COLUMNS as RESULT_COLUMNS,
    )
    from ldptel.aggregator.cli.output import (
        plot_result as plot_result,
    )
    from ldptel.aggregator.cli.output import (
        write_result as write_result,
    )
