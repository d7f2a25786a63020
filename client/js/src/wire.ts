/**
 * The binary batch (`LDPT`) and multi-part upload (`LDPU`) encodings of `ldptel.client.protocol.wire`:
 *
 *     magic "LDPT" | format u8 = 1 | mechanism code u8 | flags u16 | version u32 | n u32 |
 *     batch_id 16 bytes | name_len u8 | metric name (UTF-8) | [profile_len u8 | profile] | payload
 *
 * flags: 0, or FLAG_PROFILE (1) when the batch carries a system profile (`dim=value,...`, ASCII, in clear:
 * breakdown.ts).
 *
 *     magic "LDPU" | format u8 = 1 | flags u8 = 0 | parts u16 | per part: length u32, then one batch
 *
 * All integers little-endian.
 */
import { WireFormatError } from "./errors.js";
import { concatBytes, utf8 } from "./bytes.js";
import { columns, encodePayload, mechanismCode, type Report } from "./mechanisms.js";
import type { Params } from "./params.js";

export const FORMAT_VERSION = 1;
export const FLAG_PROFILE = 1;
export const MAX_UPLOAD_PARTS = 256;
export const MAX_REPORTS = 4294967295;
export const DEFAULT_MAX_BATCH_REPORTS = 10000;
export const DEFAULT_RETRY_HORIZON_DAYS = 3;
export const MAX_RETRY_HORIZON_DAYS = 30;
export const BATCH_AGE_HEADER = "X-Ldptel-Batch-Age-Days";
export const NAME_RE = /^[a-z0-9][a-z0-9_.-]{0,63}$/;
export const NAME_RULE = "1-64 characters of a-z, 0-9, '_', '.', '-', starting with a letter or digit";
const HEADER = 4 + 1 + 1 + 2 + 4 + 4 + 16 + 1;

/** The binary form of `reports` of `metric` at `version`, privatized under `params`. */
export function encodeBatch(
  metric: string, version: number, batchId: Uint8Array, reports: Report[], params: Params, profile: Uint8Array = new Uint8Array(0),
): Uint8Array {
  if (!NAME_RE.test(metric)) throw new WireFormatError(`metric name must be ${NAME_RULE}`);
  if (batchId.length !== 16) throw new WireFormatError(`batch_id must be 16 bytes, got ${batchId.length}`);
  const n = reports.length;
  if (n < 1 || n > MAX_REPORTS) throw new WireFormatError(`a batch holds 1 to ${MAX_REPORTS} reports, got ${n}`);
  if (!Number.isInteger(version) || version < 1 || version >= 2 ** 31) {
    throw new WireFormatError(`version must be in [1, 2**31 - 1], got ${version}`);
  }
  const name = utf8(metric);
  const cols = columns(params);
  for (const c of cols) {
    if (c.kind !== "index") continue;
    for (const r of reports) {
      const v = c.attr === "row" ? r.row : r.col;
      if (v === undefined || !Number.isInteger(v) || v < 0 || v >= c.bound) {
        throw new WireFormatError(`${c.attr} index ${String(v)} out of range [0, ${c.bound - 1}]`);
      }
    }
  }
  const head = new Uint8Array(HEADER);
  const dv = new DataView(head.buffer);
  head.set([0x4c, 0x44, 0x50, 0x54], 0); // "LDPT"
  dv.setUint8(4, FORMAT_VERSION);
  dv.setUint8(5, mechanismCode(params));
  if (profile.length > 255) throw new WireFormatError("profile over 255 bytes");
  dv.setUint16(6, profile.length ? FLAG_PROFILE : 0, true);
  dv.setUint32(8, version, true);
  dv.setUint32(12, n, true);
  head.set(batchId, 16);
  dv.setUint8(32, name.length);
  const extra = profile.length ? [Uint8Array.of(profile.length), profile] : [];
  return concatBytes([head, name, ...extra, encodePayload(reports, cols)]);
}

/** Bytes of the upload of parts of these sizes. */
export function uploadSize(partSizes: number[]): number {
  return 8 + partSizes.reduce((a, s) => a + 4 + s, 0);
}

/** One request body carrying `parts` (each an encoded batch), in order. */
export function encodeUpload(parts: Uint8Array[]): Uint8Array {
  if (parts.length < 1 || parts.length > MAX_UPLOAD_PARTS) {
    throw new WireFormatError(`an upload holds 1 to ${MAX_UPLOAD_PARTS} parts, got ${parts.length}`);
  }
  const out: Uint8Array[] = [];
  const head = new Uint8Array(8);
  head.set([0x4c, 0x44, 0x50, 0x55], 0); // "LDPU"
  head[4] = FORMAT_VERSION;
  head[5] = 0;
  new DataView(head.buffer).setUint16(6, parts.length, true);
  out.push(head);
  for (const part of parts) {
    if (part[0] !== 0x4c || part[1] !== 0x44 || part[2] !== 0x50 || part[3] !== 0x54) {
      throw new WireFormatError("every part of an upload is a batch (magic b'LDPT')");
    }
    const len = new Uint8Array(4);
    new DataView(len.buffer).setUint32(0, part.length, true);
    out.push(len, part);
  }
  return concatBytes(out);
}
