"""ServerConfig: built from LDPTEL_* variables, validated, no insecure fallbacks."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from ldptel.server import ConfigError, ServerConfig
from ldptel.server.config import MIN_TOKEN_BITS, token_problem
from tests.conftest import ADMIN_TOKEN, APP_TOKEN

APP = secrets.token_urlsafe(32)
ADMIN = secrets.token_urlsafe(32)
OTHER = "9f86d081884c7d659a2feaa0c55ad015"  # 128 bits in hex pass (token_hex(16); all digits: p = 3e-7, refused)
EXAMPLE_ENV = Path(__file__).resolve().parents[2] / "deploy" / "ldptel.env.example"


def test_from_env_full() -> None:
    config = ServerConfig.from_env(
        {
            "LDPTEL_APP_TOKENS": f"{APP}, {OTHER}",
            "LDPTEL_ADMIN_TOKEN": ADMIN,
            "LDPTEL_REDIS_URL": "redis://127.0.0.1:6379/2",
            "LDPTEL_MAX_BATCH_REPORTS": "500",
            "LDPTEL_MAX_BODY_BYTES": "100000",
            "LDPTEL_RATE_LIMIT": "50:80",
            "LDPTEL_SHARDS": "8",
            "LDPTEL_RETRY_HORIZON_DAYS": "5",
        }
    )
    assert config.app_tokens == {APP, OTHER}
    assert (config.max_batch_reports, config.max_body_bytes, config.shards, config.retry_horizon_days) == (500, 100000, 8, 5)
    assert (config.rate_limit, config.rate_burst) == (50.0, 80)
    assert APP not in repr(config) and ADMIN not in repr(config)  # secrets stay out of logs


def test_defaults_and_rate_forms() -> None:
    base = {"LDPTEL_APP_TOKENS": APP, "LDPTEL_ADMIN_TOKEN": ADMIN}
    config = ServerConfig.from_env(base)
    assert config.redis_url is None and config.shards == 4
    assert ServerConfig.from_env({**base, "LDPTEL_RATE_LIMIT": "off"}).rate_limit is None
    assert ServerConfig.from_env({**base, "LDPTEL_RATE_LIMIT": "10"}).rate_burst == 20
    assert (config.auth_failure_limit, config.auth_failure_burst) == (1.0, 20)
    assert ServerConfig.from_env({**base, "LDPTEL_AUTH_FAILURE_LIMIT": "off"}).auth_failure_limit is None
    limited = ServerConfig.from_env({**base, "LDPTEL_AUTH_FAILURE_LIMIT": "0.5:7"})
    assert (limited.auth_failure_limit, limited.auth_failure_burst) == (0.5, 7)
    with pytest.raises(ConfigError, match="AUTH_FAILURE_LIMIT"):
        ServerConfig.from_env({**base, "LDPTEL_AUTH_FAILURE_LIMIT": "-1"})


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({}, "APP_TOKENS is not set"),
        ({"LDPTEL_APP_TOKENS": APP}, "ADMIN_TOKEN is not set"),
        ({"LDPTEL_APP_TOKENS": "short", "LDPTEL_ADMIN_TOKEN": ADMIN}, "at least 128"),
        ({"LDPTEL_APP_TOKENS": ",", "LDPTEL_ADMIN_TOKEN": ADMIN}, "at least one token"),
        ({"LDPTEL_APP_TOKENS": APP, "LDPTEL_ADMIN_TOKEN": APP}, "differ"),
        ({"LDPTEL_APP_TOKENS": APP, "LDPTEL_ADMIN_TOKEN": ADMIN, "LDPTEL_METRICS_TOKEN": ADMIN}, "METRICS_TOKEN must differ"),
        ({"LDPTEL_APP_TOKENS": APP, "LDPTEL_ADMIN_TOKEN": ADMIN, "LDPTEL_METRICS_TOKEN": "replace-with-metrics-token"},
         "METRICS_TOKEN: a token contains the placeholder"),
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
    assert all(token_problem(t) is None for t in (*a.app_tokens, a.admin_token))
    assert ServerConfig.demo(redis_url="redis://127.0.0.1:1/0", shards=2).shards == 2


# ------------------------------------------------------------------------------------------------- tokens
def _example_tokens() -> list[tuple[str, str]]:
    """(variable, token) of every token the example env file ships."""
    out = []
    for line in EXAMPLE_ENV.read_text().splitlines():
        name, _, value = line.partition("=")
        if name in ("LDPTEL_APP_TOKENS", "LDPTEL_ADMIN_TOKEN", "LDPTEL_METRICS_TOKEN"):
            out += [(name, t.strip()) for t in value.split(",") if t.strip()]
    return out


def test_the_example_file_as_is_does_not_start() -> None:
    env = dict(line.split("=", 1) for line in EXAMPLE_ENV.read_text().splitlines() if "=" in line and line[0] != "#")
    with pytest.raises(ConfigError):
        ServerConfig.from_env(env)


@pytest.mark.parametrize(("name", "placeholder"), _example_tokens())
def test_every_placeholder_of_the_example_file_is_refused(name: str, placeholder: str) -> None:
    env = {"LDPTEL_APP_TOKENS": APP, "LDPTEL_ADMIN_TOKEN": ADMIN, name: placeholder}
    with pytest.raises(ConfigError) as exc:
        ServerConfig.from_env(env)
    message = str(exc.value)
    assert message.startswith(name) and "placeholder" in message and "\n" not in message
    assert placeholder not in message  # a refused token is never echoed


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("a" * 20, "bits of entropy"),  # 20 × log2(26) ≈ 94 bits
        ("0123456789" * 3, "bits of entropy"),  # 30 digits ≈ 100 bits
        ("Ab1-" * 5, "distinct characters"),  # 20 × log2(93) ≈ 131 bits by the estimate, 4 distinct characters
        ("t" * 40, "distinct characters"),  # 188 bits by length, one character
        ("abcdabcdabcdabcdabcdabcdabcdabcd", "distinct characters"),
        # fixed strong tails (not drawn at collection: pytest-xdist workers must collect the same test ids)
        ("CHANGEME-" + "q8Zt3rVx0LmN5pKs7wYb2HcJ9fDg4QeA6uRi1oTzXn", "placeholder"),
        ("has space " + "q8Zt3rVx0LmN5pKs7wYb2HcJ9fDg4QeA6uRi1oTzXn", "printable ASCII"),
    ],
)
def test_short_or_low_entropy_tokens_are_refused(token: str, reason: str) -> None:
    problem = token_problem(token)
    assert problem is not None and reason in problem and token not in problem
    with pytest.raises(ConfigError, match=reason):
        ServerConfig(app_tokens=frozenset({APP}), admin_token=token)


def test_generated_tokens_pass() -> None:
    """What the README, the demo, compose's instructions and the tests generate or use."""
    for _ in range(200):
        assert token_problem(secrets.token_urlsafe(32)) is None
        assert token_problem(secrets.token_urlsafe(24)) is None  # the demo's
    assert token_problem(APP_TOKEN) is None and token_problem(ADMIN_TOKEN) is None
    assert MIN_TOKEN_BITS == 128
