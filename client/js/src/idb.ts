/**
 * The browser store: one IndexedDB database per namespace (`ldptel:<namespace>`), the state in one record,
 * changed in one `readwrite` transaction with `durability: "strict"` (flushed before `complete`; browsers
 * default to "relaxed"). The transaction's callback is synchronous (no non-IDB await inside, which would let
 * the transaction auto-commit), so a read-check-write is atomic across tabs: IndexedDB never runs two
 * readwrite transactions over the same store at once.
 */
import type { State } from "./state.js";
import type { Store } from "./store.js";

const STORE = "state";
const KEY = "state";

function request<T>(req: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error ?? new Error("IndexedDB request failed"));
  });
}

export class IndexedDbStore implements Store {
  readonly where: string;
  private constructor(private readonly db: IDBDatabase, namespace: string) {
    this.where = `indexeddb:${namespace}`;
  }

  static async open(namespace: string, factory: IDBFactory = indexedDB): Promise<IndexedDbStore> {
    const req = factory.open(`ldptel:${namespace}`, 1);
    req.onupgradeneeded = () => {
      if (!req.result.objectStoreNames.contains(STORE)) req.result.createObjectStore(STORE);
    };
    const db = await request(req);
    // Best effort: ask the browser not to evict the origin's storage under pressure (it may decide silently).
    const storage = (globalThis as { navigator?: { storage?: { persist?: () => Promise<boolean> } } }).navigator?.storage;
    storage?.persist?.().catch(() => false);
    return new IndexedDbStore(db, namespace);
  }

  transact<T>(fn: (old: State | null) => { state: State; result: T }): Promise<{ state: State; result: T }> {
    return new Promise((resolve, reject) => {
      let tx: IDBTransaction;
      try {
        tx = this.db.transaction([STORE], "readwrite", { durability: "strict" });
      } catch (e) {
        reject(e);
        return;
      }
      const os = tx.objectStore(STORE);
      let out: { state: State; result: T } | undefined;
      const get = os.get(KEY);
      get.onsuccess = () => {
        try {
          out = fn((get.result as State | undefined) ?? null);
          os.put(out.state, KEY);
        } catch (e) {
          tx.abort();
          reject(e);
        }
      };
      tx.oncomplete = () => (out ? resolve(out) : reject(new Error("IndexedDB transaction completed without a result")));
      tx.onerror = () => reject(tx.error ?? new Error("IndexedDB transaction failed"));
      tx.onabort = () => reject(tx.error ?? new Error("IndexedDB transaction aborted"));
    });
  }

  async close(): Promise<void> {
    this.db.close();
  }
}
