/**
 * MurmurHash3 (Austin Appleby, public domain; the reference is smhasher's MurmurHash3.cpp), as the Python
 * package mmh3 computes it: x64_128 (`mmh3.hash64(data, seed, signed=False)`, the base hash of ldptel's sketch
 * family, is its first 64-bit half h1) and x86_32 (`mmh3.hash(data, seed, signed=False)`). Inputs are bytes.
 */
import { R, add64, fmix64, le32, mul64, rotl64 } from "./u64.js";

const C1H = 0x87c37b91;
const C1L = 0x114253d5;
const C2H = 0x4cf5ad43;
const C2L = 0x2745937f;

/** x·5 mod 2^64 into R: (x << 2) + x. */
function times5(hi: number, lo: number): void {
  add64(((hi << 2) | (lo >>> 30)) >>> 0, (lo << 2) >>> 0, hi, lo);
}

/** h1 of MurmurHash3_x64_128(data, seed) as (hi, lo) in R (seed: uint32). */
export function mmh3x64h1(data: Uint8Array, seed: number): void {
  const len = data.length;
  let h1h = 0;
  let h1l = seed >>> 0;
  let h2h = 0;
  let h2l = seed >>> 0;
  const blocks = len >>> 4;
  for (let i = 0; i < blocks; i++) {
    const o = i << 4;
    // k1
    mul64(le32(data, o + 4), le32(data, o), C1H, C1L);
    rotl64(R.hi, R.lo, 31);
    mul64(R.hi, R.lo, C2H, C2L);
    h1h = (h1h ^ R.hi) >>> 0;
    h1l = (h1l ^ R.lo) >>> 0;
    rotl64(h1h, h1l, 27);
    add64(R.hi, R.lo, h2h, h2l);
    times5(R.hi, R.lo);
    add64(R.hi, R.lo, 0, 0x52dce729);
    h1h = R.hi;
    h1l = R.lo;
    // k2
    mul64(le32(data, o + 12), le32(data, o + 8), C2H, C2L);
    rotl64(R.hi, R.lo, 33);
    mul64(R.hi, R.lo, C1H, C1L);
    h2h = (h2h ^ R.hi) >>> 0;
    h2l = (h2l ^ R.lo) >>> 0;
    rotl64(h2h, h2l, 31);
    add64(R.hi, R.lo, h1h, h1l);
    times5(R.hi, R.lo);
    add64(R.hi, R.lo, 0, 0x38495ab5);
    h2h = R.hi;
    h2l = R.lo;
  }
  const t = blocks << 4;
  const rest = len & 15;
  if (rest > 8) {
    let kh = 0;
    let kl = 0;
    for (let i = rest - 1; i >= 8; i--) {
      const byte = data[t + i] ?? 0;
      const shift = (i - 8) * 8;
      if (shift >= 32) kh = (kh | (byte << (shift - 32))) >>> 0;
      else kl = (kl | (byte << shift)) >>> 0;
    }
    mul64(kh, kl, C2H, C2L);
    rotl64(R.hi, R.lo, 33);
    mul64(R.hi, R.lo, C1H, C1L);
    h2h = (h2h ^ R.hi) >>> 0;
    h2l = (h2l ^ R.lo) >>> 0;
  }
  if (rest > 0) {
    let kh = 0;
    let kl = 0;
    for (let i = Math.min(rest, 8) - 1; i >= 0; i--) {
      const byte = data[t + i] ?? 0;
      const shift = i * 8;
      if (shift >= 32) kh = (kh | (byte << (shift - 32))) >>> 0;
      else kl = (kl | (byte << shift)) >>> 0;
    }
    mul64(kh, kl, C1H, C1L);
    rotl64(R.hi, R.lo, 31);
    mul64(R.hi, R.lo, C2H, C2L);
    h1h = (h1h ^ R.hi) >>> 0;
    h1l = (h1l ^ R.lo) >>> 0;
  }
  // finalization (len < 2^32: its high word is 0)
  h1l = (h1l ^ len) >>> 0;
  h2l = (h2l ^ len) >>> 0;
  add64(h1h, h1l, h2h, h2l);
  h1h = R.hi;
  h1l = R.lo;
  add64(h2h, h2l, h1h, h1l);
  h2h = R.hi;
  h2l = R.lo;
  fmix64(h1h, h1l);
  h1h = R.hi;
  h1l = R.lo;
  fmix64(h2h, h2l);
  h2h = R.hi;
  h2l = R.lo;
  add64(h1h, h1l, h2h, h2l); // h1 += h2 (h2 += h1 is not needed for h1)
}

/** MurmurHash3_x86_32(data, seed) as an unsigned 32-bit number (mmh3.hash(..., signed=False)). */
export function mmh3x86(data: Uint8Array, seed: number): number {
  const len = data.length;
  let h = seed >>> 0;
  const c1 = 0xcc9e2d51;
  const c2 = 0x1b873593;
  const blocks = len >>> 2;
  for (let i = 0; i < blocks; i++) {
    let k = le32(data, i << 2);
    k = Math.imul(k, c1);
    k = (k << 15) | (k >>> 17);
    k = Math.imul(k, c2);
    h ^= k;
    h = (h << 13) | (h >>> 19);
    h = (Math.imul(h, 5) + 0xe6546b64) | 0;
  }
  const t = blocks << 2;
  let k = 0;
  const rest = len & 3;
  if (rest === 3) k ^= (data[t + 2] ?? 0) << 16;
  if (rest >= 2) k ^= (data[t + 1] ?? 0) << 8;
  if (rest >= 1) {
    k ^= data[t] ?? 0;
    k = Math.imul(k, c1);
    k = (k << 15) | (k >>> 17);
    k = Math.imul(k, c2);
    h ^= k;
  }
  h ^= len;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
