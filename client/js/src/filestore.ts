/**
 * The Node store: `<dir>/state.json`, replaced atomically (write a temp file in the same directory, fsync,
 * rename over the old one, fsync the directory), so a kill at any instant leaves the old or the new state,
 * never a torn one. Processes sharing the directory take turns through a lock directory holding a file named
 * by the owner's pid (see `acquire`); a lock whose process is gone is reaped atomically and taken over.
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
  private seq = 0;

  constructor(private readonly dir: string) {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    this.where = `file:${dir}`;
    this.file = join(dir, "state.json");
    this.lock = join(dir, "lock");
    // temp files of writers killed mid-write (the rename never happened: the old state stands)
    for (const name of fs.readdirSync(dir)) {
      const m = /^\.state\.(\d+)\..*\.tmp$|^\.(?:lock|reap)\.(\d+)\./.exec(name);
      if (m && !alive(Number(m[1] ?? m[2]))) fs.rmSync(join(dir, name), { recursive: true, force: true });
    }
  }

  /**
   * The lock is held while `<dir>/lock/` holds a file named by the owner's pid. Taking it: build a directory
   * with that file aside, then `rename` it onto `lock` (atomic; it only replaces a missing or *empty* lock
   * directory). A lock of a dead pid P is reaped by renaming `lock/P` away: that name exists only in P's
   * incarnation of the lock, so exactly one contender can reap it and a live owner's lock is never touched.
   */
  private async acquire(): Promise<void> {
    const deadline = Date.now() + LOCK_WAIT_MS;
    const tag = `${process.pid}.${Date.now()}.${++this.seq}`;
    const prep = join(this.dir, `.lock.${tag}`);
    fs.mkdirSync(prep);
    fs.writeFileSync(join(prep, String(process.pid)), "");
    for (;;) {
      try {
        fs.renameSync(prep, this.lock);
        return;
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code !== "ENOTEMPTY" && code !== "EEXIST" && code !== "EPERM") throw e;
      }
      let names: string[] = [];
      try {
        names = fs.readdirSync(this.lock);
      } catch {
        // released meanwhile
      }
      const pidOf = (n: string): number => {
        if (n !== "owner") return /^\d+$/.test(n) ? Number(n) : NaN;
        try {
          return Number(fs.readFileSync(join(this.lock, n), "utf8")); // a lock left by an older version
        } catch {
          return NaN;
        }
      };
      const dead = names.find((n) => pidOf(n) > 0 && !alive(pidOf(n)));
      if (dead !== undefined) {
        try {
          fs.renameSync(join(this.lock, dead), join(this.dir, `.reap.${tag}`)); // only one contender wins
          fs.rmSync(join(this.dir, `.reap.${tag}`), { force: true });
        } catch {
          // another contender reaped it first
        }
        continue;
      }
      if (Date.now() > deadline) {
        fs.rmSync(prep, { recursive: true, force: true });
        throw new Error(`ldptel: the state lock ${this.lock} is held by pid ${names.join(",")}`);
      }
      await sleep(2);
    }
  }

  private release(): void {
    fs.rmSync(join(this.lock, String(process.pid)), { force: true }); // an empty lock directory is free
    try {
      fs.rmdirSync(this.lock); // tidy; fails harmlessly if another process has already renamed its lock onto it
    } catch {
      // ENOTEMPTY / ENOENT
    }
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
