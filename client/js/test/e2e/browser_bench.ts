/** report() latency in headless Chromium (tests/bench/bench_js_sdk.py runs it): one JSON line. No server needed. */
import { createServer } from "node:http";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { AddressInfo } from "node:net";
import { chromium } from "playwright-core";
import { ROOT } from "../helpers.js";

const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"];

async function main(): Promise<void> {
  const bundle = readFileSync(join(ROOT, "build", "ldptel.min.js"));
  const server = createServer((req, res) => {
    res.setHeader("Content-Type", req.url === "/ldptel.min.js" ? "text/javascript" : "text/html");
    res.end(req.url === "/ldptel.min.js" ? bundle : `<!doctype html><script type="module">import * as l from "/ldptel.min.js"; window.ldptel = l; window.ready = true;</script>`);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  const profile = process.argv[2] ?? join(ROOT, "build", "bench-profile");
  const context = await chromium.launchPersistentContext(profile, { executablePath: process.env.CHROME_BIN ?? "/usr/bin/chromium", headless: true, args: FLAGS });
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    await page.goto(`http://127.0.0.1:${port}/`);
    await page.waitForFunction(() => (window as unknown as { ready?: boolean }).ready === true);
    const r = await page.evaluate(async () => {
      const { Reporter } = (window as any).ldptel;
      const specs = [{ name: "bench.cms", version: 1, reports_per_day: 10000, params: { mechanism: "cms", epsilon: 4.0, k: 2048, m: 1024, hash_seed: 0, prob_bits: 10 } }];
      const rep = await Reporter.open({ endpoint: "http://127.0.0.1:9", token: "bench", namespace: `bench-${Date.now()}`, specs, start: false, lifecycle: false, maxQueue: 100000 });
      // The page's clock is coarsened (100 µs steps): time chunks of 50 calls and take each chunk's mean.
      const t: number[] = [];
      let fresh = 0;
      const names = Array.from({ length: 5000 }, (_, i) => `https://example.com/page/${i}`);
      for (let c = 0; c < 100; c++) {
        const a = performance.now();
        for (let i = c * 50; i < c * 50 + 50; i++) {
          const res = rep.report("bench.cms", names[i]); // distinct values: no memo hits
          if (res.status === "queued" && !res.memoized) fresh += 1;
        }
        t.push((performance.now() - a) / 50);
      }
      const c = performance.now();
      await rep.commit();
      const commitMs = performance.now() - c;
      t.sort((x, y) => x - y);
      return { p50: t[Math.floor(t.length / 2)], p90: t[Math.floor(t.length * 0.9)], fresh, commitMs };
    });
    const ua = await page.evaluate(() => navigator.userAgent);
    console.log(JSON.stringify({ sdk: "ts", figure: "report_chromium_p50_ms", value: +(r.p50 ?? NaN).toFixed(4), p90: +(r.p90 ?? NaN).toFixed(4), timing: "mean of 50-call chunks", n: r.fresh, goal: 0.2, commit_5000_reports_ms: Math.round(r.commitMs), browser: ua.match(/Chrome\/[\d.]+/)?.[0] }));
  } finally {
    await context.close();
    server.close();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
