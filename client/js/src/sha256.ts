/**
 * SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), synchronous, for the keyed randomness of the protocol
 * (permanent randomized responses, memo keys, privatization fingerprints). WebCrypto's digest is
 * Promise-only and cannot run inside a synchronous `report()`; Node's `node:crypto` does not exist in
 * browsers. Checked against Python's hashlib/hmac by the golden vectors.
 *
 * The parts are streamed through one module-level 64-byte block (no padded copy of the message, no per-call
 * buffers but the digest): JavaScript runs one call at a time and nothing here calls out, so sharing is safe.
 */

/** floor(p^(1/e) · 2^32) exactly (a float estimate, then corrected in integers); its low 32 bits are the fraction. */
function root(p: number, e: number): number {
  let k = Math.floor(p ** (1 / e) * 2 ** 32);
  const t = BigInt(p) << BigInt(32 * e);
  const E = BigInt(e);
  while (BigInt(k + 1) ** E <= t) k++;
  while (BigInt(k) ** E > t) k--;
  return k;
}

/** K: the cube roots of the first 64 primes; IV: the square roots of the first 8 (FIPS 180-4 §4.2.2, §5.3.3). */
const K = new Int32Array(64);
const IV = new Int32Array(8);
for (let p = 2, n = 0; n < 64; p++) {
  let q = 2;
  while (p % q) q++;
  if (q === p) {
    if (n < 8) IV[n] = root(p, 2);
    K[n++] = root(p, 3);
  }
}
const W = new Int32Array(64);
const H = new Int32Array(8);
/** The block being filled, `fill` bytes of it so far; `total` bytes hashed since `start`. */
const B = new Uint8Array(64);
let fill = 0;
let total = 0;

function compress(): void {
  for (let i = 0; i < 16; i++) W[i] = (B[4 * i]! << 24) | (B[4 * i + 1]! << 16) | (B[4 * i + 2]! << 8) | B[4 * i + 3]!;
  for (let i = 16; i < 64; i++) {
    const x = W[i - 15]!;
    const y = W[i - 2]!;
    const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
    const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
    W[i] = W[i - 16]! + s0 + W[i - 7]! + s1;
  }
  let a = H[0]!, b = H[1]!, c = H[2]!, d = H[3]!, e = H[4]!, f = H[5]!, g = H[6]!, h = H[7]!;
  for (let i = 0; i < 64; i++) {
    const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const t1 = (h + S1 + ((e & f) ^ (~e & g)) + K[i]! + W[i]!) | 0;
    const t2 = (((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = b;
    b = a;
    a = (t1 + t2) | 0;
  }
  H[0] = H[0]! + a;
  H[1] = H[1]! + b;
  H[2] = H[2]! + c;
  H[3] = H[3]! + d;
  H[4] = H[4]! + e;
  H[5] = H[5]! + f;
  H[6] = H[6]! + g;
  H[7] = H[7]! + h;
}

function start(): void {
  H.set(IV);
  fill = total = 0;
}

function update(p: Uint8Array): void {
  total += p.length;
  for (let i = 0; i < p.length; i++) {
    B[fill++] = p[i]!;
    if (fill === 64) {
      compress();
      fill = 0;
    }
  }
}

/** Pads, compresses the last block(s) and writes the digest into `out` (32 bytes). */
function finish(out: Uint8Array): Uint8Array {
  B[fill++] = 0x80;
  if (fill > 56) {
    B.fill(0, fill);
    compress();
    fill = 0;
  }
  B.fill(0, fill);
  for (let i = 0; i < 4; i++) {
    B[56 + i] = (total / 2 ** 29) >>> (24 - 8 * i);
    B[60 + i] = (total * 8) >>> (24 - 8 * i);
  }
  compress();
  for (let i = 0; i < 32; i++) out[i] = H[i >> 2]! >>> (24 - 8 * (i & 3));
  return out;
}

/** SHA-256 of the concatenation of `parts`. */
export function sha256(...parts: Uint8Array[]): Uint8Array {
  start();
  for (const p of parts) update(p);
  return finish(new Uint8Array(32));
}

const INNER = new Uint8Array(32);
/**
 * The last HMAC key (zero-padded to a block, as HMAC pads it) and the states after its ipad and opad blocks:
 * the device secret keys every PRR stream and memo key of a report, so those two compressions are done once.
 */
const KEY = new Uint8Array(64);
const IN = new Int32Array(8);
const OUT = new Int32Array(8);
let keyed = false;

function keyBlock(pad: number, mid: Int32Array): void {
  start();
  for (let i = 0; i < 64; i++) B[i] = KEY[i]! ^ pad;
  compress();
  mid.set(H);
}

/** Resumes hashing after the key's block. */
function resume(mid: Int32Array): void {
  H.set(mid);
  fill = 0;
  total = 64;
}

/** HMAC-SHA256(key, concatenation of `parts`). */
export function hmacSha256(key: Uint8Array, ...parts: Uint8Array[]): Uint8Array {
  if (key.length > 64) key = sha256(key);
  let same = keyed;
  for (let i = 0; i < 64; i++) same &&= (key[i] ?? 0) === KEY[i];
  if (!same) {
    KEY.fill(0).set(key);
    keyBlock(0x36, IN);
    keyBlock(0x5c, OUT);
    keyed = true;
  }
  resume(IN);
  for (const p of parts) update(p);
  finish(INNER);
  resume(OUT);
  update(INNER);
  return finish(new Uint8Array(32));
}
