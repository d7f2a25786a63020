/** ldptel's SDK for browsers and Node: the protocol (byte-compatible with the Python SDK) and the Reporter. */
export { LdpError, InvalidParameterError, InvalidValueError, WireFormatError } from "./errors.js";
export { CryptoRandom, ReplayRandom, defaultRandom, type RandomSource } from "./random.js";
export { HashFamily, family, valueBytes } from "./hashing.js";
export { mmh3x64h1, mmh3x86 } from "./mmh3.js";
export { sha256, hmacSha256 } from "./sha256.js";
export { fingerprintOf, memoKey, prrStream, HmacStream } from "./keyed.js";
export { paramsFromDict, longitudinalEpsilon, isPermanent, type Params, type MechanismName } from "./params.js";
export {
  privatize,
  privatizePermanent,
  privatizeBatch,
  valueKey,
  columns,
  packReport,
  unpackReport,
  encodePayload,
  type Report,
  type Column,
} from "./mechanisms.js";
export { encodeBatch, encodeUpload, uploadSize, NAME_RE } from "./wire.js";
export { specFromDict, specFromBody, type MetricSpec } from "./spec.js";
export { pyDumps, pyFloatRepr, PyFloat } from "./pyjson.js";
export { isWellFormed, utf8, toHex, fromHex } from "./bytes.js";
export { Reporter, UploadError, type ReportResult, type ReporterOptions, type ReporterStats, type Status } from "./reporter.js";
export { PrivacyPolicy, type PrivacyPolicyOptions } from "./policy.js";
export { MemoryStore, type Store } from "./store.js";
export { IndexedDbStore } from "./idb.js";
