/** A Node app that reports and commits in a loop until it is killed (test/kill.test.ts sends it SIGKILL). */
import { FileStore } from "../../src/filestore.js";
import { Reporter } from "../../src/reporter.js";

const [dir, endpoint] = process.argv.slice(2) as [string, string];
const spec = { name: "pages", version: 1, reports_per_day: 10000, params: { mechanism: "cms", epsilon: 2.0, k: 4, m: 64, hash_seed: 1, hash_version: 1, prob_bits: 10 } };
const rep = await Reporter.open({ endpoint, token: "t", namespace: "k", store: new FileStore(dir), specs: [spec], start: false, lifecycle: false, batchSize: 7 });
let i = 0;
process.stdout.write("ready\n");
for (;;) {
  rep.report("pages", `v${i++}`);
  if (i % 5 === 0) await rep.commit();
  if (i % 11 === 0) await rep.flush(50); // forms batches and uploads some, mid-stream
}
