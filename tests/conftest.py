"""Root fixtures shared by every test package.

Redis is always real: one private server per session (:class:`ldptel.storage.embedded.EmbeddedRedis`, started
only if a test asks for it), or an existing server given with ``--redis-url``. Each test that uses ``redis``
gets an empty database, flushed before and after. No fakeredis, no mocks.

Fixtures: ``redis_url`` (session), ``redis_server`` (session; the embedded server, skips with --redis-url),
``redis`` (a client on a flushed db), ``server_config``, ``app``, ``client`` (Flask test client), ``app_token``,
``admin_token``, ``rng`` (``np.random.default_rng(12345)``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import hypothesis.configuration
import numpy as np
import pytest
import redis as redis_lib
from flask import Flask
from flask.testing import FlaskClient

from ldptel.server import ServerConfig, create_app
from ldptel.server.state import EXTENSION
from ldptel.storage.embedded import EmbeddedRedis
from tests import leaks, rewrite_cache

# Hypothesis keeps its example database and caches in ``.hypothesis/`` under the working directory. Because
# pyproject's ``norecursedirs`` replaces pytest's defaults (which skip dot-directories), a ``.hypothesis/``
# at the repo root makes collection fail under ``filterwarnings = error``. Keep it outside the tree.
_HYPOTHESIS_DIR = Path(tempfile.gettempdir()) / f"ldptel-hypothesis-{os.getuid()}"
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(_HYPOTHESIS_DIR))
hypothesis.configuration.set_hypothesis_home_dir(os.environ["HYPOTHESIS_STORAGE_DIRECTORY"])
# The shuffle stage (ldptel.storage.shuffle) releases a block once n_min uploads are held: 1 here, one upload per
# block, so every test that ingests and then folds sees its uploads folded at once and one stream entry per upload
# as before the stage (each still shuffled). Subprocesses (gunicorn, ldptel aggregate) inherit it; the tests of the
# stage itself (tests/server/test_shuffle*.py, tests/e2e/test_shuffle_at_rest.py) set their own.
os.environ.setdefault("LDPTEL_SHUFFLE_N_MIN", "1")
os.environ.setdefault("LDPTEL_SHUFFLE_MAX_BLOCK_UPLOADS", "1")

APP_TOKEN = "test-app-token-0123456789abcdef"
ADMIN_TOKEN = "test-admin-token-0123456789abcdef"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--redis-url",
        default=None,
        help="use this existing Redis (its db must be empty: tests FLUSHDB it) instead of an embedded server",
    )
    parser.addoption(
        "--grid",
        action="store_true",
        help="run every case of the parameter grids marked 'grid' (by default one representative case per grid "
        "runs and the rest are skipped: they check the same property on more configurations)",
    )


def pytest_configure(config: pytest.Config) -> None:
    leaks.install()  # a Redis connection left to the garbage collector with its socket open fails (tests/leaks.py)
    rewrite_cache.share_among_workers(config)  # each xdist worker rewrites its share of the test modules' asserts
    # --grid also asks the simulations that size their repetitions by it for their full count (test modules read
    # LDPTEL_TEST_GRID at import; every xdist worker configures before it imports them).
    if config.getoption("--grid") or "grid" in (config.getoption("markexpr") or ""):
        os.environ["LDPTEL_TEST_GRID"] = "1"


# Under pytest-xdist (dev.py test), tests that must share one process: they share a costly session fixture (one
# local Redis Cluster) or write the same build directory (client/js: npm ci, tsc into dist/).
XDIST_GROUPS = {"tests/cluster/": "cluster", "tests/client/test_js_sdk.py": "js", "tests/e2e/test_js_e2e.py": "js"}


def _xdist_group(item: pytest.Item) -> str | None:
    """The group of tests one xdist worker runs together: XDIST_GROUPS, else the module when it has a module-scoped
    fixture (a server stack started once per module), else None (the test goes to any worker)."""
    path = item.nodeid.split("::", 1)[0]
    for prefix, group in XDIST_GROUPS.items():
        if path.startswith(prefix):
            return group
    info = getattr(item, "_fixtureinfo", None)
    defs = getattr(info, "name2fixturedefs", {}) or {}
    if any(d.scope in ("module", "package") for fixture in defs.values() for d in fixture):
        return path
    return None


def _groups_apply(config: pytest.Config) -> bool:
    """True under pytest-xdist, in the controller and in each worker. The marks matter in the workers: the
    controller schedules by the node ids the workers collect (xdist suffixes them with @group there), and a
    worker's config has numprocesses None, its dist mode moved to ``loadgroup`` (xdist.remote.setup_config)."""
    option = config.option
    return config.pluginmanager.hasplugin("xdist") and bool(
        getattr(option, "numprocesses", None) or getattr(option, "loadgroup", False)
    )


def _slow_modules_first(items: list[pytest.Item]) -> None:
    """Under xdist, the modules with a slow test go first, each kept whole and in order (its module fixtures
    set up once). xdist hands out the groups first, then single tests in this order, one or two at a time to
    whichever worker is free: the long tests start early and the many short ones even out the end of the run,
    instead of a worker left alone with a fault suite collected last."""
    slow = {item.nodeid.split("::", 1)[0] for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in slow)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    full_grid = config.getoption("--grid") or "grid" in (config.getoption("markexpr") or "")
    parallel = _groups_apply(config)
    if parallel:
        _slow_modules_first(items)
    for item in items:
        if parallel and (group := _xdist_group(item)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        if {"redis", "redis_url", "redis_server"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.redis)
        if not full_grid and item.get_closest_marker("grid") is not None:
            item.add_marker(pytest.mark.skip(reason="a further case of a grid: python3 dev.py test --grid runs it"))


@pytest.fixture(scope="session")
def redis_server(request: pytest.FixtureRequest) -> Iterator[EmbeddedRedis]:
    """The session's embedded server (AOF on). Not available with ``--redis-url``."""
    if request.config.getoption("--redis-url"):
        pytest.skip("needs the embedded server (running with --redis-url)")
    # everysec, an explicit opt-out of the durable default: no test kills this shared server, and an fsync per
    # write (2-3 ms on this disk, far more under load) would slow every test that writes through it.
    with EmbeddedRedis(appendonly=True, appendfsync="everysec") as server:
        yield server


@pytest.fixture(scope="session")
def redis_url(request: pytest.FixtureRequest) -> str:
    url: str | None = request.config.getoption("--redis-url")
    if url:
        probe = redis_lib.Redis.from_url(url)
        try:
            if probe.dbsize():
                pytest.exit(f"--redis-url {url}: the database is not empty; the tests flush it, refusing", returncode=2)
        finally:
            probe.close()
        return url
    server: EmbeddedRedis = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture
def redis(redis_url: str) -> Iterator[redis_lib.Redis]:
    """A client on an empty database (flushed before and after the test)."""
    client = redis_lib.Redis.from_url(redis_url)
    client.flushdb()
    try:
        yield client
    finally:
        client.flushdb()
        client.close()


@pytest.fixture
def app_token() -> str:
    return APP_TOKEN


@pytest.fixture
def admin_token() -> str:
    return ADMIN_TOKEN


@pytest.fixture
def server_config(redis: redis_lib.Redis, redis_url: str) -> ServerConfig:
    """Test tokens, the test Redis, no rate limits (tests/server/test_rate_limits.py covers them)."""
    return ServerConfig(app_tokens=frozenset({APP_TOKEN}), admin_token=ADMIN_TOKEN, redis_url=redis_url, rate_limit=None,
                        auth_failure_limit=None)


@pytest.fixture
def app(server_config: ServerConfig) -> Iterator[Flask]:
    application = create_app(server_config)
    application.config["TESTING"] = True
    yield application
    application.extensions[EXTENSION].close()  # the app's Redis client and its appender's raw connections


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)
