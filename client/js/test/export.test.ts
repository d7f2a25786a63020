/**
 * Batches the TS SDK privatizes with the real CSPRNG, for the Python side to decode, fold and estimate
 * (tests/client/test_js_sdk.py::test_python_decodes_and_folds_ts_batches). Written to $LDPTEL_TS_OUT.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { toHex } from "../src/bytes.js";
import { fingerprintOf } from "../src/keyed.js";
import { privatize, privatizePermanent } from "../src/mechanisms.js";
import { isPermanent, paramsFromDict } from "../src/params.js";
import { CryptoRandom, randomBytes } from "../src/random.js";
import { encodeBatch, encodeUpload } from "../src/wire.js";

const N = 6000;

/** Each case: params, and the value of report i (a fixed pattern with known truth). */
const CASES: { metric: string; params: Record<string, unknown>; value: (i: number) => unknown }[] = [
  { metric: "ts.rr", params: { mechanism: "rr", epsilon: 2.0 }, value: (i) => i % 10 < 3 },
  { metric: "ts.grr", params: { mechanism: "grr", epsilon: 2.0, domain: ["x", "y", "z", "é"] }, value: (i) => ["x", "y", "y", "é", "z"][i % 5] },
  { metric: "ts.cms", params: { mechanism: "cms", epsilon: 4.0, k: 16, m: 256, hash_seed: 7, prob_bits: 12 }, value: (i) => (i % 2 ? "apple" : i % 5 ? "🍌 banana" : `u${i}`) },
  { metric: "ts.oue", params: { mechanism: "oue-cms", epsilon: 4.0, k: 16, m: 256, hash_seed: 9, prob_bits: 12 }, value: (i) => (i % 2 ? "apple" : i % 5 ? "🍌 banana" : `u${i}`) },
  { metric: "ts.hcms", params: { mechanism: "hcms", epsilon: 4.0, k: 16, m: 256, hash_seed: 3, prob_bits: 32 }, value: (i) => (i % 2 ? "apple" : `u${i}`) },
  { metric: "ts.mean1", params: { mechanism: "mean", epsilon: 1.0, lo: 0.0, hi: 10.0, variant: "onebit", window: null, pm_share: null, prob_bits: 32 }, value: (i) => (i % 11) * 1.0 - 0.5 },
  { metric: "ts.hist", params: { mechanism: "num-histogram", epsilon: 2.0, edges: [0, 1, 2, 5, 10], encoding: "grr", prob_bits: null }, value: (i) => [0.5, 1.5, 3, 7, 7][i % 5] },
  { metric: "ts.histoue", params: { mechanism: "num-histogram", epsilon: 2.0, edges: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20], encoding: "oue", prob_bits: 12 }, value: (i) => (i % 4) + 0.5 },
  { metric: "ts.daily", params: { mechanism: "daily-mean", epsilon: 1.0, lo: 0.0, hi: 1.0, prob_bits: 32 }, value: (i) => (i % 4) / 4 },
  { metric: "ts.pem", params: { mechanism: "pem", epsilon: 4.0, k: 4, m: 256, max_bytes: 8, hash_seed: 5, prob_bits: 12 }, value: (i) => (i % 2 ? "hello" : `v${i}`) },
];

test("TS batches of every mechanism for the Python decoder", () => {
  const rng = new CryptoRandom();
  const out: unknown[] = [];
  const bodies: Uint8Array[] = [];
  for (const c of CASES) {
    const p = paramsFromDict(c.params);
    const fp = fingerprintOf(p.dict);
    const reports = [];
    const values = [];
    for (let i = 0; i < N; i++) {
      const v = c.value(i);
      values.push(v);
      // every simulated device has its own secret (daily-mean's α and the PRR are per device)
      reports.push(isPermanent(p) ? privatizePermanent(v, p, randomBytes(32, rng), c.metric, fp, rng) : privatize(v, p, rng));
    }
    const batches = [];
    for (let at = 0; at < N; at += 2000) {
      const body = encodeBatch(c.metric, 1, randomBytes(16, rng), reports.slice(at, at + 2000), p);
      batches.push(toHex(body));
      bodies.push(body);
    }
    out.push({ metric: c.metric, params: c.params, values, batches });
  }
  const upload = encodeUpload(bodies.slice(0, 5));
  assert.equal(upload[0], 0x4c);
  if (process.env.LDPTEL_TS_OUT) {
    writeFileSync(process.env.LDPTEL_TS_OUT, JSON.stringify({ cases: out, upload: toHex(upload) }));
  }
});
