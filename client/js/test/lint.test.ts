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
const PLANTED = [`const u = ${M}.random();`, `const f = ${M}['random'];`, `x = ${M} . random()`];

test(`the lint refuses each way of writing the Math PRNG (${PLANTED.join(" / ")})`, () => {
  // one scratch tree, one lint run (a Node start each): every planted line must be reported on its own
  const dir = mkdtempSync(join(tmpdir(), "ldptel-lint-"));
  try {
    mkdirSync(join(dir, "src"));
    PLANTED.forEach((planted, i) => writeFileSync(join(dir, "src", `bad${i}.ts`), `export function f() {\n  ${planted}\n}\n`));
    const r = lint(dir);
    assert.equal(r.status, 1, r.out);
    PLANTED.forEach((_, i) => assert.match(r.out, new RegExp(`bad${i}\\.ts:2: Math\\.random is not a CSPRNG`)));
    assert.match(r.out, /lint: 3 problem\(s\)/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
