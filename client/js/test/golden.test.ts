/** The TS protocol reproduces the Python protocol's golden vectors byte for byte. */
import { test } from "node:test";
import { createHmac } from "node:crypto";
import assert from "node:assert/strict";
import { golden } from "./helpers.js";
import { fromHex, toHex, utf8, isWellFormed } from "../src/bytes.js";
import { InvalidValueError } from "../src/errors.js";
import { HashFamily, valueBytes } from "../src/hashing.js";
import { fingerprintOf, memoKey, prrStream } from "../src/keyed.js";
import { hmacSha256, sha256 } from "../src/sha256.js";
import { mmh3x64h1, mmh3x86 } from "../src/mmh3.js";
import { paramsFromDict, longitudinalEpsilon, reportCharge, type Params } from "../src/params.js";
import { privatize, privatizeBatch, privatizePermanent, packReport, columns, unpackReport, valueKey } from "../src/mechanisms.js";
import { checkProfile, encodeProfile } from "../src/breakdown.js";
import { specFromDict } from "../src/spec.js";
import { pyFloatRepr } from "../src/pyjson.js";
import { ReplayRandom } from "../src/random.js";
import { R } from "../src/u64.js";
import { encodeBatch, encodeUpload } from "../src/wire.js";

const G = golden();

function hex64(): string {
  return R.hi.toString(16).padStart(8, "0") + R.lo.toString(16).padStart(8, "0");
}

test("mmh3 x64 (h1) and x86_32 over the UTF-8 of >= 10,000 strings", () => {
  const rows = G.hashes.strings as { s: string; seed: number; h64: string; h32: number; rows: number[] }[];
  assert.ok(rows.length >= 10000);
  const f = G.hashes.family;
  const fam = new HashFamily(f.k, f.m, f.seed);
  let bad = 0;
  for (const r of rows) {
    const data = utf8(r.s);
    mmh3x64h1(data, r.seed);
    const h64 = hex64();
    const h32 = mmh3x86(data, r.seed);
    const hs = r.rows.map((_, j) => fam.hashOne(r.s, j));
    if (h64 !== r.h64 || h32 !== r.h32 || hs.join() !== r.rows.join()) {
      bad += 1;
      if (bad < 5) console.error("mismatch", JSON.stringify(r.s), h64, r.h64, h32, r.h32);
    }
  }
  assert.equal(bad, 0);
});

test("lone surrogates are refused (never repaired to U+FFFD), as Python refuses them", () => {
  const refused = G.hashes.lone_surrogates as string[];
  assert.ok(refused.length >= 8);
  for (const s of refused) {
    assert.equal(isWellFormed(s), false);
    assert.throws(() => utf8(s), InvalidValueError);
    assert.throws(() => valueBytes(s), InvalidValueError);
  }
  assert.equal(isWellFormed("\u{1F600}e\u0301"), true);
});

test("hash families of random (k, m, seed)", () => {
  for (const f of G.hashes.families) {
    const fam = new HashFamily(f.k, f.m, f.seed);
    f.values.forEach((v: string, i: number) => {
      const got = Array.from({ length: f.k }, (_, j) => fam.hashOne(v, j));
      assert.deepEqual(got, f.hashes[i]);
    });
  }
});

/**
 * ε's are compared to 1e-13: V8's Math.log (fdlibm) and glibc's log may differ in the last bit, and ε is a
 * difference of logs of numbers up to 2^32 (one ulp of ln 2^32 ≈ 22 is 3.6e-15). The integer thresholds (what
 * decides every draw, and so the true ε) must be equal exactly.
 */
function closeUlps(a: number, b: number, what: string): void {
  assert.ok(Math.abs(a - b) <= 1e-13, `${what}: ${a} vs ${b}`);
}

test("params of every mechanism: thresholds, effective and longitudinal ε, fingerprints", () => {
  const seen = new Set<string>();
  let ulps = 0;
  for (const v of G.params) {
    const p = paramsFromDict(v.params) as Params & Record<string, unknown>;
    seen.add(p.mechanism);
    closeUlps(p.effectiveEpsilon, v.effective_epsilon, JSON.stringify(v.params).slice(0, 200));
    closeUlps(longitudinalEpsilon(p), v.longitudinal_epsilon, "longitudinal");
    closeUlps(reportCharge(p), v.report_charge, `${p.mechanism} report charge`);
    ulps += p.effectiveEpsilon === v.effective_epsilon ? 0 : 1;
    assert.equal(toHex(fingerprintOf(p.dict)), v.fingerprint, JSON.stringify(v.params).slice(0, 300));
    const names: Record<string, string> = {
      flip_threshold: "flipThreshold",
      keep_threshold: "keepThreshold",
      noise_threshold: "noiseThreshold",
      window_threshold: "windowThreshold",
      cold_threshold: "noiseThreshold",
    };
    for (const [py, value] of Object.entries(v.thresholds as Record<string, number>)) {
      const ts = (p.mechanism === "cms" && py === "flip_threshold" ? "noiseThreshold" : names[py]) as string;
      if (p.mechanism === "num-histogram" || p.mechanism === "pem") continue;
      assert.equal(p[ts], value, `${p.mechanism} ${py}`);
    }
  }
  assert.equal(seen.size, 9);
  console.log(`# ${G.params.length} params; effective ε not bit-identical (|Δ| ≤ 1e-13) in ${ulps}`);
});

test("SHA-256 and HMAC-SHA256 of every message length 0..200 in parts, keys of every length 0..140", () => {
  assert.ok(G.sha.length > 200);
  for (const v of G.sha) {
    const parts = (v.parts as string[]).map(fromHex);
    assert.equal(toHex(sha256(...parts)), v.sha256, `sha256 of ${v.parts.join("|")}`);
    const key = fromHex(v.key);
    for (let again = 0; again < 2; again++) {
      // the second time from the key's cached ipad/opad states
      assert.equal(toHex(hmacSha256(key, ...parts)), v.hmac, `hmac of ${v.parts.join("|")} under ${v.key}`);
    }
    // keys one byte off the cached one (the last byte changed, one zero byte added or dropped: HMAC pads keys
    // up to 64 bytes with zeros, so a zero added or dropped there is the same key), against node:crypto
    const flipped = Uint8Array.from(key);
    if (key.length) flipped[key.length - 1] = (key[key.length - 1] ?? 0) ^ 1;
    for (const k of [flipped, Uint8Array.from([...key, 0]), key.subarray(0, -1)]) {
      const want = createHmac("sha256", k).update(Buffer.concat(parts)).digest("hex");
      assert.equal(toHex(hmacSha256(k, ...parts)), want, `hmac under ${toHex(k)} after ${v.key}`);
      hmacSha256(key, ...parts); // the original key cached again
    }
  }
});

test("permanent-RR streams, rejection draws, daily-mean α and memo keys", () => {
  for (const v of G.keyed) {
    const secret = fromHex(v.secret);
    const fp = fromHex(v.fingerprint);
    const s = prrStream(secret, v.metric, fp, v.mechanism, fromHex(v.value));
    const words = Array.from({ length: 6 }, () => {
      s.word();
      return s.hi.toString(16).padStart(8, "0") + s.lo.toString(16).padStart(8, "0");
    });
    assert.deepEqual(words, v.words);
    const below = [prrStream(secret, v.metric, fp, v.mechanism, fromHex(v.value)).below(v.high)];
    const s2 = prrStream(secret, v.metric, fp, v.mechanism, fromHex(v.value));
    for (let i = 0; i < 5; i++) below.push(s2.below(v.high));
    assert.deepEqual(below, v.below);
    assert.equal(prrStream(secret, v.metric, fp, "daily-mean-alpha", new Uint8Array(0)).bits(32), v.alpha);
    assert.equal(toHex(memoKey(secret, v.metric, fp, v.day, fromHex(v.value))), v.memo_key);
  }
});

test("full encoded batches of every mechanism from a recorded random byte stream", () => {
  const seen = new Set<string>();
  for (const c of G.batches) {
    const p = paramsFromDict(c.params);
    seen.add(p.mechanism);
    const rng = new ReplayRandom(fromHex(c.stream));
    const secret = fromHex(c.secret);
    const fp = fingerprintOf(p.dict);
    const cols = columns(p);
    const reports = c.values.map((value: unknown, i: number) => {
      assert.equal(toHex(valueKey(value, p)), c.value_keys[i]);
      const r = c.permanent ? privatizePermanent(value, p, secret, c.metric, fp, rng) : privatize(value, p, rng);
      assert.equal(toHex(packReport(r, cols)), c.records[i], `${p.mechanism} report ${i}`);
      return r;
    });
    const batchId = new Uint8Array(16);
    rng.fill(batchId);
    assert.equal(rng.used, c.stream.length / 2, `${p.mechanism}: every recorded byte is used, no more`);
    assert.equal(toHex(encodeBatch(c.metric, c.version, batchId, reports, p)), c.body);
  }
  assert.equal(seen.size, 9);
});

test("privatizeBatch replays the golden batches byte for byte and reads the same bytes as privatize", () => {
  let sketches = 0;
  for (const c of G.batches) {
    if (c.permanent) continue;
    const p = paramsFromDict(c.params);
    const rng = new ReplayRandom(fromHex(c.stream));
    const cols = columns(p);
    const reports = privatizeBatch(c.values, p, rng);
    reports.forEach((r, i) => assert.equal(toHex(packReport(r, cols)), c.records[i], `${p.mechanism} batch report ${i}`));
    assert.equal(rng.used, c.stream.length / 2 - 16, `${p.mechanism}: the batch reads exactly the per-report bytes`);
    if (p.mechanism === "cms" || p.mechanism === "oue-cms") sketches += 1;
  }
  assert.ok(sketches >= 2);
});

test("privatizeBatch equals privatize report by report over one byte stream (cms, oue-cms; m, prob_bits, repeats)", () => {
  // a fixed pseudo-random stream (xorshift32; tests only) long enough for every case
  const stream = new Uint8Array(1 << 22);
  let x = 0x9e3779b9;
  for (let i = 0; i < stream.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    stream[i] = x & 0xff;
  }
  const values = ["a", "b", "a", "https://example.com/x", "b", "é", "a", "", "zz", "a"];
  for (const mechanism of ["cms", "oue-cms"]) {
    for (const m of [8, 32, 64, 1024]) {
      for (const eps of [0.5, 4.0, 9.0]) {
        const p = paramsFromDict({ mechanism, epsilon: eps, k: 7, m, hash_seed: 3 });
        const cols = columns(p);
        const a = new ReplayRandom(stream);
        const b = new ReplayRandom(stream);
        const batch = privatizeBatch(values, p, a).map((r) => toHex(packReport(r, cols)));
        const one = values.map((v) => toHex(packReport(privatize(v, p, b), cols)));
        assert.deepEqual(batch, one, `${mechanism} m=${m} eps=${eps}`);
        assert.equal(a.used, b.used);
      }
    }
  }
});

test("multi-part LDPU uploads", () => {
  for (const u of G.uploads) {
    assert.equal(toHex(encodeUpload(u.parts.map(fromHex))), u.body);
  }
});

test("Python float repr (the fingerprint's JSON numbers)", () => {
  for (const f of G.floats) assert.equal(pyFloatRepr(f.x), f.repr);
});

test("breakdowns: the device's wire profile and a batch carrying it, byte for byte", () => {
  assert.ok(G.profiles.length >= 6);
  for (const v of G.profiles) {
    const spec = specFromDict(v.spec);
    const wire = encodeProfile(checkProfile(v.device), spec.breakdown, spec.declared);
    assert.equal(new TextDecoder().decode(wire), v.wire, JSON.stringify(v.device));
    const cols = columns(spec.params);
    const reports = v.records.map((r: string) => unpackReport(fromHex(r), cols));
    const id = Uint8Array.from({ length: 16 }, (_, i) => i);
    assert.equal(toHex(encodeBatch(spec.name, 3, id, reports, spec.params, wire)), v.body);
  }
  assert.throws(() => checkProfile({ OS: "x" }), /profile dimension/);
});
