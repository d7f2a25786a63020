"""ldptel ingest service: the Flask app factory, its blueprints, configuration and the development server.

Production: ``gunicorn -c deploy/gunicorn.conf.py`` (which runs ``ldptel.server:create_app()``).
Development: ``ldptel serve`` (:func:`serve`). The Redis layer it writes through is :mod:`ldptel.storage`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ldptel.client._lazy import lazy_exports

_EXPORTS = {
    "create_app": "ldptel.server.app",
    "ConfigError": "ldptel.server.config",
    "ServerConfig": "ldptel.server.config",
    "serve": "ldptel.server.serve",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from ldptel.server.app import create_app as create_app
    from ldptel.server.config import ConfigError as ConfigError
    from ldptel.server.config import ServerConfig as ServerConfig
    from ldptel.server.serve import serve as serve
