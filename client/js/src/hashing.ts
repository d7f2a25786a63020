/**
 * The sketch hash family h_j : values → [m] of `ldptel.client.protocol.hashing` (version 1), byte for byte:
 * base hash x = h1 of MurmurHash3_x64_128(UTF-8 bytes, seed); row j has a_j (odd) and b_j, outputs 2j and
 * 2j+1 of SplitMix64 seeded with seed ⊕ (version << 32); h_j = ((a_j·x + b_j) mod 2^64) >> (64 − log2 m).
 */
import { InvalidParameterError, InvalidValueError } from "./errors.js";
import { utf8 } from "./bytes.js";
import { mmh3x64h1 } from "./mmh3.js";
import { R, mulHi32 } from "./u64.js";

const MASK64 = (1n << 64n) - 1n;
const GOLDEN = 0x9e3779b97f4a7c15n;

function splitmix64(state: bigint, count: number): bigint[] {
  const out: bigint[] = [];
  for (let i = 0; i < count; i++) {
    state = (state + GOLDEN) & MASK64;
    let z = state;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
    out.push(z ^ (z >> 31n));
  }
  return out;
}

/** The bytes a sketch value hashes as: UTF-8 of a well-formed string, or the bytes themselves. */
export function valueBytes(value: unknown): Uint8Array {
  if (typeof value === "string") return utf8(value);
  if (value instanceof Uint8Array) return value;
  throw new InvalidValueError(`sketch values must be strings or Uint8Array bytes, got ${typeof value}`);
}

export class HashFamily {
  readonly shift: number;
  private readonly aHi: Uint32Array;
  private readonly aLo: Uint32Array;
  private readonly bHi: Uint32Array;
  private readonly bLo: Uint32Array;

  constructor(
    readonly k: number,
    readonly m: number,
    readonly seed = 0,
    readonly version = 1,
  ) {
    if (version !== 1) throw new InvalidParameterError("hash_version", "1", version);
    if (!Number.isInteger(m) || m < 2 || m > 65536 || (m & (m - 1)) !== 0) {
      throw new InvalidParameterError("m", "a power of two >= 2", m);
    }
    if (!Number.isInteger(k) || k < 1 || k > 65536) throw new InvalidParameterError("k", "an integer in [1, 65536]", k);
    if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) {
      throw new InvalidParameterError("hash_seed", "an integer in [0, 4294967295]", seed);
    }
    this.shift = Math.log2(m);
    const stream = splitmix64(BigInt(seed) ^ (BigInt(version) << 32n), 2 * k);
    this.aHi = new Uint32Array(k);
    this.aLo = new Uint32Array(k);
    this.bHi = new Uint32Array(k);
    this.bLo = new Uint32Array(k);
    for (let j = 0; j < k; j++) {
      const a = (stream[2 * j] ?? 0n) | 1n;
      const b = stream[2 * j + 1] ?? 0n;
      this.aHi[j] = Number(a >> 32n);
      this.aLo[j] = Number(a & 0xffffffffn);
      this.bHi[j] = Number(b >> 32n);
      this.bLo[j] = Number(b & 0xffffffffn);
    }
  }

  /** The 64-bit base hash of one value's bytes, into R (hi, lo). */
  baseOf(bytes: Uint8Array): void {
    mmh3x64h1(bytes, this.seed);
  }

  /** h_row for a value whose base hash is (hi, lo). */
  hashFromBase(hi: number, lo: number, row: number): number {
    const al = this.aLo[row] ?? 0;
    const ah = this.aHi[row] ?? 0;
    const bl = this.bLo[row] ?? 0;
    const bh = this.bHi[row] ?? 0;
    // high word of a·x + b (mod 2^64): the top log2(m) ≤ 16 bits are all we need
    const plo = Math.imul(al, lo) >>> 0;
    let phi = (mulHi32(al, lo) + Math.imul(ah, lo) + Math.imul(al, hi)) >>> 0;
    phi = (phi + bh + (plo + bl >= 4294967296 ? 1 : 0)) >>> 0;
    return phi >>> (32 - this.shift);
  }

  /** h_row(value) (one mmh3 call). */
  hashOne(value: unknown, row: number): number {
    if (!Number.isInteger(row) || row < 0 || row >= this.k) {
      throw new InvalidParameterError("row", `an integer in [0, ${this.k - 1}]`, row);
    }
    this.baseOf(valueBytes(value));
    return this.hashFromBase(R.hi, R.lo, row);
  }
}

const families = new Map<string, HashFamily>();

/** The family of (k, m, seed, version), cached. */
export function family(k: number, m: number, seed: number, version: number): HashFamily {
  const key = `${k}/${m}/${seed}/${version}`;
  let fam = families.get(key);
  if (fam === undefined) {
    fam = new HashFamily(k, m, seed, version);
    if (families.size > 64) families.clear();
    families.set(key, fam);
  }
  return fam;
}
