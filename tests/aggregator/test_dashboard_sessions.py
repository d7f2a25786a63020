"""Dashboard login sessions (issue 22 §4), without a browser: a random id per login with an expiry, revoked at logout,
``Secure`` over TLS (direct, or a declared proxy's ``X-Forwarded-Proto``), and a per-source login attempt limit.

Before: the cookie was an HMAC of the token, the same value for every login, still accepted after ``/logout`` and
forever; no ``Secure`` behind TLS termination; no attempt limit. The browser half: test_dashboard_browser.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient

from ldptel.aggregator.dashboard import DashboardConfig, create_dashboard
from ldptel.aggregator.dashboard.app import AUTH_EXTENSION, COOKIE, EXTENSION, LOGIN_FAILURE_BURST
from ldptel.aggregator.dashboard.sessions import SessionStore

TOKEN = "sess-0123456789abcdef-ABCDEFGHIJ-xyz"
WRONG = "sess-wrong-0123456789abcdef-ABCDEFGH"


@pytest.fixture
def app(redis_url: str) -> Iterator[Flask]:
    app = create_dashboard(DashboardConfig(token=TOKEN, redis_url=redis_url, session_seconds=3600,
                                           trusted_proxies="127.0.0.1"))  # type: ignore[arg-type]
    yield app
    app.extensions[EXTENSION][1].close()


def _login(client: FlaskClient, token: str = TOKEN, **kwargs: object):  # type: ignore[no-untyped-def]
    return client.post("/login", data={"token": token, "next": "/"}, **kwargs)


def _session(resp) -> str:  # type: ignore[no-untyped-def]
    header = resp.headers["Set-Cookie"]
    assert header.startswith(COOKIE + "=")
    return str(header.split(";", 1)[0].split("=", 1)[1])


def test_each_login_gets_its_own_random_session_with_an_expiry(app: Flask) -> None:
    ids = set()
    for _ in range(3):
        resp = _login(app.test_client())
        assert resp.status_code == 303
        header = resp.headers["Set-Cookie"]
        assert "HttpOnly" in header and "SameSite=Strict" in header and "Max-Age=3600" in header
        assert "Secure" not in header  # plain HTTP, no declared proxy saying otherwise
        value = _session(resp)
        assert TOKEN not in value and len(value) >= 43  # 256 random bits, url-safe
        ids.add(value)
    assert len(ids) == 3  # before: the same HMAC of the token every time


def test_logout_revokes_the_session_on_the_server(app: Flask) -> None:
    browser = app.test_client()
    old = _session(_login(browser))
    other = app.test_client()
    other.set_cookie(COOKIE, _session(_login(other)))  # another operator's session
    assert browser.get("/api/metrics").status_code == 200
    out = browser.post("/logout")
    assert out.status_code == 303 and f"{COOKIE}=;" in out.headers["Set-Cookie"]
    replay = app.test_client()
    replay.set_cookie(COOKIE, old)  # the old cookie, kept by an attacker or a stale tab
    assert replay.get("/api/metrics").status_code == 401  # before: 200
    assert replay.get("/").status_code == 303
    assert other.get("/api/metrics").status_code == 200  # only that session ended


def test_a_session_expires(app: Flask) -> None:
    now = [1000.0]
    app.extensions[AUTH_EXTENSION].sessions = SessionStore(ttl=3600, clock=lambda: now[0])
    client = app.test_client()
    _login(client)
    now[0] += 3599
    assert client.get("/api/metrics").status_code == 200
    now[0] += 1
    assert client.get("/api/metrics").status_code == 401  # ended, and forgotten
    assert len(app.extensions[AUTH_EXTENSION].sessions) == 0


def test_the_store_is_bounded_and_keeps_no_usable_id() -> None:
    now = [0.0]
    store = SessionStore(ttl=10, max_sessions=3, clock=lambda: now[0])
    ids = [store.create() for _ in range(4)]
    assert len(store) == 3 and not store.valid(ids[0]) and all(store.valid(i) for i in ids[1:])  # oldest dropped
    assert not any(i.encode() in key for i in ids for key in store._expiry)  # only SHA-256 digests are held
    assert not store.valid("") and not store.valid("\ud800") and not store.valid("x" * 1000)


@pytest.mark.parametrize(("base_url", "environ", "headers", "secure"), [
    ("https://localhost", {}, {}, True),  # served with TLS
    ("http://localhost", {"REMOTE_ADDR": "127.0.0.1"}, {"X-Forwarded-Proto": "https"}, True),  # a declared proxy
    ("http://localhost", {"REMOTE_ADDR": "198.51.100.7"}, {"X-Forwarded-Proto": "https"}, False),  # anyone else
    ("http://localhost", {"REMOTE_ADDR": "127.0.0.1"}, {}, False),
])
def test_the_cookie_is_secure_over_tls_or_behind_a_declared_proxy_only(
        app: Flask, base_url: str, environ: dict[str, str], headers: dict[str, str], secure: bool) -> None:
    resp = _login(app.test_client(), base_url=base_url, environ_base=environ, headers=headers)
    assert resp.status_code == 303
    assert ("; Secure" in resp.headers["Set-Cookie"]) is secure


def test_login_attempts_are_limited_per_source_and_a_right_guess_looks_like_a_wrong_one(app: Flask) -> None:
    client = app.test_client()

    def login(token: str, source: str, xff: str | None = None) -> int:
        headers = {} if xff is None else {"X-Forwarded-For": xff}
        return _login(client, token, environ_base={"REMOTE_ADDR": source}, headers=headers).status_code

    assert [login(WRONG, "198.51.100.7") for _ in range(LOGIN_FAILURE_BURST)] == [401] * LOGIN_FAILURE_BURST
    blocked = _login(client, WRONG, environ_base={"REMOTE_ADDR": "198.51.100.7"})
    assert blocked.status_code == 429 and int(blocked.headers["Retry-After"]) >= 1
    assert "too many failed logins" in blocked.get_data(as_text=True)
    assert login(TOKEN, "198.51.100.7") == 429  # no oracle: the right token gets the same answer
    assert login(TOKEN, "198.51.100.8") == 303  # another address is not affected
    # behind the declared proxy each client has its own budget; a client's own X-Forwarded-For is not believed
    assert [login(WRONG, "127.0.0.1", "203.0.113.5") for _ in range(LOGIN_FAILURE_BURST + 1)][-1] == 429
    assert login(TOKEN, "127.0.0.1", "203.0.113.6") == 303
    assert login(WRONG, "198.51.100.9", "203.0.113.6") == 401  # charged to 198.51.100.9, not to .6
    # wrong bearer tokens on the API count the same way
    api = [client.get("/api/metrics", headers={"Authorization": f"Bearer {WRONG}"},
                      environ_base={"REMOTE_ADDR": "198.51.100.20"}).status_code for _ in range(LOGIN_FAILURE_BURST + 2)]
    assert api[:LOGIN_FAILURE_BURST] == [401] * LOGIN_FAILURE_BURST and api[-1] == 429
    right = client.get("/api/metrics", headers={"Authorization": f"Bearer {TOKEN}"},
                       environ_base={"REMOTE_ADDR": "198.51.100.20"})
    assert right.status_code == 429 and right.get_json()["error"] == "rate_limited"


def test_session_settings_are_read_from_the_environment(redis_url: str) -> None:
    from ldptel.server.config import ConfigError

    env = {"LDPTEL_DASHBOARD_TOKEN": TOKEN, "LDPTEL_DASHBOARD_SESSION_SECONDS": "900",
           "LDPTEL_TRUSTED_PROXIES": "10.0.0.0/8"}
    cfg = DashboardConfig.from_env(env, redis_url=redis_url)
    assert cfg.session_seconds == 900 and [str(n) for n in cfg.trusted_proxies] == ["10.0.0.0/8"]
    for bad in ({"LDPTEL_DASHBOARD_SESSION_SECONDS": "5"}, {"LDPTEL_DASHBOARD_SESSION_SECONDS": "soon"},
                {"LDPTEL_TRUSTED_PROXIES": "0.0.0.0/0"}):
        with pytest.raises(ConfigError):
            DashboardConfig.from_env({**env, **bad}, redis_url=redis_url)
