"""What the SDK leaves on the device's disk: private file modes, and no memo key of a past day in any file."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from ldptel.client import CmsParams, MetricSpec
from ldptel.client.sdk.memo import SECRET_FILE
from ldptel.client.sdk.reporter import Reporter
from ldptel.client.sdk.store import DB_FILE
from tests.client.conftest import FakeClock

DAY = 86_400
SPEC = MetricSpec(name="app.page", params=CmsParams(epsilon=4.0, k=16, m=1024), reports_per_day=10_000)
PRIVATE_FILES = (DB_FILE, f"{DB_FILE}-wal", f"{DB_FILE}-shm", SECRET_FILE)


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _reporter(path: Path, clock: FakeClock) -> Reporter:
    return Reporter("http://127.0.0.1:9", "t", path, start=False, clock=clock, sleep=clock.sleep, specs=[SPEC],
                    max_queue=100_000)


def _modes(path: Path) -> dict[str, int]:
    return {name: stat.S_IMODE(os.stat(path / name).st_mode) for name in PRIVATE_FILES}


def test_files_are_0600_with_a_permissive_umask_and_an_existing_directory(tmp_path, permissive_umask) -> None:
    storage = tmp_path / "app-data"
    storage.mkdir(mode=0o755)  # the app's own data directory, readable by others
    rep = _reporter(storage, FakeClock())
    assert rep.report(SPEC.name, "v").queued  # the WAL and the shared-memory index exist from here on
    assert _modes(storage) == dict.fromkeys(PRIVATE_FILES, 0o600)
    rep.close(timeout=0)


def test_files_an_older_sdk_left_readable_are_made_private(tmp_path, permissive_umask) -> None:
    rep = _reporter(tmp_path, FakeClock())
    rep.report(SPEC.name, "v")
    for name in PRIVATE_FILES:
        os.chmod(tmp_path / name, 0o644)
    rep2 = _reporter(tmp_path, FakeClock())  # another process opens the same storage (rep still has it open)
    assert rep2.report(SPEC.name, "w").queued
    assert _modes(tmp_path) == dict.fromkeys(PRIVATE_FILES, 0o600)
    rep2.close(timeout=0)
    rep.close(timeout=0)


def _memo_keys(path: Path) -> dict[int, set[bytes]]:
    conn = sqlite3.connect(path / DB_FILE)
    try:
        rows = conn.execute("SELECT day, key FROM memo").fetchall()
    finally:
        conn.close()
    out: dict[int, set[bytes]] = {}
    for day, key in rows:
        out.setdefault(int(day), set()).add(bytes(key))
    return out


def _lingering(path: Path, keys: set[bytes]) -> dict[str, int]:
    """How many of ``keys`` occur anywhere in the raw bytes of the database file and of its WAL."""
    found = {}
    for name in (DB_FILE, f"{DB_FILE}-wal"):
        file = path / name
        raw = file.read_bytes() if file.exists() else b""
        found[name] = sum(key in raw for key in keys)
    return found


def test_no_memo_key_of_a_past_day_stays_in_the_database_or_the_wal(tmp_path) -> None:
    clock = FakeClock()
    rep = _reporter(tmp_path, clock)
    past: set[bytes] = set()
    for day in range(3):  # several days, enough rows to split pages, some values repeated across days
        for i in range(300):
            assert rep.report(SPEC.name, f"value-{day}-{i}" if i % 3 else f"shared-{i}").queued
        keys = _memo_keys(tmp_path)
        assert set(keys) == {clock.t // DAY}
        past |= keys[int(clock.t // DAY)]
        assert _lingering(tmp_path, past)[f"{DB_FILE}-wal"] > 0  # the check sees the keys while they are live
        clock.t += DAY
        assert rep.report(SPEC.name, "first of the next day").queued  # the day change prunes the memo
        assert set(_memo_keys(tmp_path)) == {clock.t // DAY}
        assert _lingering(tmp_path, past) == {DB_FILE: 0, f"{DB_FILE}-wal": 0}
    assert rep.flush(timeout=0) is False  # (nothing can be delivered: the endpoint is closed)
    rep.close(timeout=0)
    assert _lingering(tmp_path, past) == {DB_FILE: 0, f"{DB_FILE}-wal": 0}
