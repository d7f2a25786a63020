"""How the demo treats signals: SIGTERM raises :class:`Terminated` in the main thread, so the same try/finally
cleanup runs as for Ctrl-C (KeyboardInterrupt); while it cleans up, a second Ctrl-C is ignored.

An exception a signal handler raises is lost when the signal lands while a finalizer runs (a ``__del__``, such as
redis-py's ``ConnectionPool.__del__`` run by the garbage collector): Python prints "Exception ignored in ..." and
carries on, and the demo went on simulating devices until it was killed (``tests/e2e/test_demo.py::
test_sigterm_is_cleaned_up_like_ctrl_c`` failed so under load). So a handler also sends its signal again every
:data:`REDELIVER_SECONDS` until the run's cleanup starts (:func:`acknowledge`), and the block raises the exception on
its way out if every delivery was lost (``tests/aggregator/test_demo_signals.py``)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

REDELIVER_SECONDS = 1.0  # until the cleanup starts, a signal whose exception may have been lost is sent again


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
    received: list[int] = []  # the signals that arrived (their exceptions may have been lost: module docstring)
    acknowledged = _acknowledged[0] = threading.Event()

    def redeliver(signum: int) -> None:
        while not acknowledged.wait(REDELIVER_SECONDS):
            with _sending:  # acknowledge() waits for a send under way: none comes after it returns
                if not acknowledged.is_set():
                    os.kill(os.getpid(), signum)

    def handler(signum: int, frame: FrameType | None) -> None:
        if not received:
            threading.Thread(target=redeliver, args=(signum,), name="ldptel-demo-signal", daemon=True).start()
        received.append(signum)
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    previous = signal.signal(signal.SIGTERM, handler)
    previous_int = signal.signal(signal.SIGINT, handler)
    try:
        yield
    except BaseException:
        acknowledge()
        raise
    else:
        acknowledge()
        if received:  # every delivery was lost, and the block (its cleanup included) ran to its end
            raise Terminated() if received[0] == signal.SIGTERM else KeyboardInterrupt()
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


_acknowledged: list[threading.Event] = [threading.Event()]  # of the innermost sigterm_as_exception block
_sending = threading.Lock()


def acknowledge() -> None:
    """The exception of a signal reached the code that cleans up (or no signal came): stop sending it again. The run
    calls it first thing in its cleanup, so that no second delivery interrupts the cleanup."""
    with _sending:
        _acknowledged[0].set()


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """Within the block, Ctrl-C is ignored (cleanup runs to the end); a no-op outside the main thread."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main_thread() else None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
