"""Aggregator fixtures (the root conftest provides redis, redis_url, app, client, app_token, rng)."""

from __future__ import annotations

import pytest


@pytest.fixture
def token(app_token: str) -> str:
    return app_token
