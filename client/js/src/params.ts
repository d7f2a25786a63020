/**
 * Every mechanism's params, validated and with their integer thresholds computed exactly as the Python
 * protocol computes them (`ldptel.client.mechanisms.*`): the same float expressions in the same order, so the
 * thresholds, the effective ε and the privatization fingerprint agree (the golden vectors check thousands).
 */
import { InvalidParameterError } from "./errors.js";
import { PyFloat, type PyJson } from "./pyjson.js";
import { isWellFormed } from "./bytes.js";

export const EPSILON_RANGE: [number, number] = [0.01, 30.0];
export const MAX_K = 1 << 16;
export const M_RANGE: [number, number] = [8, 1 << 16];
export const MAX_CELLS = 1 << 26;
export const MAX_DOMAIN = 1 << 16;
export const MAX_LABEL_CHARS = 200;
export const SINGLE_DRAW_PROB_BITS = 32;
const AUTO_PROB_BITS_LOSS = 0.01;
const AUTO_PROB_BITS_RANGE: [number, number] = [8, 24];
export const VALUE_BITS = 32;
export const GRID = 256;
export const SHARE_BITS = 16;
const MAX_ABS_BOUND = 1e15;
const MIN_SPAN = 1e-12;
export const MAX_BUCKETS = 1024;
export const MAX_PEM_BYTES = 32;

export const MECHANISM_CODES = {
  rr: 1,
  grr: 2,
  cms: 3,
  hcms: 4,
  "oue-cms": 5,
  mean: 8,
  "num-histogram": 9,
  "daily-mean": 10,
  pem: 16,
} as const;
export type MechanismName = keyof typeof MECHANISM_CODES;
export const MECHANISMS = Object.keys(MECHANISM_CODES) as MechanismName[];

// ------------------------------------------------------------------------------------------ validation
type Obj = Record<string, unknown>;

function checkInt(name: string, value: unknown, lo: number, hi: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < lo || value > hi) {
    throw new InvalidParameterError(name, `an integer in [${lo}, ${hi}]`, value);
  }
  return value;
}

function checkNumber(name: string, value: unknown, lo: number, hi: number): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < lo || value > hi) {
    throw new InvalidParameterError(name, `a number in [${lo}, ${hi}]`, value);
  }
  return value;
}

function checkEpsilon(value: unknown): number {
  return checkNumber("epsilon", value, EPSILON_RANGE[0], EPSILON_RANGE[1]);
}

function optInt(obj: Obj, key: string): number | null {
  const v = obj[key];
  return v === undefined || v === null ? null : (v as number);
}

// ----------------------------------------------------------------------------------- exact thresholds
const TWO = (bits: number): number => 2 ** bits;

/** Smallest T with T/2^bits >= prob (a flip probability rounded towards more noise). */
export function ceilThreshold(prob: number, bits: number): number {
  return Math.max(1, Math.ceil(prob * TWO(bits)));
}

/** scale · ln((2^B − T)/T). */
export function flipEpsilon(threshold: number, bits: number, scale = 1.0): number {
  return scale * (Math.log(TWO(bits) - threshold) - Math.log(threshold));
}

export function safeFlipThreshold(prob: number, bits: number, epsilon: number, scale: number): number {
  let t = ceilThreshold(prob, bits);
  while (t < TWO(bits - 1) && flipEpsilon(t, bits, scale) > epsilon) t += 1;
  return t;
}

function grrEpsilon(t: number, d: number, bits: number): number {
  return Math.log(t) + Math.log(d - 1) - Math.log(TWO(bits) - t);
}

export function grrKeepThreshold(epsilon: number, d: number, bits: number): number {
  let t = Math.floor((Math.exp(epsilon) / (Math.exp(epsilon) + d - 1)) * TWO(bits));
  while (t > 1 && grrEpsilon(t, d, bits) > epsilon) t -= 1;
  return t;
}

function dpmEpsilon(t: number, w: number, bits: number): number {
  return Math.log(t) + Math.log(GRID) - Math.log(w) - Math.log(TWO(bits) - t);
}

export function dpmThreshold(epsilon: number, w: number, bits: number): number {
  const e = Math.exp(epsilon);
  let t = Math.floor((TWO(bits) * w * e) / (w * e + GRID));
  while (t > 1 && dpmEpsilon(t, w, bits) > epsilon) t -= 1;
  return t;
}

/** rr's split into a permanent (PRR) and an instantaneous (IRR) flip; together exactly T/2^B. */
export interface RrSplit {
  bits: number;
  threshold: number;
  prrThreshold: number;
  irrNum: number;
  irrDen: number;
  epsilonInf: number;
}

export function rrSplit(bits: number, t: number): RrSplit {
  const contrast = 1.0 - (2.0 * t) / TWO(bits);
  const f1 = (1.0 - Math.sqrt(contrast)) / 2.0;
  const t1 = Math.min(t, Math.max(1, Math.ceil(f1 * TWO(bits))));
  return {
    bits,
    threshold: t,
    prrThreshold: t1,
    irrNum: t - t1,
    irrDen: TWO(bits) - 2 * t1,
    epsilonInf: Math.log(TWO(bits) - t1) - Math.log(t1),
  };
}

export interface GrrSplit {
  bits: number;
  d: number;
  threshold: number;
  prrThreshold: number;
  irrNum: number;
  irrDen: number;
  epsilonInf: number;
}

export function grrSplit(bits: number, k: number, d: number): GrrSplit {
  const full = TWO(bits);
  const contrast = (d * k - full) / ((d - 1) * full);
  const p1 = (1.0 + (d - 1) * Math.sqrt(contrast)) / d;
  const k1 = Math.max(k, Math.min(full - 1, Math.floor(p1 * full)));
  return {
    bits,
    d,
    threshold: k,
    prrThreshold: k1,
    irrNum: k1 + (d - 1) * k - full,
    irrDen: d * k1 - full,
    epsilonInf: Math.log(k1) + Math.log(d - 1) - Math.log(full - k1),
  };
}

// -------------------------------------------------------------------------------------------- params
interface Common {
  epsilon: number;
  /** ε of one report, computed from the integer thresholds. */
  effectiveEpsilon: number;
  /** The params' JSON form with Python types (floats wrapped), for the fingerprint. */
  dict: PyJson;
}

export interface RrParams extends Common {
  mechanism: "rr";
  probBits: number;
  flipThreshold: number;
  split: RrSplit;
}

export interface GrrParams extends Common {
  mechanism: "grr";
  domain: string[];
  index: Map<string, number>;
  probBits: number;
  keepThreshold: number;
  split: GrrSplit;
}

/** cms and oue-cms (and pem's sketches): a k×m sketch of unary rows. */
export interface UnaryParams extends Common {
  mechanism: "cms" | "oue-cms";
  k: number;
  m: number;
  hashSeed: number;
  hashVersion: number;
  probBits: number;
  noiseThreshold: number;
  fairHotBit: boolean;
}

export interface HcmsParams extends Common {
  mechanism: "hcms";
  k: number;
  m: number;
  hashSeed: number;
  hashVersion: number;
  probBits: number;
  flipThreshold: number;
}

export interface MeanParams extends Common {
  mechanism: "mean";
  lo: number;
  hi: number;
  variant: "onebit" | "dhm";
  window: number | null;
  pmShare: number | null;
  probBits: number;
  flipThreshold: number;
  windowThreshold: number;
}

export interface HistogramParams extends Common {
  mechanism: "num-histogram";
  edges: number[];
  encoding: "grr" | "oue";
  probBits: number | null;
  inner: GrrParams | UnaryParams;
}

export interface DailyMeanParams extends Common {
  mechanism: "daily-mean";
  lo: number;
  hi: number;
  probBits: number;
  onebit: MeanParams;
  rr: RrParams;
}

export interface PemParams extends Common {
  mechanism: "pem";
  k: number;
  m: number;
  maxBytes: number;
  hashSeed: number;
  hashVersion: number;
  probBits: number;
  /** One group's oue-cms sketch (k rows). */
  sketch: UnaryParams;
  /** Sketch rows of the whole state: k per group. */
  rows: number;
  lanes: number;
}

export type Params =
  | RrParams
  | GrrParams
  | UnaryParams
  | HcmsParams
  | MeanParams
  | HistogramParams
  | DailyMeanParams
  | PemParams;

function allowOnly(obj: Obj, mech: string, allowed: string[]): void {
  for (const key of Object.keys(obj)) {
    if (key !== "mechanism" && !allowed.includes(key)) {
      throw new InvalidParameterError(key, `not set: ${mech} takes ${JSON.stringify([...allowed].sort())}`, obj[key]);
    }
  }
}

function need(obj: Obj, mech: string, keys: string[]): void {
  for (const key of keys) {
    if (obj[key] === undefined) throw new InvalidParameterError("params", `complete ${mech} params (missing ${key})`, Object.keys(obj).length);
  }
}

export function rrParams(epsilon: unknown, probBits: unknown = SINGLE_DRAW_PROB_BITS): RrParams {
  const eps = checkEpsilon(epsilon);
  const bits = checkInt("prob_bits", probBits, 2, 32);
  const t = safeFlipThreshold(1.0 / (Math.exp(eps) + 1.0), bits, eps, 1.0);
  if (t >= TWO(bits - 1)) throw new InvalidParameterError("prob_bits", "large enough for epsilon to survive rounding", bits);
  return {
    mechanism: "rr",
    epsilon: eps,
    probBits: bits,
    flipThreshold: t,
    split: rrSplit(bits, t),
    effectiveEpsilon: flipEpsilon(t, bits),
    dict: { mechanism: "rr", epsilon: new PyFloat(eps), prob_bits: bits },
  };
}

function grrParams(obj: Obj): GrrParams {
  allowOnly(obj, "grr", ["epsilon", "domain", "prob_bits"]);
  need(obj, "grr", ["epsilon", "domain"]);
  const eps = checkEpsilon(obj.epsilon);
  const bits = checkInt("prob_bits", obj.prob_bits ?? SINGLE_DRAW_PROB_BITS, 8, 32);
  const domain = obj.domain;
  const rule = `a list of 2 to ${MAX_DOMAIN} distinct labels`;
  if (!Array.isArray(domain)) throw new InvalidParameterError("domain", rule, domain);
  if (domain.length < 2 || domain.length > MAX_DOMAIN) throw new InvalidParameterError("domain", rule, `${domain.length} labels`);
  const index = new Map<string, number>();
  domain.forEach((label, i) => {
    // Python counts characters in code points; a lone surrogate could never be encoded by Python either
    if (typeof label !== "string" || !isWellFormed(label) || label.length < 1 || [...label].length > MAX_LABEL_CHARS) {
      throw new InvalidParameterError("domain", `labels that are strings of 1 to ${MAX_LABEL_CHARS} characters`, label);
    }
    index.set(label, i);
  });
  if (index.size !== domain.length) throw new InvalidParameterError("domain", "distinct labels", "a list with duplicates");
  return grrFromDomain(eps, domain as string[], index, bits);
}

function grrFromDomain(eps: number, domain: string[], index: Map<string, number>, bits: number): GrrParams {
  const d = domain.length;
  const k = grrKeepThreshold(eps, d, bits);
  if (k * d <= TWO(bits)) throw new InvalidParameterError("epsilon", "large enough that p stays above 1/d after rounding", eps);
  return {
    mechanism: "grr",
    epsilon: eps,
    domain,
    index,
    probBits: bits,
    keepThreshold: k,
    split: grrSplit(bits, k, d),
    effectiveEpsilon: grrEpsilon(k, d, bits),
    dict: { mechanism: "grr", epsilon: new PyFloat(eps), domain, prob_bits: bits },
  };
}

interface SketchFields {
  k: number;
  m: number;
  hashSeed: number;
  hashVersion: number;
}

function sketchFields(obj: Obj): SketchFields {
  const k = checkInt("k", obj.k, 1, MAX_K);
  const m = checkInt("m", obj.m, M_RANGE[0], M_RANGE[1]);
  if ((m & (m - 1)) !== 0) throw new InvalidParameterError("m", `a power of two in [${M_RANGE[0]}, ${M_RANGE[1]}]`, m);
  if (k * m > MAX_CELLS) throw new InvalidParameterError("k*m", `at most ${MAX_CELLS} cells`, k * m);
  const hashSeed = checkInt("hash_seed", obj.hash_seed ?? 0, 0, 0xffffffff);
  const hashVersion = obj.hash_version ?? 1;
  if (hashVersion !== 1) throw new InvalidParameterError("hash_version", "one of [1]", hashVersion);
  return { k, m, hashSeed, hashVersion: 1 };
}

function autoBits(epsAt: (bits: number) => number, epsilon: number): number {
  for (let b = AUTO_PROB_BITS_RANGE[0]; b <= AUTO_PROB_BITS_RANGE[1]; b++) {
    if (epsAt(b) >= (1.0 - AUTO_PROB_BITS_LOSS) * epsilon) return b;
  }
  return AUTO_PROB_BITS_RANGE[1];
}

function sketchDict(mech: string, eps: number, f: SketchFields, bits: number): PyJson {
  return {
    mechanism: mech,
    epsilon: new PyFloat(eps),
    k: f.k,
    m: f.m,
    hash_seed: f.hashSeed,
    hash_version: f.hashVersion,
    prob_bits: bits,
  };
}

export function unaryParams(mech: "cms" | "oue-cms", epsilon: unknown, f: SketchFields, probBits: unknown): UnaryParams {
  const eps = checkEpsilon(epsilon);
  const scale = mech === "cms" ? 2.0 : 1.0;
  const prob = mech === "cms" ? 1.0 / (Math.exp(eps / 2) + 1.0) : 1.0 / (Math.exp(eps) + 1.0);
  const bits =
    probBits === null || probBits === undefined
      ? autoBits((b) => flipEpsilon(safeFlipThreshold(prob, b, eps, scale), b, scale), eps)
      : checkInt("prob_bits", probBits, 2, 32);
  const t = safeFlipThreshold(prob, bits, eps, scale);
  return {
    mechanism: mech,
    epsilon: eps,
    ...f,
    probBits: bits,
    noiseThreshold: t,
    fairHotBit: mech === "oue-cms",
    effectiveEpsilon: flipEpsilon(t, bits, scale),
    dict: sketchDict(mech, eps, f, bits),
  };
}

function hcmsParams(obj: Obj): HcmsParams {
  const eps = checkEpsilon(obj.epsilon);
  const f = sketchFields(obj);
  const bits = obj.prob_bits === null || obj.prob_bits === undefined ? SINGLE_DRAW_PROB_BITS : checkInt("prob_bits", obj.prob_bits, 2, 32);
  const t = safeFlipThreshold(1.0 / (Math.exp(eps) + 1.0), bits, eps, 1.0);
  return {
    mechanism: "hcms",
    epsilon: eps,
    ...f,
    probBits: bits,
    flipThreshold: t,
    effectiveEpsilon: flipEpsilon(t, bits),
    dict: sketchDict("hcms", eps, f, bits),
  };
}

export function meanParams(obj: Obj): MeanParams {
  allowOnly(obj, "mean", ["epsilon", "lo", "hi", "variant", "window", "pm_share", "prob_bits"]);
  need(obj, "mean", ["epsilon", "lo", "hi"]);
  const eps = checkEpsilon(obj.epsilon);
  const lo = checkNumber("lo", obj.lo, -MAX_ABS_BOUND, MAX_ABS_BOUND);
  const hi = checkNumber("hi", obj.hi, -MAX_ABS_BOUND, MAX_ABS_BOUND);
  if (!(hi > lo)) throw new InvalidParameterError("hi", `a number above lo = ${lo}`, hi);
  if (!(hi - lo >= MIN_SPAN)) {
    // as Python's MIN_SPAN: narrower, 2^V/(hi − lo) overflows float64 and the scaling gives NaN
    throw new InvalidParameterError("hi - lo", `at least ${MIN_SPAN} (a range too narrow for the device's 2^32-step scaling in float64; use a smaller unit)`, hi - lo);
  }
  const bits = checkInt("prob_bits", obj.prob_bits ?? SINGLE_DRAW_PROB_BITS, SINGLE_DRAW_PROB_BITS, SINGLE_DRAW_PROB_BITS);
  const variant = obj.variant ?? "auto";
  let window = optInt(obj, "window");
  let pmShare = optInt(obj, "pm_share");
  if (variant === "auto") {
    // "auto" is resolved when the server builds the spec (a grid search); served specs carry the result.
    throw new InvalidParameterError("variant", "\"onebit\" or \"dhm\" with window and pm_share (as the registry serves it)", variant);
  }
  if (variant !== "onebit" && variant !== "dhm") throw new InvalidParameterError("variant", "one of [\"auto\", \"dhm\", \"onebit\"]", variant);
  if (variant === "onebit" && (window !== null || pmShare !== null)) {
    throw new InvalidParameterError("window", "unset (None) for the onebit variant", window);
  }
  const flip = safeFlipThreshold(1.0 / (Math.exp(eps) + 1.0), bits, eps, 1.0);
  let windowThreshold = 0;
  const effective: number[] = [];
  if (variant === "dhm") {
    if (window === null || pmShare === null) throw new InvalidParameterError("window", "set with pm_share for the dhm variant", window);
    window = checkInt("window", window, 1, GRID);
    pmShare = checkInt("pm_share", pmShare, 0, 1 << SHARE_BITS);
    windowThreshold = dpmThreshold(eps, window, bits);
    if (windowThreshold * GRID <= window * (TWO(bits) - windowThreshold)) {
      throw new InvalidParameterError("window", "narrow enough that epsilon survives rounding", window);
    }
  }
  const alpha = pmShare === null ? 0 : pmShare / (1 << SHARE_BITS);
  if (alpha < 1.0) effective.push(flipEpsilon(flip, bits));
  if (alpha > 0.0 && window !== null) effective.push(dpmEpsilon(windowThreshold, window, bits));
  return {
    mechanism: "mean",
    epsilon: eps,
    lo,
    hi,
    variant,
    window,
    pmShare,
    probBits: bits,
    flipThreshold: flip,
    windowThreshold,
    effectiveEpsilon: Math.max(...effective),
    dict: {
      mechanism: "mean",
      epsilon: new PyFloat(eps),
      lo: new PyFloat(lo),
      hi: new PyFloat(hi),
      variant,
      window,
      pm_share: pmShare,
      prob_bits: bits,
    },
  };
}

function histogramParams(obj: Obj): HistogramParams {
  allowOnly(obj, "num-histogram", ["epsilon", "edges", "encoding", "prob_bits"]);
  need(obj, "num-histogram", ["epsilon", "edges"]);
  const eps = checkEpsilon(obj.epsilon);
  const edges = obj.edges;
  const rule = `a list of 3 to ${MAX_BUCKETS + 1} increasing numbers`;
  if (!Array.isArray(edges) || edges.length < 3 || edges.length > MAX_BUCKETS + 1) {
    throw new InvalidParameterError("edges", rule, Array.isArray(edges) ? edges.length : edges);
  }
  const clean = edges.map((e) => checkNumber("edges", e, -MAX_ABS_BOUND, MAX_ABS_BOUND));
  for (let i = 1; i < clean.length; i++) {
    if (!((clean[i] ?? 0) > (clean[i - 1] ?? 0))) throw new InvalidParameterError("edges", rule, "a list that does not increase");
  }
  const d = clean.length - 1;
  let encoding = obj.encoding ?? "auto";
  if (encoding !== "auto" && encoding !== "grr" && encoding !== "oue") {
    throw new InvalidParameterError("encoding", "one of [\"auto\", \"grr\", \"oue\"]", encoding);
  }
  if (encoding === "auto") encoding = d < 3 * Math.exp(eps) + 2 ? "grr" : "oue";
  let inner: GrrParams | UnaryParams;
  let probBits: number | null = null;
  if (encoding === "grr") {
    if (obj.prob_bits !== null && obj.prob_bits !== undefined) {
      throw new InvalidParameterError("prob_bits", "unset (None) for grr encoding", obj.prob_bits);
    }
    // the inner grr's labels are display strings; only their number matters to the device
    const labels = Array.from({ length: d }, (_, i) => String(i));
    inner = grrFromDomain(eps, labels, new Map(labels.map((l, i) => [l, i])), SINGLE_DRAW_PROB_BITS);
  } else {
    let m = 8;
    while (m < d) m *= 2;
    inner = unaryParams("oue-cms", eps, { k: 1, m, hashSeed: 0, hashVersion: 1 }, obj.prob_bits ?? null);
    probBits = inner.probBits;
  }
  return {
    mechanism: "num-histogram",
    epsilon: eps,
    edges: clean,
    encoding: encoding as "grr" | "oue",
    probBits,
    inner,
    effectiveEpsilon: inner.effectiveEpsilon,
    dict: {
      mechanism: "num-histogram",
      epsilon: new PyFloat(eps),
      edges: clean.map((e) => new PyFloat(e)),
      encoding: encoding as string,
      prob_bits: probBits,
    },
  };
}

function dailyMeanParams(obj: Obj): DailyMeanParams {
  allowOnly(obj, "daily-mean", ["epsilon", "lo", "hi", "prob_bits"]);
  need(obj, "daily-mean", ["epsilon", "lo", "hi"]);
  const probBits = obj.prob_bits ?? SINGLE_DRAW_PROB_BITS;
  const onebit = meanParams({ epsilon: obj.epsilon, lo: obj.lo, hi: obj.hi, variant: "onebit", prob_bits: probBits });
  const rr = rrParams(onebit.epsilon, onebit.probBits);
  return {
    mechanism: "daily-mean",
    epsilon: onebit.epsilon,
    lo: onebit.lo,
    hi: onebit.hi,
    probBits: onebit.probBits,
    onebit,
    rr,
    effectiveEpsilon: onebit.effectiveEpsilon,
    dict: {
      mechanism: "daily-mean",
      epsilon: new PyFloat(onebit.epsilon),
      lo: new PyFloat(onebit.lo),
      hi: new PyFloat(onebit.hi),
      prob_bits: onebit.probBits,
    },
  };
}

function pemParams(obj: Obj): PemParams {
  allowOnly(obj, "pem", ["epsilon", "k", "m", "max_bytes", "hash_seed", "hash_version", "prob_bits"]);
  need(obj, "pem", ["epsilon", "k", "m", "max_bytes"]);
  const maxBytes = checkInt("max_bytes", obj.max_bytes, 1, MAX_PEM_BYTES);
  const f = sketchFields(obj);
  const sketch = unaryParams("oue-cms", obj.epsilon, f, obj.prob_bits ?? null);
  if (f.k * maxBytes > MAX_K) throw new InvalidParameterError("k*max_bytes", `at most ${MAX_K} sketch rows (k per byte)`, f.k * maxBytes);
  if (f.k * maxBytes * f.m > MAX_CELLS) {
    throw new InvalidParameterError("k*max_bytes*m", `at most ${MAX_CELLS} cells`, f.k * maxBytes * f.m);
  }
  return {
    mechanism: "pem",
    epsilon: sketch.epsilon,
    ...f,
    maxBytes,
    probBits: sketch.probBits,
    sketch,
    rows: f.k * maxBytes,
    lanes: Math.ceil(maxBytes / 8),
    effectiveEpsilon: sketch.effectiveEpsilon,
    dict: {
      mechanism: "pem",
      epsilon: new PyFloat(sketch.epsilon),
      k: f.k,
      m: f.m,
      max_bytes: maxBytes,
      hash_seed: f.hashSeed,
      hash_version: f.hashVersion,
      prob_bits: sketch.probBits,
    },
  };
}

/** Build and validate params from their JSON form (`{"mechanism": "cms", "epsilon": 4, ...}`). */
export function paramsFromDict(data: unknown): Params {
  if (typeof data !== "object" || data === null || Array.isArray(data)) {
    throw new InvalidParameterError("params", "a JSON object", data);
  }
  const obj = data as Obj;
  const mech = obj.mechanism;
  if (typeof mech !== "string" || !(mech in MECHANISM_CODES)) {
    throw new InvalidParameterError("mechanism", `one of ${JSON.stringify(MECHANISMS)}`, mech);
  }
  switch (mech as MechanismName) {
    case "rr":
      allowOnly(obj, "rr", ["epsilon", "prob_bits"]);
      need(obj, "rr", ["epsilon"]);
      return rrParams(obj.epsilon, obj.prob_bits ?? SINGLE_DRAW_PROB_BITS);
    case "grr":
      return grrParams(obj);
    case "cms":
    case "oue-cms":
      allowOnly(obj, mech, ["epsilon", "k", "m", "hash_seed", "hash_version", "prob_bits"]);
      need(obj, mech, ["epsilon", "k", "m"]);
      return unaryParams(mech as "cms" | "oue-cms", obj.epsilon, sketchFields(obj), obj.prob_bits ?? null);
    case "hcms":
      allowOnly(obj, "hcms", ["epsilon", "k", "m", "hash_seed", "hash_version", "prob_bits"]);
      need(obj, "hcms", ["epsilon", "k", "m"]);
      return hcmsParams(obj);
    case "mean":
      return meanParams(obj);
    case "num-histogram":
      return histogramParams(obj);
    case "daily-mean":
      return dailyMeanParams(obj);
    case "pem":
      return pemParams(obj);
  }
}

/** Whether repeated values go through a permanent randomized response (else: a per-day memo). */
export function isPermanent(p: Params): boolean {
  return p.mechanism === "rr" || p.mechanism === "grr" || p.mechanism === "daily-mean";
}

/** ε of any number of reports of one value (permanent: per privatization, ever; memoized: per day). */
export function longitudinalEpsilon(p: Params): number {
  switch (p.mechanism) {
    case "rr":
      return p.split.epsilonInf;
    case "grr":
      return p.split.epsilonInf;
    case "daily-mean":
      return 2.0 * p.rr.split.epsilonInf;
    default:
      return p.effectiveEpsilon;
  }
}

function gcd(a: number, b: number): number {
  while (b) [a, b] = [b, a % b];
  return a;
}

/** ln(p(d − 1)/(1 − p)) of a keep probability p = num/den (reduced, as Python's Fraction); ∞ when p = 1. */
function keepEpsilon(num: number, den: number, d: number): number {
  const g = gcd(num, den);
  num /= g;
  den /= g;
  if (num >= den) return Infinity;
  return Math.log(num * (d - 1)) - Math.log(den - num);
}

/** ε_irr of the permanent randomized response's instantaneous stage (ldptel.client.mechanisms.longitudinal). */
export function epsilonIrr(p: Params): number | null {
  const rr = p.mechanism === "rr" ? p : p.mechanism === "daily-mean" ? p.rr : null;
  if (rr) return keepEpsilon(rr.split.irrDen - rr.split.irrNum, rr.split.irrDen, 2);
  if (p.mechanism === "grr") return keepEpsilon(p.split.irrNum, p.split.irrDen, p.split.d);
  return null;
}

/**
 * What the daily ledger charges per report: ε_irr under a permanent randomized response (the memo lets the
 * collector compare a device's reports, so a change of value costs ε_irr per report), else the effective ε
 * (Python's `report_charge`).
 */
export function reportCharge(p: Params): number {
  return epsilonIrr(p) ?? p.effectiveEpsilon;
}
