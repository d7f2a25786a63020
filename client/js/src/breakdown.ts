/**
 * Breakdowns by system profile (`ldptel.client.protocol.breakdown`): a device's profile is given once; each batch of
 * a metric broken down by some of its dimensions carries `dim=value` pairs (the metric's dimensions, in its order)
 * **in clear**: they are not privatized (docs/breakdowns.md). A value the served spec does not declare, a missing
 * dimension or a malformed value is sent as `other`, so a rare value never leaves the device.
 */
import { InvalidParameterError } from "./errors.js";

export const OTHER = "other";
const DIM = /^[a-z][a-z0-9_]{0,31}$/;
const VALUE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$/;
const isObj = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x);
const bad = (what: string, rule: string, got: unknown): never => {
  throw new InvalidParameterError(what, rule, got);
};

/** A device profile as the Reporter takes it: dimension names must be valid, a malformed value becomes `other`. */
export function checkProfile(profile: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (profile == null) return out;
  if (!isObj(profile)) return bad("profile", "a mapping of dimension → value", profile);
  for (const [d, v] of Object.entries(profile)) {
    if (!DIM.test(d)) bad("profile dimension", "a-z, 0-9, '_', starting with a letter", d);
    out[d] = typeof v === "string" && VALUE.test(v) ? v : OTHER;
  }
  return out;
}

/** A spec's `breakdown` (dimension names, in order) and `profile` (each dimension's declared values), validated. */
export function breakdownFromDict(dims: unknown, values: unknown): { breakdown: string[]; declared: Map<string, Set<string>> } {
  const list = dims ?? [];
  if (!Array.isArray(list) || list.length > 4 || new Set(list).size !== list.length || !list.every((d) => typeof d === "string" && DIM.test(d))) {
    bad("breakdown", "at most 4 distinct profile dimension names", dims);
  }
  const breakdown = list as string[];
  const table = values ?? {};
  if (!isObj(table)) return bad("profile", "a table of dimension = [values]", values);
  const declared = new Map<string, Set<string>>();
  for (const [d, vs] of Object.entries(table)) {
    if (!breakdown.includes(d) || !Array.isArray(vs) || !vs.every((v) => typeof v === "string" && VALUE.test(v))) {
      bad(`profile.${d}`, "declared values of a breakdown dimension", vs);
    }
    declared.set(d, new Set(vs as string[]));
  }
  return { breakdown, declared };
}

/** The wire profile of a batch: `dims` in order, each `dim=value`, `other` where the profile lacks the dimension or
 * the spec does not declare the value; empty when the metric has no breakdown (the registry keeps it ≤ 255 bytes). */
export function encodeProfile(profile: Record<string, string>, dims: string[], declared: Map<string, Set<string>>): Uint8Array {
  return new TextEncoder().encode(dims.map((d) => {
    const v = profile[d];
    return `${d}=${v !== undefined && declared.get(d)?.has(v) ? v : OTHER}`;
  }).join(","));
}
