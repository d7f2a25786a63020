/**
 * `npm test`: every test file (dist/test/*.test.js) in this one Node process, in name order. `node --test` ran each
 * file in a process of its own: a Node start, the SDK's modules loaded and its hot paths (SHA-256, mmh3,
 * privatize) JIT-compiled again per file, ~1 s of the suite's ~11 s of CPU. node:test still runs the tests one
 * after another and prints the same TAP summary; the tests that need a process of their own (kill -9, the lock
 * takeover, an app that never calls close()) spawn it themselves.
 */
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const dir = dirname(fileURLToPath(import.meta.url));
for (const name of readdirSync(dir).filter((f) => f.endsWith(".test.js")).sort()) {
  await import(pathToFileURL(join(dir, name)).href);
}
