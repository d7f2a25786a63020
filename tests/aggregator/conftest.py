"""Aggregator fixtures (the root conftest provides redis, redis_url, app, client, app_token, rng)."""

from __future__ import annotations

import pytest


@pytest.fixture
def token(app_token: str) -> str:
    return app_token


@pytest.fixture
def env_url(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test Redis as ``LDPTEL_REDIS_URL``, for CLI commands run without ``--redis-url``."""
    monkeypatch.setenv("LDPTEL_REDIS_URL", redis_url)
    return redis_url
