/**
 * The Python SDK's one-report random draws (`ldptel.client.protocol.rng` with `rng=None`), byte for byte:
 * each reads the same number of CSPRNG bytes in the same order, and decides by the same integer comparison.
 */
import { R, le32, mod64, rejects64 } from "./u64.js";
import type { RandomSource } from "./random.js";

const word = new Uint8Array(8);

/** 8 random bytes as a little-endian 64-bit word, into R. */
export function drawWord(rng: RandomSource): void {
  rng.fill(word);
  R.lo = le32(word, 0);
  R.hi = le32(word, 4);
}

/** `below_threshold`: true with probability T/2^bits from a word's high 32 bits (bits ≤ 32). */
export function belowThreshold(threshold: number, bits: number, hi: number): boolean {
  return (bits === 32 ? hi : hi >>> (32 - bits)) < threshold;
}

/** `int_below(rng, high, word)`: the word mod `high`, redrawing 8 bytes while the word is rejected. */
export function intBelow(rng: RandomSource, high: number, hi: number, lo: number): number {
  while (rejects64(hi, lo, high)) {
    drawWord(rng);
    hi = R.hi;
    lo = R.lo;
  }
  return mod64(hi, lo, high);
}

/** `uniform_below(None, high, 1)[0]`: exactly uniform in [0, high) (its three size classes, as Python). */
export function uniformBelow(rng: RandomSource, high: number): number {
  if (!(high >= 1) || !Number.isSafeInteger(high)) throw new RangeError(`high must be a positive integer, got ${high}`);
  if (high === 1) return 0;
  if ((high & (high - 1)) === 0 && high <= 0x80000000) {
    drawWord(rng); // power of two: mask the low bits
    return R.lo & (high - 1);
  }
  if (high > 0x80000000 && Number.isInteger(Math.log2(high))) {
    drawWord(rng);
    return mod64(R.hi, R.lo, high);
  }
  if (high < 65536) {
    for (;;) {
      drawWord(rng); // random_words(1).view(uint32)[:1]: the word's low half
      const r = R.lo;
      const limit = Math.floor(4294967296 / high) * high;
      if (r < limit) return r % high;
    }
  }
  for (;;) {
    drawWord(rng);
    if (!rejects64(R.hi, R.lo, high)) return mod64(R.hi, R.lo, high);
  }
}

/** `draw_below(None, num, den)`: true with probability exactly num/den. */
export function drawBelow(rng: RandomSource, num: number, den: number): boolean {
  if (num <= 0) return false;
  if (num >= den) return true;
  return uniformBelow(rng, den) < num;
}

/**
 * `bernoulli_int`: `size` bytes whose bits are i.i.d. Bernoulli(threshold/2^bits), from `bits` planes of
 * `size` bytes each in `planes` (from `offset`). The recurrence P ← (t_b + P)/2 over the bits of T, lowest
 * set bit first, is bitwise, so bytes and Python's big integers give the same bits.
 */
export function bernoulliBytes(
  threshold: number,
  bits: number,
  planes: Uint8Array,
  offset: number,
  size: number,
  out: Uint8Array = new Uint8Array(size),
): Uint8Array {
  if (threshold === 0) {
    out.fill(0);
    return out;
  }
  if (threshold === 2 ** bits) {
    out.fill(0xff);
    return out;
  }
  while (threshold % 2 === 0) {
    threshold /= 2;
    bits -= 1;
  }
  out.set(planes.subarray(offset, offset + size));
  for (let b = 1; b < bits; b++) {
    const base = offset + b * size;
    if (Math.floor(threshold / 2 ** b) % 2 === 1) {
      for (let i = 0; i < size; i++) out[i] = (out[i] ?? 0) | (planes[base + i] ?? 0);
    } else {
      for (let i = 0; i < size; i++) out[i] = (out[i] ?? 0) & (planes[base + i] ?? 0);
    }
  }
  return out;
}

/** The number of planes `bernoulliBytes` reads for a threshold (after dropping trailing zero bits of T). */
export function planesUsed(threshold: number, bits: number): number {
  if (threshold === 0 || threshold === 2 ** bits) return 0;
  while (threshold % 2 === 0) {
    threshold /= 2;
    bits -= 1;
  }
  return bits;
}
