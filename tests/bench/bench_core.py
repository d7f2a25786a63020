"""Protocol-core benchmarks: one JSON line per figure, each beside a baseline measured in the same run.

    python3 dev.py bench core          (or: .venv/bin/python tests/bench/bench_core.py [--quick])

Figures (issue 2 goals): privatize_batch cms m=1024 ε=4 ≥ 1M reports/s; rr ≥ 20M reports/s; single-report
CSPRNG privatize cms m=1024 median ≤ 50 µs; fold cms m=1024 k=2048 from the packed wire form ≥ 2M reports/s;
estimate 100,000 candidates × 2,048 rows, hashing included, ≤ 1 s. Every figure is the median of 3 runs.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from ldptel.client import CmsParams, RrParams, fold, privatize, privatize_batch
from ldptel.client.mechanisms import estimate
from ldptel.client.protocol.wire import decode_batch, encode_batch

QUICK = "--quick" in sys.argv
N = 200_000 if QUICK else 1_000_000


def timed(fn: Callable[[], object], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def emit(figure: str, value: float, unit: str, *, baseline: str, baseline_value: float, goal: str, ok: bool, **extra: object) -> None:
    higher_is_better = unit.endswith("/s")
    ratio = value / baseline_value if higher_is_better else baseline_value / value
    line = {
        "figure": figure,
        "value": round(float(value), 3),
        "unit": unit,
        "baseline": baseline,
        "baseline_value": round(float(baseline_value), 3),
        "speedup_vs_baseline": round(float(ratio), 2),
        "goal": goal,
        "meets_goal": bool(ok),
        **extra,
    }
    print(json.dumps(line), flush=True)


def main() -> None:
    rng = np.random.default_rng(12345)
    cms = CmsParams(epsilon=4, k=2048, m=1024)
    domain = [f"emoji-{i}" for i in range(2600)]
    values = [domain[i] for i in rng.zipf(1.3, N) % 2600]

    # 1. privatize_batch cms, PCG64 (numpy's default generator) and SFC64; baseline: textbook numpy
    #    (uniform float per bit compared with f, then packbits), timed on a tenth of the reports.
    for name, make in (("pcg64", np.random.PCG64), ("sfc64", np.random.SFC64)):
        gen = np.random.Generator(make(1))
        t = timed(lambda gen=gen: privatize_batch(values, cms, rng=gen))
        base_n = N // 10
        def naive(gen: np.random.Generator = gen, base_n: int = base_n) -> None:
            flips = gen.random((base_n, cms.m)) < cms.flip_probability
            np.packbits(flips, axis=1)
        tb = timed(naive)
        emit(f"privatize_batch cms m=1024 eps=4 ({name})", N / t, "reports/s", baseline="numpy random((n,m)) < f + packbits",
             baseline_value=base_n / tb, goal=">= 1,000,000 reports/s", ok=N / t >= 1e6, prob_bits=cms.prob_bits,
             effective_epsilon=round(cms.effective_epsilon, 4))

    # 2. rr
    rr = RrParams(epsilon=1)
    bits = rng.random(20 * N) < 0.3
    gen = np.random.default_rng(2)
    t = timed(lambda: privatize_batch(bits, rr, rng=gen))
    tb = timed(lambda: np.packbits(bits ^ (gen.random(bits.size) < rr.flip_probability)))
    emit("privatize_batch rr", bits.size / t, "reports/s", baseline="numpy random(n) < f, xor, packbits",
         baseline_value=bits.size / tb, goal=">= 20,000,000 reports/s", ok=bits.size / t >= 2e7)

    # 3. single-report CSPRNG privatize; baseline: the os.urandom call for the same bytes alone.
    lat, base = [], []
    need = 9 + cms.prob_bits * cms.m // 8
    for i in range(3000 if QUICK else 20000):
        t0 = time.perf_counter()
        privatize(domain[i % 2600], cms)
        t1 = time.perf_counter()
        os.urandom(need)
        base.append(time.perf_counter() - t1)
        lat.append(t1 - t0)
    p50, p99 = np.percentile(lat, 50) * 1e6, np.percentile(lat, 99) * 1e6
    emit("privatize single report cms m=1024 (OS CSPRNG) p50", p50, "us", baseline=f"os.urandom({need}) alone",
         baseline_value=float(np.percentile(base, 50) * 1e6), goal="median <= 50 us", ok=p50 <= 50, p99_us=round(p99, 1))

    # 4. fold from the packed wire form: 1,000-report entries, decoded and folded together (as the worker does).
    batch = privatize_batch(values, cms, rng=np.random.default_rng(3))
    entries = [
        encode_batch(metric="emoji", version=1, batch_id=i.to_bytes(16, "little"),
                     batch=type(batch)(mechanism="cms", n=1000, rows=batch.rows[i * 1000:(i + 1) * 1000],
                                       bits=batch.bits[i * 1000:(i + 1) * 1000]), params=cms)
        for i in range(N // 1000)
    ]
    t = timed(lambda: fold(cms, [decode_batch(e, cms)[1] for e in entries]))
    sub = 20_000
    def add_at() -> None:
        counts = np.zeros((cms.k, cms.m), np.int64)
        np.add.at(counts, batch.rows[:sub], np.unpackbits(batch.bits[:sub], axis=1))
    tb = timed(add_at, runs=1)
    emit("fold cms m=1024 k=2048 from wire entries of 1000", N / t, "reports/s", baseline="np.add.at per report",
         baseline_value=sub / tb, goal=">= 2,000,000 reports/s", ok=N / t >= 2e6)

    # 5. estimate 100,000 candidates × 2,048 rows, hashing included; baseline: the bare gather of the same
    #    C·k cells at precomputed random indices (no hashing, no accumulation by candidate).
    state = fold(cms, [batch])
    cands = [f"candidate-{i}" for i in range(100_000)]
    t = timed(lambda: estimate(cms, state, candidates=cands))
    idx = rng.integers(0, cms.m, size=100_000)
    row = state.counts[0]
    def bare() -> None:
        buf = np.empty(100_000, np.int64)
        for _ in range(cms.k):
            np.take(row, idx, mode="wrap", out=buf)
    tb = timed(bare)
    emit("estimate 100k candidates x 2048 rows (hashing included)", t, "s", baseline="bare gather of C*k cells",
         baseline_value=tb, goal="<= 1 s", ok=t <= 1.0)


if __name__ == "__main__":
    main()
