"""``ldptel dashboard``: a read-only web dashboard over the query API, behind an operator token.

:func:`create_dashboard` builds the Flask app (:mod:`~ldptel.aggregator.dashboard.app`: the JSON API and the
pages), :class:`DashboardConfig` its configuration. Templates and static files ship with the package; the
charts are inline SVG drawn by ``static/dashboard.js`` (no build step, nothing fetched from the internet).
"""

from __future__ import annotations

from ldptel.aggregator.dashboard.app import create_dashboard
from ldptel.aggregator.dashboard.config import DashboardConfig

__all__ = ["DashboardConfig", "create_dashboard"]
