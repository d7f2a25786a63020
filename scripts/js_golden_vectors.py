#!/usr/bin/env python3
"""Golden vectors for the TypeScript SDK (client/js), generated from the Python protocol.

    python scripts/js_golden_vectors.py OUT.json [--seed N]

Everything is computed by the Python SDK itself (no re-implementation here): hashes of >= 10,000 strings
(ASCII, non-ASCII, emoji, combining marks, every tail length, long strings; lone surrogates, which both SDKs
refuse), SHA-256 and HMAC-SHA256 of every message length over the padding boundaries,
params of every mechanism (thresholds, effective and longitudinal ε, the privatization fingerprint),
permanent-RR streams, daily-mean α values and memo keys, and full encoded batches privatized from a recorded
byte stream: ``os.urandom`` is replaced by a deterministic stream whose bytes are recorded per case, so the TS
SDK, replaying the same bytes, must produce the same reports and the same batch bytes.

The file is JSON with ``ensure_ascii=True`` so that lone surrogates survive as ``\\udXXX`` escapes (JSON.parse
gives the same UTF-16 strings back).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import math
import os
import random
import struct
import sys
from functools import cache
from typing import Any
from unittest import mock

import mmh3

from ldptel.client.errors import LdpError
from ldptel.client.mechanisms import mechanism_of
from ldptel.client.mechanisms.capabilities import Permanent
from ldptel.client.mechanisms.histogram import bucket_edges
from ldptel.client.mechanisms.longitudinal import report_charge
from ldptel.client.protocol.breakdown import check_profile, encode_profile
from ldptel.client.protocol.hashing import HashFamily, value_bytes
from ldptel.client.protocol.keyed import memo_key, privatization_fingerprint, prr_stream
from ldptel.client.protocol.specs import MetricSpec, params_from_dict
from ldptel.client.protocol.wire import encode_batch, encode_upload

N_STRINGS = 10_240


class Stream:
    """A deterministic byte stream standing in for os.urandom; records what each case consumed."""

    def __init__(self, seed: bytes) -> None:
        self._seed = seed
        self._counter = 0
        self._buf = b""
        self.taken = bytearray()

    def __call__(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._buf += hashlib.sha256(self._seed + self._counter.to_bytes(8, "little")).digest()
            self._counter += 1
        out, self._buf = self._buf[:n], self._buf[n:]
        self.taken += out
        return out


def strings(rnd: random.Random) -> list[str]:
    alphabets = [
        [chr(c) for c in range(0x20, 0x7F)],
        [chr(c) for c in range(0xA0, 0x250)],  # Latin-1, Latin extended
        [chr(c) for c in range(0x391, 0x3CA)] + [chr(c) for c in range(0x410, 0x450)],  # Greek, Cyrillic
        [chr(c) for c in range(0x4E00, 0x4E80)] + [chr(c) for c in range(0x3040, 0x30A0)],  # CJK, kana
        [chr(c) for c in range(0x1F600, 0x1F650)] + ["\U0001F468\u200D\U0001F469\u200D\U0001F467", "\U0001F1EB\U0001F1F7"],
        ["e\u0301", "a\u0308", "n\u0303", "\u0300", "\u0327", "\u20DD", "\u093F"],  # combining marks
        ["\x00", "\n", "\t", "\u2028", "\uFEFF", "\uFFFF", "\U0010FFFF", "\U00010000"],
    ]
    out = ["", "a", "ab", "abc", "abcd", "\U0001F600", "e\u0301", "\u00e9", "\u0000", "x" * 1000]
    out += ["".join(chr(0x61 + i % 26) for i in range(n)) for n in range(0, 41)]
    out += ["w" * n for n in (63, 64, 65, 100, 127, 128, 129, 255, 256, 257, 1000, 4096)]
    while len(out) < N_STRINGS:
        n = rnd.choice([1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, rnd.randrange(0, 40), rnd.randrange(0, 200)])
        pools = rnd.sample(alphabets, rnd.randrange(1, 4))
        out.append("".join(rnd.choice(rnd.choice(pools)) for _ in range(n)))
    return out


def lone_surrogates(rnd: random.Random) -> list[str]:
    out = ["\ud800", "\udfff", "a\ud800b", "\udc00\ud800", "x\udbff", "\ud83d", "\ude00", "\U0001F600\ud800"]
    while len(out) < 64:
        s = [rnd.choice("abc\u00e9\U0001F600") for _ in range(rnd.randrange(0, 6))]
        s.insert(rnd.randrange(0, len(s) + 1), chr(rnd.randrange(0xD800, 0xE000)))
        out.append("".join(s))
    return out


def rows_of(fam: HashFamily, s: str) -> list[int]:
    """[h_j(s) for every row j]: the client's ``hash_one`` path with the base hash computed once, not k times."""
    base = fam.base(s)
    return [fam.hash_from_base(base, j) for j in range(fam.k)]


def hash_vectors(rnd: random.Random) -> dict[str, Any]:
    seeds = [0, 1, 42, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]
    fam = HashFamily(k=8, m=1 << 12, seed=0x1234ABCD)
    rows = []
    for s in strings(rnd):
        data = s.encode("utf-8")
        seed = rnd.choice(seeds) if rnd.random() < 0.5 else rnd.randrange(0, 1 << 32)
        rows.append({
            "s": s,
            "seed": seed,
            "h64": f"{mmh3.hash64(data, seed, signed=False)[0]:016x}",
            "h32": mmh3.hash(data, seed, signed=False),
            "rows": rows_of(fam, s),
        })
    refused = []
    for s in lone_surrogates(rnd):
        try:
            value_bytes(s)
        except (UnicodeEncodeError, LdpError):
            refused.append(s)
            continue
        raise SystemExit(f"the Python protocol accepted a lone surrogate: {s!r}")
    families = []
    for _ in range(40):
        k, m, seed = rnd.randrange(1, 300), 1 << rnd.randrange(1, 17), rnd.randrange(0, 1 << 32)
        f = HashFamily(k=k, m=m, seed=seed)
        vals = [rnd.choice(rows)["s"] for _ in range(20)]
        families.append({"k": k, "m": m, "seed": seed, "values": vals,
                         "hashes": [rows_of(f, v) for v in vals]})
    return {"strings": rows, "family": {"k": 8, "m": 1 << 12, "seed": 0x1234ABCD}, "families": families,
            "lone_surrogates": refused}


def eps(rnd: random.Random) -> float:
    return rnd.choice([0.5, 1.0, 2.0, 3.0, 4.0, round(rnd.uniform(0.05, 8), 3), rnd.uniform(0.05, 8), rnd.uniform(0.01, 12)])


def random_params(mech: str, rnd: random.Random) -> dict[str, Any]:
    e = eps(rnd)
    if mech == "rr":
        return {"mechanism": "rr", "epsilon": e, "prob_bits": rnd.choice([32, 32, rnd.randrange(12, 33)])}
    if mech == "grr":
        d = rnd.choice([2, 3, 5, 10, 50, 256, 257, 300, rnd.randrange(2, 1000)])
        labels = [f"l{i}" if i % 3 else f"\u00e9tiquette-{i}-\U0001F600" for i in range(d)]
        return {"mechanism": "grr", "epsilon": e, "domain": labels}
    if mech in ("cms", "oue-cms", "hcms"):
        out: dict[str, Any] = {"mechanism": mech, "epsilon": e, "k": rnd.choice([1, 3, 16, 64, 1000, 2048]),
                               "m": 1 << rnd.randrange(3, 13), "hash_seed": rnd.randrange(0, 1 << 32)}
        if rnd.random() < 0.2:
            out["prob_bits"] = rnd.randrange(10, 25)
        return out
    if mech == "mean":
        lo = rnd.choice([0.0, -1.0, -1e6, rnd.uniform(-100, 100)])
        return {"mechanism": "mean", "epsilon": e, "lo": lo, "hi": lo + rnd.choice([1.0, 10.0, 0.1, rnd.uniform(0.5, 1e4)]),
                "variant": rnd.choice(["auto", "onebit", "dhm"])}
    if mech == "num-histogram":
        scale = rnd.choice(["linear", "log"])
        lo = 0.0 if scale == "log" and rnd.random() < 0.5 else rnd.uniform(0.5 if scale == "log" else -10, 10)
        edges = bucket_edges(lo, lo + rnd.uniform(1, 1000), rnd.choice([2, 3, 8, 10, 33, 100]), scale=scale)
        return {"mechanism": "num-histogram", "epsilon": e, "edges": list(edges), "encoding": rnd.choice(["auto", "grr", "oue"])}
    if mech == "daily-mean":
        lo = rnd.uniform(-10, 10)
        return {"mechanism": "daily-mean", "epsilon": e, "lo": lo, "hi": lo + rnd.uniform(0.5, 100)}
    if mech == "pem":
        return {"mechanism": "pem", "epsilon": e, "k": rnd.choice([1, 4, 16, 64]), "m": 1 << rnd.randrange(3, 11),
                "max_bytes": rnd.choice([1, 4, 8, 9, 16, 32]), "hash_seed": rnd.randrange(0, 1 << 32)}
    raise AssertionError(mech)


MECHS = ["rr", "grr", "cms", "oue-cms", "hcms", "mean", "num-histogram", "daily-mean", "pem"]


def param_vectors(rnd: random.Random) -> list[dict[str, Any]]:
    out = []
    for mech in MECHS:
        made = 0
        while made < 150:
            try:
                params = params_from_dict(random_params(mech, rnd))
            except LdpError:
                continue
            m = mechanism_of(params)
            out.append({
                "params": params.to_dict(),
                "effective_epsilon": params.effective_epsilon,
                "longitudinal_epsilon": m.longitudinal_epsilon(params),
                "report_charge": report_charge(params),
                "fingerprint": privatization_fingerprint(params).hex(),
                "thresholds": thresholds(params),
            })
            made += 1
    return out


def thresholds(params: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in ("flip_threshold", "keep_threshold", "noise_threshold", "window_threshold", "cold_threshold"):
        if hasattr(params, name):
            out[name] = int(getattr(params, name))
    return out


@cache
def _pem_candidates(pool: tuple[str, ...], max_bytes: int) -> list[str]:
    return [s for s in pool if 1 <= len(s.encode()) <= max_bytes and "\x00" not in s]


def value_for(mech: str, params: Any, rnd: random.Random, pool: list[str]) -> Any:
    if mech == "rr":
        return rnd.random() < 0.5
    if mech == "grr":
        return rnd.choice(params.domain)
    if mech in ("cms", "oue-cms", "hcms"):
        return rnd.choice(pool)
    if mech in ("mean", "daily-mean"):
        lo, hi = params.lo, params.hi
        return rnd.choice([lo, hi, lo - 1, hi + 5, rnd.uniform(lo, hi), rnd.uniform(lo, hi), (lo + hi) / 2])
    if mech == "num-histogram":
        e = params.edges
        return rnd.choice([e[0], e[-1], e[0] - 1, e[-1] + 1, rnd.choice(e), rnd.uniform(e[0], e[-1])])
    if mech == "pem":
        return rnd.choice(_pem_candidates(tuple(pool), params.max_bytes) or ["a"])
    raise AssertionError(mech)


def keyed_vectors(rnd: random.Random) -> list[dict[str, Any]]:
    out = []
    for i in range(200):
        secret = rnd.randbytes(32)
        metric = rnd.choice(["a", "metric.x", "m-" + str(i)])
        fp = rnd.randbytes(32)
        mech = rnd.choice(["rr", "grr", "daily-mean-alpha"])
        value = rnd.randbytes(rnd.randrange(0, 9))
        stream = prr_stream(secret, metric, fp, mech, value)
        words = [f"{stream.word():016x}" for _ in range(6)]
        high = rnd.choice([2, 3, 7, 255, 65535, 1000003, (1 << 32) - 5, (1 << 40) + 7])
        below = [prr_stream(secret, metric, fp, mech, value).below(high) for _ in range(1)]
        s2 = prr_stream(secret, metric, fp, mech, value)
        below += [s2.below(high) for _ in range(5)]
        alpha = prr_stream(secret, metric, fp, "daily-mean-alpha", b"").bits(32)
        day = rnd.choice([0, 1, 20_000, 20_419, -3, (1 << 40)])
        out.append({
            "secret": secret.hex(), "metric": metric, "fingerprint": fp.hex(), "mechanism": mech, "value": value.hex(),
            "words": words, "high": high, "below": below, "alpha": alpha, "day": day,
            "memo_key": memo_key(secret, metric, fp, day, value).hex(),
        })
    return out


def batch_vectors(rnd: random.Random, pool: list[str]) -> list[dict[str, Any]]:
    out = []
    case = 0
    for mech in MECHS:
        made = 0
        while made < 24:
            try:
                params = params_from_dict(random_params(mech, rnd))
            except LdpError:
                continue
            if mech == "grr" and rnd.random() < 0.5:
                continue
            m = mechanism_of(params)
            n = rnd.choice([1, 2, 7, 8, 9, 30])
            values = [value_for(mech, params, rnd, pool) for _ in range(n)]
            secret = rnd.randbytes(32)
            metric = f"golden.{mech}"
            fp = privatization_fingerprint(params)
            stream = Stream(f"case-{case}".encode())
            case += 1
            records = []
            with mock.patch("os.urandom", stream):
                for v in values:
                    if isinstance(m, Permanent):
                        batch = m.privatize_permanent(v, params, secret=secret, metric=metric, fingerprint=fp)
                    else:
                        batch = m.privatize(v, params)
                    records.append(m.pack_report(batch, params))
                batch_id = os.urandom(16)
            body = encode_batch(metric=metric, version=3, batch_id=batch_id, batch=m.unpack_reports(records, params),
                                params=params)
            out.append({
                "params": params.to_dict(), "metric": metric, "version": 3, "secret": secret.hex(),
                "permanent": isinstance(m, Permanent), "values": values, "stream": bytes(stream.taken).hex(),
                "records": [r.hex() for r in records], "body": body.hex(),
                "value_keys": [m.value_key(v, params).hex() for v in values],
            })
            made += 1
    return out


def profile_vectors(batches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Breakdowns: a spec with dimensions and declared values, a device profile, the wire profile the device sends
    (undeclared, missing and malformed values as 'other') and a golden batch's body carrying it (its own generator:
    the other vectors' random stream is unchanged)."""
    rnd = random.Random(29)
    devices: list[dict[str, Any]] = [
        {"os": "android", "app_version": "2.1", "channel": "beta"}, {"os": "beos", "app_version": "2.0"},
        {"app_version": "9.9-rare"}, {"os": "ios", "app_version": "not valid!", "arch": "arm64"}, {},
        {"os": "web", "app_version": "2.0", "channel": "other"},
    ]
    out = []
    for i, device in enumerate(devices):
        dims = rnd.choice([("os",), ("os", "app_version"), ("app_version", "os", "channel")])
        values = {"os": ("android", "ios", "web"), "app_version": ("2.0", "2.1"), "channel": ("stable", "beta")}
        case = batches[i * 7 % len(batches)]
        params = params_from_dict(case["params"])
        spec = MetricSpec(name=case["metric"], params=params, version=3, breakdown=dims,
                          profile=tuple((d, values[d]) for d in dims))
        wire = encode_profile(check_profile(device), dims, spec.profile_schema)
        m = mechanism_of(params)
        batch = m.unpack_reports([bytes.fromhex(r) for r in case["records"]], params)
        body = encode_batch(metric=case["metric"], version=3, batch_id=bytes(range(16)), batch=batch, params=params,
                            profile=wire)
        out.append({"spec": spec.to_dict(), "device": device, "wire": wire.decode("ascii"), "records": case["records"],
                    "body": body.hex()})
    return out


def upload_vectors(batches: list[dict[str, Any]], rnd: random.Random) -> list[dict[str, Any]]:
    out = []
    for _ in range(10):
        parts = rnd.sample(batches, rnd.randrange(1, 6))
        out.append({"parts": [p["body"] for p in parts],
                    "body": encode_upload([bytes.fromhex(p["body"]) for p in parts]).hex()})
    return out


def float_vectors(rnd: random.Random) -> list[dict[str, Any]]:
    xs = [0.0, -0.0, 1.0, -1.0, 0.1, 1e-4, 1e-5, 9.999e-5, 1e15, 1e16, 1e17, 123456789012345678.0, 1.5e300,
          5e-324, 2.2250738585072014e-308, math.pi, 1 / 3, 4.0, 1e22, 1e21, 0.00001234, 12345.678]
    xs += [rnd.uniform(-1e6, 1e6) for _ in range(300)] + [10 ** rnd.uniform(-30, 30) for _ in range(300)]
    xs += [struct.unpack("<d", rnd.randbytes(8))[0] for _ in range(300)]
    return [{"x": x, "repr": repr(x)} for x in xs if math.isfinite(x)]


def sha_vectors() -> list[dict[str, Any]]:
    """SHA-256 and HMAC-SHA256 from hashlib/hmac: every message length 0..200 (both padding boundaries, 55/56 and
    63/64 bytes mod 64, over 1-4 blocks) cut into 1-4 parts, and keys of every length 0..140 (empty, short, one
    block, hashed first when over 64 bytes). Their own generator: the other vectors' random stream is unchanged."""
    rnd = random.Random(31)
    out = []
    for n in range(201):
        msg = rnd.randbytes(n)
        cuts = sorted(rnd.randrange(0, n + 1) for _ in range(rnd.randrange(0, 4)))
        parts = [msg[a:b] for a, b in zip([0, *cuts], [*cuts, n], strict=True)]
        key = rnd.randbytes(n % 141)
        out.append({"parts": [x.hex() for x in parts], "key": key.hex(), "sha256": hashlib.sha256(msg).hexdigest(),
                    "hmac": hmac.new(key, msg, hashlib.sha256).hexdigest()})
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=20261127)
    args = ap.parse_args(argv)
    rnd = random.Random(args.seed)
    hashes = hash_vectors(rnd)
    pool = [row["s"] for row in hashes["strings"][:2000]]
    batches = batch_vectors(rnd, pool)
    doc = {
        "seed": args.seed,
        "hashes": hashes,
        "params": param_vectors(rnd),
        "keyed": keyed_vectors(rnd),
        "sha": sha_vectors(),
        "batches": batches,
        "uploads": upload_vectors(batches, rnd),
        "floats": float_vectors(rnd),
        "profiles": profile_vectors(batches),
    }
    text = json.dumps(doc, ensure_ascii=True, separators=(",", ":"), allow_nan=False)  # one shot: the C encoder
    with open(args.out, "w", encoding="ascii") as fh:
        fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
