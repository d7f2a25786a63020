/** ldptel's SDK for browsers and Node: the Reporter, and the protocol (byte-compatible with the Python SDK). */
export { LdpError, InvalidParameterError, InvalidValueError, WireFormatError } from "./errors.js";
export { CryptoRandom, type RandomSource } from "./random.js";
export { paramsFromDict, longitudinalEpsilon, reportCharge, type Params, type MechanismName } from "./params.js";
export { privatize, privatizePermanent, privatizeBatch, type Report } from "./mechanisms.js";
export { fingerprintOf } from "./keyed.js";
export { encodeBatch, encodeUpload } from "./wire.js";
export { checkProfile, encodeProfile, OTHER } from "./breakdown.js";
export { specFromDict, type MetricSpec } from "./spec.js";
export { Reporter, UploadError, type ReportResult, type ReporterOptions, type ReporterStats, type Status } from "./reporter.js";
export { PrivacyPolicy, type PrivacyPolicyOptions } from "./policy.js";
export { MemoryStore, type Store } from "./store.js";
export { IndexedDbStore } from "./idb.js";
