import { readFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** The package root (client/js), from dist/test/*.js. */
export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The golden vectors the Python protocol generated (scripts/js_golden_vectors.py). */
export function golden(): any {
  const path = process.env.LDPTEL_GOLDEN ?? join(ROOT, "build", "golden.json");
  if (!existsSync(path)) {
    throw new Error(`golden vectors missing at ${path}: run python scripts/js_golden_vectors.py ${path} (the pytest wrapper tests/client/test_js_sdk.py does)`);
  }
  return JSON.parse(readFileSync(path, "utf8"));
}
