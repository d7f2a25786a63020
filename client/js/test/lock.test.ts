/** The FileStore lock after its owner is SIGKILLed: several processes take it over, never two at once. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stateFromJson } from "../src/state.js";
import { ROOT } from "./helpers.js";

const CHILD = join(ROOT, "dist", "test", "e2e", "lock_child.js");

function run(args: string[]): ChildProcess {
  return spawn(process.execPath, [CHILD, ...args], { stdio: ["ignore", "pipe", "inherit"] });
}

const exited = (c: ChildProcess): Promise<number | null> =>
  c.exitCode !== null ? Promise.resolve(c.exitCode) : new Promise((r) => c.once("exit", (code) => r(code)));

test("dead-lock takeover: contenders waiting on a SIGKILLed owner's lock lose and double nothing", async () => {
  const dir = mkdtempSync(join(tmpdir(), "ldptel-lock-"));
  const ROUNDS = 4;
  const N = 5;
  const M = 20;
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const holder = run([dir, "hold", "0"]);
      const lock = join(dir, "lock");
      while (!(existsSync(lock) && readdirSync(lock).length > 0 && !readdirSync(dir).some((f) => f.startsWith(".lock.")))) {
        await new Promise((r) => setTimeout(r, 5));
      }
      const kids = Array.from({ length: N }, () => run([dir, "count", String(M)]));
      await Promise.all(kids.map((k) => new Promise<void>((r) => k.stdout?.once("data", () => r()))));
      await new Promise((r) => setTimeout(r, 100)); // all of them are polling the live lock now
      holder.kill("SIGKILL");
      await exited(holder);
      const codes = await Promise.all(kids.map(exited));
      assert.deepEqual(codes, Array(N).fill(0), `round ${round}: a contender failed (3: two owners at once)`);
      const s = stateFromJson(readFileSync(join(dir, "state.json"), "utf8"));
      assert.equal(s.ledger["c"]?.count, (round + 1) * N * M, `round ${round}: transactions lost`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
