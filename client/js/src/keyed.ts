/**
 * Keyed randomness from the device secret (`ldptel.client.protocol.keyed`), byte for byte: the privatization
 * fingerprint (SHA-256 of the params' canonical JSON), the permanent randomized response's HMAC stream and
 * the memo key.
 */
import { i64le, utf8 } from "./bytes.js";
import { pyDumps, type PyJson } from "./pyjson.js";
import { hmacSha256, sha256 } from "./sha256.js";
import { le32, mod64, rejects64 } from "./u64.js";

const PRR_LABEL = utf8("ldptel-prr-v2\x00");
const MEMO_LABEL = utf8("ldptel-memo-v2\x00");
const FINGERPRINT_LABEL = utf8("ldptel-privatization-v1\x00");
export const FINGERPRINT_BYTES = 32;
const NUL = new Uint8Array([0]);

/** SHA-256 of the canonical JSON of the params (Python's `privatization_fingerprint`). */
export function fingerprintOf(paramsDict: PyJson): Uint8Array {
  return sha256(FINGERPRINT_LABEL, utf8(pyDumps(paramsDict), "params"));
}

/** The parts of (metric, fingerprint, ...parts) joined by NUL bytes (hashed as they are, never concatenated). */
function frame(metric: string, fingerprint: Uint8Array, parts: Uint8Array[]): Uint8Array[] {
  if (fingerprint.length !== FINGERPRINT_BYTES) {
    throw new Error(`a privatization fingerprint is ${FINGERPRINT_BYTES} bytes, got ${fingerprint.length}`);
  }
  const out: Uint8Array[] = [utf8(metric, "metric names"), NUL, fingerprint];
  for (const p of parts) out.push(NUL, p);
  return out;
}

/** Deterministic 64-bit words: HMAC-SHA256(key, counter as u64 LE), 4 little-endian words per block. */
export class HmacStream {
  private counter = 0;
  private block: Uint8Array | null = null;
  private at = 4;
  hi = 0;
  lo = 0;

  constructor(private readonly key: Uint8Array) {}

  /** The next word, into this.hi / this.lo. */
  word(): void {
    if (this.at === 4) {
      const c = new Uint8Array(8);
      for (let i = 0, x = this.counter; i < 8; i++, x = Math.floor(x / 256)) c[i] = x; // u64 little-endian
      this.block = hmacSha256(this.key, c);
      this.counter += 1;
      this.at = 0;
    }
    const b = this.block as Uint8Array;
    this.lo = le32(b, 8 * this.at);
    this.hi = le32(b, 8 * this.at + 4);
    this.at += 1;
  }

  /** Exactly uniform in [0, high) by rejection. */
  below(high: number): number {
    for (;;) {
      this.word();
      if (!rejects64(this.hi, this.lo, high)) return mod64(this.hi, this.lo, high);
    }
  }

  /** A uniform `bits`-bit integer (the top bits of one word; bits ≤ 32). */
  bits(bits: number): number {
    this.word();
    return bits === 32 ? this.hi : this.hi >>> (32 - bits);
  }
}

/** The keyed stream of a value's permanent randomized response under one privatization of `metric`. */
export function prrStream(
  secret: Uint8Array,
  metric: string,
  fingerprint: Uint8Array,
  mechanism: string,
  value: Uint8Array,
): HmacStream {
  const key = hmacSha256(secret, PRR_LABEL, ...frame(metric, fingerprint, [utf8(mechanism), value]));
  return new HmacStream(key);
}

/** The memo table key of a value: HMAC-SHA256 over (metric, privatization fingerprint, day, value). */
export function memoKey(secret: Uint8Array, metric: string, fingerprint: Uint8Array, day: number, value: Uint8Array): Uint8Array {
  return hmacSha256(secret, MEMO_LABEL, ...frame(metric, fingerprint, [i64le(day), value]));
}
