"""Sealing from the fold worker: every ``seal_seconds`` a worker seals the days of each metric that can no
longer change (:func:`ldptel.storage.sealed.seal_metric`), builds their roll-ups and applies the metric's daily
retention (its registry record's ``retention_days``). A per-metric seal lease makes one worker do it at a time;
the sealing itself is exactly once even without it (see :mod:`ldptel.storage.sealed`). A pass seals at most
``max_days`` days per metric, so a worker that meets a long backlog keeps folding between passes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis as redis_lib

from ldptel.storage import registry
from ldptel.storage.sealed import SealReport, seal_metric

__all__ = ["SEAL_DAYS_PER_PASS", "seal_pass"]

log = logging.getLogger(__name__)

SEAL_DAYS_PER_PASS = 7  # days of one metric sealed per pass of a follow worker (a backlog takes several passes)


def seal_pass(r: redis_lib.Redis, metrics: list[str], *, horizon_days: int, owner: str,
              max_days: int | None = SEAL_DAYS_PER_PASS, between: Callable[[], None] | None = None) -> list[SealReport]:
    """Seal what is due in each of ``metrics``; returns what each did (logged when it did something).

    ``between`` runs before each metric (a worker renews its shard leases there, so a long pass never lets them
    expire)."""
    reports = []
    for name in metrics:
        if between is not None:
            between()
        record = registry.get_metric(r, name)
        report = seal_metric(r, name, horizon_days=horizon_days, retention_days=record.retention_days, owner=owner,
                             max_days=max_days)
        if report.days_sealed or report.rollups_built or report.states_dropped:
            log.info("sealed days", extra={"event": "seal", **report.to_dict()})
        if report.late_states:
            log.error("shard states written after their day was sealed are kept but not counted: reports arrived "
                      "stamped with a day already sealed (an ingest host's clock is days behind, or the clocks of "
                      "the aggregator host and Redis are days ahead of the ingest hosts); check the hosts' clocks",
                      extra={"event": "seal_late_states", "metric": name, "states": report.late_states})
        reports.append(report)
    return reports
