"""What a Reporter counts: :class:`Counters` (mutable, shared by ``report()`` and the uploader) and its public
snapshot :class:`ReporterStats`.

:class:`Counters` has no lock of its own: the Reporter's state condition guards it (see
:class:`ldptel.client.sdk.reporter.Reporter`), and the uploader updates it under that same condition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Counters", "ReporterStats"]


@dataclass(frozen=True, slots=True)
class ReporterStats:
    """Counters since this Reporter started, plus ``pending`` (unacknowledged reports on disk)."""

    pending: int
    queued: int
    memoized: int
    delivered: int
    refused_budget: int
    refused_policy: int
    dropped_queue_full: int
    dropped_rejected: int
    dropped_stale: int
    no_spec: int
    retries: int
    clipped: int = 0  # numeric values queued after clipping to their metric's range (counted here only)
    dropped_too_old: int = 0  # in batches older than the retry horizon (dropped by the SDK or refused: 422)
    not_sampled: int = 0  # report() calls on days this device does not take part in the metric (sample_rate)


@dataclass(slots=True)
class Counters:
    """Queue accounting (``pending``, ``unbatched``) and event counts since start.

    ``pending`` starts from the reports left on disk by an earlier run; the rest count this run's events.
    """

    pending: int  # unacknowledged reports on disk: queued ones plus those in formed batches
    unbatched: int  # queued reports not yet in a batch
    queued: int = 0
    memoized: int = 0
    delivered: int = 0
    refused_budget: int = 0
    refused_policy: int = 0  # report() calls refused by the device's PrivacyPolicy (nothing privatized)
    dropped_queue_full: int = 0
    dropped_rejected: int = 0
    dropped_stale: int = 0
    dropped_too_old: int = 0
    no_spec: int = 0
    retries: int = 0
    clipped: int = 0
    not_sampled: int = 0

    def settle(self, n: int, outcome: Literal["ack", "stale", "rejected", "too_old"]) -> None:
        """A batch of ``n`` reports left the disk: acknowledged, or dropped as stale, rejected or too old."""
        self.pending -= n
        if outcome == "ack":
            self.delivered += n
        elif outcome == "stale":
            self.dropped_stale += n
        elif outcome == "too_old":
            self.dropped_too_old += n
        else:
            self.dropped_rejected += n

    def snapshot(self) -> ReporterStats:
        return ReporterStats(
            pending=self.pending,
            queued=self.queued,
            memoized=self.memoized,
            delivered=self.delivered,
            refused_budget=self.refused_budget,
            refused_policy=self.refused_policy,
            dropped_queue_full=self.dropped_queue_full,
            dropped_rejected=self.dropped_rejected,
            dropped_stale=self.dropped_stale,
            dropped_too_old=self.dropped_too_old,
            no_spec=self.no_spec,
            retries=self.retries,
            clipped=self.clipped,
            not_sampled=self.not_sampled,
        )
