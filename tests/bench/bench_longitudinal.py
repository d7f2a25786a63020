"""The longitudinal audit of issue 22 §1: one JSON line per figure.

    .venv/bin/python tests/bench/bench_longitudinal.py [--quick] [--exact]

For daily-mean at ε = 1 and 2: the empirical ε lower bound (``tests/longitudinal_audit.py``, 99.9%
Clopper–Pearson, 20,000 devices per history; 5,000 with --quick) between "30 days at lo" and "15 days at lo,
then 15 at hi", beside the claim before issue 22 (2·ε∞ whatever the values) and the claim now
(:func:`~ldptel.client.mechanisms.longitudinal.sequence_epsilon`); also the same for "30 at lo" against "30 at
hi" (a constant value: the level claim ε∞, which the audit should nearly reach). ``--exact`` adds the exact ε
of rr's channel between "n reports at 0" and "m of them at 1" (docs/longitudinal.md's table).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.longitudinal_audit

from ldptel.client import RrParams
from ldptel.client.mechanisms.daily_mean import DAILY_MEAN, DailyMeanParams
from ldptel.client.mechanisms.longitudinal import sequence_epsilon
from ldptel.client.mechanisms.rr import rr_split
from tests.longitudinal_audit import History, audit

QUICK = "--quick" in sys.argv
N = 5_000 if QUICK else 20_000


def exact_rr(eps: float, n: int, m: int) -> float:
    """Exact ε of rr's PRR+IRR between n reports of 0 and n reports of which m are of 1 (any order)."""
    split = rr_split(RrParams(epsilon=eps))
    f1 = split.prr_threshold / 2**split.bits
    f2 = split.irr_num / split.irr_den

    def seg(k: np.ndarray, size: int, p1: float) -> np.ndarray:
        one = math.log(p1) + k * math.log(1 - f2) + (size - k) * math.log(f2)
        zero = math.log(1 - p1) + k * math.log(f2) + (size - k) * math.log(1 - f2)
        out: np.ndarray = np.logaddexp(one, zero)
        return out

    worst = 0.0
    b = np.arange(m + 1)
    for a in range(n - m + 1):
        diff = seg(a + b, n, f1) - (seg(np.array(a), n - m, f1) + seg(b, m, 1 - f1))
        worst = max(worst, float(np.max(np.abs(diff))))
    return worst


def main() -> None:
    for eps in (1.0, 2.0):
        params = DailyMeanParams(epsilon=eps, lo=0.0, hi=1.0)
        old_claim = DAILY_MEAN.longitudinal_epsilon(params)
        for case, first, second in (
            ("change after 15 of 30 days", [0.0] * 30, [0.0] * 15 + [1.0] * 15),
            ("constant lo vs hi, 30 days", [0.0] * 30, [1.0] * 30),
        ):
            start = time.perf_counter()
            found = audit(params, History.daily(first), History.daily(second), lo=0.0, hi=1.0, n=N, seed=2026)
            print(json.dumps({
                "figure": f"daily-mean ε={eps:g}: empirical ε lower bound, {case}",
                "value": round(found.epsilon, 3), "unit": "epsilon", "devices_per_history": N,
                "hits": [found.hits_first, found.hits_second],
                "claim_before_issue_22": round(old_claim, 3),
                "claim_now": round(sequence_epsilon(params, first, second), 3),
                "seconds": round(time.perf_counter() - start, 2),
            }))
    if "--exact" in sys.argv:
        for eps in (1.0, 2.0, 4.0):
            for n, m in ((30, 1), (30, 5), (30, 15), (365, 182)):
                print(json.dumps({"figure": f"rr ε={eps:g}: exact ε, {m} of {n} reports changed",
                                  "value": round(exact_rr(eps, n, m), 2), "unit": "epsilon"}))


if __name__ == "__main__":
    main()
