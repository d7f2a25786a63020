"""The ingest service's configuration: one frozen, validated dataclass, built from ``LDPTEL_*`` variables.

There are no insecure fallbacks: the app tokens and the admin token must be set, the admin token distinct
from every app token, and every token must look random (:func:`token_problem`):

* its estimated entropy is at least :data:`MIN_TOKEN_BITS` (128) bits. The estimate is
  ``length × log2(alphabet)``, where the alphabet is the union of the character classes the token uses:
  a–z (26), A–Z (26), 0–9 (10), other printable ASCII except the comma (31). ``secrets.token_urlsafe(32)``
  (43 characters, ~256 bits) passes, so does ``secrets.token_hex(16)`` unless all its 32 characters happen
  to be digits (probability 3e-7); 16 lowercase letters (~75 bits) do not;
* it uses at least :data:`MIN_DISTINCT_CHARS` distinct characters (``"t" * 40`` is not random; a random
  128-bit hex token has fewer with probability below 1e-7);
* it contains none of the :data:`PLACEHOLDERS` (``replace-with`` of ``deploy/ldptel.env.example``,
  ``changeme``, ...), case-insensitively: a copied example file must not run with published tokens.

Generate tokens with ``python3 -c "import secrets; print(secrets.token_urlsafe(32))"``. A demo builds its
config in code with :meth:`ServerConfig.demo`, which generates such tokens.

Environment variables (all optional except the tokens):

=============================  ==========================================================================
``LDPTEL_REDIS_URL``           ``redis://host:port/db`` or ``redis+cluster://host:port[,host:port...]`` (a
                               Redis Cluster; see ``ldptel.storage.client``); unset: a private embedded server
``LDPTEL_APP_TOKENS``          comma-separated bearer tokens for apps (``POST /v1/reports``, reading specs)
``LDPTEL_ADMIN_TOKEN``         bearer token for metric changes (and ``GET /metrics``)
``LDPTEL_METRICS_TOKEN``       optional bearer token that may only read ``GET /metrics`` (for Prometheus)
``LDPTEL_MAX_BATCH_REPORTS``   most reports in one batch (default 10000)
``LDPTEL_MAX_BODY_BYTES``      largest request body (default 4 MiB)
``LDPTEL_RATE_LIMIT``          ``RATE[:BURST]`` requests/s per token, over all processes and replicas (Redis), or
                               ``off`` (default 1000:2000)
``LDPTEL_AUTH_FAILURE_LIMIT``  ``RATE[:BURST]`` failed authentications/s per source address and process (memory
                               only), or ``off`` (default 1:20)
``LDPTEL_TRUSTED_PROXIES``     comma-separated addresses or CIDR networks of the reverse proxies in front of the
                               service (e.g. ``127.0.0.1`` for ``deploy/nginx.conf`` on the same host); from
                               those peers only, the client address for the failed-authentication limit is
                               read from ``X-Forwarded-For`` (:mod:`ldptel.server.proxies`). Default: none
``LDPTEL_SHARDS``              stream shards of a new metric (default 4)
``LDPTEL_RETRY_HORIZON_DAYS``  days a batch may be retried: the server refuses (422 ``batch_too_old``) a batch
                               formed longer ago and remembers batch ids until the end of their arrival day +
                               this + 1; the SDK drops such batches itself (default 3)
``LDPTEL_RETRY_AFTER``         seconds advertised in Retry-After on 503/429 (default 1)
``LDPTEL_REDIS_TIMEOUT``       Redis socket timeout in seconds (default 2)
``LDPTEL_REGISTRY_TTL``        seconds an ingest process may reuse a metric's registry record (default 1; 0: never)
``LDPTEL_CORS_ORIGINS``        comma-separated origins whose pages may call the report and spec routes (``*``: any;
                              default none; ``ldptel.server.cors``, docs/web-sdk.md)
``LDPTEL_DATA_DIR``            data dir of the embedded server (default: a temporary dir, deleted on exit)
=============================  ==========================================================================
"""

from __future__ import annotations

import math
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ldptel.client.errors import LdpError
from ldptel.client.protocol.wire import (
    DEFAULT_MAX_BATCH_REPORTS,
    DEFAULT_RETRY_HORIZON_DAYS,
    MAX_REPORTS,
    MAX_RETRY_HORIZON_DAYS,
)
from ldptel.server.cors import parse_origins
from ldptel.server.proxies import Network, ProxyConfigError, parse_trusted_proxies
from ldptel.server.ratelimit import MAX_BURST
from ldptel.storage.client import parse_redis_url
from ldptel.storage.registry import DEFAULT_SHARDS, MAX_SHARDS

__all__ = ["ConfigError", "MIN_DISTINCT_CHARS", "MIN_TOKEN_BITS", "PLACEHOLDERS", "ServerConfig", "token_problem"]

PREFIX = "LDPTEL_"
MIN_TOKEN_BITS = 128
MIN_DISTINCT_CHARS = 8
TOKEN_BYTES = 32  # what generated tokens carry: secrets.token_urlsafe(TOKEN_BYTES)
# lowercase so the check can be case-insensitive
PLACEHOLDERS = ("replace-with", "replace_with", "replaceme", "replace-me", "changeme", "change-me", "change_me",
                "placeholder", "example", "your-token", "your_token", "secret-token", "xxxxxxxx")
_CLASSES = (
    (str.islower, 26),
    (str.isupper, 26),
    (str.isdigit, 10),
    (lambda c: True, 31),  # other printable ASCII: the 32 punctuation characters but the comma
)
_GENERATE = f"generate one with: python3 -c 'import secrets; print(secrets.token_urlsafe({TOKEN_BYTES}))'"


class ConfigError(LdpError, ValueError):
    """A configuration value is missing or invalid; the message names the variable."""


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """Validated ingest configuration (see the module docstring for the matching environment variables).

    ``rate_limit`` is requests/s per token over every process and replica (``None``: no limit) and
    ``rate_burst`` the bucket size; ``auth_failure_limit``/``auth_failure_burst`` the same for failed
    authentications per source address, in each process (``ldptel.server.ratelimit``); ``trusted_proxies``
    the proxies whose ``X-Forwarded-For`` names that address (a string is parsed like the variable). ``redis_url=None`` means "start an embedded Redis" (:func:`ldptel.server.serve`,
    :func:`ldptel.server.create_app` and the gunicorn config all honour it).
    """

    app_tokens: frozenset[str] = field(repr=False)
    admin_token: str = field(repr=False)
    metrics_token: str | None = field(default=None, repr=False)
    redis_url: str | None = None
    max_batch_reports: int = DEFAULT_MAX_BATCH_REPORTS
    max_body_bytes: int = 4 * 1024 * 1024
    rate_limit: float | None = 1000.0
    rate_burst: int = 2000
    auth_failure_limit: float | None = 1.0
    auth_failure_burst: int = 20
    trusted_proxies: tuple[Network, ...] = ()
    shards: int = DEFAULT_SHARDS
    retry_horizon_days: int = DEFAULT_RETRY_HORIZON_DAYS
    retry_after: int = 1
    redis_timeout: float = 2.0
    registry_ttl: float = 1.0
    data_dir: Path | None = None
    cors_origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        tokens = self.app_tokens
        if isinstance(tokens, str) or not all(isinstance(t, str) for t in tokens):
            raise ConfigError(f"{PREFIX}APP_TOKENS must be a set of strings")
        object.__setattr__(self, "app_tokens", frozenset(tokens))
        if not self.app_tokens:
            raise ConfigError(f"{PREFIX}APP_TOKENS must name at least one token (comma-separated)")
        for token in self.app_tokens:
            _check_token(f"{PREFIX}APP_TOKENS", token)
        _check_token(f"{PREFIX}ADMIN_TOKEN", self.admin_token)
        if self.admin_token in self.app_tokens:
            raise ConfigError(f"{PREFIX}ADMIN_TOKEN must differ from every app token")
        if self.metrics_token is not None:
            _check_token(f"{PREFIX}METRICS_TOKEN", self.metrics_token)
            if self.metrics_token in self.app_tokens or self.metrics_token == self.admin_token:
                raise ConfigError(f"{PREFIX}METRICS_TOKEN must differ from the admin token and every app token")
        if self.redis_url is not None:
            try:
                parse_redis_url(self.redis_url)  # one Redis or a cluster (ldptel.storage.client)
            except LdpError as exc:
                raise ConfigError(f"{PREFIX}REDIS_URL: {exc}") from None
        _check_range("MAX_BATCH_REPORTS", self.max_batch_reports, 1, MAX_REPORTS)
        _check_range("MAX_BODY_BYTES", self.max_body_bytes, 64, 1 << 31)
        if self.rate_limit is not None and not (math.isfinite(self.rate_limit) and self.rate_limit > 0):
            raise ConfigError(f"{PREFIX}RATE_LIMIT must be a positive number of requests/s or 'off'")
        _check_range("RATE_LIMIT burst", self.rate_burst, 1, MAX_BURST)
        if self.auth_failure_limit is not None and not (
                math.isfinite(self.auth_failure_limit) and self.auth_failure_limit > 0):
            raise ConfigError(f"{PREFIX}AUTH_FAILURE_LIMIT must be a positive number of failures/s or 'off'")
        _check_range("AUTH_FAILURE_LIMIT burst", self.auth_failure_burst, 1, MAX_BURST)
        proxies = self.trusted_proxies
        try:
            parsed = parse_trusted_proxies(proxies) if isinstance(proxies, str) else parse_trusted_proxies(
                ",".join(str(p) for p in proxies))
        except ProxyConfigError as exc:
            raise ConfigError(f"{PREFIX}TRUSTED_PROXIES: {exc}") from None
        object.__setattr__(self, "trusted_proxies", parsed)
        _check_range("SHARDS", self.shards, 1, MAX_SHARDS)
        _check_range("RETRY_HORIZON_DAYS", self.retry_horizon_days, 0, MAX_RETRY_HORIZON_DAYS)
        _check_range("RETRY_AFTER", self.retry_after, 1, 3600)
        if not (math.isfinite(self.redis_timeout) and 0 < self.redis_timeout <= 60):
            raise ConfigError(f"{PREFIX}REDIS_TIMEOUT must be in (0, 60] seconds")
        if not (math.isfinite(self.registry_ttl) and 0 <= self.registry_ttl <= 60):
            raise ConfigError(f"{PREFIX}REGISTRY_TTL must be in [0, 60] seconds")
        try:
            object.__setattr__(self, "cors_origins", parse_origins(self.cors_origins))
        except ValueError as exc:
            raise ConfigError(f"{PREFIX}CORS_ORIGINS: {exc}") from None

    # ------------------------------------------------------------------------------------------ builders
    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServerConfig:
        """Read and validate ``LDPTEL_*`` variables (``environ`` defaults to ``os.environ``)."""
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            value = env.get(PREFIX + name)
            return None if value is None or value.strip() == "" else value.strip()

        tokens = get("APP_TOKENS")
        admin = get("ADMIN_TOKEN")
        if tokens is None:
            raise ConfigError(f"{PREFIX}APP_TOKENS is not set (comma-separated app bearer tokens)")
        if admin is None:
            raise ConfigError(f"{PREFIX}ADMIN_TOKEN is not set")
        kwargs: dict[str, object] = {
            "app_tokens": frozenset(t.strip() for t in tokens.split(",") if t.strip()),
            "admin_token": admin,
            "metrics_token": get("METRICS_TOKEN"),
            "redis_url": get("REDIS_URL"),
        }
        for name, attr in (
            ("MAX_BATCH_REPORTS", "max_batch_reports"),
            ("MAX_BODY_BYTES", "max_body_bytes"),
            ("SHARDS", "shards"),
            ("RETRY_HORIZON_DAYS", "retry_horizon_days"),
            ("RETRY_AFTER", "retry_after"),
        ):
            raw = get(name)
            if raw is not None:
                kwargs[attr] = _parse_int(name, raw)
        for name, attr in (("REDIS_TIMEOUT", "redis_timeout"), ("REGISTRY_TTL", "registry_ttl")):
            raw = get(name)
            if raw is not None:
                kwargs[attr] = _parse_float(name, raw)
        raw = get("RATE_LIMIT")
        if raw is not None:
            kwargs["rate_limit"], kwargs["rate_burst"] = _parse_rate(raw)
        raw = get("AUTH_FAILURE_LIMIT")
        if raw is not None:
            kwargs["auth_failure_limit"], kwargs["auth_failure_burst"] = _parse_rate(raw, "AUTH_FAILURE_LIMIT")
        raw = get("TRUSTED_PROXIES")
        if raw is not None:
            kwargs["trusted_proxies"] = raw
        raw = get("CORS_ORIGINS")
        if raw is not None:
            kwargs["cors_origins"] = raw
        raw = get("DATA_DIR")
        if raw is not None:
            kwargs["data_dir"] = Path(raw)
        return cls(**kwargs)  # type: ignore[arg-type]

    @classmethod
    def demo(cls, *, redis_url: str | None = None, **overrides: object) -> ServerConfig:
        """A config with freshly generated random tokens (read them back from the returned object)."""
        return cls(
            app_tokens=frozenset({secrets.token_urlsafe(TOKEN_BYTES)}),
            admin_token=secrets.token_urlsafe(TOKEN_BYTES),
            redis_url=redis_url,
            **overrides,  # type: ignore[arg-type]
        )

    def with_redis_url(self, url: str) -> ServerConfig:
        return replace(self, redis_url=url)


def token_bits(token: str) -> float:
    """The entropy estimate of a token: ``len(token) × log2(alphabet of the character classes it uses)``."""
    alphabet = 0
    rest = set(token)
    for member, size in _CLASSES:
        used = {c for c in rest if member(c)}
        if used:
            alphabet += size
            rest -= used
    return len(token) * math.log2(alphabet) if alphabet else 0.0


def token_problem(token: str) -> str | None:
    """Why ``token`` must not be used (one line, never the token itself), or None when it is acceptable."""
    if any(c.isspace() or c == "," for c in token) or not token.isprintable() or not token.isascii():
        return "tokens are printable ASCII without spaces or commas"
    lowered = token.lower()
    for word in PLACEHOLDERS:
        if word in lowered:
            return f"a token contains the placeholder {word!r}; {_GENERATE}"
    bits = token_bits(token)
    if bits < MIN_TOKEN_BITS:
        return (
            f"a token has ~{bits:.0f} bits of entropy, at least {MIN_TOKEN_BITS} are required (estimate: length x "
            f"log2 of the alphabet of its character classes: a-z 26, A-Z 26, 0-9 10, other 31); {_GENERATE}"
        )
    if len(set(token)) < MIN_DISTINCT_CHARS:
        return f"a token uses fewer than {MIN_DISTINCT_CHARS} distinct characters; {_GENERATE}"
    return None


def _check_token(name: str, token: str) -> None:
    problem = "a token must be a string" if not isinstance(token, str) else token_problem(token)
    if problem is not None:
        raise ConfigError(f"{name}: {problem}")


def _check_range(name: str, value: object, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"{PREFIX}{name} must be an integer in [{lo}, {hi}], got {value!r}")


def _parse_int(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{PREFIX}{name} must be an integer, got {raw!r}") from None


def _parse_float(name: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{PREFIX}{name} must be a number, got {raw!r}") from None


def _parse_rate(raw: str, name: str = "RATE_LIMIT") -> tuple[float | None, int]:
    """``"off"`` → no limit; ``"RATE"`` → burst 2×RATE; ``"RATE:BURST"``."""
    if raw.lower() == "off":
        return None, 1
    rate_text, _, burst_text = raw.partition(":")
    rate = _parse_float(name, rate_text)
    burst = _parse_int(f"{name} burst", burst_text) if burst_text else max(1, math.ceil(2 * rate))
    return rate, burst
