/**
 * The device's own privacy policy, with the Python SDK's defaults and reasons (`ldptel.client.sdk.policy`):
 * a served spec beyond it is refused (`policy_refused`, nothing privatized, queued or spent).
 *
 * - maxReportEpsilon = 4: ε of one report (Apple's largest published per-report ε).
 * - maxDailyEpsilon = 8: reports_per_day × effective ε per metric and UTC day.
 * - maxLongitudinalEpsilon = 8: the lifetime ε∞ of one value of a metric with a permanent randomized response,
 *   summed over every privatization (fingerprint) the device ever used for it.
 * `Infinity` disables a bound. Pinned specs (compiled into the app) are not checked against it.
 */
import { InvalidParameterError } from "./errors.js";

export const DEFAULT_MAX_REPORT_EPSILON = 4.0;
export const DEFAULT_MAX_DAILY_EPSILON = 8.0;
export const DEFAULT_MAX_LONGITUDINAL_EPSILON = 8.0;
const SLACK = 1e-9;

export interface PrivacyPolicyOptions {
  maxReportEpsilon?: number;
  maxDailyEpsilon?: number;
  maxLongitudinalEpsilon?: number;
}

export class PrivacyPolicy {
  readonly maxReportEpsilon: number;
  readonly maxDailyEpsilon: number;
  readonly maxLongitudinalEpsilon: number;

  constructor(opts: PrivacyPolicyOptions = {}) {
    this.maxReportEpsilon = check("maxReportEpsilon", opts.maxReportEpsilon ?? DEFAULT_MAX_REPORT_EPSILON);
    this.maxDailyEpsilon = check("maxDailyEpsilon", opts.maxDailyEpsilon ?? DEFAULT_MAX_DAILY_EPSILON);
    this.maxLongitudinalEpsilon = check("maxLongitudinalEpsilon", opts.maxLongitudinalEpsilon ?? DEFAULT_MAX_LONGITUDINAL_EPSILON);
  }

  /** Why a spec with these ε's is beyond the policy (null when it is within). */
  refusal(report: number, daily: number, longitudinal: number): string | null {
    const checks: [string, number, number][] = [
      ["report_epsilon", report, this.maxReportEpsilon],
      ["daily_epsilon", daily, this.maxDailyEpsilon],
      ["longitudinal_epsilon", longitudinal, this.maxLongitudinalEpsilon],
    ];
    for (const [what, value, cap] of checks) {
      if (!within(value, cap)) return `${what} ${value.toPrecision(4)} is above the device policy's maximum ${cap.toPrecision(4)}`;
    }
    return null;
  }
}

export function within(value: number, cap: number): boolean {
  return value <= cap * (1 + SLACK);
}

function check(name: string, v: unknown): number {
  if (typeof v !== "number" || Number.isNaN(v) || !(v > 0)) throw new InvalidParameterError(name, "a number in (0, inf] (Infinity disables the bound)", v);
  return v;
}
