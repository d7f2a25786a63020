"""The one way a test waits for something to become true: :func:`wait_until`.

A condition is polled until it holds or a deadline passes; the deadline is generous (the suite runs on a
shared, loaded 2-core machine, where a step that takes 50 ms alone can take seconds) and a timeout fails with
what was awaited and the last value seen, never silently. Tests must not sleep a fixed time for something to
have happened; they wait for it with this."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["DEFAULT_TIMEOUT", "wait_until"]

T = TypeVar("T")
DEFAULT_TIMEOUT = 60.0  # seconds: far above anything that passes, so only a real hang fails


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = 0.02,
    what: str | Callable[[], str] = "a condition",
    max_interval: float = 0.25,
) -> T:
    """Call ``condition`` until it returns a truthy value and return that value; ``AssertionError`` naming
    ``what`` (a text, or a function that makes it at the timeout: a log's tail) and the last value after
    ``timeout`` seconds. The poll interval starts at ``interval`` and
    grows by half each time up to ``max_interval`` (cheap when it is quick, light on the machine when not)."""
    deadline = time.monotonic() + timeout
    pause = interval
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            described = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:g} s waiting for {described} (last: {value!r})")
        time.sleep(pause)
        pause = min(pause * 1.5, max_interval)
