"""SDK cost of ``Reporter.count()`` (on-device aggregation, issue 29) beside the baseline ``Reporter.report()`` of an
rr metric, measured in the same run on the same kind of storage.

Run:  .venv/bin/python tests/bench/bench_count.py [--n 20000] [--dir /dev/shm]

Prints one JSON line per figure: ops/s and latency percentiles of

* ``report`` (baseline): ``report(rr_metric, bool)``, a privatization, a queued report and a ledger spend per call;
* ``count-event``: ``count(event_count_metric)`` within a day (one tally row updated per call, nothing privatized);
* ``count-unique``: ``count(unique_devices_metric)`` within a day;
* ``count-rollover``: ``count()`` where every call starts a new day (each call also privatizes and queues the
  previous day's report: the worst case, once per day in real use).

Each figure uses a fresh Reporter and storage directory (no upload thread, a fake clock).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ldptel.client import MetricSpec, RrParams
from ldptel.client.mechanisms.event_count import EventCountParams
from ldptel.client.mechanisms.unique_devices import UniqueDevicesParams
from ldptel.client.sdk.reporter import Reporter

DAY = 86_400.0
START = 20_006 * DAY + 1.0


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def run(name: str, spec: MetricSpec, call: Callable[[Reporter, Callable[[], None]], object], n: int, base: Path) -> None:
    clock = [START]

    def next_day() -> None:
        clock[0] += DAY

    with tempfile.TemporaryDirectory(dir=base) as tmp:
        rep = Reporter("http://127.0.0.1:9", "bench-token", Path(tmp), specs=[spec], start=False,
                       clock=lambda: clock[0], max_queue=n + 1_000)
        try:
            for _ in range(min(200, n)):  # warm-up (spec cost, statements)
                call(rep, next_day)
            samples = []
            t_all = time.perf_counter()
            for _ in range(n):
                t0 = time.perf_counter()
                call(rep, next_day)
                samples.append(time.perf_counter() - t0)
            total = time.perf_counter() - t_all
        finally:
            rep.close(timeout=0)
    samples.sort()
    emit(figure=name, n=n, ops_per_s=round(n / total), p50_us=round(samples[n // 2] * 1e6, 1),
         p99_us=round(samples[min(n - 1, int(0.99 * n))] * 1e6, 1), storage=str(base), python=platform.python_version())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else tempfile.gettempdir())
    args = ap.parse_args()
    base = Path(args.dir)
    rr = MetricSpec(name="flag", params=RrParams(epsilon=1.0), reports_per_day=10_000)
    ev = MetricSpec(name="opens", params=EventCountParams(epsilon=1.0, hi=50))
    uq = MetricSpec(name="weekly", params=UniqueDevicesParams(epsilon=1.0, window_days=7))
    n = args.n
    state = {"i": 0}

    def report(rep: Reporter, next_day: Callable[[], None]) -> None:
        state["i"] += 1
        if state["i"] % 10_000 == 0:
            next_day()  # the rr metric allows 10,000 reports a day
        assert rep.report("flag", state["i"] % 3 == 0).queued

    def count_ev(rep: Reporter, next_day: Callable[[], None]) -> None:
        assert rep.count("opens").status == "counted"

    def count_uq(rep: Reporter, next_day: Callable[[], None]) -> None:
        assert rep.count("weekly").status == "counted"

    def count_rollover(rep: Reporter, next_day: Callable[[], None]) -> None:
        next_day()
        rep.count("opens")

    run("report (baseline, rr)", rr, report, n, base)
    run("count-event", ev, count_ev, n, base)
    run("count-unique", uq, count_uq, n, base)
    run("count-rollover (a report per call)", ev, count_rollover, min(n, 5_000), base)


if __name__ == "__main__":
    main()
