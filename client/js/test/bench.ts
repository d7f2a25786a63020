/**
 * Node benchmark of the TS SDK (tests/bench/bench_js_sdk.py runs it): one JSON line per figure.
 * cms with k = 2048, m = 1024, ε = 4 (prob_bits chosen as the registry would: 1% of ε).
 */
import { loadavg } from "node:os";
import { performance } from "node:perf_hooks";
import { privatize, privatizeBatch } from "../src/mechanisms.js";
import { paramsFromDict } from "../src/params.js";
import { CryptoRandom } from "../src/random.js";
import { Reporter } from "../src/reporter.js";
import { MemoryStore } from "../src/store.js";

const emit = (o: Record<string, unknown>): void => console.log(JSON.stringify({ sdk: "ts", node: process.version, ...o }));
const params = paramsFromDict({ mechanism: "cms", epsilon: 4.0, k: 2048, m: 1024, hash_seed: 0 });
const rng = new CryptoRandom();
const values = Array.from({ length: 500 }, (_, i) => `https://example.com/page/${i}`);

function pct(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
}

async function main(): Promise<void> {
  if (params.mechanism !== "cms") throw new Error();
  for (let i = 0; i < 5000; i++) privatize(values[i % 500], params, rng); // warm up
  const single: number[] = [];
  for (let i = 0; i < 20000; i++) {
    const t = performance.now();
    privatize(values[i % 500], params, rng);
    single.push((performance.now() - t) * 1000);
  }
  emit({ figure: "privatize_cms_m1024_p50_us", value: +pct(single, 0.5).toFixed(2), p90: +pct(single, 0.9).toFixed(2), prob_bits: params.probBits, goal: 30 });
  const n = 50000;
  const rates: number[] = [];
  const cpuRates: number[] = [];
  let t: number;
  let s: number;
  for (let round = 0; round < 7; round++) {
    t = performance.now();
    const c = process.cpuUsage();
    for (let at = 0; at < n; at += values.length) privatizeBatch(values, params, rng);
    const used = process.cpuUsage(c);
    rates.push(n / ((performance.now() - t) / 1000));
    cpuRates.push(n / ((used.user + used.system) / 1e6));
  }
  // wall-clock rate, and the rate per CPU-second of this process (on a loaded shared machine the wall clock
  // also counts the time the OS gave other processes)
  emit({ figure: "privatize_cms_m1024_reports_per_s", value: Math.round(pct(rates, 0.5)), best: Math.round(Math.max(...rates)), per_cpu_second: Math.round(pct(cpuRates, 0.5)), rounds: 7, n_per_round: n, loop: "privatizeBatch over 500 distinct values (each hashed once per call)", goal: 300000, goal_measure: "per_cpu_second (the machine is shared and loaded; wall counts other processes' time)", loadavg: loadavg().map((x) => +x.toFixed(2)) });
  // baseline, same run: only the CSPRNG bytes one report needs (9 + prob_bits·m/8), from the same pool
  const buf = new Uint8Array(9 + params.probBits * (params.m / 8));
  t = performance.now();
  for (let i = 0; i < n; i++) rng.fill(buf);
  s = (performance.now() - t) / 1000;
  emit({ figure: "baseline_csprng_bytes_per_report_per_s", value: Math.round(n / s), bytes: buf.length });
  const rep = await Reporter.open({
    endpoint: "http://127.0.0.1:9",
    token: "bench",
    namespace: "bench",
    store: new MemoryStore(),
    specs: [{ name: "bench.cms", version: 1, reports_per_day: 10000, params: { mechanism: "cms", epsilon: 4.0, k: 2048, m: 1024, hash_seed: 0, prob_bits: params.probBits } }],
    start: false,
    lifecycle: false,
    maxQueue: 1000000,
  });
  const lat: number[] = [];
  for (let i = 0; i < 10000; i++) {
    const a = performance.now();
    rep.report("bench.cms", values[i % 500]);
    lat.push((performance.now() - a) * 1000);
  }
  emit({ figure: "report_node_p50_us", value: +pct(lat, 0.5).toFixed(2), p90: +pct(lat, 0.9).toFixed(2), note: "memo hits after the first 500 values" });
  await rep.commit();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
