/**
 * The device state of one storage namespace, and the pure functions that change it. A store keeps the state
 * durably (IndexedDB in browsers, a file in Node) and applies changes in one atomic transaction.
 *
 * `report()` decides against an in-memory copy and records an {@link Op}; the Reporter commits the ops within
 * `commitDelay` ms (1 s by default). The commit re-applies each op to the durable state *inside the store's
 * transaction* ({@link applyOps}): the budget is checked again (another tab or process may have spent it: the
 * op is then dropped, never sent), a memo entry another writer stored first wins (its report replaces this
 * one: one report per value and day), and the lifetime ledger is charged. Only committed reports are ever
 * batched and sent, so a crash before the commit loses the last reports together with their spends.
 */

export interface LedgerRow {
  day: number;
  count: number;
  eps: number;
}

export interface QueuedReport {
  metric: string;
  version: number;
  day: number;
  record: Uint8Array;
}

export interface StoredBatch {
  /** hex of the 16-byte batch id. */
  id: string;
  metric: string;
  version: number;
  n: number;
  body: Uint8Array;
  /** UTC day (YYYY-MM-DD) the batch was formed, for the retry horizon. */
  formedDay: string;
}

export interface State {
  v: 1;
  secret: Uint8Array;
  highDay: number;
  ledger: Record<string, LedgerRow>;
  /** metric → fingerprint hex → ε∞ charged for that privatization. */
  lifetime: Record<string, Record<string, number>>;
  /** memo key hex → the day's memoized report of one value. */
  memo: Record<string, { day: number; record: Uint8Array }>;
  /** "metric/version" → spec JSON. */
  specs: Record<string, Record<string, unknown>>;
  /** metric → current version and when it was fetched (ms). */
  current: Record<string, { version: number; fetched: number }>;
  reports: QueuedReport[];
  batches: StoredBatch[];
  /** Secret sampling: metric → the device's 53-bit draw for the budget day (ldptel.client.sdk.sampling). */
  sampling?: Record<string, { day: number; draw: number }>;
}

export function emptyState(secret: Uint8Array): State {
  return { v: 1, secret, highDay: -(2 ** 52), ledger: {}, lifetime: {}, memo: {}, specs: {}, current: {}, reports: [], batches: [], sampling: {} };
}

const EPS_SLACK = 1e-9;

/** One report to add: checked again against the durable ledger when committed. */
export interface ReportOp {
  kind: "report";
  metric: string;
  version: number;
  day: number;
  eps: number;
  reportsPerDay: number;
  dailyEpsilon: number;
  /** Permanent RR: the privatization to charge in the lifetime ledger, and the cap. */
  lifetime: { fp: string; eps: number; cap: number } | null;
  memoKey: string | null;
  record: Uint8Array;
  /** Secret sampling: the draw this report was decided with and floor(β·2^53); the commit decides again with the durable draw of the day. */
  sample: { draw: number; threshold: number } | null;
}

export interface SpecOp {
  kind: "spec";
  json: Record<string, unknown>;
  metric: string;
  version: number;
  current: boolean;
  fetched: number;
}

/** The day's sampling draw of a metric (the first one stored for the day wins). */
export interface SampleOp {
  kind: "sample";
  metric: string;
  day: number;
  draw: number;
}

export type Op = ReportOp | SpecOp | SampleOp;

/** Why a report op is refused by `s` (null: allowed). */
export function refusal(s: State, op: ReportOp): "budget" | "lifetime" | null {
  const row = s.ledger[op.metric];
  const count = row && row.day === op.day ? row.count : 0;
  const eps = row && row.day === op.day ? row.eps : 0;
  if (count + 1 > op.reportsPerDay) return "budget";
  if (eps + op.eps > op.dailyEpsilon * (1 + EPS_SLACK)) return "budget";
  if (op.lifetime) {
    const charged = s.lifetime[op.metric] ?? {};
    if (charged[op.lifetime.fp] === undefined) {
      const total = Object.values(charged).reduce((a, b) => a + b, 0);
      if (total + op.lifetime.eps > op.lifetime.cap * (1 + EPS_SLACK)) return "lifetime";
    }
  }
  return null;
}

/** Move the state to budget day `day` (never backwards): prune past days' memo entries. */
export function advanceDay(s: State, day: number): void {
  if (day <= s.highDay) return;
  s.highDay = day;
  for (const [key, entry] of Object.entries(s.memo)) if (entry.day < day) delete s.memo[key];
  for (const [metric, entry] of Object.entries(s.sampling ?? {})) if (entry.day < day) delete (s.sampling ?? {})[metric];
}

/** Apply one op to `s` in place; for a report, what happened to it. */
export function applyOp(s: State, op: Op): "queued" | "memo_replaced" | "budget" | "lifetime" | "not_sampled" | null {
  if (op.kind === "sample") {
    advanceDay(s, op.day);
    const sampling = (s.sampling ??= {});
    const prior = sampling[op.metric];
    // the first draw stored for a day wins; a draw of an earlier day never replaces a later one
    if (op.day >= s.highDay && (!prior || prior.day < op.day)) sampling[op.metric] = { day: op.day, draw: op.draw };
    return null;
  }
  if (op.kind === "spec") {
    s.specs[`${op.metric}/${op.version}`] = op.json;
    if (op.current) s.current[op.metric] = { version: op.version, fetched: op.fetched };
    return null;
  }
  if (op.day < s.highDay) op = { ...op, day: s.highDay }; // a clock behind the durable one: the later day
  advanceDay(s, op.day);
  if (op.sample) {
    // one decision per metric and day across tabs/processes: the durable draw decides (this op's own if none yet)
    const sampling = (s.sampling ??= {});
    const prior = sampling[op.metric];
    if (!prior || prior.day !== op.day) sampling[op.metric] = { day: op.day, draw: op.sample.draw };
    if ((sampling[op.metric]?.draw ?? 0) >= op.sample.threshold) return "not_sampled";
  }
  const why = refusal(s, op);
  if (why) return why;
  if (op.lifetime) {
    const charged = (s.lifetime[op.metric] ??= {});
    if (charged[op.lifetime.fp] === undefined) charged[op.lifetime.fp] = op.lifetime.eps;
  }
  let record = op.record;
  let outcome: "queued" | "memo_replaced" = "queued";
  if (op.memoKey) {
    const prior = s.memo[op.memoKey];
    if (prior && prior.day === op.day) {
      if (!sameBytes(prior.record, record)) outcome = "memo_replaced";
      record = prior.record;
    } else s.memo[op.memoKey] = { day: op.day, record };
  }
  const row = s.ledger[op.metric];
  if (row && row.day === op.day) {
    row.count += 1;
    row.eps += op.eps;
  } else s.ledger[op.metric] = { day: op.day, count: 1, eps: op.eps };
  s.reports.push({ metric: op.metric, version: op.version, day: op.day, record });
  return outcome;
}

export function applyOps(s: State, ops: Op[]): { dropped: number; notSampled: number } {
  let dropped = 0;
  let notSampled = 0;
  for (const op of ops) {
    const r = applyOp(s, op);
    if (r === "budget" || r === "lifetime") dropped += 1;
    if (r === "not_sampled") notSampled += 1;
  }
  return { dropped, notSampled };
}

export function pendingCount(s: State): number {
  return s.reports.length + s.batches.reduce((a, b) => a + b.n, 0);
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** A deep copy (the in-memory state must not share arrays with the durable one). */
export function cloneState(s: State): State {
  return {
    v: 1,
    secret: s.secret.slice(),
    highDay: s.highDay,
    ledger: Object.fromEntries(Object.entries(s.ledger).map(([k, r]) => [k, { ...r }])),
    lifetime: Object.fromEntries(Object.entries(s.lifetime).map(([k, r]) => [k, { ...r }])),
    memo: Object.fromEntries(Object.entries(s.memo).map(([k, r]) => [k, { day: r.day, record: r.record }])),
    specs: { ...s.specs },
    current: Object.fromEntries(Object.entries(s.current).map(([k, r]) => [k, { ...r }])),
    reports: s.reports.slice(),
    batches: s.batches.slice(),
    sampling: Object.fromEntries(Object.entries(s.sampling ?? {}).map(([k, r]) => [k, { ...r }])),
  };
}

// ---------------------------------------------------------------------------- JSON form (file store)
function b64(bytes: Uint8Array): string {
  let s = "";
  for (let i = 0; i < bytes.length; i++) s += String.fromCharCode(bytes[i] ?? 0);
  return btoa(s);
}

function unb64(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function stateToJson(s: State): string {
  return JSON.stringify(s, (_key, value: unknown) => (value instanceof Uint8Array ? { $b: b64(value) } : value));
}

export function stateFromJson(text: string): State {
  const s = JSON.parse(text, (_key, value: unknown) =>
    value && typeof value === "object" && "$b" in (value as object) ? unb64((value as { $b: string }).$b) : value,
  ) as State;
  if (s.v !== 1 || !(s.secret instanceof Uint8Array) || s.secret.length !== 32) throw new Error("not an ldptel state (version 1)");
  return s;
}
