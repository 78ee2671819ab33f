// Job events for producers, read from the event log (`<ns>:meta:events`, written by the server
// functions in the call that changes a job), and the waits they wake.
//
// `QueueEvents` is BullMQ's: `new QueueEvents(type, { url, lastEventId })`, an EventEmitter of
// `completed` `{ jobId, returnvalue }`, `failed` `{ jobId, failedReason }`, `progress`, `active`,
// `waiting`, `delayed`, `retried`, `stalled` (a job recovered from a dead worker), `removed` (a
// stopped one), each with the entry id as the second argument (`failed` also for a job the
// broker dead-lettered: hero's `dead`); `event` carries every event in
// hero's own names. One blocking read per shard; a subscriber that fell behind the log's cap
// (`events_max`) gets `gap` `{ missed }`: Redis counts every entry ever added (`XINFO STREAM`
// `entries-added`), so the first kept entry's number is `added - length + 1`, and the reader
// counts what it read. The check rides in a MULTI with a read, and only a read that came back
// full can span a trim, so keeping up costs one XREAD BLOCK a batch.
//
// `Waiter` is the one follower of a shard's log that all of a client's `wait` calls share; with
// the log off it wakes every wait each `POLL_MS` instead (the bound on a wait's delay there).
import { EventEmitter } from "node:events";

import { Redis } from "ioredis";

import { HeroError, InvalidInput } from "./errors.js";
import { Keys } from "./keys.js";
import { redisUrl } from "./client.js";
import { ShardMap } from "./shards.js";

const COUNT = 1000;
const BLOCK_MS = 1000;
export const POLL_MS = 250;
const NOT_ENDS = new Set(["submitted", "dispatched", "started", "progress", "logged", "paused", "resumed", "bridged_in", "bridged_out"]);

/** The namespace's event log is off (`events_max 0`): there are no events to subscribe to. */
export class EventLogOff extends HeroError {}

/** One change of a job's state as hero logs it. */
export interface HeroEvent {
  /** The log entry's id (`<ms>-<seq>`): pass it as `lastEventId` to resume after it. */
  id: string;
  event: string;
  jobId: string;
  queue?: string;
  worker?: string;
  attempt?: number;
  reason?: string;
  dueMs?: number;
  /** A finished job's output (read with its event; absent once the job is deleted). */
  output?: string;
  shard: number;
}

type Fields = string[];

/** The events one log entry holds (jobs of one call share an entry). */
export function decodeEntry(id: string, fields: Fields, shard = 0): HeroEvent[] {
  const f: Record<string, string> = {};
  for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i]] = fields[i + 1];
  if (!f.e || !f.j) return [];
  const base = {
    id,
    event: f.e,
    shard,
    ...(f.q ? { queue: f.q } : {}),
    ...(f.w ? { worker: f.w } : {}),
    ...(f.r ? { reason: f.r } : {}),
    ...(f.d && /^\d+$/.test(f.d) ? { dueMs: Number(f.d) } : {}),
  };
  const ids = f.j.split(" ");
  const attempts = (f.a ?? "").split(" ");
  return ids.map((jobId, k) => ({ ...base, jobId, ...(/^\d+$/.test(attempts[k] ?? "") ? { attempt: Number(attempts[k]) } : {}) }));
}

function sid(id: string): [number, number] {
  const [ms, seq] = id.split("-");
  return [Number(ms), Number(seq ?? 0)];
}

function before(a: string, b: string): boolean {
  const [x, y] = [sid(a), sid(b)];
  return x[0] < y[0] || (x[0] === y[0] && x[1] < y[1]);
}

async function eventsMax(redis: Redis, keys: Keys): Promise<number> {
  const v = await redis.hget(keys.config(), "events_max");
  const n = v === null ? 10000 : Number(v);
  return Number.isFinite(n) ? n : 10000;
}

interface LogInfo {
  added: number;
  length: number;
  first: string | null;
  last: string;
}

function parseInfo(raw: unknown): LogInfo {
  const a = raw as unknown[];
  const info: LogInfo = { added: 0, length: 0, first: null, last: "0-0" };
  for (let i = 0; i + 1 < a.length; i += 2) {
    const [k, v] = [String(a[i]), a[i + 1]];
    if (k === "entries-added") info.added = Number(v);
    else if (k === "length") info.length = Number(v);
    else if (k === "last-generated-id") info.last = String(v);
    else if (k === "first-entry") info.first = Array.isArray(v) ? String(v[0]) : null;
  }
  return info;
}

async function logInfo(redis: Redis, key: string): Promise<LogInfo> {
  if (!(await redis.exists(key))) return { added: 0, length: 0, first: null, last: "0-0" };
  return parseInfo(await redis.call("XINFO", "STREAM", key));
}

type Entries = [string, Fields][];

function entriesOf(reply: unknown): Entries {
  if (!Array.isArray(reply) || reply.length === 0) return [];
  return (reply[0] as [string, Entries])[1] ?? [];
}

/** Which events pass: a script type (and optionally a queue `type/group`), a job. */
interface Filter {
  type?: string;
  queue?: string;
  jobId?: string;
}

function matches(keys: Keys, f: Filter, e: HeroEvent): boolean {
  if (f.jobId !== undefined && e.jobId !== f.jobId) return false;
  const q = e.queue ?? "";
  if (f.type !== undefined) {
    const base = keys.work(f.type);
    if (!(q === base || q.startsWith(base + ":"))) return false;
  }
  if (f.queue !== undefined) {
    const [t, g, i] = f.queue.split("/");
    const base = keys.work(t, g ?? null, i ?? null);
    if (!(q === base || q.startsWith(base + ":prio:"))) return false;
  }
  return true;
}

/** One shard's reader: the cursor, the count of entries read, and the gap check. */
class Reader {
  private cursor = "0-0";
  private ordinal: number | null = null;
  private check = false;
  private count = COUNT;
  readonly conn: Redis;

  constructor(
    base: Redis,
    private readonly keys: Keys,
    readonly shard: number,
    private readonly filter: Filter,
  ) {
    this.conn = base.duplicate();
  }

  async open(lastEventId: string): Promise<void> {
    const max = await eventsMax(this.conn, this.keys);
    if (max === 0) {
      throw new EventLogOff(
        `the event log is off in namespace ${this.keys.prefix} (events_max 0), so there are no job events to subscribe to: turn it on with \`hero broker --events-max 10000\` (the default), or wait on single jobs with \`wait\``,
      );
    }
    this.count = Math.max(1, Math.min(COUNT, max));
    const info = await logInfo(this.conn, this.keys.events());
    if (lastEventId === "$") {
      [this.cursor, this.ordinal] = [info.last, info.added];
    } else if (lastEventId === "0" || lastEventId === "0-0") {
      [this.cursor, this.ordinal, this.check] = ["0-0", info.added - info.length, true];
    } else {
      [this.cursor, this.ordinal, this.check] = [lastEventId, null, true];
    }
  }

  /** One read: the events that pass (a gap first where one was found). */
  async read(): Promise<(HeroEvent | { gap: number | null; id: string; shard: number })[]> {
    const key = this.keys.events();
    if (!this.check) {
      const got = await this.conn.xread("COUNT", this.count, "BLOCK", BLOCK_MS, "STREAMS", key, this.cursor);
      const entries = entriesOf(got);
      if (entries.length < this.count) {
        const out = await this.deliver(entries);
        if (this.ordinal !== null) this.ordinal += entries.length;
        return out;
      }
      this.check = true;
    }
    if (!(await this.conn.exists(key))) {
      this.check = false;
      return [];
    }
    const res = (await this.conn.multi().call("XINFO", "STREAM", key).xread("COUNT", this.count, "STREAMS", key, this.cursor).exec()) ?? [];
    for (const [err] of res) if (err) throw err;
    const info = parseInfo(res[0]?.[1]);
    const entries = entriesOf(res[1]?.[1]);
    let gap: { gap: number | null; id: string; shard: number } | null = null;
    if (entries.length > 0 && info.first !== null && entries[0][0] === info.first && before(this.cursor, info.first)) {
      const firstNo = info.added - info.length + 1;
      if (this.ordinal !== null && firstNo > this.ordinal + 1) gap = { gap: firstNo - this.ordinal - 1, id: info.first, shard: this.shard };
      else if (this.ordinal === null && info.added > info.length) gap = { gap: null, id: info.first, shard: this.shard };
      this.ordinal = firstNo - 1;
    }
    if (this.ordinal !== null) this.ordinal += entries.length;
    if (entries.length < this.count) [this.ordinal, this.check] = [info.added, false];
    const out: (HeroEvent | { gap: number | null; id: string; shard: number })[] = gap ? [gap] : [];
    return out.concat(await this.deliver(entries));
  }

  private async deliver(entries: Entries): Promise<HeroEvent[]> {
    const events: HeroEvent[] = [];
    for (const [id, fields] of entries) {
      this.cursor = id;
      for (const e of decodeEntry(id, fields, this.shard)) if (matches(this.keys, this.filter, e)) events.push(e);
    }
    const finished = events.filter((e) => e.event === "finished");
    if (finished.length > 0) {
      const pipe = this.conn.pipeline();
      for (const e of finished) pipe.hget(this.keys.job(e.jobId), "output");
      const got = (await pipe.exec()) ?? [];
      finished.forEach((e, k) => {
        const v = got[k]?.[1];
        if (typeof v === "string") e.output = v;
      });
    }
    return events;
  }
}

/** BullMQ's QueueEvents options, and hero's. Unknown keys are refused. */
export interface QueueEventsOptions {
  /** Redis URL (default HERO_REDIS_URL, else redis://127.0.0.1:6379). */
  url?: string;
  namespace?: string;
  /** `"$"` (the default) for what happens from now on, `"0"` from the oldest kept, or an event
   * id to resume after (the second argument of every listener). */
  lastEventId?: string;
  /** Start reading at once (default true, as BullMQ); else call `run()`. */
  autorun?: boolean;
  /** Only the jobs of one queue of the type: `group` (or `group/instance`). */
  group?: string;
  /** Only one job's events. */
  jobId?: string;
}

const QUEUE_EVENTS_OPTIONS = new Set(["url", "namespace", "lastEventId", "autorun", "group", "jobId"]);

/** A subscription to a script type's job events, as BullMQ's QueueEvents. */
export class QueueEvents extends EventEmitter {
  private readonly base: Redis;
  private readonly readers: Reader[] = [];
  private closing = false;
  private ready: Promise<void> | null = null;
  private loops: Promise<void>[] = [];
  private readonly keys: Keys;

  constructor(
    readonly name: string,
    private readonly opts: QueueEventsOptions = {},
  ) {
    super();
    for (const k of Object.keys(opts)) {
      if (!QUEUE_EVENTS_OPTIONS.has(k)) {
        const hint: Record<string, string> = { connection: "url", prefix: "namespace", blockingTimeout: "(none: reads block 1 s)" };
        throw new InvalidInput(`QueueEvents option ${JSON.stringify(k)} is not one hero knows${hint[k] ? `; use ${hint[k]}` : ""}: the options are ${[...QUEUE_EVENTS_OPTIONS].join(", ")}`);
      }
    }
    if (typeof name !== "string" || !/^[A-Za-z0-9_-]{1,64}$/.test(name)) throw new InvalidInput(`script type ${JSON.stringify(name)}: use 1-64 characters of A-Z a-z 0-9 _ -`);
    if (opts.lastEventId !== undefined && !/^(\$|0|\d+(-\d+)?)$/.test(opts.lastEventId)) {
      throw new InvalidInput(`lastEventId ${JSON.stringify(opts.lastEventId)}: give "$" (now), "0" (the oldest kept) or an event id (<ms>-<seq>)`);
    }
    this.keys = new Keys(opts.namespace ?? "hero");
    this.base = new Redis(redisUrl(opts.url), { lazyConnect: true, maxRetriesPerRequest: 3 });
    // errors are `error` events (and `waitUntilReady()`'s rejection), never unhandled ones
    this.base.on("error", () => undefined);
    if (opts.autorun ?? true) this.run().catch((e) => this.emit("error", e));
  }

  /** Starts reading (once); resolves when the readers hold their cursors. */
  run(): Promise<void> {
    if (!this.ready) this.ready = this.start();
    return this.ready;
  }

  /** Resolves once the subscription reads (everything logged after this is seen). */
  async waitUntilReady(): Promise<void> {
    await this.run();
  }

  private async start(): Promise<void> {
    await this.base.connect();
    const map = ShardMap.parse(await this.base.hgetall(this.keys.shardMap()));
    const filter: Filter = { type: this.name, ...(this.opts.group ? { queue: `${this.name}/${this.opts.group}` } : {}), ...(this.opts.jobId ? { jobId: this.opts.jobId } : {}) };
    for (const n of map.sharded ? map.served() : [0]) {
      const r = new Reader(this.base, map.sharded ? map.keys(this.keys, n) : this.keys, n, filter);
      r.conn.on("error", () => undefined);
      this.readers.push(r);
      await r.open(this.opts.lastEventId ?? "$");
    }
    this.loops = this.readers.map((r) => this.loop(r));
  }

  private async loop(r: Reader): Promise<void> {
    let failing = false;
    while (!this.closing) {
      try {
        const items = await r.read();
        failing = false;
        for (const item of items) this.dispatch(item);
      } catch (e) {
        if (this.closing) return;
        if (!failing) this.emit("error", e);
        failing = true;
        await new Promise((res) => setTimeout(res, 1000));
      }
    }
  }

  private dispatch(item: HeroEvent | { gap: number | null; id: string; shard: number }): void {
    if ("gap" in item) {
      this.emit("gap", { missed: item.gap, shard: item.shard }, item.id);
      return;
    }
    const e = item;
    this.emit("event", e, e.id);
    const jobId = e.jobId;
    switch (e.event) {
      case "submitted":
      case "dispatched":
        if (e.dueMs !== undefined) this.emit("delayed", { jobId, delay: e.dueMs }, e.id);
        else this.emit("waiting", { jobId }, e.id);
        break;
      case "started":
        this.emit("active", { jobId, prev: "waiting" }, e.id);
        break;
      case "finished":
        this.emit("completed", { jobId, returnvalue: e.output ?? null }, e.id);
        break;
      case "error":
      case "dead": // ended `error` by the broker (abandoned after its attempts), dead-lettered
        this.emit("failed", { jobId, failedReason: e.reason ?? "" }, e.id);
        break;
      case "retried":
        this.emit("retried", { jobId, attempt: e.attempt, ...(e.reason ? { failedReason: e.reason } : {}) }, e.id);
        if (e.dueMs !== undefined) this.emit("delayed", { jobId, delay: e.dueMs }, e.id);
        break;
      case "recovered":
        this.emit("stalled", { jobId }, e.id);
        break;
      case "stopped":
      case "purged":
        this.emit("removed", { jobId }, e.id);
        break;
      case "progress": {
        let data: unknown = e.reason ?? null;
        try {
          data = JSON.parse(e.reason ?? "null");
        } catch {
          // a detail that is not JSON stays text
        }
        this.emit("progress", { jobId, data }, e.id);
        break;
      }
      default:
        break;
    }
  }

  /** Stops reading and closes the connections. */
  async close(): Promise<void> {
    this.closing = true;
    await this.ready?.catch(() => undefined);
    for (const r of this.readers) r.conn.disconnect();
    await Promise.all(this.loops);
    this.base.disconnect();
  }
}

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
      this.conn = this.base.duplicate();
      this.conn.on("error", () => undefined);
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
