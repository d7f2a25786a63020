"""Defaults the CLI, the dashboard and the demo share (light: importing this loads nothing but the standard library,
so ``ldptel --help`` stays fast; a test checks each constant against the value it restates)."""

from __future__ import annotations

DISCOVER_TOP = 20  # discovered values shown
DISCOVER_KEEP = 50  # ldptel.client.mechanisms.state.DEFAULT_KEEP: candidates kept per round
DISCOVER_ALPHA = 0.05  # ldptel.client.mechanisms.state.DEFAULT_ALPHA: family-wise false-discovery chance


def default_confidence() -> float:
    """The interval level of an estimate unless asked otherwise: :class:`~ldptel.client.Estimate`'s default."""
    from ldptel.client import Estimate
    from ldptel.client.protocol.validate import check_number

    return check_number("confidence", Estimate.__dataclass_fields__["confidence"].default, 0, 1, open_interval=True)


__all__ = ["DISCOVER_ALPHA", "DISCOVER_KEEP", "DISCOVER_TOP", "default_confidence"]
