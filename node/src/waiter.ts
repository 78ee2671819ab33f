// The one follower of a shard's event log that every `wait` of a client shares: it wakes the
// waits of the jobs whose events it reads, and each then reads its record. With the log off it
// wakes every wait each `POLL_MS` instead (the bound on a wait's delay there). It ends when
// nobody waits; the next wait starts it again from a fresh cursor.
import { Redis } from "ioredis";

import { duplicate } from "./connect.js";
import { Keys } from "./keys.js";
import { BLOCK_MS, COUNT, decodeEntry, entriesOf, eventsMax, logInfo, NOT_ENDS } from "./log.js";

export const POLL_MS = 250;

/** The follower of one shard's log that every `wait` of a client shares. */
export class Waiter {
  private readonly waits = new Map<string, Set<() => void>>();
  private conn: Redis | null = null;
  private running: Promise<void> | null = null;
  private starting: Promise<void> | null = null;
  private cursor = "0-0";
  private on = true;
  private closed = false;

  constructor(
    private readonly base: Redis,
    private readonly keys: Keys,
  ) {}

  /** Registers a wake-up for `jobId` (read the record only after this resolves); the returned
   * function takes it out again. */
  async register(jobId: string, wake: () => void): Promise<() => void> {
    let set = this.waits.get(jobId);
    if (!set) this.waits.set(jobId, (set = new Set()));
    set.add(wake);
    const unregister = () => {
      set.delete(wake);
      if (set.size === 0 && this.waits.get(jobId) === set) this.waits.delete(jobId);
    };
    try {
      // the cursor is taken before the caller reads the record; the loop ends when nobody waits
      while (!this.running) {
        if (!this.starting) this.starting = this.take().finally(() => (this.starting = null));
        await this.starting;
      }
    } catch (e) {
      unregister();
      throw e;
    }
    return unregister;
  }

  private async take(): Promise<void> {
    if (!this.conn) {
      this.conn = duplicate(this.base);
    }
    this.on = (await eventsMax(this.conn, this.keys)) > 0;
    this.cursor = (await logInfo(this.conn, this.keys.events())).last;
    this.running = this.loop().finally(() => (this.running = null));
  }

  private wake(jobId?: string): void {
    if (jobId === undefined) for (const s of this.waits.values()) for (const w of s) w();
    else for (const w of this.waits.get(jobId) ?? []) w();
  }

  private async loop(): Promise<void> {
    let idle = 0;
    // it ends when nobody waits; the next wait starts it again from a fresh cursor
    while (!this.closed && this.waits.size > 0) {
      if (!this.on) {
        await new Promise((r) => setTimeout(r, POLL_MS));
        this.wake();
        idle++;
      } else {
        try {
          const entries = entriesOf(await this.conn!.xread("COUNT", COUNT, "BLOCK", BLOCK_MS, "STREAMS", this.keys.events(), this.cursor));
          for (const [id, fields] of entries) {
            this.cursor = id;
            for (const e of decodeEntry(id, fields)) if (!NOT_ENDS.has(e.event)) this.wake(e.jobId);
          }
          if (entries.length >= COUNT) this.wake(); // a full read may span a trim of the log
          idle = entries.length > 0 ? 0 : idle + 1;
        } catch {
          if (this.closed) return;
          await new Promise((r) => setTimeout(r, 1000));
          this.wake();
        }
      }
      if (idle >= 5) {
        idle = 0;
        const on = (await eventsMax(this.conn!, this.keys).catch(() => (this.on ? 1 : 0))) > 0;
        if (on && !this.on) {
          this.cursor = (await logInfo(this.conn!, this.keys.events())).last;
          this.wake();
        }
        this.on = on;
      }
    }
  }

  close(): void {
    this.closed = true;
    this.conn?.disconnect();
  }
}
