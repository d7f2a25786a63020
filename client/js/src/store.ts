/** Where a Reporter keeps its state: one atomic read-modify-write transaction at a time. */
import { cloneState, type State } from "./state.js";

export interface Store {
  /** Run `fn` on the durable state (null when none exists yet) and store what it returns, atomically. */
  transact<T>(fn: (old: State | null) => { state: State; result: T }): Promise<{ state: State; result: T }>;
  close(): Promise<void>;
  /** Short description for errors ("indexeddb:<ns>", "file:<dir>", "memory"). */
  readonly where: string;
}

/** Not durable: for tests and for apps that accept losing the queue on restart. */
export class MemoryStore implements Store {
  readonly where = "memory";
  private state: State | null = null;
  private chain: Promise<unknown> = Promise.resolve();

  transact<T>(fn: (old: State | null) => { state: State; result: T }): Promise<{ state: State; result: T }> {
    const run = this.chain.then(() => {
      const out = fn(this.state ? cloneState(this.state) : null);
      this.state = cloneState(out.state);
      return out;
    });
    this.chain = run.catch(() => undefined);
    return run;
  }

  async close(): Promise<void> {}
}
