/** kill -9 of a Node app mid-stream: the state file is never torn, and what was committed is delivered once. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FileStore } from "../src/filestore.js";
import { Reporter } from "../src/reporter.js";
import { ROOT } from "./helpers.js";
import { batchInfo, partsOf, startServer } from "./server.js";

const spec = { name: "pages", version: 1, reports_per_day: 10000, params: { mechanism: "cms", epsilon: 2.0, k: 4, m: 64, hash_seed: 1, hash_version: 1, prob_bits: 10 } };

// The app's loop is CPU-bound (fsync-heavy commits, uploads), so each ms of delay costs ~1 ms of CPU and a kill
// lands at an arbitrary point of the loop whatever the delay (a cycle of 11 reports is 10-80 ms here). The three
// delays give three history lengths: from a few to ~50 batches acknowledged before the kill (printed below).
for (const delay of [150, 300, 500]) {
  test(`SIGKILL after ${delay} ms: no torn state, no lost committed report, no batch sent twice`, async () => {
    const s = await startServer();
    const dir = mkdtempSync(join(tmpdir(), "ldptel-kill-"));
    try {
      const child = spawn(process.execPath, [join(ROOT, "dist", "test", "e2e", "kill_child.js"), dir, s.url], { stdio: ["ignore", "pipe", "inherit"] });
      await new Promise<void>((resolve) => child.stdout.once("data", () => resolve()));
      await new Promise((r) => setTimeout(r, delay));
      child.kill("SIGKILL");
      await new Promise((r) => child.once("exit", r));
      const before = s.received.filter((r) => r.method === "POST").flatMap((p) => partsOf(p.body).map(batchInfo));
      const rep = await Reporter.open({ endpoint: s.url, token: "t", namespace: "k", store: new FileStore(dir), specs: [spec], start: false, lifecycle: false });
      const pending = rep.stats().pending;
      console.log(`# delay ${delay}: ${before.length} batches before the kill (${before.reduce((a, b) => a + b.n, 0)} reports), ${pending} pending`);
      assert.equal(await rep.flush(10000), true);
      await rep.close();
      const all = s.received.filter((r) => r.method === "POST").flatMap((p) => partsOf(p.body).map(batchInfo));
      const after = all.slice(before.length);
      assert.equal(after.reduce((a, b) => a + b.n, 0), pending, "every committed report left on disk is delivered after the restart");
      // a batch acknowledged before the kill is never sent again; one sent but not yet settled may be resent
      // with the same id (the server counts it once)
      const acked = new Set(before.map((b) => b.id));
      const resent = after.filter((b) => acked.has(b.id));
      assert.ok(resent.length <= 1, `${resent.length} batches resent`);
      assert.deepEqual(readdirSync(dir).filter((f) => f !== "state.json"), []);
    } finally {
      await s.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
