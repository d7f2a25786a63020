/**
 * Every mechanism's output distribution against its exact integer thresholds (chi-square at α = 1e-6, or a
 * binomial z = 6), drawn from the real CSPRNG; unbiasedness of the numeric debias values; the permanent
 * randomized response's composed channel over many device secrets; bad values refused.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { InvalidValueError } from "../src/errors.js";
import { family } from "../src/hashing.js";
import { fingerprintOf } from "../src/keyed.js";
import { privatize, privatizePermanent, quantize, valueKey, bucketOf } from "../src/mechanisms.js";
import { GRID, paramsFromDict, type MeanParams, type Params } from "../src/params.js";
import { CryptoRandom, randomBytes } from "../src/random.js";
import { R } from "../src/u64.js";
import { assertBinomial, assertChiSquare, assertClose } from "./stats.js";

const rng = new CryptoRandom();
const P = (d: Record<string, unknown>): Params => paramsFromDict(d);
const inc = (a: number[], i: number): void => {
  a[i] = (a[i] ?? 0) + 1;
};
const bitAt = (bits: Uint8Array, a: number): number => ((bits[a >> 3] ?? 0) >> (7 - (a & 7))) & 1;

test("rr: P(flip) = T/2^B exactly", () => {
  const p = P({ mechanism: "rr", epsilon: 1.3 });
  assert.equal(p.mechanism, "rr");
  if (p.mechanism !== "rr") return;
  const n = 200000;
  let ones = 0;
  for (let i = 0; i < n; i++) ones += privatize(true, p, rng).bit ?? 0;
  assertBinomial(ones, n, 1 - p.flipThreshold / 2 ** p.probBits, "rr P(1 | true)");
});

test("grr: keep K/2^B, every other label (1 − p)/(d − 1)", () => {
  const domain = ["a", "b", "c", "d", "e", "f", "g"];
  const p = P({ mechanism: "grr", epsilon: 1.5, domain });
  if (p.mechanism !== "grr") throw new Error();
  const n = 140000;
  const counts = new Array(domain.length).fill(0);
  for (let i = 0; i < n; i++) inc(counts, privatize("c", p, rng).col ?? 0);
  const keep = p.keepThreshold / 2 ** p.probBits;
  assertChiSquare(counts, domain.map((l) => (l === "c" ? keep : (1 - keep) / (domain.length - 1))), "grr labels");
});

for (const mech of ["cms", "oue-cms"] as const) {
  test(`${mech}: rows uniform, hot bit and cold bits at their exact probabilities`, () => {
    const p = P({ mechanism: mech, epsilon: 3, k: 5, m: 64, hash_seed: 11 });
    if (p.mechanism !== mech) throw new Error();
    const fam = family(p.k, p.m, p.hashSeed, p.hashVersion);
    const n = 40000;
    const rows = new Array(p.k).fill(0);
    let hotOnes = 0;
    let coldOnes = 0;
    for (let i = 0; i < n; i++) {
      const r = privatize("needle", p, rng);
      const j = r.row ?? 0;
      inc(rows, j);
      const hot = fam.hashOne("needle", j);
      for (let a = 0; a < p.m; a++) {
        const b = bitAt(r.bits as Uint8Array, a);
        if (a === hot) hotOnes += b;
        else coldOnes += b;
      }
    }
    const q = p.noiseThreshold / 2 ** p.probBits;
    assertChiSquare(rows, rows.map(() => 1 / p.k), `${mech} rows`);
    assertBinomial(hotOnes, n, mech === "cms" ? 1 - q : 0.5, `${mech} hot bit`);
    assertBinomial(coldOnes, n * (p.m - 1), q, `${mech} cold bits`);
  });
}

test("hcms: rows and columns uniform, the Hadamard sign kept with probability 1 − f", () => {
  const p = P({ mechanism: "hcms", epsilon: 2, k: 3, m: 16, hash_seed: 2 });
  if (p.mechanism !== "hcms") throw new Error();
  const fam = family(p.k, p.m, p.hashSeed, p.hashVersion);
  const n = 100000;
  const rows = new Array(p.k).fill(0);
  const cols = new Array(p.m).fill(0);
  let kept = 0;
  for (let i = 0; i < n; i++) {
    const r = privatize("x", p, rng);
    inc(rows, r.row ?? 0);
    inc(cols, r.col ?? 0);
    let x = (r.col ?? 0) & fam.hashOne("x", r.row ?? 0);
    let parity = 0;
    while (x) {
      parity ^= 1;
      x &= x - 1;
    }
    kept += (parity === 0 ? 1 : 0) === r.bit ? 1 : 0;
  }
  assertChiSquare(rows, rows.map(() => 1 / p.k), "hcms rows");
  assertChiSquare(cols, cols.map(() => 1 / p.m), "hcms cols");
  assertBinomial(kept, n, 1 - p.flipThreshold / 2 ** p.probBits, "hcms sign kept");
});

test("mean onebit: P(1) = u/2^V·(1 − f) + (1 − u/2^V)·f exactly; values clipped", () => {
  const p = P({ mechanism: "mean", epsilon: 1, lo: -2, hi: 6, variant: "onebit", window: null, pm_share: null, prob_bits: 32 });
  if (p.mechanism !== "mean") throw new Error();
  const f = p.flipThreshold / 2 ** 32;
  for (const x of [-5, -2, 0.37, 4, 6, 99]) {
    const n = 60000;
    let ones = 0;
    for (let i = 0; i < n; i++) ones += privatize(x, p, rng).bit ?? 0;
    const u = quantize(x, p.lo, p.hi) / 2 ** 32;
    assertBinomial(ones, n, u * (1 - f) + (1 - u) * f, `mean onebit x=${x}`);
  }
});

function dhmDebias(p: MeanParams): number[] {
  const f = p.flipThreshold / 2 ** 32;
  const c = 1 / (1 - 2 * f);
  const w = p.window as number;
  const full = 2 ** 32;
  const ph = p.windowThreshold / (full * w);
  const pl = (full - p.windowThreshold) / (full * GRID);
  const a = 2 / (GRID * w * (ph - pl));
  return [-c, c, ...Array.from({ length: GRID + w }, (_, j) => a * (j - (GRID + w - 1) / 2))];
}

test("mean dhm: the debiased output is unbiased for t (z = 6) and every symbol occurs in range", () => {
  const p = P({ mechanism: "mean", epsilon: 4, lo: 0, hi: 1, variant: "dhm", window: 83, pm_share: 60416, prob_bits: 32 });
  if (p.mechanism !== "mean") throw new Error();
  const y = dhmDebias(p);
  for (const x of [0, 0.013, 0.5, 0.77, 1]) {
    const n = 60000;
    let sum = 0;
    let sq = 0;
    for (let i = 0; i < n; i++) {
      const s = privatize(x, p, rng).col ?? -1;
      assert.ok(s >= 0 && s < y.length);
      const v = y[s] ?? 0;
      sum += v;
      sq += v * v;
    }
    const t = (2 * quantize(x, p.lo, p.hi)) / 2 ** 32 - 1;
    const mean = sum / n;
    const sd = Math.sqrt(sq / n - mean * mean);
    assertClose(mean, t, sd / Math.sqrt(n), `dhm x=${x}`);
  }
});

test("num-histogram: buckets clip to the edges; grr and oue encodings at their exact probabilities", () => {
  const edges = [0, 1, 2, 5, 10];
  assert.deepEqual([-Infinity, -3, 0, 0.99, 1, 4.9, 5, 10, 12, Infinity].map((x) => bucketOf(x, edges)), [0, 0, 0, 0, 1, 2, 3, 3, 3, 3]);
  const g = P({ mechanism: "num-histogram", epsilon: 2, edges, encoding: "grr" });
  if (g.mechanism !== "num-histogram" || g.inner.mechanism !== "grr") throw new Error();
  const n = 80000;
  const counts = [0, 0, 0, 0];
  for (let i = 0; i < n; i++) inc(counts, privatize(7, g, rng).col ?? 0);
  const keep = g.inner.keepThreshold / 2 ** 32;
  assertChiSquare(counts, [0, 1, 2, 3].map((b) => (b === 3 ? keep : (1 - keep) / 3)), "histogram grr");
  const o = P({ mechanism: "num-histogram", epsilon: 2, edges: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], encoding: "oue" });
  if (o.mechanism !== "num-histogram" || o.inner.mechanism !== "oue-cms") throw new Error();
  const q = o.inner.noiseThreshold / 2 ** o.inner.probBits;
  const ones = new Array(o.inner.m).fill(0);
  const m = 30000;
  for (let i = 0; i < m; i++) {
    const bits = privatize(3.5, o, rng).bits as Uint8Array;
    for (let a = 0; a < o.inner.m; a++) ones[a] = (ones[a] ?? 0) + bitAt(bits, a);
  }
  ones.forEach((c, a) => assertBinomial(c, m, a === 3 ? 0.5 : q, `histogram oue bit ${a}`));
});

test("rr and grr PRR + IRR: over device secrets, one report has exactly the spec's channel", () => {
  const rr = P({ mechanism: "rr", epsilon: 1 });
  if (rr.mechanism !== "rr") throw new Error();
  const fp = fingerprintOf(rr.dict);
  const n = 60000;
  let flips = 0;
  for (let i = 0; i < n; i++) flips += 1 - (privatizePermanent(true, rr, randomBytes(32, rng), "m", fp, rng).bit ?? 0);
  assertBinomial(flips, n, rr.flipThreshold / 2 ** 32, "rr PRR+IRR flip");
  const domain = ["a", "b", "c", "d"];
  const grr = P({ mechanism: "grr", epsilon: 1, domain });
  if (grr.mechanism !== "grr") throw new Error();
  const gfp = fingerprintOf(grr.dict);
  const counts = [0, 0, 0, 0];
  for (let i = 0; i < n; i++) inc(counts, privatizePermanent("b", grr, randomBytes(32, rng), "g", gfp, rng).col ?? 0);
  const keep = grr.keepThreshold / 2 ** 32;
  assertChiSquare(counts, [0, 1, 2, 3].map((c) => (c === 1 ? keep : (1 - keep) / 3)), "grr PRR+IRR");
});

test("PRR: one device repeats its permanent answer (the IRR flips only with its own probability)", () => {
  const rr = P({ mechanism: "rr", epsilon: 1 });
  if (rr.mechanism !== "rr") throw new Error();
  const secret = randomBytes(32, rng);
  const fp = fingerprintOf(rr.dict);
  const n = 40000;
  let ones = 0;
  for (let i = 0; i < n; i++) ones += privatizePermanent(true, rr, secret, "m", fp, rng).bit ?? 0;
  const f2 = rr.split.irrNum / rr.split.irrDen;
  // The device's PRR bit is fixed: its reports are 1 with probability 1 − f₂ (PRR kept) or f₂ (PRR flipped).
  const frac = ones / n;
  const target = Math.abs(frac - (1 - f2)) < Math.abs(frac - f2) ? 1 - f2 : f2;
  assertBinomial(ones, n, target, "rr one device");
});

test("daily-mean: over devices, P(1) = u/2^V·(1 − f) + (1 − u/2^V)·f (α-rounding is unbiased)", () => {
  const p = P({ mechanism: "daily-mean", epsilon: 1, lo: 0, hi: 10 });
  if (p.mechanism !== "daily-mean") throw new Error();
  const fp = fingerprintOf(p.dict);
  const f = p.onebit.flipThreshold / 2 ** 32;
  const n = 60000;
  let ones = 0;
  for (let i = 0; i < n; i++) ones += privatizePermanent(3.3, p, randomBytes(32, rng), "dm", fp, rng).bit ?? 0;
  const u = quantize(3.3, 0, 10) / 2 ** 32;
  assertBinomial(ones, n, u * (1 - f) + (1 - u) * f, "daily-mean P(1)");
});

test("pem: rows uniform over the L·k group rows; hot bit ½", () => {
  const p = P({ mechanism: "pem", epsilon: 3, k: 2, m: 64, max_bytes: 3, hash_seed: 4 });
  if (p.mechanism !== "pem") throw new Error();
  const n = 30000;
  const rows = new Array(p.rows).fill(0);
  for (let i = 0; i < n; i++) inc(rows, privatize("hé", p, rng).row ?? 0);
  assertChiSquare(rows, rows.map(() => 1 / p.rows), "pem rows");
});

test("bad values are refused with InvalidValueError, naming no value", () => {
  const cases: [Record<string, unknown>, unknown][] = [
    [{ mechanism: "rr", epsilon: 1 }, "yes"],
    [{ mechanism: "grr", epsilon: 1, domain: ["a", "b"] }, "secret-label"],
    [{ mechanism: "cms", epsilon: 1, k: 2, m: 8 }, 12],
    [{ mechanism: "cms", epsilon: 1, k: 2, m: 8 }, "a\ud800"],
    [{ mechanism: "mean", epsilon: 1, lo: 0, hi: 1, variant: "onebit" }, NaN],
    [{ mechanism: "mean", epsilon: 1, lo: 0, hi: 1, variant: "onebit" }, "1"],
    [{ mechanism: "pem", epsilon: 1, k: 2, m: 8, max_bytes: 4 }, "toolong"],
    [{ mechanism: "pem", epsilon: 1, k: 2, m: 8, max_bytes: 4 }, "a\0"],
  ];
  for (const [d, v] of cases) {
    const p = P(d);
    assert.throws(() => privatize(v, p, rng), (e: unknown) => e instanceof InvalidValueError && !String(e).includes("secret-label"));
    assert.throws(() => valueKey(v, p), InvalidValueError);
  }
  R.hi = 0;
});

test("hostile or malformed params are refused with the parameter named", () => {
  const bad: Record<string, unknown>[] = [
    { mechanism: "rr", epsilon: 31 },
    { mechanism: "rr", epsilon: 0 },
    { mechanism: "rr", epsilon: "4" },
    { mechanism: "rr", epsilon: 1, extra: 1 },
    { mechanism: "nope", epsilon: 1 },
    { mechanism: "cms", epsilon: 1, k: 2, m: 12 },
    { mechanism: "cms", epsilon: 1, k: 70000, m: 8 },
    { mechanism: "cms", epsilon: 1, k: 4096, m: 65536 },
    { mechanism: "grr", epsilon: 1, domain: ["a"] },
    { mechanism: "grr", epsilon: 1, domain: ["a", "a"] },
    { mechanism: "grr", epsilon: 1, domain: ["a", "\ud800"] },
    { mechanism: "mean", epsilon: 1, lo: 1, hi: 0, variant: "onebit" },
    { mechanism: "mean", epsilon: 1, lo: 0, hi: 1, variant: "dhm" },
    { mechanism: "mean", epsilon: 1, lo: 0, hi: 5e-324, variant: "onebit" },
    { mechanism: "daily-mean", epsilon: 1, lo: 1, hi: 1 + 1e-13 },
    { mechanism: "num-histogram", epsilon: 1, edges: [0, 2, 1] },
    { mechanism: "pem", epsilon: 1, k: 4096, m: 8, max_bytes: 32 },
  ];
  for (const d of bad) assert.throws(() => P(d), /must be|not set|one of|complete/, JSON.stringify(d));
});
