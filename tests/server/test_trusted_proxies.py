"""The real client address behind a declared proxy (``LDPTEL_TRUSTED_PROXIES``, ``ldptel.server.proxies``), the key
of the failed-authentication limit (issue 22 §2). Through the shipped nginx: tests/faults/test_auth_isolation.py."""

from __future__ import annotations

import ipaddress

import pytest
from flask.testing import FlaskClient
from hypothesis import given
from hypothesis import strategies as st

from ldptel.server import ServerConfig, create_app
from ldptel.server.config import ConfigError
from ldptel.server.proxies import TrustedProxies, parse_trusted_proxies

APP_TOKEN = "proxy-app-token-Xc8Vb2Nm4Lk6Jh0G"
ADMIN_TOKEN = "proxy-admin-token-Qw3Er5Ty7Ui9Op1A"
WRONG = "wrong-token-0123456789abcdefXYZ"
PROXIES = TrustedProxies(parse_trusted_proxies("127.0.0.1, 10.1.0.0/16, fd00::/8"))


def _source(peer: str, xff: str | None = None, proxies: TrustedProxies = PROXIES) -> str:
    environ = {"REMOTE_ADDR": peer}
    if xff is not None:
        environ["HTTP_X_FORWARDED_FOR"] = xff
    return proxies.source(environ)


@pytest.mark.parametrize(("peer", "xff", "expected"), [
    ("198.51.100.7", None, "198.51.100.7"),  # no proxy
    ("198.51.100.7", "203.0.113.9", "198.51.100.7"),  # an undeclared peer's header is ignored
    ("127.0.0.1", "203.0.113.9", "203.0.113.9"),  # nginx on the same host
    ("127.0.0.1", None, "127.0.0.1"),  # a declared proxy that sent no header: the proxy (one shared budget)
    ("127.0.0.1", "", "127.0.0.1"),
    ("127.0.0.1", "spoofed, 203.0.113.9", "203.0.113.9"),  # what the client wrote is left of what nginx appended
    ("127.0.0.1", "203.0.113.9, 10.1.2.3", "203.0.113.9"),  # a chain of declared proxies is skipped
    ("127.0.0.1", "10.1.2.3", "127.0.0.1"),  # only proxies: the peer
    ("127.0.0.1", "198.51.100.1, not-an-address", "127.0.0.1"),  # unparseable: fail closed onto the proxy
    ("127.0.0.1", "203.0.113.9:51234", "203.0.113.9"),  # v4:port
    ("127.0.0.1", "[2001:db8:1:2::7]:443", "2001:db8:1:2::/64"),  # IPv6 keyed by its /64
    ("127.0.0.1", "2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
    ("127.0.0.1", "::ffff:203.0.113.9", "203.0.113.9"),  # IPv4-mapped
    ("::ffff:127.0.0.1", "203.0.113.9", "203.0.113.9"),  # a mapped peer address is the proxy too
    ("fd00::5", "198.51.100.2", "198.51.100.2"),
    ("2001:db8:9:9::1", None, "2001:db8:9:9::/64"),
    ("", "203.0.113.9", ""),  # no peer address (a UNIX socket): one source
])
def test_the_source_is_the_first_undeclared_address_from_the_right(peer: str, xff: str | None, expected: str) -> None:
    assert _source(peer, xff) == expected


def test_without_declared_proxies_no_header_is_ever_read() -> None:
    assert _source("127.0.0.1", "203.0.113.9", TrustedProxies()) == "127.0.0.1"


@given(st.text(max_size=300))
def test_any_header_from_a_proxy_gives_an_address_or_the_proxy_and_never_raises(xff: str) -> None:
    source = _source("127.0.0.1", xff)
    if source != "127.0.0.1":
        network = ipaddress.ip_network(source)  # an address (/32) or an IPv6 /64, never free text
        assert network.prefixlen in (32, 64) and not PROXIES.trusts(network.network_address)


@pytest.mark.parametrize("text", ["0.0.0.0/0", "::/0", "nginx", "127.0.0.1, 10.0.0.0/33", "300.1.1.1"])
def test_a_bad_or_all_trusting_declaration_is_refused_by_name(text: str) -> None:
    with pytest.raises(ConfigError, match="LDPTEL_TRUSTED_PROXIES"):
        ServerConfig.from_env({"LDPTEL_APP_TOKENS": APP_TOKEN, "LDPTEL_ADMIN_TOKEN": ADMIN_TOKEN,
                               "LDPTEL_TRUSTED_PROXIES": text})


def test_the_declaration_is_read_from_the_environment() -> None:
    cfg = ServerConfig.from_env({"LDPTEL_APP_TOKENS": APP_TOKEN, "LDPTEL_ADMIN_TOKEN": ADMIN_TOKEN,
                                 "LDPTEL_TRUSTED_PROXIES": " 127.0.0.1 , 172.28.0.0/24,"})
    assert [str(n) for n in cfg.trusted_proxies] == ["127.0.0.1/32", "172.28.0.0/24"]
    assert ServerConfig.from_env({"LDPTEL_APP_TOKENS": APP_TOKEN, "LDPTEL_ADMIN_TOKEN": ADMIN_TOKEN}).trusted_proxies == ()


def test_behind_a_declared_proxy_each_client_has_its_own_failure_budget(redis_url: str) -> None:
    app = create_app(ServerConfig(app_tokens=frozenset({APP_TOKEN}), admin_token=ADMIN_TOKEN, redis_url=redis_url,
                                  rate_limit=None, auth_failure_limit=0.001, auth_failure_burst=2,
                                  trusted_proxies="127.0.0.1"))  # type: ignore[arg-type]
    client: FlaskClient = app.test_client()

    def get(token: str, peer: str, xff: str | None = None) -> int:
        headers = {"Authorization": f"Bearer {token}"} | ({} if xff is None else {"X-Forwarded-For": xff})
        return client.get("/v1/metrics", headers=headers, environ_base={"REMOTE_ADDR": peer}).status_code

    assert [get(WRONG, "127.0.0.1", "203.0.113.9") for _ in range(3)] == [401, 401, 429]
    assert get(WRONG, "127.0.0.1", "203.0.113.10") == 401  # another client behind the same proxy
    assert get(ADMIN_TOKEN, "127.0.0.1", "203.0.113.9") == 429 and get(APP_TOKEN, "127.0.0.1", "203.0.113.9") == 200
    # An undeclared peer that names someone else is charged itself, not the address it wrote.
    assert [get(WRONG, "198.51.100.5", "203.0.113.11") for _ in range(3)] == [401, 401, 429]
    assert get(WRONG, "127.0.0.1", "203.0.113.11") == 401
    assert get(WRONG, "198.51.100.5", "203.0.113.12") == 429  # rotating the header does not help
    app.extensions["ldptel"].close()
