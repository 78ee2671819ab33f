// Nothing waits silently (issue 59), as the Rust client's `upkeep` and `cron_add` say it: a
// producer that submits a job only the queue's upkeep can move (a delayed job, one with a retry
// budget) into a namespace where no live process does that upkeep (no holder of the duty lease:
// no worker with duties on, no `hero broker`) is told once; so is one that stores a recurring job
// where no live `hero broker` runs (the broker fires the ticks). Each is looked at once per
// client (one EXISTS; one fleet read), and told as a process warning (`process.emitWarning`,
// type `HeroBrokerWarning`: `process.on("warning", ...)` sees it, `--no-warnings` hides it),
// naming the namespace and the Redis with its db, its password hidden.
import { Redis } from "ioredis";

import { shownUrl } from "./connect.js";
import { Keys } from "./keys.js";
import { JobOptions, Spec } from "./options.js";

/** The warnings' type (`warning.name`), and their codes. */
export const WARNING_TYPE = "HeroBrokerWarning";
export const NO_UPKEEP = "HERO_NO_UPKEEP";
export const NO_BROKER = "HERO_NO_BROKER";

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
  private lookedDuties = false;
  private lookedBroker = false;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly url: string | null,
  ) {}

  /** Looks once, when a job of `jobs` needs the upkeep: warns when nobody holds the duty lease.
   * A failed look says nothing (the submit itself tells of a Redis that does not answer). */
  async note(jobs: [JobOptions<unknown>, Spec][]): Promise<void> {
    if (this.lookedDuties || !jobs.some(([o, s]) => needsUpkeep(o, s))) return;
    this.lookedDuties = true;
    let held: number;
    try {
      held = await this.redis.exists(this.keys.duties());
    } catch {
      return;
    }
    if (held === 0) {
      warn(
        `no live process does the queue's upkeep in this namespace (no worker with duties on, no \`hero broker\`, on this Redis and db): ` +
          `delayed jobs and retries wait until one runs. Start a worker (workers do it by default) or \`hero broker\` with the same URL, db and namespace ` +
          `(namespace ${this.keys.prefix}, Redis ${shownRedis(this.redis, this.url)})`,
        NO_UPKEEP,
      );
    }
  }

  /** After recurring job `name` was stored: warns once when no live `hero broker` is in the
   * namespace's fleet (an entry of role `broker` whose `expires_ms` is not past on Redis's
   * clock). */
  async noteRecurring(name: string): Promise<void> {
    if (this.lookedBroker) return;
    this.lookedBroker = true;
    let live: boolean;
    try {
      live = await liveBroker(this.redis, this.keys);
    } catch {
      return;
    }
    if (!live) {
      warn(
        `recurring job ${name} stored, but no \`hero broker\` runs in this namespace (this Redis and db): its ticks fire only while one does. ` +
          `Start \`hero broker\` with the same URL, db and namespace (namespace ${this.keys.prefix}, Redis ${shownRedis(this.redis, this.url)})`,
        NO_BROKER,
      );
    }
  }
}

/** Whether the namespace's fleet (`<ns>:meta:fleet`, name → JSON `{role, expires_ms, ...}`)
 * holds a live broker, on Redis's clock (TIME). */
export async function liveBroker(redis: Redis, keys: Keys): Promise<boolean> {
  const r = await redis.pipeline().time().hgetall(keys.fleet()).exec();
  if (!r) return false;
  const [[timeErr, time], [fleetErr, fleet]] = r as [[Error | null, [string, string]], [Error | null, Record<string, string>]];
  if (timeErr) throw timeErr;
  if (fleetErr) throw fleetErr;
  const now = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
  for (const json of Object.values(fleet ?? {})) {
    let v: { role?: unknown; expires_ms?: unknown };
    try {
      v = JSON.parse(json);
    } catch {
      continue;
    }
    if (v?.role === "broker" && Number(v.expires_ms) >= now) return true;
  }
  return false;
}
