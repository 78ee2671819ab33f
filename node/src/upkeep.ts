// Nothing waits silently (issue 59), as the Rust client's `upkeep` says it: a producer that
// submits a job only the queue's upkeep can move (a delayed job, one with a retry budget), or
// stores a recurring job (whose ticks the upkeep fires, protocol 32), into a namespace where no
// live process does that upkeep (no holder of the duty lease: no worker with duties on, no `hero
// broker`) is told once. It is looked at once per client (one EXISTS, whichever came first: the
// answer is the same for both), and told as a process warning (`process.emitWarning`, type
// `HeroBrokerWarning`, code `HERO_NO_UPKEEP`: `process.on("warning", ...)` sees it,
// `--no-warnings` hides it), naming the namespace and the Redis with its db, its password hidden.
import { Redis } from "ioredis";

import { shownUrl } from "./connect.js";
import { Keys } from "./keys.js";
import { JobOptions, Spec } from "./options.js";

/** The warnings' type (`warning.name`), and their code. */
export const WARNING_TYPE = "HeroBrokerWarning";
export const NO_UPKEEP = "HERO_NO_UPKEEP";

function warn(message: string, code: string): void {
  process.emitWarning(message, { type: WARNING_TYPE, code });
}

/** The Redis `redis` reaches, as a URL with its db and the password hidden: `url` when it was
 * given (with the db appended when it names none), else built from the connection's options. */
export function shownRedis(redis: Redis, url: string | null): string {
  const o = redis.options ?? {};
  const db = Number(o.db ?? 0) || 0;
  if (url) {
    let named = false;
    try {
      const u = new URL(url);
      named = u.protocol === "unix:" ? u.searchParams.has("db") : /^\/\d+\/?$/.test(u.pathname);
    } catch {
      named = true;
    }
    return named ? shownUrl(url) : `${shownUrl(url)} (db ${db})`;
  }
  if (o.path) return `unix://${o.path}?db=${db}`;
  return `${o.tls ? "rediss" : "redis"}://${o.host ?? "127.0.0.1"}:${o.port ?? 6379}/${db}`;
}

/** Whether job `o` (checked as `s`) waits on the queue's upkeep at some point: a run-at in the
 * future (a delay > 0, a date to come), or retries. */
export function needsUpkeep(o: JobOptions<unknown>, s: Spec): boolean {
  if (s.fields.some(([k, v]) => k === "retries" && Number(v.toString()) > 0)) return true;
  if (typeof o.delay === "number" && Math.floor(o.delay) >= 1) return true;
  return o.at instanceof Date && o.at.getTime() > Date.now();
}

/** What one client has looked at yet. */
export class Upkeep {
  private looked = false;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly url: string | null,
  ) {}

  /** Whether the one look is still to come (`note` does nothing after it). */
  get pending(): boolean {
    return !this.looked;
  }

  /** Looks once, when a job of `jobs` needs the upkeep: warns when nobody holds the duty lease.
   * A failed look says nothing (the submit itself tells of a Redis that does not answer). */
  async note(jobs: [JobOptions<unknown>, Spec][]): Promise<void> {
    if (this.looked || !jobs.some(([o, s]) => needsUpkeep(o, s))) return;
    if (await this.nobody()) {
      warn(
        `no live process does the queue's upkeep in this namespace (no worker with duties on, no \`hero broker\`, on this Redis and db): ` +
          `delayed jobs, retries and recurring jobs' ticks wait until one runs. ${this.start()}`,
        NO_UPKEEP,
      );
    }
  }

  /** After recurring job `name` was stored: its ticks are fired by the holder of the duty lease
   * (any worker with duties on, or a broker), so with nobody holding it, says so (once, the
   * look shared with {@link note}). */
  async noteRecurring(name: string): Promise<void> {
    if (this.looked) return;
    if (await this.nobody()) {
      warn(
        `recurring job ${name} stored, but no live process does the queue's upkeep in this namespace (no worker with duties on, no \`hero broker\`, on this Redis and db): ` +
          `recurring jobs' ticks wait until one runs, and a tick more than 1 s late is skipped (unless missed: "catch-up"). ${this.start()}`,
        NO_UPKEEP,
      );
    }
  }

  /** The one look: true when nobody holds the duty lease (its key is gone with the lease);
   * false after a failed look too. */
  private async nobody(): Promise<boolean> {
    this.looked = true;
    try {
      return (await this.redis.exists(this.keys.duties())) === 0;
    } catch {
      return false;
    }
  }

  private start(): string {
    return `Start a worker (workers do it by default) or \`hero broker\` with the same URL, db and namespace (namespace ${this.keys.prefix}, Redis ${shownRedis(this.redis, this.url)})`;
  }
}
