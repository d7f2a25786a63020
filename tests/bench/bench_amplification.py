"""The central ε calculator's cost and the blocked sum's looseness (docs/central-privacy.md), one JSON line per figure.

    .venv/bin/python tests/bench/bench_amplification.py

For each (ε₀, n) at δ = 10⁻⁶: ``seconds`` of one uncached :func:`~ldptel.aggregator.amplification.shuffle_epsilon`
(as shipped: at most MAX_POINTS values of c) beside the ``baseline_seconds`` of the exact sum over every c (MAX_POINTS
raised past the range), and the two ε (the shipped one is an upper bound; ``looser`` is their difference).
"""

from __future__ import annotations

import json
import time

from ldptel.aggregator import amplification as amp


def _one(eps0: float, n: int, points: int) -> tuple[float, float]:
    amp._shuffle_epsilon.cache_clear()
    amp.MAX_POINTS = points
    t = time.perf_counter()
    eps = amp.shuffle_epsilon(eps0, n, 1e-6)
    return eps, time.perf_counter() - t


def main() -> None:
    shipped = amp.MAX_POINTS
    amp.shuffle_epsilon(4.0, 100)  # imports scipy outside the timings
    for n in (10_000, 100_000, 1_000_000, 10_000_000):
        for eps0 in (1.0, 4.0):
            eps, seconds = _one(eps0, n, shipped)
            exact, baseline = _one(eps0, n, 1 << 30)
            print(json.dumps({"figure": "shuffle_epsilon", "n": n, "epsilon0": eps0, "delta": 1e-6, "epsilon": eps,
                              "seconds": round(seconds, 4), "baseline": "exact sum over every c",
                              "baseline_epsilon": exact, "baseline_seconds": round(baseline, 4),
                              "looser": eps - exact}), flush=True)
    amp.MAX_POINTS = shipped


if __name__ == "__main__":
    main()
