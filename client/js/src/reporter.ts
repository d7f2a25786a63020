/**
 * The Reporter: privatize on the device, queue durably, upload in the background. Mirrors the Python SDK's
 * `ldptel.client.sdk.reporter.Reporter` (statuses, policy, ledgers, memo, batches, multi-part uploads,
 * retries with the same batch id, retry horizon).
 *
 * `report(metric, value)` is synchronous, never throws and never waits on the network or the disk: it decides
 * against the in-memory copy of the device state, privatizes with `crypto.getRandomValues`, and returns a
 * {@link ReportResult}. The decision is committed to the store (IndexedDB / file) within `commitDelay` ms
 * (default 250, at most 1000): a crash or reload inside that window loses those reports *and* their budget
 * spends together (nothing of them was sent); everything committed survives and is sent exactly once (the
 * server dedupes the batch id; a batch older than the retry horizon is dropped, never sent late).
 */
import { checkProfile, encodeProfile } from "./breakdown.js";
import { InvalidParameterError, InvalidValueError } from "./errors.js";
import { toHex } from "./bytes.js";
import { memoKey } from "./keyed.js";
import { columns, clips, packReport, privatize, privatizePermanent, unpackReport, valueKey, type Report } from "./mechanisms.js";
import { PrivacyPolicy, type PrivacyPolicyOptions } from "./policy.js";
import { defaultRandom, randomBytes, uniformFloat, type RandomSource } from "./random.js";
import { specFromBody, specFromDict, type MetricSpec } from "./spec.js";
import {
  advanceDay,
  applyOp,
  applyOps,
  cloneState,
  emptyState,
  pendingCount,
  refusal,
  type Op,
  type ReportOp,
  type SampleOp,
  type State,
  type StoredBatch,
} from "./state.js";
import type { Store } from "./store.js";
import {
  BATCH_AGE_HEADER,
  DEFAULT_MAX_BATCH_REPORTS,
  DEFAULT_RETRY_HORIZON_DAYS,
  MAX_RETRY_HORIZON_DAYS,
  MAX_UPLOAD_PARTS,
  NAME_RE,
  NAME_RULE,
  encodeBatch,
  encodeUpload,
  uploadSize,
} from "./wire.js";

export type Status =
  | "queued"
  | "budget_exceeded"
  | "policy_refused"
  | "queue_full"
  | "no_spec"
  | "invalid_value"
  | "storage_error"
  | "closed"
  | "not_sampled";

export interface ReportResult {
  status: Status;
  metric: string;
  version?: number;
  /** The privatized report queued (only when queued). */
  report?: Report;
  memoized?: boolean;
  /** Which bound refused a policy_refused report; what was wrong with an invalid value. */
  reason?: string;
}

export type Outcome = "ack" | "stale" | "auth" | "retry" | "rejected" | "too_old" | "no_spec" | "policy" | "storage_error" | "dropped_budget";

/** A delivery problem, passed to `onError` (never thrown). Carries no raw value. */
export class UploadError extends Error {
  override name = "UploadError";
  constructor(
    message: string,
    readonly outcome: Outcome,
    readonly extra: { status?: number; metric?: string; version?: number; n?: number; batchId?: string; reason?: string } = {},
  ) {
    super(message);
  }
}

export interface ReporterStats {
  pending: number;
  queued: number;
  memoized: number;
  delivered: number;
  refusedBudget: number;
  refusedPolicy: number;
  droppedQueueFull: number;
  droppedRejected: number;
  droppedStale: number;
  droppedTooOld: number;
  /** Reports dropped at commit because another tab/process had spent the budget meanwhile. */
  droppedBudgetAtCommit: number;
  /** Reports dropped at commit because another tab/process had drawn the day's sampling decision first: not sampled. */
  droppedNotSampledAtCommit: number;
  invalidValue: number;
  notSampled: number;
  noSpec: number;
  retries: number;
  clipped: number;
}

export interface ReporterOptions {
  /** Base URL of the ingest service. */
  endpoint: string;
  /** The app's bearer token (public in a web page: see docs/web-sdk.md for what it does and does not allow). */
  token: string;
  /** Storage namespace: one device identity (secret, ledgers, queue) per namespace. */
  namespace: string;
  /** Where the state lives: IndexedDB in browsers (default), `FileStore` in Node (`@ldptel/client/node`). */
  store?: Store;
  policy?: PrivacyPolicy | PrivacyPolicyOptions;
  batchSize?: number;
  uploadParts?: number;
  /** ms between uploads of partial batches. */
  flushInterval?: number;
  maxQueue?: number;
  /** Pinned spec JSON objects (never fetched, not checked against the policy). */
  specs?: Record<string, unknown>[];
  /** Metrics whose specs are fetched at start-up. */
  metrics?: string[];
  onError?: (e: UploadError) => void;
  /** ms since the epoch. */
  now?: () => number;
  fetch?: typeof fetch;
  /** ms between report() and the durable commit of its decision (≤ 1000). */
  commitDelay?: number;
  retryHorizonDays?: number;
  backoffBase?: number;
  backoffCap?: number;
  specTtl?: number;
  /** Run the background upload timer (false: only flush() uploads). */
  start?: boolean;
  /** Flush on pagehide / visibilitychange:hidden with fetch keepalive (browsers; default true). */
  lifecycle?: boolean;
  rng?: RandomSource;
  /** This device's system profile for breakdowns (`{ os: "web", app_version: "2.1" }`), given once. Each batch of a
   * metric broken down by some of these dimensions carries their values **in clear** (not privatized:
   * docs/breakdowns.md); a value the spec does not declare, or a missing dimension, is sent as "other". */
  profile?: Record<string, string>;
}

const DAY_MS = 86400000;
const MAX_UPLOAD_BYTES = 1 << 20;
const KEEPALIVE_BYTES = 60000; // fetch keepalive's in-flight limit is 64 KiB per page
const NO_SPEC_RETRY_MS = 60000;
const MAX_RETRY_AFTER_MS = 3600000;

function utcDay(ms: number): number {
  return Math.floor(ms / DAY_MS);
}

function isoDay(ms: number): string {
  return new Date(utcDay(ms) * DAY_MS).toISOString().slice(0, 10);
}

function ageDays(day: string, ms: number): number {
  const d = Date.parse(`${day}T00:00:00Z`);
  return Number.isFinite(d) ? Math.max(0, utcDay(ms) - Math.floor(d / DAY_MS)) : 0;
}

function intOpt(name: string, v: number | undefined, def: number, lo: number, hi: number): number {
  const x = v ?? def;
  if (!Number.isInteger(x) || x < lo || x > hi) throw new InvalidParameterError(name, `an integer in [${lo}, ${hi}]`, x);
  return x;
}

function posOpt(name: string, v: number | undefined, def: number): number {
  const x = v ?? def;
  if (typeof x !== "number" || !(x > 0)) throw new InvalidParameterError(name, "a number > 0", x);
  return x;
}

type Cost = { refusal: string | null };

export class Reporter {
  private live: State;
  private pending: (ReportOp | SampleOp)[] = [];
  private specOps: Op[] = [];
  private commitTimer: ReturnType<typeof setTimeout> | null = null;
  private cycleTimer: ReturnType<typeof setTimeout> | null = null;
  private committing: Promise<void> = Promise.resolve();
  private cycling: Promise<void> | null = null;
  private closed = false;
  private readonly pinned = new Map<string, MetricSpec>();
  private readonly parsed = new Map<string, MetricSpec | null>();
  private readonly costs = new Map<string, Cost>();
  private readonly told = new Set<string>();
  private readonly wanted = new Set<string>();
  private readonly refresh = new Set<string>();
  private readonly failedAt = new Map<string, number>();
  private readonly counters = {
    queued: 0,
    memoized: 0,
    delivered: 0,
    refusedBudget: 0,
    refusedPolicy: 0,
    droppedQueueFull: 0,
    droppedRejected: 0,
    droppedStale: 0,
    droppedTooOld: 0,
    droppedBudgetAtCommit: 0,
    droppedNotSampledAtCommit: 0,
    invalidValue: 0,
    notSampled: 0,
    noSpec: 0,
    retries: 0,
    clipped: 0,
  };
  private failures = 0;
  private retryAt = 0;
  private nextFlushAt: number;
  private uploadParts: number;
  private readonly endpoint: string;
  /** The endpoint as errors name it: origin and path, never userinfo or a query. */
  private readonly where: string;
  private readonly token: string;
  private readonly policy: PrivacyPolicy;
  private readonly batchSize: number;
  private readonly flushInterval: number;
  private readonly maxQueue: number;
  private readonly commitDelay: number;
  private readonly horizon: number;
  private readonly backoffBase: number;
  private readonly backoffCap: number;
  private readonly specTtl: number;
  private readonly now: () => number;
  private readonly fetchFn: typeof fetch;
  private readonly rng: RandomSource;
  private readonly onError: ((e: UploadError) => void) | undefined;
  private readonly profile: Record<string, string>;
  private readonly unlisten: (() => void)[] = [];

  private constructor(
    private readonly store: Store,
    state: State,
    opts: ReporterOptions,
  ) {
    this.live = cloneState(state);
    this.endpoint = opts.endpoint.replace(/\/+$/, "");
    this.where = safeWhere(this.endpoint);
    this.token = opts.token;
    this.policy = opts.policy instanceof PrivacyPolicy ? opts.policy : new PrivacyPolicy(opts.policy ?? {});
    this.batchSize = intOpt("batchSize", opts.batchSize, 256, 1, DEFAULT_MAX_BATCH_REPORTS);
    this.uploadParts = intOpt("uploadParts", opts.uploadParts, 16, 1, MAX_UPLOAD_PARTS);
    this.flushInterval = posOpt("flushInterval", opts.flushInterval, 30000);
    this.maxQueue = intOpt("maxQueue", opts.maxQueue, 10000, 1, 2 ** 31);
    this.commitDelay = intOpt("commitDelay", opts.commitDelay, 250, 0, 1000);
    this.horizon = intOpt("retryHorizonDays", opts.retryHorizonDays, DEFAULT_RETRY_HORIZON_DAYS, 0, MAX_RETRY_HORIZON_DAYS);
    this.backoffBase = posOpt("backoffBase", opts.backoffBase, 1000);
    this.backoffCap = posOpt("backoffCap", opts.backoffCap, 300000);
    this.specTtl = posOpt("specTtl", opts.specTtl, 3600000);
    this.now = opts.now ?? (() => Date.now());
    this.fetchFn = opts.fetch ?? ((...args: Parameters<typeof fetch>) => fetch(...args));
    this.rng = opts.rng ?? defaultRandom();
    this.onError = opts.onError;
    this.profile = checkProfile(opts.profile);
    this.nextFlushAt = this.now() + this.flushInterval;
    for (const json of opts.specs ?? []) {
      const spec = specFromDict(json);
      this.pinned.set(spec.name, spec);
    }
    for (const name of opts.metrics ?? []) {
      if (typeof name !== "string" || !NAME_RE.test(name)) throw new InvalidParameterError("metrics", `metric names (${NAME_RULE})`, name);
      if (this.pinned.has(name)) continue;
      const cur = this.live.current[name];
      if (!cur) this.wanted.add(name);
      else if (this.now() - cur.fetched > this.specTtl) this.refresh.add(name); // stale cache: refetched at start

    }
  }

  /** Open (or create) the device state of `opts.namespace` and start the background uploads. */
  static async open(opts: ReporterOptions): Promise<Reporter> {
    if (typeof opts.endpoint !== "string" || !/^https?:\/\/[^/]/.test(opts.endpoint)) {
      throw new InvalidParameterError("endpoint", "an http:// or https:// URL", opts.endpoint);
    }
    if (typeof opts.token !== "string" || opts.token === "") throw new InvalidParameterError("token", "a non-empty string", "");
    if (typeof opts.namespace !== "string" || !/^[A-Za-z0-9_.-]{1,128}$/.test(opts.namespace)) {
      throw new InvalidParameterError("namespace", "1-128 characters of A-Z, a-z, 0-9, '_', '.', '-'", opts.namespace);
    }
    checkProfile(opts.profile); // before anything is opened
    let store = opts.store;
    if (!store) {
      if (typeof indexedDB === "undefined") {
        throw new InvalidParameterError("store", "a Store (in Node: new FileStore(dir) from '@ldptel/client/node')", undefined);
      }
      const { IndexedDbStore } = await import("./idb.js");
      store = await IndexedDbStore.open(opts.namespace);
    }
    const rng = opts.rng ?? defaultRandom();
    const { state } = await store.transact((old) => ({ state: old ?? emptyState(randomBytes(32, rng)), result: null }));
    const rep = new Reporter(store, state, opts);
    if (opts.start !== false) rep.schedule(0);
    if (opts.lifecycle !== false) rep.listen();
    return rep;
  }

  // ------------------------------------------------------------------------------------------ public
  /** Privatize `value` for `metric` now and queue it. Synchronous; never throws; never waits. */
  report(metric: string, value: unknown): ReportResult {
    try {
      return this.reportInner(metric, value);
    } catch (e) {
      if (e instanceof InvalidValueError) {
        this.counters.invalidValue += 1;
        return { status: "invalid_value", metric, reason: e.message };
      }
      this.tell(new UploadError(`report() failed: ${String(e)}`, "storage_error", { metric }));
      return { status: "storage_error", metric };
    }
  }

  private reportInner(metric: string, value: unknown): ReportResult {
    if (this.closed) return { status: "closed", metric };
    const spec = this.specFor(metric);
    if (!spec) {
      this.counters.noSpec += 1;
      if (!this.wanted.has(metric) && typeof metric === "string" && NAME_RE.test(metric)) {
        this.wanted.add(metric);
        this.schedule(0);
      }
      return { status: "no_spec", metric };
    }
    const pinned = this.pinned.get(metric) === spec;
    const cost = this.costOf(spec);
    if (cost.refusal && !pinned) return this.refuse(spec, cost.refusal);
    if (pendingCount(this.live) >= this.maxQueue) {
      this.counters.droppedQueueFull += 1;
      return { status: "queue_full", metric, version: spec.version };
    }
    const now = this.now();
    const day = Math.max(utcDay(now), this.live.highDay);
    const key = valueKey(value, spec.params); // InvalidValueError before anything is spent
    const sample = this.sampleOf(metric, day, spec.sampleRate);
    if (sample && sample.draw >= sample.threshold) {
      this.counters.notSampled += 1;
      return { status: "not_sampled", metric, version: spec.version };
    }
    const op: ReportOp = {
      kind: "report",
      metric,
      version: spec.version,
      day,
      eps: spec.reportCharge,
      reportsPerDay: spec.reportsPerDay,
      dailyEpsilon: spec.dailyEpsilon,
      lifetime: spec.permanent
        ? { fp: toHex(spec.fingerprint), eps: spec.longitudinalEpsilon, cap: pinned ? Infinity : this.policy.maxLongitudinalEpsilon }
        : null,
      memoKey: null,
      record: new Uint8Array(0),
      sample,
    };
    const why = refusal(this.live, op);
    if (why === "budget") {
      this.counters.refusedBudget += 1;
      return { status: "budget_exceeded", metric, version: spec.version };
    }
    if (why === "lifetime") {
      return this.refuse(spec, `longitudinal_epsilon: a new privatization would take the lifetime ε∞ of a value above the device policy's maximum ${this.policy.maxLongitudinalEpsilon}`);
    }
    const cols = columns(spec.params);
    let report: Report;
    let memoized = false;
    if (spec.permanent) {
      report = privatizePermanent(value, spec.params, this.live.secret, metric, spec.fingerprint, this.rng);
    } else {
      op.memoKey = toHex(memoKey(this.live.secret, metric, spec.fingerprint, day, key));
      const prior = this.live.memo[op.memoKey];
      if (prior && prior.day >= day) {
        report = unpackReport(prior.record, cols);
        memoized = true;
      } else report = privatize(value, spec.params, this.rng);
    }
    op.record = packReport(report, cols);
    applyOp(this.live, op);
    this.pending.push(op);
    this.counters.queued += 1;
    if (memoized) this.counters.memoized += 1;
    if (clips(value, spec.params)) this.counters.clipped += 1;
    this.scheduleCommit();
    if (this.live.reports.length >= this.batchSize) this.schedule(this.commitDelay);
    return { status: "queued", metric, version: spec.version, report, memoized };
  }

  /**
   * Secret sampling (the Python SDK's rule, `ldptel.client.sdk.sampling`): the first report of a metric on a
   * budget day draws U = 53 CSPRNG bits (8 bytes little-endian >> 11) and keeps it for the day; the device
   * takes part iff U < floor(β·2^53). β = 1 draws nothing (null). The report op carries the draw: its commit
   * decides again with the durable draw of the day, so another tab/process that drew first decides for all.
   */
  private sampleOf(metric: string, day: number, rate: number): { draw: number; threshold: number } | null {
    if (rate >= 1) return null;
    advanceDay(this.live, day);
    const prior = this.live.sampling?.[metric];
    let draw: number;
    if (prior && prior.day === day) draw = prior.draw;
    else {
      const b = randomBytes(8, this.rng);
      const lo = (b[0] ?? 0) | ((b[1] ?? 0) << 8) | ((b[2] ?? 0) << 16) | ((b[3] ?? 0) * 16777216);
      const hi = (b[4] ?? 0) | ((b[5] ?? 0) << 8) | ((b[6] ?? 0) << 16) | ((b[7] ?? 0) * 16777216);
      draw = (hi >>> 0) * 2097152 + Math.floor((lo >>> 0) / 2048); // (hi·2^32 + lo) >> 11, exact below 2^53
      const op: SampleOp = { kind: "sample", metric, day, draw };
      applyOp(this.live, op);
      this.pending.push(op);
      this.scheduleCommit();
    }
    return { draw, threshold: Math.floor(rate * 2 ** 53) };
  }

  /** Upload everything queued now; true when nothing is left unacknowledged within `timeoutMs`. */
  async flush(timeoutMs = 30000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    await this.commit();
    while (!this.closed || this.pending.length) {
      await this.cycle(true, false);
      if (pendingCount(this.live) === 0) return true;
      const wait = Math.max(this.retryAt - this.now(), 0);
      if (Date.now() + wait > deadline) return false;
      if (wait > 0) await new Promise((r) => setTimeout(r, Math.min(wait, 1000)));
      if (Date.now() > deadline) return false;
    }
    return pendingCount(this.live) === 0;
  }

  /** Wait until the specs of declared/requested metrics are fetched or failed; true when all are known. */
  async waitForSpecs(timeoutMs = 10000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      await this.fetchSpecs(true);
      if ([...this.wanted].every((m) => this.specFor(m)) && this.refresh.size === 0) return true;
      await new Promise((r) => setTimeout(r, 50));
    }
    return [...this.wanted].every((m) => this.specFor(m));
  }

  /** Commit, try to deliver what is queued (up to `timeoutMs`), stop the timers, close the store. */
  async close(timeoutMs = 10000): Promise<void> {
    if (this.closed) return;
    try {
      await this.commit();
      if (pendingCount(this.live) > 0) await this.flush(timeoutMs);
    } finally {
      this.closed = true;
      if (this.cycleTimer) clearTimeout(this.cycleTimer);
      if (this.commitTimer) clearTimeout(this.commitTimer);
      for (const f of this.unlisten) f();
      await this.commit();
      if (this.cycling) await this.cycling;
      await this.store.close();
    }
  }

  stats(): ReporterStats {
    return { pending: pendingCount(this.live), ...this.counters };
  }

  /** Reports the ledger still allows for `metric` today (null when its spec is unknown). */
  budgetRemaining(metric: string): number | null {
    const spec = this.specFor(metric);
    if (!spec) return null;
    if (this.costOf(spec).refusal && this.pinned.get(metric) !== spec) return 0;
    const day = Math.max(utcDay(this.now()), this.live.highDay);
    const row = this.live.ledger[metric];
    let count = row && row.day === day ? row.count : 0;
    let eps = row && row.day === day ? row.eps : 0;
    let left = 0;
    while (count + 1 <= spec.reportsPerDay && eps + spec.reportCharge <= spec.dailyEpsilon * (1 + 1e-9)) {
      left += 1;
      count += 1;
      eps += spec.reportCharge;
    }
    return left;
  }

  /** Make every decision so far durable now (report() does it within commitDelay by itself). */
  async commit(): Promise<void> {
    const run = this.committing.then(() => this.commitNow());
    this.committing = run.catch(() => undefined);
    return run;
  }

  // -------------------------------------------------------------------------------------- internals
  private async commitNow(): Promise<void> {
    if (this.commitTimer) {
      clearTimeout(this.commitTimer);
      this.commitTimer = null;
    }
    const ops: Op[] = [...this.specOps, ...this.pending];
    if (ops.length === 0) return;
    this.specOps = [];
    this.pending = [];
    try {
      const { state, result } = await this.store.transact((old) => {
        const s = old ?? emptyState(this.live.secret);
        return { state: s, result: applyOps(s, ops) };
      });
      this.counters.droppedBudgetAtCommit += result.dropped;
      this.counters.droppedNotSampledAtCommit += result.notSampled;
      this.counters.queued -= result.dropped + result.notSampled;
      this.rebase(state);
    } catch (e) {
      this.pending = [...(ops.filter((o) => o.kind !== "spec") as (ReportOp | SampleOp)[]), ...this.pending];
      this.specOps = [...ops.filter((o) => o.kind === "spec"), ...this.specOps];
      this.tell(new UploadError(`could not store reports in ${this.store.where}: ${String(e)}`, "storage_error"));
      throw e;
    }
  }

  /** The in-memory state becomes the durable one plus the decisions not yet committed. */
  private rebase(durable: State): void {
    const live = cloneState(durable);
    applyOps(live, [...this.specOps, ...this.pending]);
    this.live = live;
    this.parsed.clear();
  }

  private scheduleCommit(): void {
    if (this.commitTimer || this.closed) return;
    this.commitTimer = setTimeout(() => {
      this.commitTimer = null;
      this.commit().catch(() => undefined);
    }, this.commitDelay);
    unref(this.commitTimer);
  }

  private schedule(ms: number): void {
    if (this.closed) return;
    if (this.cycleTimer) clearTimeout(this.cycleTimer);
    this.cycleTimer = setTimeout(() => {
      this.cycleTimer = null;
      this.cycle(false, false)
        .catch(() => undefined)
        .finally(() => {
          const now = this.now();
          const next = this.retryAt > now ? Math.max(this.retryAt, this.nextFlushAt) : this.nextFlushAt;
          this.schedule(Math.max(next - now, 10));
        });
    }, ms);
    unref(this.cycleTimer);
  }

  private listen(): void {
    const proc = (globalThis as { process?: { once?: (e: string, f: () => void) => void; off?: (e: string, f: () => void) => void } }).process;
    if (proc && typeof proc.once === "function") {
      // Node: commit what report() decided when the event loop runs dry (an app that forgot close())
      const onExit = (): void => void this.commit().catch(() => undefined);
      proc.once("beforeExit", onExit);
      this.unlisten.push(() => proc.off?.("beforeExit", onExit));
    }
    const doc = (globalThis as { document?: Document }).document;
    const win = (globalThis as { addEventListener?: Window["addEventListener"]; removeEventListener?: Window["removeEventListener"] });
    if (!doc || typeof win.addEventListener !== "function") return;
    const onHide = (): void => {
      if (doc.visibilityState === "hidden") void this.commit().then(() => this.cycle(true, true)).catch(() => undefined);
    };
    const onPageHide = (): void => void this.commit().then(() => this.cycle(true, true)).catch(() => undefined);
    doc.addEventListener("visibilitychange", onHide);
    win.addEventListener("pagehide", onPageHide);
    this.unlisten.push(() => doc.removeEventListener("visibilitychange", onHide));
    this.unlisten.push(() => win.removeEventListener?.("pagehide", onPageHide));
  }

  private tell(e: UploadError): void {
    if (!this.onError) return;
    try {
      this.onError(e);
    } catch {
      // the app's callback must not break the SDK
    }
  }

  private refuse(spec: MetricSpec, reason: string): ReportResult {
    this.counters.refusedPolicy += 1;
    const key = `${spec.name}/${spec.version}/${reason.split(" ")[0]}`;
    if (!this.told.has(key)) {
      this.told.add(key);
      this.tell(new UploadError(`the served spec of '${spec.name}' v${spec.version} is refused: ${reason}; nothing is reported`, "policy", {
        metric: spec.name,
        version: spec.version,
        reason,
      }));
    }
    return { status: "policy_refused", metric: spec.name, version: spec.version, reason };
  }

  private costOf(spec: MetricSpec): Cost {
    const key = `${spec.name}/${spec.version}`;
    let c = this.costs.get(key);
    if (!c) {
      c = { refusal: this.policy.refusal(spec.effectiveEpsilon, spec.dailyEpsilon, spec.longitudinalEpsilon) };
      this.costs.set(key, c);
    }
    return c;
  }

  /** The spec report() uses: pinned, else the current cached one (marked for refresh past its TTL). */
  private specFor(metric: string): MetricSpec | null {
    const pinned = this.pinned.get(metric);
    if (pinned) return pinned;
    const cur = this.live.current[metric];
    if (!cur) return null;
    if (this.now() - cur.fetched > this.specTtl) this.refresh.add(metric);
    return this.specOf(metric, cur.version);
  }

  /** Any version a queued report was privatized with. */
  private specOf(metric: string, version: number): MetricSpec | null {
    const pinned = this.pinned.get(metric);
    if (pinned && pinned.version === version) return pinned;
    const key = `${metric}/${version}`;
    if (this.parsed.has(key)) return this.parsed.get(key) ?? null;
    const json = this.live.specs[key];
    let spec: MetricSpec | null = null;
    if (json) {
      try {
        spec = specFromDict(json);
      } catch {
        spec = null;
      }
    }
    this.parsed.set(key, spec);
    return spec;
  }

  private async request(method: string, path: string, body?: Uint8Array, headers: Record<string, string> = {}, keepalive = false): Promise<Response> {
    const init: RequestInit = {
      method,
      headers: { Authorization: `Bearer ${this.token}`, Accept: "application/json", ...headers },
      credentials: "omit",
      keepalive,
    };
    if (body) {
      (init.headers as Record<string, string>)["Content-Type"] = "application/octet-stream";
      init.body = body as unknown as BodyInit;
    }
    return this.fetchFn(this.endpoint + path, init);
  }

  private async fetchSpecs(force: boolean): Promise<void> {
    const now = this.now();
    const todo = [...this.wanted].filter((m) => !this.specFor(m) && (force || now - (this.failedAt.get(m) ?? -Infinity) > NO_SPEC_RETRY_MS));
    for (const m of [...this.refresh]) if (!todo.includes(m)) todo.push(m);
    for (const metric of todo) {
      this.refresh.delete(metric);
      let why: string;
      try {
        const resp = await this.request("GET", `/v1/metrics/${encodeURIComponent(metric)}`);
        const body: unknown = await resp.json().catch(() => null);
        const spec = resp.status === 200 ? specFromBody(body, metric) : null;
        if (spec) {
          this.adopt(spec);
          continue;
        }
        why = `no spec for '${metric}': the server answered HTTP ${resp.status} without a usable spec`;
      } catch (e) {
        why = `could not fetch the spec of '${metric}' from ${this.where}: ${String(e)}`;
      }
      this.failedAt.set(metric, this.now());
      this.tell(new UploadError(why, "no_spec", { metric }));
    }
    if (this.specOps.length) await this.commit();
  }

  private adopt(spec: MetricSpec): void {
    const op: Op = { kind: "spec", json: spec.json, metric: spec.name, version: spec.version, current: true, fetched: this.now() };
    applyOp(this.live, op);
    this.specOps.push(op);
    this.parsed.delete(`${spec.name}/${spec.version}`);
  }

  /** One upload round (see the module docs of the Python uploader): specs, batches, uploads, settlement. */
  private cycle(force: boolean, keepalive: boolean): Promise<void> {
    const run = (this.cycling ?? Promise.resolve()).then(() => this.cycleNow(force, keepalive));
    this.cycling = run.catch(() => undefined);
    return run;
  }

  private async cycleNow(force: boolean, keepalive: boolean): Promise<void> {
    await this.fetchSpecs(false);
    const now = this.now();
    if (now < this.retryAt) return;
    const due = force || now >= this.nextFlushAt;
    if (due) this.nextFlushAt = now + this.flushInterval;
    await this.commit();
    if (this.live.reports.length > 0 && (due || this.live.reports.length >= this.batchSize)) await this.formBatches(due);
    for (const group of this.plan(keepalive)) {
      if (!(await this.send(group, keepalive))) break;
    }
  }

  private async formBatches(partial: boolean): Promise<void> {
    const day = isoDay(this.now());
    const { state } = await this.store.transact((old) => {
      const s = old ?? emptyState(this.live.secret);
      const groups = new Map<string, number[]>();
      s.reports.forEach((r, i) => {
        const key = `${r.metric}\u0000${r.version}\u0000${r.day}`;
        let g = groups.get(key);
        if (!g) groups.set(key, (g = []));
        g.push(i);
      });
      const taken = new Set<number>();
      for (const idx of groups.values()) {
        const first = s.reports[idx[0] as number] as (typeof s.reports)[number];
        const spec = this.specOfState(s, first.metric, first.version);
        if (!spec) {
          idx.forEach((i) => taken.add(i)); // no spec of its version: cannot be encoded, dropped
          this.counters.droppedStale += idx.length;
          continue;
        }
        const cols = columns(spec.params);
        for (let at = 0; at < idx.length; at += this.batchSize) {
          const part = idx.slice(at, at + this.batchSize);
          if (part.length < this.batchSize && !partial) break;
          const reports = part.map((i) => unpackReport((s.reports[i] as (typeof s.reports)[number]).record, cols));
          const id = randomBytes(16, this.rng);
          const body = encodeBatch(first.metric, first.version, id, reports, spec.params,
            encodeProfile(this.profile, spec.breakdown, spec.declared));
          s.batches.push({ id: toHex(id), metric: first.metric, version: first.version, n: part.length, body, formedDay: day });
          part.forEach((i) => taken.add(i));
        }
      }
      s.reports = s.reports.filter((_, i) => !taken.has(i));
      return { state: s, result: null };
    });
    this.rebase(state);
  }

  private specOfState(s: State, metric: string, version: number): MetricSpec | null {
    const pinned = this.pinned.get(metric);
    if (pinned && pinned.version === version) return pinned;
    const json = s.specs[`${metric}/${version}`];
    if (!json) return null;
    try {
      return specFromDict(json);
    } catch {
      return null;
    }
  }

  /** Stored batches grouped into uploads: ≤ uploadParts batches of distinct metrics, oldest first. */
  private plan(keepalive: boolean): StoredBatch[][] {
    const limit = keepalive ? KEEPALIVE_BYTES : MAX_UPLOAD_BYTES;
    const left = [...this.live.batches];
    const plans: StoredBatch[][] = [];
    while (left.length) {
      const group: StoredBatch[] = [];
      const metrics = new Set<string>();
      for (let i = 0; i < left.length && group.length < this.uploadParts; ) {
        const b = left[i] as StoredBatch;
        const sizes = [...group.map((g) => g.body.length), b.body.length];
        if (metrics.has(b.metric) || (group.length > 0 && uploadSize(sizes) > limit)) {
          i += 1;
          continue;
        }
        group.push(b);
        metrics.add(b.metric);
        left.splice(i, 1);
      }
      plans.push(group);
    }
    return plans;
  }

  private async settle(done: { batch: StoredBatch; outcome: Outcome; body?: unknown }[]): Promise<void> {
    if (!done.length) return;
    const ids = new Set(done.map((d) => d.batch.id));
    const { state } = await this.store.transact((old) => {
      const s = old ?? emptyState(this.live.secret);
      s.batches = s.batches.filter((b) => !ids.has(b.id));
      return { state: s, result: null };
    });
    this.rebase(state);
    for (const { batch, outcome, body } of done) {
      if (outcome === "ack") this.counters.delivered += batch.n;
      else if (outcome === "stale") {
        this.counters.droppedStale += batch.n;
        const spec = specFromBody(body, batch.metric);
        if (spec) this.adopt(spec);
        else this.refresh.add(batch.metric);
        this.tell(new UploadError(`HTTP 409: version ${batch.version} of '${batch.metric}' is no longer accepted; ${batch.n} reports dropped`, "stale", { status: 409, metric: batch.metric, version: batch.version, n: batch.n, batchId: batch.id }));
      } else if (outcome === "too_old") {
        this.counters.droppedTooOld += batch.n;
        this.tell(new UploadError(`batch formed on ${batch.formedDay} is beyond the retry horizon; ${batch.n} reports dropped`, "too_old", { metric: batch.metric, n: batch.n, batchId: batch.id }));
      } else {
        this.counters.droppedRejected += batch.n;
        this.tell(new UploadError(`batch rejected for good; ${batch.n} reports dropped`, "rejected", { metric: batch.metric, n: batch.n, batchId: batch.id }));
      }
    }
  }

  private backoff(retryAfterMs: number | null): void {
    this.failures += 1;
    this.counters.retries += 1;
    const u = uniformFloat(this.rng);
    let delay: number;
    if (retryAfterMs !== null) delay = retryAfterMs + u * Math.min(retryAfterMs / 10, this.backoffCap);
    else {
      const d = Math.min(this.backoffCap, this.backoffBase * 2 ** Math.min(this.failures - 1, 62));
      delay = d / 2 + (u * d) / 2;
    }
    this.retryAt = this.now() + delay;
  }

  /** Post one upload (one batch, or several as LDPU) and settle each part; false when backing off. */
  private async send(group: StoredBatch[], keepalive: boolean): Promise<boolean> {
    const now = this.now();
    const tooOld = group.filter((b) => ageDays(b.formedDay, now) > this.horizon);
    if (tooOld.length) await this.settle(tooOld.map((batch) => ({ batch, outcome: "too_old" as Outcome })));
    group = group.filter((b) => !tooOld.includes(b));
    if (!group.length) return true;
    const age = Math.max(...group.map((b) => ageDays(b.formedDay, now)));
    const body = group.length === 1 ? (group[0] as StoredBatch).body : encodeUpload(group.map((b) => b.body));
    let resp: Response;
    try {
      resp = await this.request("POST", "/v1/reports", body, { [BATCH_AGE_HEADER]: String(age) }, keepalive && body.length <= KEEPALIVE_BYTES);
    } catch (e) {
      this.backoff(null);
      this.tell(new UploadError(`network error reaching ${this.where}: ${String(e)}`, "retry", { n: group.reduce((a, b) => a + b.n, 0) }));
      return false;
    }
    const status = resp.status;
    const json: unknown = await resp.json().catch(() => null);
    const retryAfter = parseRetryAfter(resp.headers.get("Retry-After"), now);
    if (group.length > 1) {
      const parts = status === 200 && json && typeof json === "object" ? (json as { parts?: unknown }).parts : undefined;
      if (Array.isArray(parts) && parts.length === group.length) {
        this.failures = 0;
        const done: { batch: StoredBatch; outcome: Outcome; body?: unknown }[] = [];
        parts.forEach((p, i) => {
          const st = p && typeof p === "object" ? (p as { http_status?: unknown }).http_status : undefined;
          const o = typeof st === "number" ? outcomeOf(st, p) : "retry";
          if (o !== "retry" && o !== "auth") done.push({ batch: group[i] as StoredBatch, outcome: o, body: p });
        });
        await this.settle(done);
        return true;
      }
      const o = outcomeOf(status, json);
      if (o === "too_old") {
        for (const b of group) if (!(await this.send([b], keepalive))) return false;
        return true;
      }
      if (o === "retry" || o === "auth" || status === 200) {
        this.backoff(retryAfter);
        this.tell(new UploadError(`HTTP ${status} for an upload of ${group.length} batches; will retry`, o === "auth" ? "auth" : "retry", { status }));
        return false;
      }
      this.uploadParts = 1; // an older server refuses the multi-part form: single batches from now on
      for (const b of group) if (!(await this.send([b], keepalive))) return false;
      return true;
    }
    const o = outcomeOf(status, json);
    if (o === "retry" || o === "auth") {
      this.backoff(retryAfter);
      this.tell(new UploadError(`HTTP ${status}; will retry`, o, { status, metric: (group[0] as StoredBatch).metric }));
      return false;
    }
    if (o === "ack") this.failures = 0;
    await this.settle([{ batch: group[0] as StoredBatch, outcome: o, body: json }]);
    return true;
  }
}

function outcomeOf(status: number, body: unknown): Outcome {
  if (status === 422 && body && typeof body === "object" && (body as { error?: unknown }).error === "batch_too_old") return "too_old";
  if (status === 409 && body && typeof body === "object" && (body as { error?: unknown }).error === "batch_id_conflict") {
    return "rejected"; // its id was accepted before with other bytes: no newer spec to adopt (as the Python SDK)
  }
  if (status === 200 || status === 202) return "ack";
  if (status === 409) return "stale";
  if (status === 401 || status === 403) return "auth";
  if (status === 408 || status === 425 || status === 429 || status >= 500) return "retry";
  return "rejected";
}

function parseRetryAfter(value: string | null, nowMs: number): number | null {
  if (value === null) return null;
  const v = value.trim();
  let ms = /^\d+(\.\d+)?$/.test(v) ? Number(v) * 1000 : Date.parse(v) - nowMs;
  if (!Number.isFinite(ms)) return null;
  ms = Math.min(Math.max(ms, 0), MAX_RETRY_AFTER_MS);
  return ms;
}

function unref(t: ReturnType<typeof setTimeout>): void {
  (t as { unref?: () => void }).unref?.();
}

/** An endpoint URL as an error message may show it: scheme, host, port and path (no userinfo, query or hash). */
export function safeWhere(endpoint: string): string {
  try {
    const url = new URL(endpoint);
    return `${url.protocol}//${url.host}${url.pathname.replace(/\/+$/, "")}`;
  } catch {
    return "the configured endpoint";
  }
}
