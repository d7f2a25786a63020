"""LDPTEL_REDIS_URL parsing (ldptel.storage.client): one Redis or a cluster, our wait_replicas option, and a
clear error naming what is allowed."""

from __future__ import annotations

import pytest

from ldptel.client.errors import InvalidParameterError
from ldptel.server.config import ConfigError, ServerConfig
from ldptel.storage.client import parse_redis_url


def test_single_node_urls_pass_through_to_redis_py() -> None:
    target = parse_redis_url("redis://:secret@h:6380/2?socket_keepalive=true")
    assert not target.cluster and target.url == "redis://:secret@h:6380/2?socket_keepalive=true"
    assert target.display == "redis://:***@h:6380/2?socket_keepalive=true"
    assert parse_redis_url("unix:///run/redis.sock").url == "unix:///run/redis.sock"


def test_cluster_urls_give_seeds_tls_credentials_and_wait_replicas() -> None:
    target = parse_redis_url("rediss+cluster://app:p%40ss@10.0.0.1:7000,[::1]:7001,node-c:7002?wait_replicas=1")
    assert target.cluster and target.tls and target.wait_replicas == 1
    assert target.seeds == (("10.0.0.1", 7000), ("::1", 7001), ("node-c", 7002))
    assert (target.username, target.password) == ("app", "p@ss")
    assert "p@ss" not in target.display and "p%40ss" not in target.display
    plain = parse_redis_url("redis+cluster://h:1")
    assert plain.seeds == (("h", 1),) and not plain.tls and plain.password is None and plain.wait_replicas == 0
    assert parse_redis_url("redis://h:1/0?wait_replicas=2").url == "redis://h:1/0"  # ours, removed for redis-py


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://h:1", "redis\\+cluster://"),
        ("h:6379", "redis://"),
        ("redis+cluster://h", "host:port"),
        ("redis+cluster://h:0", "host:port"),
        ("redis+cluster://", "at least one seed"),
        ("redis+cluster://h:1/3", "only db 0"),
        ("redis+cluster://h:1?ssl_cert_reqs=none", "wait_replicas only"),
        ("redis+cluster://h:1?wait_replicas=x", "wait_replicas"),
        ("redis://h:1?wait_replicas=99", "wait_replicas"),
    ],
)
def test_bad_urls_say_what_is_allowed(url: str, message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        parse_redis_url(url)


def test_the_service_config_accepts_a_cluster_url_and_refuses_a_bad_one() -> None:
    tokens = {"app_tokens": frozenset({"test-app-token-0123456789abcdef"}), "admin_token": "test-admin-token-0123456789abcdef"}
    assert ServerConfig(redis_url="redis+cluster://a:1,b:2", **tokens).redis_url == "redis+cluster://a:1,b:2"  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="LDPTEL_REDIS_URL"):
        ServerConfig(redis_url="redis+cluster://a", **tokens)  # type: ignore[arg-type]
