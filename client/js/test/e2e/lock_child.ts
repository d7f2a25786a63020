/**
 * A process contending for the FileStore lock (test/lock.test.ts). `hold`: takes the lock and blocks inside the
 * transaction until it is SIGKILLed. `count N`: prints "ready"; then for every line on stdin prints "started",
 * runs N transactions that each add 1 to a counter and prints "done" (one process serves every round of the
 * test); exits 3 if it ever finds another process inside a transaction at the same time, 0 at the end of stdin.
 */
import * as fs from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { FileStore } from "../../src/filestore.js";
import { emptyState } from "../../src/state.js";

const [dir, mode, n] = process.argv.slice(2) as [string, string, string];
const store = new FileStore(dir);
const inside = join(dir, "inside");
if (mode === "hold") {
  await store.transact(() => {
    // holds the lock until killed, blocked without using the CPU (the callback is synchronous)
    for (;;) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
  });
}
process.stdout.write("ready\n");
for await (const _ of createInterface({ input: process.stdin })) {
  process.stdout.write("started\n");
  for (let i = 0; i < Number(n); i++) await transaction();
  process.stdout.write("done\n");
}

async function transaction(): Promise<void> {
  await store.transact((old) => {
    try {
      fs.closeSync(fs.openSync(inside, "wx"));
    } catch {
      process.stderr.write(`pid ${process.pid}: another process is inside the transaction\n`);
      process.exit(3);
    }
    const s = old ?? emptyState(new Uint8Array(32));
    const row = (s.ledger["c"] ??= { day: 0, count: 0, eps: 0 });
    row.count += 1;
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2); // stay inside 2 ms: widen the window in which a second owner would be caught
    fs.rmSync(inside);
    return { state: s, result: null };
  });
}
