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

from ldptel.aggregator.dashboard.sessions import DEFAULT_SESSION_SECONDS
from ldptel.server.config import PREFIX, ConfigError, token_problem
from ldptel.server.proxies import Network, ProxyConfigError, parse_trusted_proxies

ENV_TOKEN = f"{PREFIX}DASHBOARD_TOKEN"
ENV_ADMIN_TOKEN = f"{PREFIX}ADMIN_TOKEN"
ENV_REDIS_URL = f"{PREFIX}REDIS_URL"
ENV_SESSION_SECONDS = f"{PREFIX}DASHBOARD_SESSION_SECONDS"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_HOST = "127.0.0.1"  # loopback: put a TLS proxy in front to reach it from elsewhere
DEFAULT_PORT = 8050


@dataclass(frozen=True, kw_only=True)
class DashboardConfig:
    """``token``: the bearer token operators log in with; ``redis_url``: the Redis the aggregator folds into."""

    token: str = field(repr=False)
    redis_url: str = DEFAULT_REDIS_URL
    # Login sessions (aggregator/dashboard/sessions.py): seconds a login lasts (LDPTEL_DASHBOARD_SESSION_SECONDS).
    session_seconds: float = DEFAULT_SESSION_SECONDS
    # The reverse proxies (LDPTEL_TRUSTED_PROXIES, as for the ingest) whose X-Forwarded-For names the client for the
    # login attempt limit, and whose X-Forwarded-Proto: https makes the session cookie Secure.
    trusted_proxies: tuple[Network, ...] = ()

    def __post_init__(self) -> None:
        problem = "a token must be a string" if not isinstance(self.token, str) else token_problem(self.token)
        if problem is not None:
            raise ConfigError(f"dashboard token: {problem}")
        seconds = self.session_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 60 <= seconds <= 30 * 86400:
            raise ConfigError(f"{ENV_SESSION_SECONDS} must be a number of seconds in [60, 2592000], got {seconds!r}")
        proxies = self.trusted_proxies
        try:
            parsed = parse_trusted_proxies(proxies if isinstance(proxies, str) else ",".join(str(p) for p in proxies))
        except ProxyConfigError as exc:
            raise ConfigError(f"{PREFIX}TRUSTED_PROXIES: {exc}") from None
        object.__setattr__(self, "trusted_proxies", parsed)
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
        raw_seconds = (env.get(ENV_SESSION_SECONDS) or "").strip()
        try:
            seconds = float(raw_seconds) if raw_seconds else DEFAULT_SESSION_SECONDS
        except ValueError:
            raise ConfigError(f"{ENV_SESSION_SECONDS} must be a number of seconds, got {raw_seconds!r}") from None
        proxies = (env.get(f"{PREFIX}TRUSTED_PROXIES") or "").strip()
        return cls(token=token, redis_url=url, session_seconds=seconds, trusted_proxies=proxies)  # type: ignore[arg-type]
