"""``ldptel demo``: the whole system on one machine, end to end, in one command.

What it runs, all real and all on loopback:

1. a private Redis (:class:`~ldptel.storage.embedded.EmbeddedRedis`, AOF on, ``appendfsync always`` as shipped);
2. the ingest service as a real HTTP server in its own process group: gunicorn (gthread) when it is
   installed, else ``ldptel serve``; a free port and bearer tokens generated for this run;
3. three metrics created through the HTTP admin API: ``demo.dark_mode`` (a boolean, ``rr``),
   ``demo.emoji`` (a sketch: ``cms``, ``oue-cms`` or ``hcms``) and ``demo.words`` (``pem``: discovered);
4. the fold worker, ``ldptel aggregate`` following the streams, in its own process group;
5. a fleet of simulated devices. Each device is a real :class:`~ldptel.client.sdk.reporter.Reporter` with its
   own storage directory (sqlite queue, budget ledger, device secret), privatizing with the OS CSPRNG and
   uploading over HTTP. The true values are drawn from the emoji distribution shipped in
   ``aggregator/data/emoji.tsv``, and each device's 2 typed words from ``aggregator/data/words.tsv`` (a list the
   aggregator never gets); ``--seed`` seeds only those draws, never the privatization.

Then it waits until the worker has folded every report the server acknowledged, queries the sketches
(:func:`~ldptel.aggregator.query.estimate_metric`), prints the top-k estimates beside the true counts with
their intervals, the words ``ldptel discover`` found (no candidates) beside their true counts, and the rr
proportion beside the truth, writes a PNG chart (the ``plot`` extra), and prints
the wall time and an accuracy summary.

Every process it started is stopped on the way out: on success, on errors, on Ctrl-C (SIGINT) and on SIGTERM
(try/finally; each child runs in its own process group, which is terminated, then killed). The work
directory (device storage, Redis data, logs) is removed unless ``--keep``.

Exit status: 0 success, 1 a component failed, 2 a user error (one line on stderr), 130 interrupted.

Where each part lives: :mod:`.entry` (``main``: arguments, dependencies, exit statuses), :mod:`.config` (the
arguments, defaults and metric specs), :mod:`.run` (the phases of a run and the cleanup), :mod:`.services`
(the ingest service, the metrics over HTTP, the worker), :mod:`.processes` (child process groups),
:mod:`.fleet` (the simulated devices), :mod:`.distribution` (their true values), :mod:`.progress` (status
lines on stderr), :mod:`.report` (results, summary and chart), :mod:`.signals` (SIGTERM, Ctrl-C) and
:mod:`.errors`. Tables and charts are drawn with :mod:`ldptel.aggregator.render`, like the CLI's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ldptel.client._lazy import lazy_exports

_EXPORTS = {
    "main": "ldptel.aggregator.demo.entry",
    "DemoConfig": "ldptel.aggregator.demo.config",
    "build_parser": "ldptel.aggregator.demo.config",
    "parse_config": "ldptel.aggregator.demo.config",
    "Distribution": "ldptel.aggregator.demo.distribution",
    "load_distribution": "ldptel.aggregator.demo.distribution",
    "DemoFailure": "ldptel.aggregator.demo.errors",
    "DemoUserError": "ldptel.aggregator.demo.errors",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from ldptel.aggregator.demo.config import (
        DemoConfig as DemoConfig,
    )
    from ldptel.aggregator.demo.config import (
        build_parser as build_parser,
    )
    from ldptel.aggregator.demo.config import (
        parse_config as parse_config,
    )
    from ldptel.aggregator.demo.distribution import Distribution as Distribution
    from ldptel.aggregator.demo.distribution import load_distribution as load_distribution
    from ldptel.aggregator.demo.entry import main as main
    from ldptel.aggregator.demo.errors import DemoFailure as DemoFailure
    from ldptel.aggregator.demo.errors import DemoUserError as DemoUserError
