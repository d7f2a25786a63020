"""How the demo treats signals: SIGTERM raises :class:`Terminated` in the main thread, so the same try/finally
cleanup runs as for Ctrl-C (KeyboardInterrupt); while it cleans up, a second Ctrl-C is ignored."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class Terminated(BaseException):
    """SIGTERM arrived. A BaseException on purpose, like KeyboardInterrupt: no ``except Exception`` on the way
    out may swallow it, so every process the demo started is stopped before it exits (143)."""


def in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def sigterm_as_exception() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` and SIGINT raises KeyboardInterrupt (only the main
    thread can install handlers). SIGINT explicitly: a process started as a background job of a non-interactive
    shell (``cmd &`` in a script, a CI loop) inherits SIGINT *ignored*, and Python then never raises
    KeyboardInterrupt: Ctrl-C / ``kill -INT`` would not stop the demo."""
    if not in_main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """Within the block, Ctrl-C is ignored (cleanup runs to the end); a no-op outside the main thread."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main_thread() else None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
