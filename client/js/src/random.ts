/**
 * The one source of randomness: `crypto.getRandomValues` (Web Crypto, in browsers and in Node ≥ 19 as the
 * global `crypto`), read through a refillable pool. The Math PRNG is never used (scripts/lint.mjs enforces it).
 *
 * Every mechanism consumes bytes from a {@link RandomSource} in exactly the order and amounts the Python SDK
 * reads `os.urandom` on its one-report path, so a recorded byte stream replays to the same reports in both
 * languages (the golden vectors), and every probability is an integer threshold compared with random bits.
 */

export interface RandomSource {
  /** Fill `out` with uniformly random bytes. */
  fill(out: Uint8Array): void;
}

const MAX_CALL = 65536; // getRandomValues throws QuotaExceededError above 65,536 bytes per call

interface CryptoLike {
  getRandomValues<T extends ArrayBufferView>(array: T): T;
}

function webCrypto(): CryptoLike {
  const c = (globalThis as { crypto?: CryptoLike }).crypto;
  if (!c || typeof c.getRandomValues !== "function") {
    throw new Error("ldptel needs crypto.getRandomValues (a browser, or Node 19+ / Node 20 with the global crypto)");
  }
  return c;
}

/** The CSPRNG through a pool of `poolBytes` (refilled with one getRandomValues call when used up). */
export class CryptoRandom implements RandomSource {
  private readonly pool: Uint8Array;
  private at: number;
  private readonly crypto: CryptoLike;

  constructor(poolBytes = 65536) {
    this.crypto = webCrypto();
    this.pool = new Uint8Array(Math.min(Math.max(poolBytes, 64), MAX_CALL));
    this.at = this.pool.length;
  }

  fill(out: Uint8Array): void {
    const n = out.length;
    if (n > this.pool.length) {
      for (let off = 0; off < n; off += MAX_CALL) this.crypto.getRandomValues(out.subarray(off, Math.min(n, off + MAX_CALL)));
      return;
    }
    let done = 0;
    while (done < n) {
      if (this.at === this.pool.length) {
        this.crypto.getRandomValues(this.pool);
        this.at = 0;
      }
      const take = Math.min(n - done, this.pool.length - this.at);
      out.set(this.pool.subarray(this.at, this.at + take), done);
      this.pool.fill(0, this.at, this.at + take); // used bytes do not stay in memory
      this.at += take;
      done += take;
    }
  }
}

/** Replays a fixed byte stream (tests and golden vectors); throws when it runs out. */
export class ReplayRandom implements RandomSource {
  private at = 0;
  constructor(private readonly bytes: Uint8Array) {}
  fill(out: Uint8Array): void {
    if (this.at + out.length > this.bytes.length) throw new Error("ReplayRandom: the recorded stream is used up");
    out.set(this.bytes.subarray(this.at, this.at + out.length));
    this.at += out.length;
  }
  get used(): number {
    return this.at;
  }
}

let shared: CryptoRandom | undefined;

/** The process-wide CSPRNG source. */
export function defaultRandom(): RandomSource {
  shared ??= new CryptoRandom();
  return shared;
}

/** `n` fresh random bytes from `rng`. */
export function randomBytes(n: number, rng: RandomSource = defaultRandom()): Uint8Array {
  const out = new Uint8Array(n);
  rng.fill(out);
  return out;
}

/** A uniform float in [0, 1) from the CSPRNG (backoff jitter only; never for privatization). */
export function uniformFloat(rng: RandomSource = defaultRandom()): number {
  const b = randomBytes(7, rng);
  let x = 0;
  for (let i = 6; i >= 0; i--) x = x * 256 + (b[i] ?? 0);
  return Math.floor(x / 8) / 9007199254740992;
}
