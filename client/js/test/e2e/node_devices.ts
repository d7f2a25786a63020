/**
 * Simulated Node devices for tests/e2e/test_js_e2e.py: each device is one Reporter with its own namespace and
 * FileStore directory. Phases (argv[2]): "specs" (online: fetch and cache the specs), "offline" (report with the
 * ingest unreachable: everything stays queued on disk), "online" (reopen every device and deliver). Its metrics
 * are node.pages, node.flag and node.latency (the browser devices have their own web.*, so each SDK's estimates
 * are checked on their own). Prints one JSON line with the totals.
 */
import { join } from "node:path";
import { FileStore } from "../../src/filestore.js";
import { Reporter } from "../../src/reporter.js";

const [phase, endpoint, token, dir, nText] = process.argv.slice(2) as [string, string, string, string, string];
const n = Number(nText);
const METRICS = ["node.pages", "node.flag", "node.latency"];

/** Device i's values: known truth for the Python side. */
export function values(i: number): [string, boolean, number] {
  const page = i % 2 === 0 ? "apple" : i % 4 === 1 ? "pear" : `page-${i}`;
  return [page, i % 10 < 3, (i % 7) * 10];
}

async function main(): Promise<void> {
  const totals: Record<string, number> = { queued: 0, delivered: 0, pending: 0, errors: 0 };
  const statuses: Record<string, number> = {};
  for (let i = 0; i < n; i++) {
    const rep = await Reporter.open({
      endpoint,
      token,
      namespace: `dev${i}`,
      store: new FileStore(join(dir, `dev${i}`)),
      metrics: METRICS,
      start: false,
      lifecycle: false,
      onError: () => {
        totals.errors = (totals.errors ?? 0) + 1;
      },
    });
    if (phase === "specs") {
      if (!(await rep.waitForSpecs(10000))) throw new Error(`device ${i}: specs not fetched`);
    } else if (phase === "offline") {
      const [page, flag, latency] = values(i);
      for (const [m, v] of [["node.pages", page], ["node.flag", flag], ["node.latency", latency]] as const) {
        const s = rep.report(m, v).status;
        statuses[s] = (statuses[s] ?? 0) + 1;
      }
      await rep.commit();
      await rep.flush(50); // the network is down: nothing is acknowledged, the batches stay on disk
    } else {
      await rep.flush(20000);
    }
    const st = rep.stats();
    totals.queued = (totals.queued ?? 0) + st.queued;
    totals.delivered = (totals.delivered ?? 0) + st.delivered;
    totals.pending = (totals.pending ?? 0) + st.pending;
    await rep.close(phase === "online" ? 10000 : 1);
  }
  console.log(JSON.stringify({ phase, ...totals, statuses }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
