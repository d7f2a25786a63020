/**
 * The Node store: `<dir>/state.json`, replaced atomically (write a temp file in the same directory, fsync,
 * rename over the old one, fsync the directory), so a kill at any instant leaves the old or the new state,
 * never a torn one. Processes sharing the directory take turns through a lock directory (`mkdir` is atomic)
 * holding the owner's pid; a lock whose process is gone is taken over.
 */
import * as fs from "node:fs";
import { join } from "node:path";
import { stateFromJson, stateToJson, type State } from "./state.js";
import type { Store } from "./store.js";

const LOCK_WAIT_MS = 10000;

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

export class FileStore implements Store {
  readonly where: string;
  private chain: Promise<unknown> = Promise.resolve();
  private readonly file: string;
  private readonly lock: string;

  constructor(private readonly dir: string) {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    this.where = `file:${dir}`;
    this.file = join(dir, "state.json");
    this.lock = join(dir, "lock");
    // temp files of writers killed mid-write (the rename never happened: the old state stands)
    for (const name of fs.readdirSync(dir)) {
      const m = /^\.state\.(\d+)\..*\.tmp$/.exec(name);
      if (m && !alive(Number(m[1]))) fs.rmSync(join(dir, name), { force: true });
    }
  }

  private async acquire(): Promise<void> {
    const deadline = Date.now() + LOCK_WAIT_MS;
    for (;;) {
      try {
        fs.mkdirSync(this.lock);
        fs.writeFileSync(join(this.lock, "owner"), String(process.pid));
        return;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      }
      let owner = NaN;
      try {
        owner = Number(fs.readFileSync(join(this.lock, "owner"), "utf8"));
      } catch {
        // the owner is between mkdir and writing its pid, or just released the lock
      }
      if (Number.isInteger(owner) && owner > 0 && !alive(owner)) {
        fs.rmSync(this.lock, { recursive: true, force: true }); // its process is gone: take over
        continue;
      }
      if (Date.now() > deadline) throw new Error(`ldptel: the state lock ${this.lock} is held by pid ${owner}`);
      await sleep(2);
    }
  }

  private release(): void {
    fs.rmSync(this.lock, { recursive: true, force: true });
  }

  private read(): State | null {
    let text: string;
    try {
      text = fs.readFileSync(this.file, "utf8");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw e;
    }
    return stateFromJson(text);
  }

  private write(s: State): void {
    const tmp = join(this.dir, `.state.${process.pid}.${Date.now()}.tmp`);
    const fd = fs.openSync(tmp, "w", 0o600);
    try {
      fs.writeSync(fd, stateToJson(s));
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, this.file);
    try {
      const dfd = fs.openSync(this.dir, "r");
      try {
        fs.fsyncSync(dfd);
      } finally {
        fs.closeSync(dfd);
      }
    } catch {
      // directories cannot be fsynced on some platforms (Windows); the rename is still atomic
    }
  }

  transact<T>(fn: (old: State | null) => { state: State; result: T }): Promise<{ state: State; result: T }> {
    const run = this.chain.then(async () => {
      await this.acquire();
      try {
        const out = fn(this.read());
        this.write(out.state);
        return out;
      } finally {
        this.release();
      }
    });
    this.chain = run.catch(() => undefined);
    return run;
  }

  async close(): Promise<void> {
    await this.chain;
  }
}
