"""ldptel ingest service: Flask app factory, metric registry, Redis storage and the embedded Redis launcher.

Production: ``gunicorn -c deploy/gunicorn.conf.py`` (which runs ``ldptel.server:create_app()``).
Development: ``ldptel serve`` (:func:`serve`).
"""

from __future__ import annotations

from .app import create_app as create_app
from .config import ConfigError as ConfigError, ServerConfig as ServerConfig
from .serve import serve as serve

__all__ = ["ConfigError", "ServerConfig", "create_app", "serve"]
