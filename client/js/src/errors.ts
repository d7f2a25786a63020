/** Errors of the SDK's protocol layer. `Reporter.report()` never throws: it turns these into results. */

export class LdpError extends Error {
  override name = "LdpError";
}

/** A value the metric's mechanism does not take (wrong type, outside a grr domain, a lone surrogate, ...). */
export class InvalidValueError extends LdpError {
  override name = "InvalidValueError";
}

/** A parameter (spec field, option) outside what is allowed: names the parameter, the rule and the value. */
export class InvalidParameterError extends LdpError {
  override name = "InvalidParameterError";
  constructor(
    readonly parameter: string,
    readonly allowed: string,
    received: unknown,
  ) {
    super(`${parameter} must be ${allowed}, got ${describe(received)}`);
  }
}

/** Bytes that are not a valid batch or upload. */
export class WireFormatError extends LdpError {
  override name = "WireFormatError";
}

function describe(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value.length > 80 ? value.slice(0, 80) + "…" : value);
  if (typeof value === "number" || typeof value === "boolean" || value === null || value === undefined) {
    return String(value);
  }
  if (Array.isArray(value)) return `a list of ${value.length}`;
  return typeof value;
}
