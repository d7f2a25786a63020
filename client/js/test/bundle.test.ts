/** The browser entry bundles (esbuild, ESM, minified) to at most 20 KB after gzip. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { ROOT } from "./helpers.js";

test("browser bundle ≤ 20 KB min+gzip", () => {
  const r = spawnSync(process.execPath, [join(ROOT, "scripts", "bundle.mjs")], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const line = JSON.parse(r.stdout.trim().split("\n").pop() as string);
  console.log(`# bundle ${line.value} bytes min+gzip (${line.min_bytes} min)`);
  assert.ok(line.value <= 20480);
});
