"""The dashboard's configuration: the operator token (checked like the ingest service's tokens), Redis, address.

The token comes from ``LDPTEL_DASHBOARD_TOKEN``, else ``LDPTEL_ADMIN_TOKEN`` (the ingest's operator token, so
one environment file serves both), or from a file (``ldptel dashboard --token-file``). It must pass
:func:`ldptel.server.config.token_problem`: at least 128 bits estimated, no placeholder of the example files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ldptel.server.config import PREFIX, ConfigError, token_problem

ENV_TOKEN = f"{PREFIX}DASHBOARD_TOKEN"
ENV_ADMIN_TOKEN = f"{PREFIX}ADMIN_TOKEN"
ENV_REDIS_URL = f"{PREFIX}REDIS_URL"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_HOST = "127.0.0.1"  # loopback: put a TLS proxy in front to reach it from elsewhere
DEFAULT_PORT = 8050


@dataclass(frozen=True, kw_only=True)
class DashboardConfig:
    """``token``: the bearer token operators log in with; ``redis_url``: the Redis the aggregator folds into."""

    token: str = field(repr=False)
    redis_url: str = DEFAULT_REDIS_URL

    def __post_init__(self) -> None:
        problem = "a token must be a string" if not isinstance(self.token, str) else token_problem(self.token)
        if problem is not None:
            raise ConfigError(f"dashboard token: {problem}")
        if not self.redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError(f"{ENV_REDIS_URL} must start with redis://, rediss:// or unix://")

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, token_file: str | None = None, redis_url: str | None = None
    ) -> DashboardConfig:
        """The token from ``token_file``, else ``LDPTEL_DASHBOARD_TOKEN``, else ``LDPTEL_ADMIN_TOKEN``."""
        env = os.environ if environ is None else environ
        if token_file is not None:
            try:
                token = Path(token_file).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read the dashboard token file {token_file}: {exc}") from None
        else:
            token = (env.get(ENV_TOKEN) or "").strip() or (env.get(ENV_ADMIN_TOKEN) or "").strip()
        if not token:
            raise ConfigError(f"no dashboard token: set {ENV_TOKEN} (or {ENV_ADMIN_TOKEN}), or pass --token-file FILE")
        url = redis_url or (env.get(ENV_REDIS_URL) or "").strip() or DEFAULT_REDIS_URL
        return cls(token=token, redis_url=url)
