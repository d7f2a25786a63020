/** Metric specs as the registry serves them (`GET /v1/metrics/<name>`): params plus the reporting policy. */
import { breakdownFromDict } from "./breakdown.js";
import { InvalidParameterError } from "./errors.js";
import { fingerprintOf } from "./keyed.js";
import { isPermanent, longitudinalEpsilon, paramsFromDict, reportCharge, type Params } from "./params.js";
import { NAME_RE, NAME_RULE } from "./wire.js";

export const MAX_REPORTS_PER_DAY = 10000;

export interface MetricSpec {
  name: string;
  version: number;
  reportsPerDay: number;
  params: Params;
  /** ε of one report (from the integer thresholds). */
  effectiveEpsilon: number;
  /** What the daily ledger charges per report: the effective ε, or ε_irr under a permanent randomized response. */
  reportCharge: number;
  /** reportCharge × reports_per_day. */
  dailyEpsilon: number;
  /** ε of all reports of one value: per privatization, ever (permanent RR), or per day (memo). */
  longitudinalEpsilon: number;
  permanent: boolean;
  /** SHA-256 privatization fingerprint (keys the PRR, the memo and the lifetime ledger). */
  fingerprint: Uint8Array;
  /** β: the share of devices that take part each day (secret sampling; 1: all). */
  sampleRate: number;
  /** Breakdowns: the profile dimensions the metric is broken down by (in order), and their declared values. */
  breakdown: string[];
  declared: Map<string, Set<string>>;
  /** The spec's JSON (what is cached on the device). */
  json: Record<string, unknown>;
}

const ALLOWED = ["name", "version", "params", "reports_per_day", "description", "owner", "expires", "notes", "effective_epsilon", "sample_rate", "breakdown", "profile"];

/** A spec from its JSON form, fully validated (a hostile server's spec throws InvalidParameterError). */
export function specFromDict(data: unknown): MetricSpec {
  if (typeof data !== "object" || data === null || Array.isArray(data)) throw new InvalidParameterError("metric", "a JSON object", data);
  const obj = data as Record<string, unknown>;
  for (const key of Object.keys(obj)) {
    if (!ALLOWED.includes(key)) throw new InvalidParameterError(key, `not set: a metric takes ${JSON.stringify([...ALLOWED].sort())}`, obj[key]);
  }
  const name = obj.name;
  if (typeof name !== "string" || !NAME_RE.test(name)) throw new InvalidParameterError("name", NAME_RULE, name);
  const version = obj.version ?? 1;
  if (typeof version !== "number" || !Number.isInteger(version) || version < 1 || version > 2 ** 31 - 1) {
    throw new InvalidParameterError("version", "an integer in [1, 2147483647]", version);
  }
  const rpd = obj.reports_per_day ?? 1;
  if (typeof rpd !== "number" || !Number.isInteger(rpd) || rpd < 1 || rpd > MAX_REPORTS_PER_DAY) {
    throw new InvalidParameterError("reports_per_day", `an integer in [1, ${MAX_REPORTS_PER_DAY}]`, rpd);
  }
  const rate = obj.sample_rate ?? 1.0;
  if (typeof rate !== "number" || !(rate > 0 && rate <= 1)) {
    throw new InvalidParameterError("sample_rate", "a number in (0, 1] (the share of devices that take part each day)", rate);
  }
  const params = paramsFromDict(obj.params);
  const { breakdown, declared } = breakdownFromDict(obj.breakdown, obj.profile);
  return {
    breakdown,
    declared,
    sampleRate: rate,
    name,
    version,
    reportsPerDay: rpd,
    params,
    effectiveEpsilon: params.effectiveEpsilon,
    reportCharge: reportCharge(params),
    dailyEpsilon: reportCharge(params) * rpd,
    longitudinalEpsilon: longitudinalEpsilon(params),
    permanent: isPermanent(params),
    fingerprint: fingerprintOf(params.dict),
    json: obj,
  };
}

/** The current spec from a registry record (`{"current": {...}}`), a `{"spec": ...}` body or a spec. */
export function specFromBody(data: unknown, metric: string): MetricSpec | null {
  if (typeof data !== "object" || data === null) return null;
  const obj = data as Record<string, unknown>;
  if (obj.status === "retired") return null;
  for (const cand of [obj.current, obj.spec, obj.current_spec, obj]) {
    if (typeof cand === "object" && cand !== null && "params" in cand) {
      try {
        const spec = specFromDict(cand);
        if (spec.name === metric) return spec;
      } catch {
        continue;
      }
    }
  }
  return null;
}
