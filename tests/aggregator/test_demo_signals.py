"""The demo's signals (aggregator/demo/signals.py): SIGTERM and Ctrl-C stop the run even when the exception the
handler raises is lost, which happens when the signal lands while a finalizer (``__del__``) runs."""

from __future__ import annotations

import os
import signal
import time

import pytest

from ldptel.aggregator.demo import signals
from ldptel.aggregator.demo.signals import Terminated, sigterm_as_exception

SIGNALS = [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)]


class _SignalledInFinalizer:
    """Sends ``signum`` to this process from its ``__del__``, and waits there: the handler runs inside the
    finalizer, whose exceptions Python reports as "Exception ignored in ..." and drops."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def __del__(self) -> None:
        os.kill(os.getpid(), self.signum)
        time.sleep(0.05)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize(("signum", "exc"), SIGNALS)
def test_a_signal_whose_exception_a_finalizer_dropped_still_stops_the_run(signum: int, exc: type[BaseException]) -> None:
    """The demo went on simulating devices after a SIGTERM that landed in redis-py's ConnectionPool.__del__."""
    started = time.monotonic()
    with pytest.raises(exc), sigterm_as_exception():
        _SignalledInFinalizer(signum)  # dropped at once: its __del__ runs here
        while time.monotonic() < started + 10:  # the run goes on (device threads, polls)
            time.sleep(0.01)
    assert time.monotonic() - started < 3 * signals.REDELIVER_SECONDS


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize(("signum", "exc"), SIGNALS)
def test_a_run_that_ends_right_after_a_dropped_signal_still_reports_it(signum: int, exc: type[BaseException]) -> None:
    with pytest.raises(exc), sigterm_as_exception():
        _SignalledInFinalizer(signum)
    time.sleep(1.5 * signals.REDELIVER_SECONDS)  # and nothing sends it again once the block is left: still alive


def test_no_signal_no_exception() -> None:
    with sigterm_as_exception():
        pass
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
