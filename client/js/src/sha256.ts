/**
 * SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), synchronous, for the keyed randomness of the protocol
 * (permanent randomized responses, memo keys, privatization fingerprints). WebCrypto's digest is
 * Promise-only and cannot run inside a synchronous `report()`; Node's `node:crypto` does not exist in
 * browsers. ~60 lines, checked against Python's hashlib/hmac by the golden vectors.
 */

const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
  0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
  0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
  0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
  0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
  0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
  0xc67178f2,
]);
const W = new Uint32Array(64);

function compress(st: Uint32Array, b: Uint8Array, off: number): void {
  for (let i = 0; i < 16; i++) {
    const j = off + 4 * i;
    W[i] = (((b[j] ?? 0) << 24) | ((b[j + 1] ?? 0) << 16) | ((b[j + 2] ?? 0) << 8) | (b[j + 3] ?? 0)) >>> 0;
  }
  for (let i = 16; i < 64; i++) {
    const x = W[i - 15] ?? 0;
    const y = W[i - 2] ?? 0;
    const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
    const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
    W[i] = ((W[i - 16] ?? 0) + s0 + (W[i - 7] ?? 0) + s1) >>> 0;
  }
  let a = st[0] ?? 0, bb = st[1] ?? 0, c = st[2] ?? 0, d = st[3] ?? 0;
  let e = st[4] ?? 0, f = st[5] ?? 0, g = st[6] ?? 0, h = st[7] ?? 0;
  for (let i = 0; i < 64; i++) {
    const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const ch = (e & f) ^ (~e & g);
    const t1 = (h + S1 + ch + (K[i] ?? 0) + (W[i] ?? 0)) | 0;
    const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const maj = (a & bb) ^ (a & c) ^ (bb & c);
    const t2 = (S0 + maj) | 0;
    h = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = bb;
    bb = a;
    a = (t1 + t2) | 0;
  }
  st[0] = (st[0] ?? 0) + a;
  st[1] = (st[1] ?? 0) + bb;
  st[2] = (st[2] ?? 0) + c;
  st[3] = (st[3] ?? 0) + d;
  st[4] = (st[4] ?? 0) + e;
  st[5] = (st[5] ?? 0) + f;
  st[6] = (st[6] ?? 0) + g;
  st[7] = (st[7] ?? 0) + h;
}

const IV = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

/** SHA-256 of the concatenation of `parts`. */
export function sha256(...parts: Uint8Array[]): Uint8Array {
  let total = 0;
  for (const p of parts) total += p.length;
  const padded = new Uint8Array(((total + 9 + 63) >>> 6) << 6);
  let at = 0;
  for (const p of parts) {
    padded.set(p, at);
    at += p.length;
  }
  padded[total] = 0x80;
  const bits = total * 8;
  const end = padded.length;
  padded[end - 5] = Math.floor(bits / 4294967296) & 0xff;
  padded[end - 4] = (bits >>> 24) & 0xff;
  padded[end - 3] = (bits >>> 16) & 0xff;
  padded[end - 2] = (bits >>> 8) & 0xff;
  padded[end - 1] = bits & 0xff;
  const st = new Uint32Array(IV);
  for (let off = 0; off < end; off += 64) compress(st, padded, off);
  const out = new Uint8Array(32);
  for (let i = 0; i < 8; i++) {
    const v = st[i] ?? 0;
    out[4 * i] = v >>> 24;
    out[4 * i + 1] = (v >>> 16) & 0xff;
    out[4 * i + 2] = (v >>> 8) & 0xff;
    out[4 * i + 3] = v & 0xff;
  }
  return out;
}

/** HMAC-SHA256(key, concatenation of `parts`). */
export function hmacSha256(key: Uint8Array, ...parts: Uint8Array[]): Uint8Array {
  const block = new Uint8Array(64);
  block.set(key.length > 64 ? sha256(key) : key);
  const ipad = new Uint8Array(64);
  const opad = new Uint8Array(64);
  for (let i = 0; i < 64; i++) {
    ipad[i] = (block[i] ?? 0) ^ 0x36;
    opad[i] = (block[i] ?? 0) ^ 0x5c;
  }
  return sha256(opad, sha256(ipad, ...parts));
}
