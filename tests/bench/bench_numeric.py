"""Numeric-mechanism benchmarks: one JSON line per figure, each beside a baseline measured in the same run.

    python3 dev.py bench numeric          (or: .venv/bin/python tests/bench/bench_numeric.py [--quick])

Figures (issue 15 goals): privatize_batch of the one-bit mean ≥ 20M reports/s; its fold from wire entries
≥ 20M reports/s; a 64-bucket numeric histogram privatize_batch and fold ≥ 2M reports/s (grr at ε = 4 and
oue at ε = 1). The dhm mean is measured too (no goal). Every figure is the median of 3 runs; privatization
uses the OS CSPRNG (what the SDK uses) unless the figure says otherwise.
"""

from __future__ import annotations

import sys

import numpy as np
from bench_core import emit, timed  # the script directory is on sys.path

from ldptel.client import fold, privatize_batch
from ldptel.client.mechanisms.histogram import HistogramParams, bucket_edges
from ldptel.client.mechanisms.mean import MeanParams
from ldptel.client.protocol.wire import decode_batch, encode_batch

QUICK = "--quick" in sys.argv
N = 1_000_000 if QUICK else 10_000_000
SUB = N // 50  # the slow baselines run on fewer reports
ENTRY = 1000  # reports per wire entry, as bench_core folds them


def _entries(name: str, params: object, batch: object, n: int) -> list[bytes]:
    out = []
    for i in range(n // ENTRY):
        part = _slice(batch, i)
        out.append(encode_batch(metric=name, version=1, batch_id=i.to_bytes(16, "little"), batch=part, params=params))  # type: ignore[arg-type]
    return out


def _slice(batch: object, i: int) -> object:
    lo, hi = i * ENTRY, (i + 1) * ENTRY
    bits, cols = batch.bits, batch.cols  # type: ignore[attr-defined]
    if bits is not None and bits.ndim == 1:
        bits = bits[lo // 8 : hi // 8]
    elif bits is not None:
        bits = bits[lo:hi]
    return type(batch)(n=ENTRY, bits=bits, cols=None if cols is None else cols[lo:hi])


def main() -> None:
    rng = np.random.default_rng(15)
    seconds = rng.lognormal(np.log(95), 1.2, N)

    # 1. one-bit mean privatize_batch; baseline: textbook numpy floats (value coin and flip as uniforms < p)
    onebit = MeanParams(epsilon=1, lo=0, hi=3600, variant="onebit")
    t = timed(lambda: privatize_batch(seconds, onebit))
    gen = np.random.default_rng(2)
    f = 1 / (np.e + 1)
    def naive() -> None:
        x = np.clip(seconds, 0, 3600) / 3600
        np.packbits((gen.random(N) < x) ^ (gen.random(N) < f))
    tb = timed(naive)
    emit("privatize_batch mean onebit eps=1 (OS CSPRNG)", N / t, "reports/s", baseline="numpy random(n) < x, random(n) < f, xor, packbits (PCG64)",
         baseline_value=N / tb, goal=">= 20,000,000 reports/s", ok=N / t >= 2e7, effective_epsilon=round(onebit.effective_epsilon, 6))
    t = timed(lambda: privatize_batch(seconds, onebit, rng=gen))
    emit("privatize_batch mean onebit eps=1 (PCG64)", N / t, "reports/s", baseline="same textbook numpy (PCG64)",
         baseline_value=N / tb, goal=">= 20,000,000 reports/s", ok=N / t >= 2e7)

    # 2. fold of the one-bit mean from wire entries of 1000 reports (decode included); baseline: unpackbits + sum
    batch = privatize_batch(seconds, onebit, rng=gen)
    entries = _entries("secs", onebit, batch, N)
    t = timed(lambda: fold(onebit, [decode_batch(e, onebit)[1] for e in entries]))
    tb = timed(lambda: [int(np.unpackbits(np.frombuffer(e, np.uint8)).sum()) for e in entries])
    emit("fold mean onebit from wire entries of 1000", N / t, "reports/s", baseline="unpackbits + sum of each entry",
         baseline_value=N / tb, goal=">= 20,000,000 reports/s", ok=N / t >= 2e7)

    # 3. dhm mean (ε = 4): privatize and fold, no goal; baseline: the one-bit mean above
    dhm = MeanParams(epsilon=4, lo=0, hi=3600)
    n3 = N // 5
    t = timed(lambda: privatize_batch(seconds[:n3], dhm))
    to = timed(lambda: privatize_batch(seconds[:n3], onebit))
    emit("privatize_batch mean dhm eps=4 (OS CSPRNG)", n3 / t, "reports/s", baseline="mean onebit, same run",
         baseline_value=n3 / to, goal="none (informational)", ok=True, window=dhm.window, pm_share=dhm.pm_share)

    # 4. 64-bucket histogram: grr at ε = 4 (d < 3e^4 + 2) and oue at ε = 1; baseline: textbook numpy
    #    (searchsorted, random() < p, integers() for the other bucket; fold with np.add.at)
    edges = bucket_edges(0, 3600, 64, scale="log")
    n4 = N // 5
    for eps in (4.0, 1.0):
        hist = HistogramParams(epsilon=eps, edges=edges)
        t = timed(lambda hist=hist: privatize_batch(seconds[:n4], hist))
        def naive_hist(hist: HistogramParams = hist) -> None:
            b = np.searchsorted(np.asarray(edges[1:-1]), seconds[:n4], side="right")
            other = gen.integers(0, 63, n4)
            np.where(gen.random(n4) < hist.p, b, other + (other >= b))
        tb = timed(naive_hist)
        emit(f"privatize_batch num-histogram d=64 eps={eps:g} ({hist.encoding}, OS CSPRNG)", n4 / t, "reports/s",
             baseline="numpy searchsorted + random() < p + integers() (PCG64; grr's work even for oue)",
             baseline_value=n4 / tb, goal=">= 2,000,000 reports/s", ok=n4 / t >= 2e6)
        hb = privatize_batch(seconds[:n4], hist, rng=gen)
        entries = _entries("hist", hist, hb, n4)
        t = timed(lambda hist=hist, entries=entries: fold(hist, [decode_batch(e, hist)[1] for e in entries]))

        def add_at(hb: object = hb, hist: HistogramParams = hist) -> None:
            counts = np.zeros(hist.d if hist.encoding == "grr" else 64, np.int64)
            if hb.cols is not None:  # type: ignore[attr-defined]
                np.add.at(counts, hb.cols[:SUB], 1)  # type: ignore[attr-defined]
            else:
                counts += np.unpackbits(hb.bits[:SUB], axis=1).sum(axis=0, dtype=np.int64)  # type: ignore[attr-defined]
        tb = timed(add_at)
        emit(f"fold num-histogram d=64 eps={eps:g} ({hist.encoding}) from wire entries of 1000", n4 / t, "reports/s",
             baseline="np.add.at (grr) / unpackbits + sum (oue), no decode", baseline_value=SUB / tb,
             goal=">= 2,000,000 reports/s", ok=n4 / t >= 2e6)


if __name__ == "__main__":
    main()
