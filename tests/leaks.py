"""The suite's guard against leaked Redis connections: one that the garbage collector finds open warns, every time.

Why: redis-py 8's pooled connections sit in reference cycles (connection <-> its maintenance-notification
handlers; pool <-> pool handler), so a client that is dropped without ``close()`` is freed by the cyclic garbage
collector, whenever it next runs, in whatever test runs then. The collector finalizes the objects of a cycle in
no fixed order: when the socket goes before its connection (whose ``__del__`` would close it), Python warns
"unclosed socket", which ``filterwarnings = error`` turns into a failure of that unrelated test -- about one full
run in two failed so. Whether it warned was chance; that the connection leaked was not.

:func:`install` (called by ``tests/conftest.py``) makes it deterministic: every redis-py connection that the
cyclic collector finalizes with its socket still open, and every ``redis.Redis`` it finalizes unclosed with
sockets open in its own pool,
raises a ``ResourceWarning`` (an error in this suite) naming where it was made -- the code that should have
closed it. It still surfaces in the test during which the collector runs, but always, and with that address.
Cost: one short stack walk per connection or client made (measured: nothing visible in the suite's time). An
object finalized in another process than the one that made it (a fork) is not this process's to close.
"""

from __future__ import annotations

import gc
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis.connection

__all__ = ["install", "made_at"]

_ROOT = str(Path(__file__).resolve().parents[1])
_SITE = os.sep + "site-packages" + os.sep
_FRAMES = 6  # frames of our own code kept for the message


def _our_frames() -> str:
    """Where the caller is: the innermost frames of this repository's code (tests and ldptel), innermost first."""
    frames: list[str] = []
    frame = sys._getframe(2)
    while frame is not None and len(frames) < _FRAMES:
        name = frame.f_code.co_filename
        if name.startswith(_ROOT) and _SITE not in name and not name.endswith("leaks.py"):
            frames.append(f"{os.path.relpath(name, _ROOT)}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    return " <- ".join(frames) or "(no frame of this repository)"


def made_at(obj: object) -> str | None:
    """Where ``obj`` (a redis-py connection or client made after :func:`install`) was made, else None."""
    where = getattr(obj, "_ldptel_made_at", None)
    return where if isinstance(where, str) else None


def _open_in(pool: object) -> list[object]:
    """The sockets still open in a redis-py connection pool (idle or checked out)."""
    conns: list[object] = []
    for name in ("_available_connections", "_in_use_connections", "_connections"):
        conns.extend(getattr(pool, name, None) or ())
    return [sock for c in conns if (sock := getattr(c, "_sock", None)) is not None]


def _warn(what: str, made: str | None) -> None:
    warnings.warn(f"{what}; it was made at {made}: close it (with / try-finally), do not leave it to the garbage "
                  "collector", ResourceWarning, stacklevel=2)


_collecting = False  # the cyclic garbage collector is running (gc.callbacks)


def _on_gc(phase: str, info: dict[str, int]) -> None:
    global _collecting
    _collecting = phase == "start"


def _wrap(cls: type, check: Callable[[Any], str | None]) -> None:
    """Note where each instance of ``cls`` is made; when the cyclic collector finalizes one in the process that
    made it and ``check`` names what it left open, warn (then let its own finalizer close it, as before). One
    freed by reference counting is not reported: its own finalizer closes the socket before the socket object
    goes, every time, so it cannot warn "unclosed socket" (the raw connection stack relies on that)."""
    original_init: Callable[..., None] = cls.__init__  # type: ignore[misc]
    original_del: Callable[[Any], None] | None = getattr(cls, "__del__", None)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        self._ldptel_made_at = _our_frames()
        self._ldptel_pid = os.getpid()
        original_init(self, *args, **kwargs)

    def __del__(self: Any) -> None:
        try:
            if _collecting and getattr(self, "_ldptel_pid", None) == os.getpid() and (left := check(self)):
                _warn(left, made_at(self))
        finally:
            if original_del is not None:
                original_del(self)

    cls.__init__ = __init__  # type: ignore[misc]
    cls.__del__ = __del__  # type: ignore[attr-defined]


def _connection_left(conn: Any) -> str | None:
    sock = getattr(conn, "_sock", None)
    return None if sock is None else f"a Redis connection was garbage-collected with its socket open ({sock!r})"


def _client_left(client: Any) -> str | None:
    if not getattr(client, "auto_close_connection_pool", False):  # a pool it was given is not its to close
        return None
    sockets = _open_in(getattr(client, "connection_pool", None))
    return f"a Redis client was garbage-collected unclosed, {len(sockets)} socket(s) open" if sockets else None


def install() -> None:
    """Wrap redis-py's connection and client classes (idempotent): a connection that the cyclic collector
    finalizes with its socket open, or a client it finalizes unclosed with sockets open in its own pool, warns
    ``ResourceWarning``. A leak warns whatever the collector's order: the client first (it sees the open
    sockets), the connection first (its socket is open), or the socket first (Python itself warns)."""
    if getattr(redis.connection.AbstractConnection, "_ldptel_leak_guard", False):
        return
    gc.callbacks.append(_on_gc)
    _wrap(redis.connection.AbstractConnection, _connection_left)
    _wrap(redis.Redis, _client_left)
    redis.connection.AbstractConnection._ldptel_leak_guard = True  # type: ignore[attr-defined]
