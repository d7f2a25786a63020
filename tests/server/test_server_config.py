"""ServerConfig: built from LDPTEL_* variables, validated, no insecure fallbacks."""

from __future__ import annotations

import pytest

from ldptel.server import ConfigError, ServerConfig

APP = "a" * 20
ADMIN = "b" * 20


def test_from_env_full() -> None:
    config = ServerConfig.from_env(
        {
            "LDPTEL_APP_TOKENS": f"{APP}, {'c' * 16}",
            "LDPTEL_ADMIN_TOKEN": ADMIN,
            "LDPTEL_REDIS_URL": "redis://127.0.0.1:6379/2",
            "LDPTEL_MAX_BATCH_REPORTS": "500",
            "LDPTEL_MAX_BODY_BYTES": "100000",
            "LDPTEL_RATE_LIMIT": "50:80",
            "LDPTEL_SHARDS": "8",
            "LDPTEL_DEDUPE_TTL": "3600",
        }
    )
    assert config.app_tokens == {APP, "c" * 16}
    assert (config.max_batch_reports, config.max_body_bytes, config.shards, config.dedupe_ttl) == (500, 100000, 8, 3600)
    assert (config.rate_limit, config.rate_burst) == (50.0, 80)
    assert APP not in repr(config) and ADMIN not in repr(config)  # secrets stay out of logs


def test_defaults_and_rate_forms() -> None:
    base = {"LDPTEL_APP_TOKENS": APP, "LDPTEL_ADMIN_TOKEN": ADMIN}
    config = ServerConfig.from_env(base)
    assert config.redis_url is None and config.shards == 4
    assert ServerConfig.from_env({**base, "LDPTEL_RATE_LIMIT": "off"}).rate_limit is None
    assert ServerConfig.from_env({**base, "LDPTEL_RATE_LIMIT": "10"}).rate_burst == 20


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({}, "APP_TOKENS is not set"),
        ({"LDPTEL_APP_TOKENS": APP}, "ADMIN_TOKEN is not set"),
        ({"LDPTEL_APP_TOKENS": "short", "LDPTEL_ADMIN_TOKEN": ADMIN}, "at least 16"),
        ({"LDPTEL_APP_TOKENS": ",", "LDPTEL_ADMIN_TOKEN": ADMIN}, "at least one token"),
        ({"LDPTEL_APP_TOKENS": APP, "LDPTEL_ADMIN_TOKEN": APP}, "differ"),
        ({"LDPTEL_APP_TOKENS": APP, "LDPTEL_ADMIN_TOKEN": ADMIN, "LDPTEL_SHARDS": "0"}, "SHARDS"),
        ({"LDPTEL_APP_TOKENS": APP, "LDPTEL_ADMIN_TOKEN": ADMIN, "LDPTEL_SHARDS": "four"}, "SHARDS must be an integer"),
        ({"LDPTEL_APP_TOKENS": APP, "LDPTEL_ADMIN_TOKEN": ADMIN, "LDPTEL_RATE_LIMIT": "-1"}, "RATE_LIMIT"),
        ({"LDPTEL_APP_TOKENS": APP, "LDPTEL_ADMIN_TOKEN": ADMIN, "LDPTEL_REDIS_URL": "http://x"}, "REDIS_URL"),
        ({"LDPTEL_APP_TOKENS": APP, "LDPTEL_ADMIN_TOKEN": ADMIN, "LDPTEL_MAX_BODY_BYTES": "1"}, "MAX_BODY_BYTES"),
    ],
)
def test_invalid_config_is_rejected(env: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ServerConfig.from_env(env)


def test_demo_generates_tokens() -> None:
    a, b = ServerConfig.demo(), ServerConfig.demo()
    assert a.app_tokens != b.app_tokens and len(a.admin_token) >= 16
    assert ServerConfig.demo(redis_url="redis://127.0.0.1:1/0", shards=2).shards == 2
