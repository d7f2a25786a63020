/**
 * The client half of every mechanism (`ldptel.client.mechanisms.*`): one report from one value, drawing the
 * CSPRNG bytes exactly as the Python SDK's one-report path does, the permanent randomized response keyed by
 * the device secret, the value keys of the memo, and the codec columns of the wire format.
 */
import { InvalidValueError } from "./errors.js";
import { concatBytes, isWellFormed, u64le } from "./bytes.js";
import { family as familyOf, valueBytes, type HashFamily } from "./hashing.js";
import { prrStream } from "./keyed.js";
import {
  GRID,
  MECHANISM_CODES,
  VALUE_BITS,
  type GrrParams,
  type HcmsParams,
  type HistogramParams,
  type MeanParams,
  type Params,
  type PemParams,
  type RrParams,
  type UnaryParams,
} from "./params.js";
import { bernoulliBytes, belowThreshold, drawBelow, drawWord, intBelow, planesUsed, uniformBelow } from "./draws.js";
import { defaultRandom, type RandomSource } from "./random.js";
import { R, fmix64, le32 } from "./u64.js";

/** One privatized report: the columns its mechanism has (a row, a column/label index, a bit, a row of bits). */
export interface Report {
  row?: number;
  col?: number;
  bit?: number;
  bits?: Uint8Array;
}

export type ColumnKind = "index" | "bit" | "bytes";
export interface Column {
  attr: "row" | "col" | "bit" | "bits";
  kind: ColumnKind;
  /** index: bytes per value (1 or 2); bytes: bytes per report. */
  size: number;
  /** index: values are below bound. */
  bound: number;
}

// --------------------------------------------------------------------------------------------- values
function numberOf(value: unknown, what = "mean"): number {
  if (typeof value !== "number") throw new InvalidValueError(`${what} values must be numbers, got ${typeof value}`);
  if (Number.isNaN(value)) throw new InvalidValueError(`${what} values must not be NaN`);
  return value;
}

/** u = ⌈(clip(x) − lo)·(2^V/(hi − lo))⌉, capped at 2^V (the same float operations as numpy's). */
export function quantize(x: number, lo: number, hi: number): number {
  let v = Math.min(Math.max(x, lo), hi);
  v -= lo;
  v *= 4294967296 / (hi - lo);
  return Math.min(Math.ceil(v), 4294967296);
}

function grrCode(value: unknown, p: GrrParams): number {
  if (typeof value !== "string") throw new InvalidValueError(`grr values are labels (strings), got ${typeof value}`);
  const code = p.index.get(value);
  // The offending value is not echoed: error messages can end up in logs.
  if (code === undefined) throw new InvalidValueError(`a value is not in the metric's domain of ${p.domain.length} labels`);
  return code;
}

/** Bucket of a number (clipped to the edges): the count of inner edges ≤ x. */
export function bucketOf(x: number, edges: number[]): number {
  let lo = 1;
  let hi = edges.length - 1; // inner edges are edges[1 .. d−1]
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (x >= (edges[mid] ?? 0)) lo = mid + 1;
    else hi = mid;
  }
  return lo - 1;
}

function pemData(value: unknown, p: PemParams): Uint8Array {
  if (typeof value === "string" && !isWellFormed(value)) throw new InvalidValueError("pem values must be valid UTF-8 text");
  const data = valueBytes(value);
  if (value instanceof Uint8Array) {
    try {
      new TextDecoder("utf-8", { fatal: true }).decode(data);
    } catch {
      throw new InvalidValueError("pem values must be valid UTF-8 text");
    }
  }
  if (data.length < 1 || data.length > p.maxBytes) {
    throw new InvalidValueError(`pem values must be 1 to ${p.maxBytes} UTF-8 bytes, got ${data.length}`);
  }
  if (data.includes(0)) throw new InvalidValueError("pem values must not contain a NUL character");
  return data;
}

/** The canonical bytes of a value, for keying its memoized or permanent report (Python's `value_key`). */
export function valueKey(value: unknown, p: Params): Uint8Array {
  switch (p.mechanism) {
    case "rr":
      if (typeof value !== "boolean") throw new InvalidValueError(`rr values must be booleans, got ${typeof value}`);
      return new Uint8Array([value ? 1 : 0]);
    case "grr": {
      const out = new Uint8Array(4);
      new DataView(out.buffer).setUint32(0, grrCode(value, p), true);
      return out;
    }
    case "cms":
    case "oue-cms":
    case "hcms":
      return valueBytes(value);
    case "mean":
      return u64le(quantize(numberOf(value), p.lo, p.hi));
    case "num-histogram": {
      const out = new Uint8Array(2);
      new DataView(out.buffer).setUint16(0, bucketOf(numberOf(value, "num-histogram"), p.edges), true);
      return out;
    }
    case "daily-mean": {
      const out = new Uint8Array(8);
      new DataView(out.buffer).setFloat64(0, numberOf(value, "daily-mean"), true);
      return out;
    }
    case "pem":
      return pemData(value, p);
  }
}

/** Numeric metrics: the value lies outside the declared range (counted on the device). */
export function clips(value: unknown, p: Params): boolean {
  if (typeof value !== "number") return false;
  if (p.mechanism === "mean" || p.mechanism === "daily-mean") return !(p.lo <= value && value <= p.hi);
  if (p.mechanism === "num-histogram") return !((p.edges[0] ?? 0) <= value && value <= (p.edges[p.edges.length - 1] ?? 0));
  return false;
}

// ------------------------------------------------------------------------------------------ privatize
function rrPrivatize(value: unknown, p: RrParams, rng: RandomSource): Report {
  if (typeof value !== "boolean") throw new InvalidValueError(`rr values must be booleans, got ${typeof value}`);
  drawWord(rng);
  const flip = belowThreshold(p.flipThreshold, p.probBits, R.hi);
  return { bit: value !== flip ? 1 : 0 };
}

function grrReport(code: number, keepThreshold: number, bits: number, d: number, rng: RandomSource): number {
  const raw = new Uint8Array(16);
  rng.fill(raw);
  if (belowThreshold(keepThreshold, bits, le32(raw, 4))) return code;
  const other = intBelow(rng, d - 1, le32(raw, 12), le32(raw, 8));
  return other + (other >= code ? 1 : 0);
}

// Random bytes of one unary report, reused: the planes never outlive the call (zeroed after use). The raw
// draw starts at byte 3 of the buffer so that its planes (from raw[9]) are 4-byte aligned for Uint32 views.
let scratchBuf = new ArrayBuffer(4096);
let planes32 = new Uint32Array(scratchBuf, 12);
let out32 = new Uint32Array(2048);
let out8 = new Uint8Array(out32.buffer);

function noisyRow(threshold: number, bits: number, raw: Uint8Array, nb: number): Uint8Array {
  if (nb % 4 !== 0 || threshold === 0 || threshold === 2 ** bits) return bernoulliBytes(threshold, bits, raw, 9, nb);
  const n32 = nb >>> 2;
  const planes = planes32;
  if (out32.length < n32) {
    out32 = new Uint32Array(n32);
    out8 = new Uint8Array(out32.buffer);
  }
  const out = out32;
  let t = threshold;
  let b = bits;
  while (t % 2 === 0) {
    t /= 2;
    b -= 1;
  }
  for (let i = 0; i < n32; i++) out[i] = planes[i] as number;
  for (let k = 1; k < b; k++) {
    const base = k * n32;
    if (Math.floor(t / 2 ** k) % 2 === 1) for (let i = 0; i < n32; i++) out[i] = (out[i] as number) | (planes[base + i] as number);
    else for (let i = 0; i < n32; i++) out[i] = (out[i] as number) & (planes[base + i] as number);
  }
  const y = out8.slice(0, nb);
  out32.fill(0, 0, n32);
  return y;
}

const families = new WeakMap<object, HashFamily>();

/** The hash family of sketch params, cached on the params object. */
function family(p: { k: number; m: number; hashSeed: number; hashVersion: number }): HashFamily {
  let f = families.get(p);
  if (!f) {
    f = familyOf(p.k, p.m, p.hashSeed, p.hashVersion);
    families.set(p, f);
  }
  return f;
}

/** One report of a unary row (cms, oue-cms, pem): Python's `unary_report`. */
function unaryReport(p: UnaryParams, rowBound: number, hotOf: (row: number) => number, rng: RandomSource): Report {
  const nb = p.m / 8;
  const size = 9 + p.probBits * nb;
  if (scratchBuf.byteLength < size + 3) {
    scratchBuf = new ArrayBuffer(size + 3 + 4);
    planes32 = new Uint32Array(scratchBuf, 12);
  }
  const raw = new Uint8Array(scratchBuf, 3, size);
  rng.fill(raw);
  const j = intBelow(rng, rowBound, le32(raw, 4), le32(raw, 0));
  const hot = hotOf(j);
  const y = noisyRow(p.noiseThreshold, p.probBits, raw, nb);
  const mask = 0x80 >> (hot & 7);
  const at = hot >> 3;
  if (p.fairHotBit) y[at] = (raw[8] ?? 0) & 1 ? (y[at] ?? 0) | mask : (y[at] ?? 0) & ~mask;
  else y[at] = (y[at] ?? 0) ^ mask;
  raw.fill(0);
  return { row: j, bits: y };
}

function hcmsPrivatize(value: unknown, p: HcmsParams, rng: RandomSource): Report {
  const fam = family(p);
  fam.baseOf(valueBytes(value));
  const xh = R.hi;
  const xl = R.lo;
  const raw = new Uint8Array(24);
  rng.fill(raw);
  const j = intBelow(rng, p.k, le32(raw, 4), le32(raw, 0));
  const col = intBelow(rng, p.m, le32(raw, 12), le32(raw, 8));
  const flip = belowThreshold(p.flipThreshold, p.probBits, le32(raw, 20));
  let x = col & fam.hashFromBase(xh, xl, j);
  let parity = 0;
  while (x) {
    parity ^= 1;
    x &= x - 1;
  }
  const plus = parity === 0;
  return { row: j, col, bit: plus !== flip ? 1 : 0 };
}

function meanPrivatize(x: number, p: MeanParams, rng: RandomSource): Report {
  const u = quantize(x, p.lo, p.hi);
  const raw = new Uint8Array(24);
  rng.fill(raw);
  const coin = le32(raw, 0);
  const w0hi = le32(raw, 4);
  const w1hi = le32(raw, 12);
  if (p.window === null || !(w0hi >>> 16 < (p.pmShare ?? 0))) {
    const bit = (coin < u) !== belowThreshold(p.flipThreshold, p.probBits, w1hi);
    return p.window === null ? { bit: bit ? 1 : 0 } : { col: bit ? 1 : 0 };
  }
  const w = p.window;
  const s = u * GRID; // ≤ 2^40, exact
  const i = Math.floor(s / 4294967296) + (coin < s % 4294967296 ? 1 : 0);
  let cell: number;
  if (belowThreshold(p.windowThreshold, p.probBits, w1hi)) {
    cell = i + intBelow(rng, w, le32(raw, 20), le32(raw, 16));
  } else {
    cell = intBelow(rng, GRID, le32(raw, 20), le32(raw, 16));
    if (cell >= i) cell += w;
  }
  return { col: 2 + cell };
}

/** A one-report oue row by Python's batch path (`unary_bits` with n = 1), as num-histogram's oue uses it. */
function unaryBitsOne(hot: number, p: UnaryParams, rng: RandomSource): Uint8Array {
  const nb = p.m / 8;
  const coinWord = new Uint8Array(8);
  rng.fill(coinWord); // random_words(1): the report's fair coin is its first bit (MSB of byte 0)
  const coin = ((coinWord[0] ?? 0) & 0x80) !== 0;
  // bernoulli_words over the padded block of 8 rows (8·nb bytes = nb words): planes drawn in order
  const planes = planesUsed(p.noiseThreshold, p.probBits);
  const block = 8 * nb;
  const raw = new Uint8Array(planes * block);
  if (planes > 0) rng.fill(raw);
  const full = bernoulliBytes(p.noiseThreshold, p.probBits, raw, 0, block);
  const y = full.slice(0, nb);
  const mask = 0x80 >> (hot & 7);
  const at = hot >> 3;
  y[at] = coin ? (y[at] ?? 0) | mask : (y[at] ?? 0) & ~mask;
  return y;
}

const PHI_HI = 0x9e3779b9;
const PHI_LO = 0x7f4a7c15;

/** pem's base hash of one key: fmix64 over (seed·256 + len) ⊕ φ, then over each u64 lane of the padded key. */
export function pemKeyBase(key: Uint8Array, seed: number, lanes: number): void {
  const shifted = seed * 256 + key.length; // < 2^40
  let hi = (Math.floor(shifted / 4294967296) ^ PHI_HI) >>> 0;
  let lo = ((shifted >>> 0) ^ PHI_LO) >>> 0;
  fmix64(hi, lo);
  hi = R.hi;
  lo = R.lo;
  const padded = new Uint8Array(8 * lanes);
  padded.set(key.subarray(0, 8 * lanes));
  for (let i = 0; i < lanes; i++) {
    fmix64((hi ^ le32(padded, 8 * i + 4)) >>> 0, (lo ^ le32(padded, 8 * i)) >>> 0);
    hi = R.hi;
    lo = R.lo;
  }
  R.hi = hi;
  R.lo = lo;
}

/** One value privatized now with fresh randomness (no device secret): Python's `Mechanism.privatize`. */
export function privatize(value: unknown, p: Params, rng: RandomSource = defaultRandom()): Report {
  switch (p.mechanism) {
    case "rr":
      return rrPrivatize(value, p, rng);
    case "grr":
      return { col: grrReport(grrCode(value, p), p.keepThreshold, p.probBits, p.domain.length, rng) };
    case "cms":
    case "oue-cms": {
      const fam = family(p);
      fam.baseOf(valueBytes(value));
      const xh = R.hi;
      const xl = R.lo;
      return unaryReport(p, p.k, (j) => fam.hashFromBase(xh, xl, j), rng);
    }
    case "hcms":
      return hcmsPrivatize(value, p, rng);
    case "mean":
      return meanPrivatize(numberOf(value), p, rng);
    case "num-histogram": {
      const code = bucketOf(numberOf(value, "num-histogram"), p.edges);
      const inner = p.inner;
      if (inner.mechanism === "grr") return { col: grrReport(code, inner.keepThreshold, inner.probBits, inner.domain.length, rng) };
      return { bits: unaryBitsOne(code, inner, rng) };
    }
    case "daily-mean":
      return meanPrivatize(numberOf(value, "daily-mean"), p.onebit, rng);
    case "pem": {
      const data = concatBytes([pemData(value, p), new Uint8Array([0])]);
      const fam = family(p);
      const k = p.k;
      return unaryReport(
        p.sketch,
        p.rows,
        (row) => {
          const group = Math.floor(row / k);
          pemKeyBase(data.subarray(0, group + 1), p.hashSeed, p.lanes);
          return fam.hashFromBase(R.hi, R.lo, row % k);
        },
        rng,
      );
    }
  }
}

function rrPermanentBit(
  bit: boolean,
  p: RrParams,
  secret: Uint8Array,
  metric: string,
  fingerprint: Uint8Array,
  rng: RandomSource,
): number {
  const split = p.split;
  const stream = prrStream(secret, metric, fingerprint, "rr", new Uint8Array([bit ? 1 : 0]));
  if (stream.bits(split.bits) < split.prrThreshold) bit = !bit;
  if (drawBelow(rng, split.irrNum, split.irrDen)) bit = !bit;
  return bit ? 1 : 0;
}

/**
 * One report through the value's permanent randomized response (rr, grr, daily-mean), keyed by the device
 * `secret`, the metric and its privatization fingerprint, with fresh instantaneous noise on top.
 */
export function privatizePermanent(
  value: unknown,
  p: Params,
  secret: Uint8Array,
  metric: string,
  fingerprint: Uint8Array,
  rng: RandomSource = defaultRandom(),
): Report {
  if (p.mechanism === "rr") {
    if (typeof value !== "boolean") throw new InvalidValueError(`rr values must be booleans, got ${typeof value}`);
    return { bit: rrPermanentBit(value, p, secret, metric, fingerprint, rng) };
  }
  if (p.mechanism === "grr") {
    const code = grrCode(value, p);
    const split = p.split;
    const key = new Uint8Array(4);
    new DataView(key.buffer).setUint32(0, code, true);
    const stream = prrStream(secret, metric, fingerprint, "grr", key);
    let prr = code;
    if (stream.bits(split.bits) >= split.prrThreshold) {
      const other = stream.below(split.d - 1);
      prr = other + (other >= code ? 1 : 0);
    }
    let out = prr;
    if (!drawBelow(rng, split.irrNum, split.irrDen)) {
      const other = uniformBelow(rng, split.d - 1);
      out = other + (other >= prr ? 1 : 0);
    }
    return { col: out };
  }
  if (p.mechanism === "daily-mean") {
    const u = quantize(numberOf(value, "daily-mean"), p.lo, p.hi);
    const alpha = prrStream(secret, metric, fingerprint, "daily-mean-alpha", new Uint8Array(0)).bits(VALUE_BITS);
    const c = u + alpha >= 4294967296;
    return { bit: rrPermanentBit(c, p.rr, secret, metric, fingerprint, rng) };
  }
  throw new InvalidValueError(`${p.mechanism} has no permanent randomized response`);
}

// ------------------------------------------------------------------------------------------ the codec
/** The columns of a mechanism's reports, in payload order (Python's `Mechanism.columns`). */
export function columns(p: Params): Column[] {
  switch (p.mechanism) {
    case "rr":
    case "daily-mean":
      return [{ attr: "bit", kind: "bit", size: 1, bound: 2 }];
    case "grr":
      return [{ attr: "col", kind: "index", size: p.domain.length <= 256 ? 1 : 2, bound: p.domain.length }];
    case "cms":
    case "oue-cms":
      return [
        { attr: "row", kind: "index", size: 2, bound: p.k },
        { attr: "bits", kind: "bytes", size: p.m / 8, bound: 0 },
      ];
    case "pem":
      return [
        { attr: "row", kind: "index", size: 2, bound: p.rows },
        { attr: "bits", kind: "bytes", size: p.m / 8, bound: 0 },
      ];
    case "hcms":
      return [
        { attr: "row", kind: "index", size: 2, bound: p.k },
        { attr: "col", kind: "index", size: 2, bound: p.m },
        { attr: "bit", kind: "bit", size: 1, bound: 2 },
      ];
    case "mean":
      return p.window === null
        ? [{ attr: "bit", kind: "bit", size: 1, bound: 2 }]
        : [{ attr: "col", kind: "index", size: 2, bound: 2 + GRID + p.window }];
    case "num-histogram": {
      const inner = p.inner;
      if (inner.mechanism === "grr") return columns(inner);
      return [{ attr: "bits", kind: "bytes", size: inner.m / 8, bound: 0 }];
    }
  }
}

export function mechanismCode(p: Params): number {
  return MECHANISM_CODES[p.mechanism];
}

/** Bytes of one stored report record: each index as u16 LE, each bit as a 0/1 byte, bytes as they are. */
export function recordSize(cols: Column[]): number {
  let n = 0;
  for (const c of cols) n += c.kind === "index" ? 2 : c.kind === "bit" ? 1 : c.size;
  return n;
}

/** The stored record of one report (the device format of the Python SDK's queue). */
export function packReport(r: Report, cols: Column[]): Uint8Array {
  const out = new Uint8Array(recordSize(cols));
  let at = 0;
  for (const c of cols) {
    if (c.kind === "index") {
      const v = (c.attr === "row" ? r.row : r.col) ?? -1;
      if (!Number.isInteger(v) || v < 0 || v >= c.bound) throw new InvalidValueError(`a ${c.attr} index out of range`);
      out[at] = v & 0xff;
      out[at + 1] = v >>> 8;
      at += 2;
    } else if (c.kind === "bit") {
      out[at] = r.bit ? 1 : 0;
      at += 1;
    } else {
      const b = r.bits;
      if (!b || b.length !== c.size) throw new InvalidValueError(`a report needs ${c.size} bytes of bits`);
      out.set(b, at);
      at += c.size;
    }
  }
  return out;
}

export function unpackReport(rec: Uint8Array, cols: Column[]): Report {
  const r: Report = {};
  let at = 0;
  for (const c of cols) {
    if (c.kind === "index") {
      const v = (rec[at] ?? 0) | ((rec[at + 1] ?? 0) << 8);
      if (c.attr === "row") r.row = v;
      else r.col = v;
      at += 2;
    } else if (c.kind === "bit") {
      r.bit = rec[at] ? 1 : 0;
      at += 1;
    } else {
      r.bits = rec.slice(at, at + c.size);
      at += c.size;
    }
  }
  return r;
}

/** The wire payload of `reports`: each column holding all n reports, one after another. */
export function encodePayload(reports: Report[], cols: Column[]): Uint8Array {
  const n = reports.length;
  const parts: Uint8Array[] = [];
  for (const c of cols) {
    if (c.kind === "index") {
      const out = new Uint8Array(n * c.size);
      reports.forEach((r, i) => {
        const v = (c.attr === "row" ? r.row : r.col) ?? 0;
        if (c.size === 1) out[i] = v;
        else {
          out[2 * i] = v & 0xff;
          out[2 * i + 1] = v >>> 8;
        }
      });
      parts.push(out);
    } else if (c.kind === "bit") {
      const out = new Uint8Array((n + 7) >> 3);
      reports.forEach((r, i) => {
        if (r.bit) out[i >> 3] = (out[i >> 3] ?? 0) | (0x80 >> (i & 7));
      });
      parts.push(out);
    } else {
      const out = new Uint8Array(n * c.size);
      reports.forEach((r, i) => out.set(r.bits ?? new Uint8Array(c.size), i * c.size));
      parts.push(out);
    }
  }
  return concatBytes(parts);
}

/**
 * Many values at once (the batch loop of a simulation or an importer): the same distribution and the same
 * draws per report as {@link privatize}, with each distinct sketch value hashed once per call (the base
 * hashes are kept only for the call).
 */
export function privatizeBatch(values: unknown[], p: Params, rng: RandomSource = defaultRandom()): Report[] {
  if (p.mechanism !== "cms" && p.mechanism !== "oue-cms") return values.map((v) => privatize(v, p, rng));
  const fam = family(p);
  const n = values.length;
  const nb = p.m / 8;
  if (nb % 4 !== 0 || p.noiseThreshold === 0 || p.noiseThreshold === 2 ** p.probBits) {
    return values.map((v) => privatize(v, p, rng));
  }
  // the fast loop: one scratch draw buffer for the call, every row written straight into one output buffer
  // (a view per report, no per-report ArrayBuffer), each distinct value hashed once
  const size = 9 + p.probBits * nb;
  if (scratchBuf.byteLength < size + 3) {
    scratchBuf = new ArrayBuffer(size + 3 + 4);
    planes32 = new Uint32Array(scratchBuf, 12);
  }
  const raw = new Uint8Array(scratchBuf, 3, size);
  const planes = planes32;
  const n32 = nb >>> 2;
  const outBuf = new ArrayBuffer(n * nb);
  const o32 = new Uint32Array(outBuf);
  const o8 = new Uint8Array(outBuf);
  let t = p.noiseThreshold;
  let b = p.probBits;
  while (t % 2 === 0) {
    t /= 2;
    b -= 1;
  }
  const ors = new Uint8Array(b);
  for (let k = 1; k < b; k++) ors[k] = Math.floor(t / 2 ** k) % 2;
  const index = new Map<unknown, number>();
  const baseHi: number[] = [];
  const baseLo: number[] = [];
  const fair = p.fairHotBit;
  const out: Report[] = new Array(n);
  for (let i = 0; i < n; i++) {
    const v = values[i];
    let at = index.get(v);
    if (at === undefined) {
      fam.baseOf(valueBytes(v));
      at = baseHi.length;
      baseHi.push(R.hi);
      baseLo.push(R.lo);
      index.set(v, at);
    }
    rng.fill(raw);
    const j = intBelow(rng, p.k, le32(raw, 4), le32(raw, 0));
    const hot = fam.hashFromBase(baseHi[at] as number, baseLo[at] as number, j);
    const ob = i * n32;
    for (let w = 0; w < n32; w++) o32[ob + w] = planes[w] as number;
    for (let k = 1; k < b; k++) {
      const base = k * n32;
      if (ors[k]) for (let w = 0; w < n32; w++) o32[ob + w] = (o32[ob + w] as number) | (planes[base + w] as number);
      else for (let w = 0; w < n32; w++) o32[ob + w] = (o32[ob + w] as number) & (planes[base + w] as number);
    }
    const mask = 0x80 >> (hot & 7);
    const byte = i * nb + (hot >> 3);
    if (fair) o8[byte] = (raw[8] ?? 0) & 1 ? (o8[byte] ?? 0) | mask : (o8[byte] ?? 0) & ~mask;
    else o8[byte] = (o8[byte] ?? 0) ^ mask;
    out[i] = { row: j, bits: o8.subarray(i * nb, i * nb + nb) };
  }
  raw.fill(0);
  return out;
}
