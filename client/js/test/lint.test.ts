/** The lint really refuses the Math PRNG (planted in a scratch tree), and passes on the SDK itself. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT } from "./helpers.js";

function lint(root?: string): { status: number | null; out: string } {
  const env = { ...process.env };
  if (root) env.LDPTEL_LINT_ROOT = root;
  else delete env.LDPTEL_LINT_ROOT;
  const r = spawnSync(process.execPath, [join(ROOT, "scripts", "lint.mjs")], { env, encoding: "utf8" });
  return { status: r.status, out: r.stdout + r.stderr };
}

test("the SDK passes its lint", () => {
  const r = lint();
  assert.equal(r.status, 0, r.out);
});

const M = "Math";
for (const planted of [`const u = ${M}.random();`, `const f = ${M}['random'];`, `x = ${M} . random()`]) {
  test(`the lint refuses ${planted}`, () => {
    const dir = mkdtempSync(join(tmpdir(), "ldptel-lint-"));
    try {
      mkdirSync(join(dir, "src"));
      writeFileSync(join(dir, "src", "bad.ts"), `export function f() {\n  ${planted}\n}\n`);
      const r = lint(dir);
      assert.equal(r.status, 1, r.out);
      assert.match(r.out, /bad\.ts:2: Math\.random is not a CSPRNG/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
