"""What the demo shows while it runs (on stderr): phase lines and progress bars, and the clock of its phases.

On a terminal a bar is redrawn in place (at most every :data:`REDRAW_SECONDS`); otherwise a plain line is
written at every tenth of the way, so logs and pipes stay short.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TextIO

PREFIX = "ldptel demo: "
BAR_WIDTH = 30
REDRAW_SECONDS = 0.1
PLAIN_STEPS = 10  # plain output: a line at every 10%


class Status:
    """Phase lines and a progress bar on stderr: redrawn in place on a terminal, sparse plain lines otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._last_draw = 0.0
        self._last_step = -1
        self._open = False

    def line(self, text: str) -> None:
        self._end_bar()
        self.stream.write(f"{PREFIX}{text}\n")
        self.stream.flush()

    def progress(self, label: str, done: int, total: int, *, started: float, final: bool = False) -> None:
        now = time.monotonic()
        elapsed = max(now - started, 1e-9)
        rate = done / elapsed
        if self.tty:
            if not final and now - self._last_draw < REDRAW_SECONDS:
                return
            self._last_draw = now
            filled = int(BAR_WIDTH * done / total) if total else BAR_WIDTH
            eta = (total - done) / rate if rate > 0 else float("inf")
            eta_text = f"ETA {eta:4.0f}s" if math.isfinite(eta) else "ETA    ?"
            bar = "█" * filled + "░" * (BAR_WIDTH - filled)
            self.stream.write(
                f"\r{label} {bar} {done:>{len(str(total))}}/{total} {100 * done / max(total, 1):3.0f}% "
                f"· {rate:,.0f}/s · {eta_text} "
            )
            self._open = True
            if final:
                self._end_bar()
            self.stream.flush()
            return
        step = int(PLAIN_STEPS * done / total) if total else PLAIN_STEPS
        if step > self._last_step or final:
            if step == self._last_step and final:
                return
            self._last_step = step
            self.stream.write(f"{PREFIX}{label} {done}/{total} ({rate:,.0f}/s)\n")
            self.stream.flush()

    def reset(self) -> None:
        self._last_step = -1
        self._last_draw = 0.0

    def _end_bar(self) -> None:
        if self._open:
            self.stream.write("\n")
            self._open = False


@dataclass
class Timings:
    """Named instants of the run (``start`` is implicit); :meth:`span` is the time between two of them."""

    start: float = field(default_factory=time.perf_counter)
    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, name: str) -> None:
        self.marks[name] = time.perf_counter()

    def span(self, a: str, b: str) -> float:
        return self.marks.get(b, time.perf_counter()) - self.marks.get(a, self.start)
