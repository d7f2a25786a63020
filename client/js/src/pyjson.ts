/**
 * Python's `json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`, for the privatization
 * fingerprint: JSON that hashes to the same bytes as the Python SDK's. Numbers need their Python type, which
 * JSON.parse loses (4.0 and 4 are both 4), so floats are wrapped in {@link PyFloat}; a plain number is an int.
 */

export class PyFloat {
  constructor(readonly value: number) {}
}

export type PyJson = null | boolean | number | string | PyFloat | PyJson[] | { [key: string]: PyJson };

/** `repr(float)` of CPython 3 (shortest round-trip digits; exponent form below 1e-4 and from 1e16). */
export function pyFloatRepr(x: number): string {
  if (Number.isNaN(x)) return "NaN";
  if (x === Infinity) return "Infinity";
  if (x === -Infinity) return "-Infinity";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  const [mant, expText] = Math.abs(x).toExponential().split("e") as [string, string];
  const digits = mant.replace(".", "");
  const exp = Number(expText); // value = d.ddd × 10^exp
  if (exp < -4 || exp >= 16) {
    const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    const e = Math.abs(exp).toString().padStart(2, "0");
    return `${sign}${m}e${exp < 0 ? "-" : "+"}${e}`;
  }
  if (exp < 0) return `${sign}0.${"0".repeat(-exp - 1)}${digits}`;
  if (digits.length <= exp + 1) return `${sign}${digits}${"0".repeat(exp + 1 - digits.length)}.0`;
  return `${sign}${digits.slice(0, exp + 1)}.${digits.slice(exp + 1)}`;
}

function compareCodePoints(a: string, b: string): number {
  // Python sorts str keys by code point; JS's default sort compares UTF-16 code units.
  const x = Array.from(a, (c) => c.codePointAt(0) ?? 0);
  const y = Array.from(b, (c) => c.codePointAt(0) ?? 0);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] !== y[i]) return (x[i] ?? 0) - (y[i] ?? 0);
  }
  return x.length - y.length;
}

/** Canonical JSON text, as Python's json.dumps with sort_keys, compact separators and ensure_ascii=False. */
export function pyDumps(v: PyJson): string {
  if (v === null) return "null";
  if (v === true) return "true";
  if (v === false) return "false";
  if (v instanceof PyFloat) return pyFloatRepr(v.value);
  if (typeof v === "number") {
    if (!Number.isSafeInteger(v)) throw new Error(`an int field holds ${v}`);
    return String(v);
  }
  if (typeof v === "string") return JSON.stringify(v); // same escapes as Python for well-formed strings
  if (Array.isArray(v)) return `[${v.map(pyDumps).join(",")}]`;
  const keys = Object.keys(v).sort(compareCodePoints);
  return `{${keys.map((k) => `${JSON.stringify(k)}:${pyDumps(v[k] as PyJson)}`).join(",")}}`;
}
