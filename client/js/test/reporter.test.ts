/** The Reporter against a real loopback HTTP server and real files: statuses, ledgers, memo, delivery. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, readFileSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FileStore } from "../src/filestore.js";
import { PrivacyPolicy } from "../src/policy.js";
import { Reporter, type ReporterOptions, type UploadError } from "../src/reporter.js";
import { MemoryStore } from "../src/store.js";
import { batchInfo, partsOf, startServer, type TestServer } from "./server.js";

const DAY = 86400000;
const CMS = { name: "pages", version: 1, reports_per_day: 3, params: { mechanism: "cms", epsilon: 2.0, k: 4, m: 64, hash_seed: 1, hash_version: 1, prob_bits: 10 } };
const RR = (version: number, epsilon: number) => ({ name: "flag", version, reports_per_day: 1, params: { mechanism: "rr", epsilon, prob_bits: 32 } });

function tmp(): string {
  return mkdtempSync(join(tmpdir(), "ldptel-js-"));
}

async function withServer(fn: (s: TestServer) => Promise<void>): Promise<void> {
  const s = await startServer();
  try {
    await fn(s);
  } finally {
    await s.close();
  }
}

function opts(s: TestServer, extra: Partial<ReporterOptions> = {}): ReporterOptions {
  return { endpoint: s.url, token: "app-token", namespace: "t", store: new MemoryStore(), start: false, lifecycle: false, ...extra };
}

test("statuses: no_spec, queued, budget_exceeded, invalid_value (never throws), closed", async () => {
  await withServer(async (s) => {
    s.specs.set("pages", CMS);
    const errors: UploadError[] = [];
    const rep = await Reporter.open(opts(s, { onError: (e) => errors.push(e) }));
    assert.equal(rep.report("pages", "a").status, "no_spec");
    assert.equal(await rep.waitForSpecs(5000), true);
    const q = rep.report("pages", "a");
    assert.equal(q.status, "queued");
    assert.equal(q.version, 1);
    assert.equal(rep.report("pages", 42).status, "invalid_value");
    const lone = rep.report("pages", "x\ud800");
    assert.equal(lone.status, "invalid_value");
    assert.match(lone.reason ?? "", /lone surrogate/);
    assert.equal(rep.report("pages", "b").status, "queued");
    assert.equal(rep.report("pages", "c").status, "queued");
    assert.equal(rep.report("pages", "d").status, "budget_exceeded");
    assert.equal(rep.budgetRemaining("pages"), 0);
    assert.equal(rep.report("nope!", "x").status, "no_spec");
    assert.equal(rep.report(undefined as unknown as string, "x").status, "no_spec");
    const st = rep.stats();
    assert.equal(st.queued, 3);
    assert.equal(st.refusedBudget, 1);
    assert.equal(st.invalidValue, 2);
    assert.equal(await rep.flush(5000), true);
    assert.equal(rep.stats().delivered, 3);
    await rep.close();
    assert.equal(rep.report("pages", "a").status, "closed");
  });
});

test("the memo: a repeated value on one day resends the same report; the next day a fresh one", async () => {
  await withServer(async (s) => {
    let now = 20000 * DAY + 1000;
    const spec = { ...CMS, reports_per_day: 100 };
    const rep = await Reporter.open(opts(s, { specs: [spec], now: () => now }));
    const a = rep.report("pages", "same");
    const b = rep.report("pages", "same");
    assert.equal(b.memoized, true);
    assert.deepEqual(b.report, a.report);
    now += DAY;
    const fresh = [0, 1, 2, 3, 4].map(() => rep.report("pages", "same").report);
    assert.equal(rep.stats().memoized, 1 + 4);
    assert.ok(fresh.every((r) => JSON.stringify(r) === JSON.stringify(fresh[0])));
    await rep.close(100);
  });
});

test("policy: a served spec above the defaults is refused (told once); a pinned one is the app's choice", async () => {
  await withServer(async (s) => {
    const hot = { ...CMS, name: "hot", params: { ...CMS.params, epsilon: 6.0 } };
    const greedy = { ...CMS, name: "greedy", reports_per_day: 10 }; // 10 × ε 2 = 20 per day > 8
    s.specs.set("hot", hot);
    s.specs.set("greedy", greedy);
    const errors: UploadError[] = [];
    const rep = await Reporter.open(opts(s, { metrics: ["hot", "greedy"], onError: (e) => errors.push(e) }));
    await rep.waitForSpecs(5000);
    const r = rep.report("hot", "a");
    assert.equal(r.status, "policy_refused");
    assert.match(r.reason ?? "", /^report_epsilon 5\.98\d is above the device policy's maximum 4\.000/);
    assert.equal(rep.report("hot", "b").status, "policy_refused");
    assert.match(rep.report("greedy", "b").reason ?? "", /^daily_epsilon/);
    assert.equal(errors.filter((e) => e.outcome === "policy").length, 2);
    assert.equal(rep.stats().pending, 0);
    await rep.close(100);
    const pinned = await Reporter.open(opts(s, { specs: [hot] }));
    assert.equal(pinned.report("hot", "a").status, "queued");
    await pinned.close(100);
    const lax = await Reporter.open(opts(s, { metrics: ["hot"], policy: new PrivacyPolicy({ maxReportEpsilon: 7, maxDailyEpsilon: 30, maxLongitudinalEpsilon: 30 }) }));
    await lax.waitForSpecs(5000);
    assert.equal(lax.report("hot", "a").status, "queued");
    await lax.close(100);
  });
});

test("lifetime ledger: each privatization of a permanent-RR metric is charged once; past ε∞ = 8 refused", async () => {
  await withServer(async (s) => {
    let now = 20000 * DAY;
    const store = new MemoryStore();
    const open = async (spec: Record<string, unknown>): Promise<Reporter> => {
      s.specs.set("flag", spec);
      const r = await Reporter.open(opts(s, { store, now: () => now, metrics: ["flag"] }));
      await r.waitForSpecs(5000);
      return r;
    };
    // ε = 3: ε∞ ≈ 3.69; a second privatization at ε = 4 (ε∞ ≈ 4.69) would take the lifetime to ≈ 8.4 > 8
    let rep = await open(RR(1, 3.0));
    assert.equal(rep.report("flag", true).status, "queued");
    await rep.close(100);
    now += DAY;
    rep = await open({ ...RR(2, 3.0), description: "metadata only" }); // same privatization: no new charge
    assert.equal(rep.report("flag", false).status, "queued");
    await rep.close(100);
    now += DAY;
    rep = await open(RR(3, 4.0));
    const r = rep.report("flag", true);
    assert.equal(r.status, "policy_refused");
    assert.match(r.reason ?? "", /^longitudinal_epsilon/);
    await rep.close(100);
  });
});

test("retries resend the same batch id after 503/429 and a network error; acknowledged once", async () => {
  await withServer(async (s) => {
    s.statuses.push(503, 429);
    const rep = await Reporter.open(opts(s, { specs: [CMS], backoffBase: 1, backoffCap: 5 }));
    rep.report("pages", "a");
    rep.report("pages", "b");
    assert.equal(await rep.flush(5000), true);
    const posts = s.received.filter((r) => r.method === "POST");
    assert.equal(posts.length, 3);
    const ids = posts.map((p) => batchInfo(p.body).id);
    assert.equal(new Set(ids).size, 1);
    assert.ok(posts.every((p) => p.body.equals((posts[0] as { body: Buffer }).body)));
    assert.equal(posts[0]?.headers.authorization, "Bearer app-token");
    assert.equal(posts[0]?.headers["content-type"], "application/octet-stream");
    assert.equal(posts[0]?.headers["x-ldptel-batch-age-days"], "0");
    assert.equal(rep.stats().retries, 2);
    assert.equal(rep.stats().delivered, 2);
    await rep.close(100);
  });
});

test("multi-part LDPU: batches of several metrics go in one request, each with its own batch id", async () => {
  await withServer(async (s) => {
    const specs = ["m1", "m2", "m3"].map((name) => ({ ...CMS, name }));
    const rep = await Reporter.open(opts(s, { specs }));
    for (const m of ["m1", "m2", "m3"]) rep.report(m, "v");
    assert.equal(await rep.flush(5000), true);
    const posts = s.received.filter((r) => r.method === "POST");
    assert.equal(posts.length, 1);
    assert.equal(posts[0]?.body.subarray(0, 4).toString(), "LDPU");
    const parts = partsOf(posts[0]?.body as Buffer).map(batchInfo);
    assert.deepEqual(parts.map((p) => p.metric).sort(), ["m1", "m2", "m3"]);
    assert.equal(new Set(parts.map((p) => p.id)).size, 3);
    await rep.close(100);
  });
});

test("retry horizon: a batch older than it is dropped unsent; rejected (400) batches are dropped; 409 adopts", async () => {
  await withServer(async (s) => {
    let now = 20000 * DAY;
    const store = new MemoryStore();
    s.statuses.push(503);
    s.retryAfter = "60";
    const rep = await Reporter.open(opts(s, { store, specs: [CMS], now: () => now, backoffBase: 1, retryHorizonDays: 3 }));
    rep.report("pages", "a");
    // one 503 (Retry-After 60 s): the batch is kept for a retry a minute later on the test's clock. With Retry-After 0 the
    // retry came at once, and flush(1) returned true whenever both POSTs took under a millisecond (a chance failure)
    assert.equal(await rep.flush(1), false);
    now += 4 * DAY;
    assert.equal(await rep.flush(5000), true);
    assert.equal(rep.stats().droppedTooOld, 1);
    assert.equal(s.received.filter((r) => r.method === "POST").length, 1);
    s.statuses.push(400);
    rep.report("pages", "b");
    assert.equal(await rep.flush(5000), true);
    assert.equal(rep.stats().droppedRejected, 1);
    await rep.close(100);
  });
});

test("file store: committed reports survive a crash (no close) and are sent once; a torn temp file is ignored", async () => {
  await withServer(async (s) => {
    const dir = tmp();
    try {
      const a = await Reporter.open(opts(s, { store: new FileStore(dir), specs: [{ ...CMS, reports_per_day: 100 }] }));
      for (let i = 0; i < 10; i++) a.report("pages", `v${i}`);
      await a.commit(); // durable now; the process "dies" here without close()
      const secret = JSON.parse(readFileSync(join(dir, "state.json"), "utf8")).secret;
      const b = await Reporter.open(opts(s, { store: new FileStore(dir), specs: [{ ...CMS, reports_per_day: 100 }] }));
      assert.equal(b.stats().pending, 10);
      for (let i = 0; i < 91; i++) b.report("pages", `w${i}`);
      assert.equal(b.report("pages", "over").status, "budget_exceeded"); // 10 + 90 = 100: the ledger survived too
      assert.equal(await b.flush(5000), true);
      await b.close();
      const n = s.received.filter((r) => r.method === "POST").flatMap((p) => partsOf(p.body).map(batchInfo)).reduce((x, y) => x + y.n, 0);
      assert.equal(n, 100);
      assert.deepEqual(JSON.parse(readFileSync(join(dir, "state.json"), "utf8")).secret, secret);
      assert.deepEqual(readdirSync(dir).sort(), ["state.json"]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

test("two writers of one namespace cannot overspend: the commit re-checks the durable ledger", async () => {
  await withServer(async (s) => {
    const dir = tmp();
    try {
      const spec = { ...CMS, reports_per_day: 5 };
      const a = await Reporter.open(opts(s, { store: new FileStore(dir), specs: [spec] }));
      const b = await Reporter.open(opts(s, { store: new FileStore(dir), specs: [spec] }));
      for (let i = 0; i < 5; i++) assert.equal(a.report("pages", `a${i}`).status, "queued");
      for (let i = 0; i < 5; i++) assert.equal(b.report("pages", `b${i}`).status, "queued"); // b has not seen a's spends
      await a.commit();
      await b.commit();
      assert.equal(b.stats().droppedBudgetAtCommit, 5);
      assert.equal(b.stats().pending, 5);
      assert.equal(b.report("pages", "later").status, "budget_exceeded");
      await a.close(100);
      await b.close(100);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

test("secret sampling (sample_rate β): U = 53 CSPRNG bits kept per metric and day; takes part iff U < floor(β·2^53)", async () => {
  await withServer(async (s) => {
    const { ReplayRandom } = await import("../src/random.js");
    const spec = { ...CMS, reports_per_day: 10, sample_rate: 0.25 };
    // the draw's bytes: U = 0x3FF…F >> 11 decides; U just below floor(0.25·2^53) = 2^51 takes part
    const below = new Uint8Array(8);
    new DataView(below.buffer).setBigUint64(0, ((1n << 51n) - 1n) << 11n, true);
    const at = new Uint8Array(8);
    new DataView(at.buffer).setBigUint64(0, (1n << 51n) << 11n, true);
    for (const [bytes, want] of [[below, "queued"], [at, "not_sampled"]] as const) {
      const secret = new Uint8Array(32);
      const rng = new ReplayRandom(new Uint8Array([...secret, ...bytes, ...new Uint8Array(4096)]));
      const rep = await Reporter.open(opts(s, { specs: [spec], rng }));
      assert.equal(rep.report("pages", "a").status, want);
      assert.equal(rep.report("pages", "b").status, want); // the day's draw is kept
      if (want === "not_sampled") assert.equal(rep.budgetRemaining("pages"), 10); // nothing spent
      await rep.close(1);
    }
    // over many devices the share that takes part is β (binomial, z = 6); what each device queued is not
    // uploaded (the decision is the point: a commit to its store, no close() that would deliver it)
    const n = 2000;
    let part = 0;
    for (let i = 0; i < n; i++) {
      const rep = await Reporter.open(opts(s, { specs: [spec] }));
      if (rep.report("pages", "x").status === "queued") part += 1;
      await rep.commit();
    }
    assert.ok(Math.abs(part / n - 0.25) <= 6 * Math.sqrt((0.25 * 0.75) / n), `${part} of ${n}`);
    const bad = { ...CMS, sample_rate: 1.5 };
    await assert.rejects(Reporter.open(opts(s, { specs: [bad] })), /sample_rate must be a number in \(0, 1\]/);
  });
});

test("permanent RR: the daily ledger charges ε_irr per report (a changing value), as the Python SDK", async () => {
  await withServer(async (s) => {
    // rr at ε = 2: ε_irr ≈ 2.69, so 3 reports a day cost ≈ 8.07 > 8 (at ε_eff they would cost 6)
    const errors: UploadError[] = [];
    s.specs.set("flag", { ...RR(1, 2.0), reports_per_day: 3 });
    const rep = await Reporter.open(opts(s, { metrics: ["flag"], onError: (e) => errors.push(e) }));
    await rep.waitForSpecs(5000);
    const r = rep.report("flag", true);
    assert.equal(r.status, "policy_refused");
    assert.match(r.reason ?? "", /^daily_epsilon 8\.0\d/);
    await rep.close(1);
    s.specs.set("flag", { ...RR(2, 2.0), reports_per_day: 2 });
    const ok = await Reporter.open(opts(s, { metrics: ["flag"] }));
    await ok.waitForSpecs(5000);
    assert.equal(ok.report("flag", true).status, "queued");
    assert.equal(ok.budgetRemaining("flag"), 1);
    await ok.close(1);
  });
});

test("Node: an app that never calls close() still commits its reports when the event loop runs dry", async () => {
  const { spawnSync } = await import("node:child_process");
  const dir = tmp();
  try {
    const code = `
      import { FileStore } from ${JSON.stringify(join(process.cwd(), "dist", "src", "filestore.js"))};
      import { Reporter } from ${JSON.stringify(join(process.cwd(), "dist", "src", "reporter.js"))};
      const spec = ${JSON.stringify({ ...CMS, reports_per_day: 10 })};
      const rep = await Reporter.open({ endpoint: "http://127.0.0.1:9", token: "t", namespace: "x", store: new FileStore(${JSON.stringify(dir)}), specs: [spec] });
      rep.report("pages", "a"); rep.report("pages", "b");`;
    const r = spawnSync(process.execPath, ["--input-type=module", "-e", code], { encoding: "utf8", timeout: 20000 });
    assert.equal(r.status, 0, r.stderr);
    const state = JSON.parse(readFileSync(join(dir, "state.json"), "utf8"));
    assert.equal(state.reports.length + state.batches.reduce((a: number, b: { n: number }) => a + b.n, 0), 2);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("secret sampling across instances: one decision per metric and day, whoever draws first (two writers, one FileStore)", async () => {
  await withServer(async (s) => {
    const { stateFromJson } = await import("../src/state.js");
    const dir = tmp();
    try {
      const names = Array.from({ length: 12 }, (_, i) => `m${i}`);
      const specs = names.map((name) => ({ ...CMS, name, reports_per_day: 10, sample_rate: 0.5 }));
      const threshold = Math.floor(0.5 * 2 ** 53);
      let now = Date.UTC(2026, 0, 1);
      const a = await Reporter.open(opts(s, { store: new FileStore(dir), specs, now: () => now, commitDelay: 1000 }));
      const b = await Reporter.open(opts(s, { store: new FileStore(dir), specs, now: () => now, commitDelay: 1000 }));
      let disagreed = 0;
      for (let d = 0; d < 8; d++, now += DAY) {
        const day = Math.floor(now / DAY);
        // both draw before either commits; the committed draw decides for both
        const sa = names.map((m) => a.report(m, "x").status);
        const sb = names.map((m) => b.report(m, "y").status);
        disagreed += sa.filter((st, i) => st !== sb[i]).length;
        await (d % 2 ? b : a).commit();
        await (d % 2 ? a : b).commit();
        const durable = stateFromJson(readFileSync(join(dir, "state.json"), "utf8"));
        for (const [i, m] of names.entries()) {
          const entry = durable.sampling?.[m];
          assert.equal(entry?.day, day, `${m}: the day's draw is stored`);
          const sent = durable.reports.filter((r) => r.metric === m && r.day === day).length;
          // an instance that drew "not sampled" sent nothing; one that drew "sampled" is overruled by a stored "not sampled"
          const queued = [sa[i], sb[i]].filter((st) => st === "queued").length;
          assert.equal(sent, (entry?.draw ?? 0) < threshold ? queued : 0, `${m} day ${d}: reports applied against the stored decision`);
        }
        // once committed, both instances follow the stored decision
        for (const m of names) assert.equal(a.report(m, "z").status === "not_sampled", b.report(m, "z").status === "not_sampled");
        await a.commit();
        await b.commit();
      }
      // P(no disagreement in 96 metric-days at β = 0.5) = 2^-96; P(no overruled report) = 0.75^96 ≈ 1e-12
      assert.ok(disagreed > 0, "the instances drew differently at least once (else the test proves nothing)");
      assert.equal(a.stats().droppedNotSampledAtCommit + b.stats().droppedNotSampledAtCommit > 0, true);
      await a.close(1);
      await b.close(1);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

test("secret sampling: a draw of an earlier day (a late commit) never replaces the later day's draw", async () => {
  const { applyOp, emptyState } = await import("../src/state.js");
  const st = emptyState(new Uint8Array(32));
  applyOp(st, { kind: "sample", metric: "m", day: 20, draw: 7 });
  applyOp(st, { kind: "sample", metric: "m", day: 19, draw: 9 });
  assert.deepEqual(st.sampling?.["m"], { day: 20, draw: 7 });
  applyOp(st, { kind: "sample", metric: "m", day: 20, draw: 11 }); // the first draw stored for the day wins
  assert.deepEqual(st.sampling?.["m"], { day: 20, draw: 7 });
  // a report decided with its own draw is judged by the stored one
  const report = { kind: "report" as const, metric: "m", version: 1, day: 20, eps: 1, reportsPerDay: 10, dailyEpsilon: 10, lifetime: null, memoKey: null, record: new Uint8Array(1) };
  assert.equal(applyOp(st, { ...report, sample: { draw: 5, threshold: 7 } }), "not_sampled");
  assert.equal(st.reports.length, 0);
  assert.equal(applyOp(st, { ...report, sample: { draw: 9, threshold: 8 } }), "queued");
  assert.equal(st.reports.length, 1);
});

test("server down: the network error names the endpoint (origin and path), never the token or userinfo", async () => {
  const errors: UploadError[] = [];
  const refuse = (() => Promise.reject(new TypeError("fetch failed"))) as typeof fetch;
  const rep = await Reporter.open({
    endpoint: "https://user:secret@ingest.example:8443/telemetry/?k=v", token: "app-token", namespace: "t",
    store: new MemoryStore(), start: false, lifecycle: false, specs: [CMS], fetch: refuse, backoffBase: 1, backoffCap: 1,
    onError: (e) => errors.push(e),
  });
  rep.report("pages", "a");
  assert.equal(await rep.flush(50), false);
  assert.ok(errors.length > 0);
  for (const e of errors) {
    assert.match(e.message, /^network error reaching https:\/\/ingest\.example:8443\/telemetry: /);
    assert.ok(!e.message.includes("secret") && !e.message.includes("app-token") && !e.message.includes("k=v"));
  }
  await rep.close(10);
});

test("breakdowns: the profile goes with each batch of a breakdown metric, undeclared values as 'other', none elsewhere", async () => {
  await withServer(async (s) => {
    const by = { ...CMS, name: "by", breakdown: ["os", "app_version"], profile: { os: ["android", "web"], app_version: ["2.1"] } };
    const rep = await Reporter.open(opts(s, { specs: [by, { ...CMS, name: "flat" }], profile: { os: "web", app_version: "9.9-rare", arch: "x" } }));
    rep.report("by", "v");
    rep.report("flat", "v");
    assert.equal(await rep.flush(5000), true);
    const bodies = s.received.filter((r) => r.method === "POST").flatMap((r) => (r.body.subarray(0, 4).toString() === "LDPU" ? partsOf(r.body) : [r.body]));
    const of = (m: string) => bodies.find((b) => batchInfo(b).metric === m) as Buffer;
    assert.equal(of("by").readUInt16LE(6), 1);
    assert.match(of("by").toString("latin1"), /os=web,app_version=other/);
    assert.doesNotMatch(of("by").toString("latin1"), /rare|arch/);
    assert.equal(of("flat").readUInt16LE(6), 0);
    await rep.close(100);
  });
  await assert.rejects(Reporter.open({ endpoint: "http://127.0.0.1:9", token: "t", namespace: "x", store: new MemoryStore(), profile: { "Bad Dim": "x" } }), /profile dimension/);
});
