"""TypeScript SDK benchmark: Node privatize (cms m = 1024) per report and in a loop, report() in Node and in
headless Chromium, the browser bundle's size; the Python SDK's privatize measured in the same run as the baseline.

Run:  .venv/bin/python tests/bench/bench_js_sdk.py      (or: python3 dev.py bench js_sdk)

One JSON line per figure. Goals (issue 27): Node privatize p50 <= 30 us and >= 300k reports/s in a loop;
report() p50 in Chromium <= 0.2 ms; bundle <= 20 KB min+gzip.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ldptel.client import CmsParams  # noqa: E402
from ldptel.client.mechanisms import privatize  # noqa: E402
from tests.js_sdk import JS, build, run_npm  # noqa: E402


def emit(**fields: object) -> None:
    print(json.dumps({"machine": f"{platform.machine()} {os.cpu_count()} cpu", **fields}), flush=True)


def main() -> int:
    build()
    params = CmsParams(epsilon=4.0, k=2048, m=1024)
    values = [f"https://example.com/page/{i}" for i in range(500)]
    for i in range(2000):
        privatize(values[i % 500], params)
    times = []
    for i in range(20000):
        t = time.perf_counter()
        privatize(values[i % 500], params)
        times.append((time.perf_counter() - t) * 1e6)
    times.sort()
    emit(sdk="python", figure="baseline_python_privatize_cms_m1024_p50_us", value=round(times[len(times) // 2], 2),
         prob_bits=params.prob_bits)
    # the Python loop rate beside the TS one, per wall second and per CPU-second of this process: the machine is
    # shared and loaded, so CPU-seconds is the honest measure (wall also counts time given to other processes)
    n = 20000
    t, c = time.perf_counter(), time.process_time()
    for i in range(n):
        privatize(values[i % 500], params)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    emit(sdk="python", figure="baseline_python_privatize_cms_m1024_reports_per_s", value=round(n / wall),
         per_cpu_second=round(n / cpu), loadavg=[round(x, 2) for x in os.getloadavg()])
    for script in ("dist/test/bench.js",):
        res = subprocess.run(["node", script], cwd=JS, capture_output=True, text=True, timeout=600)
        sys.stdout.write(res.stdout)
        if res.returncode:
            sys.stderr.write(res.stderr)
            return 1
    res = run_npm("bundle")
    sys.stdout.write(res.stdout)
    with tempfile.TemporaryDirectory() as profile:
        res = subprocess.run(["node", "dist/test/e2e/browser_bench.js", profile], cwd=JS, capture_output=True, text=True,
                             timeout=600)
        sys.stdout.write(res.stdout)
        if res.returncode:
            sys.stderr.write(res.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
