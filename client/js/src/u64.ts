/**
 * 64-bit unsigned arithmetic on pairs of uint32 numbers (hi, lo), without BigInt on the hot paths.
 * Results of the two-word operations are left in the module-level `R` (no allocation per call).
 */

export const R = { hi: 0, lo: 0 };

const TWO32 = 4294967296;

/** High 32 bits of the full 64-bit product of two uint32 numbers. */
export function mulHi32(a: number, b: number): number {
  const a0 = a & 0xffff;
  const a1 = a >>> 16;
  const b0 = b & 0xffff;
  const b1 = b >>> 16;
  const lo = a0 * b0; // < 2^32
  const mid = a1 * b0 + a0 * b1; // < 2^33, exact
  const low = lo + (mid % 65536) * 65536; // < 2^33, exact
  return (a1 * b1 + Math.floor(mid / 65536) + Math.floor(low / TWO32)) >>> 0;
}

/** (ah:al) * (bh:bl) mod 2^64 into R. */
export function mul64(ah: number, al: number, bh: number, bl: number): void {
  const hi = (mulHi32(al, bl) + Math.imul(ah, bl) + Math.imul(al, bh)) >>> 0;
  R.lo = Math.imul(al, bl) >>> 0;
  R.hi = hi;
}

/** (ah:al) + (bh:bl) mod 2^64 into R. */
export function add64(ah: number, al: number, bh: number, bl: number): void {
  const lo = al + bl;
  R.hi = (ah + bh + (lo >= TWO32 ? 1 : 0)) >>> 0;
  R.lo = lo >>> 0;
}

/** rotl64 by r (1..63) into R. */
export function rotl64(hi: number, lo: number, r: number): void {
  if (r >= 32) {
    const t = hi;
    hi = lo;
    lo = t;
    r -= 32;
  }
  if (r === 0) {
    R.hi = hi >>> 0;
    R.lo = lo >>> 0;
    return;
  }
  R.hi = ((hi << r) | (lo >>> (32 - r))) >>> 0;
  R.lo = ((lo << r) | (hi >>> (32 - r))) >>> 0;
}

/** MurmurHash3's 64-bit finalizer fmix64 into R. */
export function fmix64(hi: number, lo: number): void {
  lo = (lo ^ (hi >>> 1)) >>> 0; // z ^= z >> 33
  mul64(hi, lo, 0xff51afd7, 0xed558ccd);
  hi = R.hi;
  lo = (R.lo ^ (hi >>> 1)) >>> 0;
  mul64(hi, lo, 0xc4ceb9fe, 0x1a85ec53);
  hi = R.hi;
  R.lo = (R.lo ^ (hi >>> 1)) >>> 0;
}

/** Little-endian uint32 at offset i of a byte array. */
export function le32(b: Uint8Array, i: number): number {
  return ((b[i] ?? 0) | ((b[i + 1] ?? 0) << 8) | ((b[i + 2] ?? 0) << 16) | ((b[i + 3] ?? 0) << 24)) >>> 0;
}

/** A (hi, lo) pair as a BigInt (cold paths and tests). */
export function toBig(hi: number, lo: number): bigint {
  return (BigInt(hi) << 32n) | BigInt(lo);
}

const remCache = new Map<number, number>();

/** 2^64 mod h (h a positive safe integer), cached. */
export function rem64(h: number): number {
  let r = remCache.get(h);
  if (r === undefined) {
    r = Number((1n << 64n) % BigInt(h));
    if (remCache.size > 4096) remCache.clear();
    remCache.set(h, r);
  }
  return r;
}

/**
 * Whether the 64-bit word (hi:lo) is rejected when drawing uniformly below h by `word % h` (CPython's and
 * ldptel's rule: accept word < floor(2^64 / h)·h).
 */
export function rejects64(hi: number, lo: number, h: number): boolean {
  const rem = rem64(h);
  if (rem === 0) return false;
  if (h <= TWO32) return hi === 0xffffffff && lo >= TWO32 - rem; // limit = 2^64 − rem, rem < 2^32
  return toBig(hi, lo) >= (1n << 64n) - BigInt(rem);
}

/** (hi:lo) mod h for a positive safe integer h. */
export function mod64(hi: number, lo: number, h: number): number {
  if (h <= 2097152) return ((hi % h) * TWO32 + lo) % h; // (hi mod h)·2^32 + lo < 2^53: exact
  if (h <= TWO32) {
    let r = hi % h;
    r = (r * 65536 + (lo >>> 16)) % h; // r·2^16 < 2^48
    return (r * 65536 + (lo & 0xffff)) % h;
  }
  return Number(toBig(hi, lo) % BigInt(h));
}
