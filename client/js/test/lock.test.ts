/** The FileStore lock after its owner is SIGKILLed: several processes take it over, never two at once. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { stateFromJson } from "../src/state.js";
import { ROOT } from "./helpers.js";

const CHILD = join(ROOT, "dist", "test", "e2e", "lock_child.js");

function run(args: string[]): ChildProcess {
  return spawn(process.execPath, [CHILD, ...args], { stdio: ["pipe", "pipe", "inherit"] });
}

const exited = (c: ChildProcess): Promise<number | null> =>
  c.exitCode !== null ? Promise.resolve(c.exitCode) : new Promise((r) => c.once("exit", (code) => r(code)));

/** A contender serving every round (one process each, not one per round: ~0.1 s of CPU per Node start). */
function contender(dir: string, m: number): { proc: ChildProcess; said: () => Promise<string> } {
  const proc = run([dir, "count", String(m)]);
  const lines = createInterface({ input: proc.stdout as NodeJS.ReadableStream })[Symbol.asyncIterator]();
  return { proc, said: async () => (await lines.next()).value ?? `(exited ${await exited(proc)})` };
}

test("dead-lock takeover: contenders waiting on a SIGKILLed owner's lock lose and double nothing", async () => {
  const dir = mkdtempSync(join(tmpdir(), "ldptel-lock-"));
  const ROUNDS = 4;
  const N = 5;
  const M = 20;
  const kids = Array.from({ length: N }, () => contender(dir, M));
  try {
    assert.deepEqual(await Promise.all(kids.map((k) => k.said())), Array(N).fill("ready"));
    for (let round = 0; round < ROUNDS; round++) {
      const holder = run([dir, "hold", "0"]);
      const lock = join(dir, "lock");
      while (!(existsSync(lock) && readdirSync(lock).length > 0 && !readdirSync(dir).some((f) => f.startsWith(".lock.")))) {
        await new Promise((r) => setTimeout(r, 5));
      }
      for (const k of kids) k.proc.stdin?.write("go\n");
      assert.deepEqual(await Promise.all(kids.map((k) => k.said())), Array(N).fill("started"));
      await new Promise((r) => setTimeout(r, 100)); // all of them are polling the live lock now
      holder.kill("SIGKILL");
      await exited(holder);
      const said = await Promise.all(kids.map((k) => k.said()));
      assert.deepEqual(said, Array(N).fill("done"), `round ${round}: a contender failed (exited 3: two owners at once)`);
      const s = stateFromJson(readFileSync(join(dir, "state.json"), "utf8"));
      assert.equal(s.ledger["c"]?.count, (round + 1) * N * M, `round ${round}: transactions lost`);
    }
    for (const k of kids) k.proc.stdin?.end();
    assert.deepEqual(await Promise.all(kids.map((k) => exited(k.proc))), Array(N).fill(0));
  } finally {
    for (const k of kids) if (k.proc.exitCode === null) k.proc.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  }
});
