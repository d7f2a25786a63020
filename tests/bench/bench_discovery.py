"""Discovery (pem) benchmarks: one JSON line per figure, each beside a baseline measured in the same run.

    .venv/bin/python tests/bench/bench_discovery.py [--quick] [--reps R] [--pure-ldp pem|sfp|both|none]

Population (issue 16): Zipf(1.1) counts over 100,000 distinct random strings of 1–10 letters a–z, n = 10⁶
reports (2·10⁵ with --quick), total ε = 4 per report, pem with k = 256, m = 1024, L = 10 bytes, 50 prefixes
kept per round, family-wise α = 0.05; a new population and hash seed in each of R repetitions (default 20).

Figures: privatize_batch (goal ≥ 500 k reports/s; baseline oue-cms k = 256, m = 1024 on the same values);
fold from the wire form (goal: the rate of oue-cms with the same state, k = 2560 rows: ratio ≥ 0.8); discovery from the folded state (goal
≤ 30 s); recall@10 ≥ 0.9 and recall@20 ≥ 0.8 (mean over repetitions, min printed) and the share of
repetitions with no false value (a reported value nobody holds) ≥ 0.95. With pure-LDP installed
(``pip install pure-ldp scikit-learn statsmodels`` into .venv; not a project dependency), its PEM and SFP run
on the first repetition's values: recall, time and ε beside ours (pure-LDP predates numpy 2 and xxhash 2:
two attributes of its modules are shimmed here, nothing else).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import string
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from ldptel.client import OueCmsParams, PemParams, fold, privatize_batch
from ldptel.client.mechanisms import get_mechanism
from ldptel.client.protocol.wire import decode_batch, encode_batch

DISTINCT = 100_000
MAX_LEN = 10
EPSILON = 4.0
K, M = 256, 1024
KEEP = 50


def emit(figure: str, value: float, unit: str, *, baseline: str, baseline_value: float, goal: str, ok: bool, **extra: Any) -> None:
    higher = unit.endswith("/s") or unit in ("recall", "share")
    ratio = value / baseline_value if higher else baseline_value / value
    print(json.dumps({"figure": figure, "value": round(float(value), 4), "unit": unit, "baseline": baseline,
                      "baseline_value": round(float(baseline_value), 4), "ratio_vs_baseline": round(float(ratio), 3),
                      "goal": goal, "meets_goal": bool(ok), **extra}), flush=True)


def population(seed: int, n: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(distinct strings, their counts, the n values shuffled as an object array)."""
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(string.ascii_lowercase.encode(), dtype=np.uint8)
    words: list[str] = []
    while len(words) < DISTINCT:
        lens = rng.integers(1, MAX_LEN + 1, DISTINCT)
        words = list(dict.fromkeys(words + [bytes(letters[rng.integers(0, 26, int(n_))]).decode() for n_ in lens]))
    words = words[:DISTINCT]
    w = 1.0 / np.arange(1, DISTINCT + 1) ** 1.1
    counts = rng.multinomial(n, w / w.sum())
    values = np.repeat(np.array(words, dtype=object), counts)
    rng.shuffle(values)
    return words, counts, values


def recalls(words: list[str], counts: np.ndarray, found: list[str]) -> tuple[float, float]:
    top = [words[i] for i in np.argsort(-counts, kind="stable")[:20]]
    return len(set(top[:10]) & set(found[:10])) / 10, len(set(top) & set(found[:20])) / 20


def median_rate(fn: Callable[[], object], n: int, runs: int = 3) -> float:
    """n / the median time of ``runs`` calls."""
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return n / statistics.median(times)


def fold_rate(params: Any, batch: Any, n: int) -> float:
    wire = encode_batch(metric="m", version=1, batch_id=os.urandom(16), batch=batch, params=params)
    mech = get_mechanism(params.mechanism)

    def once() -> None:
        _h, back = decode_batch(wire, params)
        fold(params, [mech.merge([back])])

    return median_rate(once, n)


def pure_ldp(values: np.ndarray, words: list[str], counts: np.ndarray, which: tuple[str, ...]) -> None:
    """pure-LDP's PEM (CMS oracle, k = 256) and SFP (CMS oracles, k = 32: its fragment search evaluates
    5 × 186,624 candidates × k hashes in Python) on the same values, beside ours."""
    try:
        import pure_ldp.core as core
        import pure_ldp.core._freq_oracle_server as fos
        import xxhash
    except ImportError:
        print(json.dumps({"figure": "pure-LDP comparison", "skipped": "pure-ldp is not installed"}), flush=True)
        return
    shim = types.SimpleNamespace(**{a: getattr(np, a) for a in dir(np) if not a.startswith("__")})
    shim.zeros = lambda shape, *a, **kw: np.zeros(() if shape is None else shape, *a, **kw)
    fos.np = shim  # np.zeros(None) was allowed before numpy 2
    core.xxhash = types.SimpleNamespace(  # xxhash ≥ 2 hashes bytes only
        xxh64=lambda data, seed=0: xxhash.xxh64(data.encode() if isinstance(data, str) else data, seed=seed))
    from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer
    from pure_ldp.heavy_hitters.apple_sfp import SFPClient, SFPServer
    from pure_ldp.heavy_hitters.prefix_extending import PEMClient, PEMServer

    random.seed(1)
    alphabet = [*string.ascii_lowercase, "*"]
    runs = {
        "pem": (lambda: _pl_pem(CMSClient, CMSServer, PEMClient, PEMServer, alphabet)),
        "sfp": (lambda: _pl_sfp(CMSClient, CMSServer, SFPClient, SFPServer, alphabet)),
    }
    for name, make in runs.items():
        if name not in which:
            continue
        client, server, k = make()
        t = time.perf_counter()
        for v in values:
            server.aggregate(client.privatise(v))
        t_collect = time.perf_counter() - t
        t = time.perf_counter()
        hh, freq = server.find_heavy_hitters(k=KEEP)
        t_find = time.perf_counter() - t
        ranked = [h for _f, h in sorted(zip(freq, hh, strict=True), key=lambda item: -item[0])]  # sfp: unranked
        r10, r20 = recalls(words, counts, [h.rstrip("*") for h in ranked])
        print(json.dumps({"figure": f"pure-LDP {name.upper()} (CMS k={k}, m={M}, ε={EPSILON:g} nominal per report)",
                          "n": int(values.size), "recall@10": r10, "recall@20": r20, "privatize+aggregate_s": round(t_collect, 2),
                          "find_s": round(t_find, 2), "epsilon": EPSILON}), flush=True)


def _pl_pem(cms_client: Any, cms_server: Any, pem_client: Any, pem_server: Any, alphabet: list[str]) -> tuple[Any, Any, int]:
    srv = cms_server(EPSILON, K, M)
    cli = cms_client(EPSILON, srv.hash_funcs, M)
    return (pem_client(EPSILON, 0, MAX_LEN, 2, alphabet=alphabet, fo_client=cli),
            pem_server(EPSILON, 0, MAX_LEN, 2, alphabet=alphabet, fo_server=srv), K)


def _pl_sfp(cms_client: Any, cms_server: Any, sfp_client: Any, sfp_server: Any, alphabet: list[str]) -> tuple[Any, Any, int]:
    k = 32
    srv = cms_server(EPSILON, k, M)
    cli = cms_client(EPSILON, srv.hash_funcs, M)
    return (sfp_client(EPSILON, 2, MAX_LEN, alphabet=alphabet, fo_client=cli),
            sfp_server(EPSILON, 2, MAX_LEN, alphabet=set(alphabet), fo_server=srv), k)  # its server adds to a set


def speeds(values: np.ndarray, params: PemParams, rng: np.random.Generator, n: int) -> None:
    """privatize_batch and fold rates of pem beside oue-cms on the same values (medians of 3)."""
    oue = OueCmsParams(epsilon=EPSILON, k=K, m=M)
    base_rate = median_rate(lambda: privatize_batch(values, oue, rng=rng), n)
    rate = median_rate(lambda: privatize_batch(values, params, rng=rng), n)
    emit("privatize_batch pem k=256 m=1024 L=10 eps=4 (PCG64)", rate, "reports/s", baseline="oue-cms k=256 m=1024",
         baseline_value=base_rate, goal=">= 500k reports/s", ok=rate >= 500_000)
    same = OueCmsParams(epsilon=EPSILON, k=K * MAX_LEN, m=M)  # the same state: L·k rows of m cells
    pem_fold = fold_rate(params, privatize_batch(values, params, rng=rng), n)
    oue_fold = fold_rate(same, privatize_batch(values, same, rng=rng), n)
    emit("fold pem from the wire form (decode, merge, fold)", pem_fold, "reports/s", baseline="oue-cms k=2560 m=1024",
         baseline_value=oue_fold, goal="the rate of oue-cms (ratio >= 0.8)", ok=pem_fold >= 0.8 * oue_fold)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--pure-ldp", choices=("pem", "sfp", "both", "none"), default="both",
                    help="pure-LDP designs to run on the first repetition's values")
    args = ap.parse_args()
    n = 200_000 if args.quick else 1_000_000
    mech = get_mechanism("pem")
    r10s, r20s, clean, discover_s, collect_s = [], [], [], [], []
    first: tuple[list[str], np.ndarray, np.ndarray] | None = None
    for rep in range(args.reps):
        words, counts, values = population(1000 + rep, n)
        params = PemParams(epsilon=EPSILON, k=K, m=M, max_bytes=MAX_LEN, hash_seed=rep)
        rng = np.random.default_rng(rep)
        if rep == 0:
            first = (words, counts, values)
            speeds(values, params, rng, n)
        t = time.perf_counter()
        state = fold(params, [privatize_batch(values, params, rng=rng)])
        collect_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        found = mech.discover(params, state, keep=KEEP)
        discover_s.append(time.perf_counter() - t)
        labels = list(found.estimate.labels)
        r10, r20 = recalls(words, counts, labels)
        held = {w for w, c in zip(words, counts, strict=True) if c > 0}
        false = [v for v in labels if v not in held]
        r10s.append(r10)
        r20s.append(r20)
        clean.append(not false)
        print(json.dumps({"repetition": rep, "recall@10": r10, "recall@20": r20, "found": len(labels), "false": false,
                          "examined": found.examined, "tested": found.tested, "threshold_stderr": round(found.threshold, 3),
                          "discover_s": round(discover_s[-1], 3)}), flush=True)
    eps = PemParams(epsilon=EPSILON, k=K, m=M, max_bytes=MAX_LEN).effective_epsilon
    emit(f"discover from folded sketches (median of {args.reps})", float(np.median(discover_s)), "s",
         baseline="goal", baseline_value=30.0, goal="<= 30 s", ok=max(discover_s) <= 30.0, max_s=round(max(discover_s), 3))
    emit("recall@10 (mean over repetitions)", float(np.mean(r10s)), "recall", baseline="goal", baseline_value=0.9,
         goal=">= 0.9", ok=float(np.mean(r10s)) >= 0.9, min=min(r10s), reps=args.reps, n=n, epsilon=round(eps, 4))
    emit("recall@20 (mean over repetitions)", float(np.mean(r20s)), "recall", baseline="goal", baseline_value=0.8,
         goal=">= 0.8", ok=float(np.mean(r20s)) >= 0.8, min=min(r20s), reps=args.reps, n=n, epsilon=round(eps, 4))
    share = float(np.mean(clean))
    emit("repetitions with no false value", share, "share", baseline="goal", baseline_value=0.95, goal=">= 0.95",
         ok=share >= 0.95, reps=args.reps)
    if args.pure_ldp != "none" and first is not None:
        words, counts, values = first
        print(json.dumps({"figure": "ldptel pem on the same values", "n": n, "recall@10": r10s[0], "recall@20": r20s[0],
                          "privatize+fold_s": round(collect_s[0], 2), "discover_s": round(discover_s[0], 3),
                          "epsilon": round(eps, 4)}), flush=True)
        pure_ldp(values, words, counts, ("pem", "sfp") if args.pure_ldp == "both" else (args.pure_ldp,))


if __name__ == "__main__":
    main()
