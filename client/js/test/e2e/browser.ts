/**
 * Headless Chromium runs the browser bundle for many simulated devices (one IndexedDB namespace each) against a
 * real ingest, through an offline period and a page reload. Driven by tests/e2e/test_js_e2e.py:
 *   node dist/test/e2e/browser.js ENDPOINT TOKEN N PROFILE_DIR STATIC_PORT OFFLINE_ENDPOINT
 * The page is served from http://127.0.0.1:STATIC_PORT, an origin the ingest's LDPTEL_CORS_ORIGINS allows.
 * OFFLINE_ENDPOINT is a loopback port where nothing listens (the caller holds it bound): every request to it
 * fails in Chromium's network stack as with no network, while the page's own origin still loads (so the page
 * can reload while offline). Each device opens once per phase: online (specs), offline (report), after the
 * reload (online again: deliver).
 * Prints one JSON line with what each phase saw.
 */
import { createServer } from "node:http";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { chromium, type Page } from "playwright-core";
import { ROOT } from "../helpers.js";

const [endpoint, token, nText, profile, staticPort, offEndpoint] = process.argv.slice(2) as [string, string, string, string, string, string];
const n = Number(nText);
// The omnibox-popup WebUIs that new headless preloads for its (unused) address bar cost a renderer of their own.
const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
  "--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup,WebUIOmniboxFullPopup"];

const PAGE = `<!doctype html><meta charset="utf-8"><title>ldptel devices</title><script type="module">
import * as ldptel from "/ldptel.min.js";
window.ldptel = ldptel;
window.ready = true;
</script>`;

function values(i: number): [string, boolean, number] {
  const page = i % 2 === 0 ? "apple" : i % 4 === 1 ? "pear" : `page-${i}`;
  return [page, i % 10 < 3, (i % 7) * 10];
}

async function load(page: Page, url: string): Promise<void> {
  await page.goto(url);
  await page.waitForFunction(() => (window as unknown as { ready?: boolean }).ready === true);
}

async function main(): Promise<void> {
  const bundle = readFileSync(join(ROOT, "build", "ldptel.min.js"));
  const server = createServer((req, res) => {
    if (req.url === "/ldptel.min.js") {
      res.setHeader("Content-Type", "text/javascript");
      res.end(bundle);
    } else {
      res.setHeader("Content-Type", "text/html");
      res.end(PAGE);
    }
  });
  await new Promise<void>((r) => server.listen(Number(staticPort), "127.0.0.1", r));
  const url = `http://127.0.0.1:${staticPort}/`;
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROME_BIN ?? "/usr/bin/chromium",
    headless: true,
    args: FLAGS,
  });
  const out: Record<string, unknown> = {};
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    page.on("pageerror", (e) => console.error("pageerror", e));
    await load(page, url);
    const args = { endpoint, offEndpoint, token, n, vals: Array.from({ length: n }, (_, i) => values(i)) };
    // 1. online: every device fetches and caches its specs (and the two devices of the commit-window check)
    await page.evaluate(async ({ endpoint, token, n }) => {
      const { Reporter } = (window as any).ldptel;
      const devices: [string, string[]][] = Array.from({ length: n }, (_, i) => [`b${i}`, ["web.pages", "web.flag", "web.latency"]]);
      devices.push(["window-lost", ["web.flag"]], ["window-kept", ["web.flag"]]);
      for (const [namespace, metrics] of devices) {
        const rep = await Reporter.open({ endpoint, token, namespace, metrics, start: false, lifecycle: false });
        if (!(await rep.waitForSpecs(10000))) throw new Error(`device ${namespace}: no specs`);
        await rep.close(0);
      }
    }, args);
    // 2. offline: every device reports three values; they are committed, the upload fails, batches stay queued
    const offline = await page.evaluate(async ({ offEndpoint, token, n, vals }) => {
      const { Reporter } = (window as any).ldptel;
      const statuses: Record<string, number> = {};
      let pending = 0;
      let delivered = 0;
      for (let i = 0; i < n; i++) {
        const rep = await Reporter.open({ endpoint: offEndpoint, token, namespace: `b${i}`, start: false, lifecycle: false });
        const [p, f, l] = vals[i] as [string, boolean, number];
        for (const [m, v] of [["web.pages", p], ["web.flag", f], ["web.latency", l]]) {
          const s = rep.report(m, v).status;
          statuses[s] = (statuses[s] ?? 0) + 1;
        }
        await rep.flush(20);
        pending += rep.stats().pending;
        delivered += rep.stats().delivered;
        await rep.close(0);
      }
      return { statuses, pending, delivered };
    }, args);
    out.report = offline.statuses;
    out.offline = { pending: offline.pending, delivered: offline.delivered };
    // 3. the commit window, and the page reload mid-queue (still offline): a report not yet committed
    //    (commitDelay 1000) is lost with its spend on the reload; one committed survives (specs cached in 1.)
    await page
      .evaluate(async ({ offEndpoint, token }) => {
        const { Reporter } = (window as any).ldptel;
        const kept = await Reporter.open({ endpoint: offEndpoint, token, namespace: "window-kept", start: false, lifecycle: false, commitDelay: 1000 });
        const lost = await Reporter.open({ endpoint: offEndpoint, token, namespace: "window-lost", start: false, lifecycle: false, commitDelay: 1000 });
        kept.report("web.flag", true);
        // past kept's commit window, told by the store itself, not a clock: its own timer (no commit() call) has
        // made the report durable when a second connection to its database reads it in the ledger
        const db = await new Promise<IDBDatabase>((resolve, reject) => {
          const req = indexedDB.open("ldptel:window-kept", 1);
          req.onsuccess = () => resolve(req.result);
          req.onerror = () => reject(req.error);
        });
        for (const deadline = Date.now() + 30000; ; ) {
          if (Date.now() > deadline) throw new Error("window-kept: its report was never committed by its own timer");
          const state = await new Promise<any>((resolve, reject) => {
            const get = db.transaction(["state"]).objectStore("state").get("state");
            get.onsuccess = () => resolve(get.result);
            get.onerror = () => reject(get.error);
          });
          if (state?.ledger?.["web.flag"]?.count === 1) break;
          await new Promise((r) => setTimeout(r, 50));
        }
        db.close();
        lost.report("web.flag", true);
        location.reload(); // inside lost's window
      }, args)
      .catch(() => undefined);
    await page.waitForFunction(() => (window as unknown as { ready?: boolean }).ready === true);
    out.window = await page.evaluate(async ({ offEndpoint, token }) => {
      const { Reporter } = (window as any).ldptel;
      const res: Record<string, unknown> = {};
      for (const ns of ["window-lost", "window-kept"]) {
        const r = await Reporter.open({ endpoint: offEndpoint, token, namespace: ns, start: false, lifecycle: false });
        res[ns] = { pending: r.stats().pending, remaining: r.budgetRemaining("web.flag") };
        await r.close(0);
      }
      return res;
    }, args);
    // 4. after the reload, back online: the queue and the ledgers survived (a second report today is refused),
    //    and every device delivers its queue, each batch once
    const after = await page.evaluate(async ({ endpoint, token, n }) => {
      const { Reporter } = (window as any).ldptel;
      const statuses: Record<string, number> = {};
      let before = 0;
      let pending = 0;
      let delivered = 0;
      for (let i = 0; i < n; i++) {
        const rep = await Reporter.open({ endpoint, token, namespace: `b${i}`, start: false, lifecycle: false });
        before += rep.stats().pending;
        const s = rep.report("web.flag", true).status;
        statuses[s] = (statuses[s] ?? 0) + 1;
        await rep.flush(20000);
        pending += rep.stats().pending;
        delivered += rep.stats().delivered;
        await rep.close(0);
      }
      return { before, statuses, pending, delivered };
    }, args);
    out.after_reload = { pending: after.before, statuses: after.statuses };
    out.online = { pending: after.pending, delivered: after.delivered };
    // 5. lifecycle: visibilitychange → hidden commits and flushes with fetch keepalive (no flush() call)
    out.lifecycle = await page.evaluate(async ({ endpoint, token }) => {
      const { Reporter } = (window as any).ldptel;
      const rep = await Reporter.open({ endpoint, token, namespace: "life", metrics: ["web.flag"], flushInterval: 3600000 });
      await rep.waitForSpecs(5000);
      const status = rep.report("web.flag", true).status;
      Object.defineProperty(document, "visibilityState", { configurable: true, get: () => "hidden" });
      document.dispatchEvent(new Event("visibilitychange"));
      const deadline = performance.now() + 10000;
      while (rep.stats().delivered < 1 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      const delivered = rep.stats().delivered;
      await rep.close(0);
      return { status, delivered };
    }, args);
  } finally {
    await context.close();
    server.close();
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
