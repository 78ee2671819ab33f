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
// The waits' follower of the log is `waiter.ts`; reading the log, `log.ts`.
import { EventEmitter } from "node:events";

import { Redis } from "ioredis";

import { InvalidInput, strictOptions } from "./errors.js";
import { Keys } from "./keys.js";
import { checkUrl, duplicate, openRedis, redisUrl } from "./connect.js";
import { before, BLOCK_MS, COUNT, decodeEntry, Entries, entriesOf, EventLogOff, eventsMax, HeroEvent, logInfo, parseInfo } from "./log.js";
import { ShardMap } from "./shards.js";
import { readResult } from "./value.js";

export { EventLogOff, decodeEntry } from "./log.js";
export type { HeroEvent } from "./log.js";


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
    this.conn = duplicate(base);
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
      // the value as bytes (MessagePack), never as UTF-8 text
      for (const e of finished) pipe.hmgetBuffer(this.keys.job(e.jobId), "output", "value");
      const got = (await pipe.exec()) ?? [];
      finished.forEach((e, k) => {
        const v = got[k]?.[1] as (Buffer | null)[] | undefined;
        if (!Array.isArray(v) || (v[0] === null && v[1] === null)) return;
        const text = v[0] === null ? undefined : v[0].toString("utf8");
        e.output = readResult(v[1], text);
        if (text !== undefined) e.outputText = text;
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
/** QueueEvents' events and their arguments (BullMQ's shapes; `id` is the event's id in the
 * log, for `lastEventId`): `events.on("completed", ({ jobId, returnvalue }) => …)` is typed by
 * them. */
export interface QueueEventsListener {
  /** `returnvalue`: what the handler returned, of its own type (protocol 33's reading rule: an
   * object, an array, null, a Date, a Buffer, a number …; a string result or a foreign worker's
   * text as a string); null when the job was deleted before the event was read. */
  completed: (args: { jobId: string; returnvalue: unknown }, id: string) => void;
  failed: (args: { jobId: string; failedReason: string }, id: string) => void;
  active: (args: { jobId: string; prev: string }, id: string) => void;
  waiting: (args: { jobId: string }, id: string) => void;
  delayed: (args: { jobId: string; delay: number }, id: string) => void;
  retried: (args: { jobId: string; attempt?: number; failedReason?: string }, id: string) => void;
  /** A job recovered from a dead worker. */
  stalled: (args: { jobId: string }, id: string) => void;
  /** A job stopped. */
  removed: (args: { jobId: string }, id: string) => void;
  progress: (args: { jobId: string; data: unknown }, id: string) => void;
  /** It fell behind the log's cap: `missed` events are gone. */
  gap: (args: { missed: number; shard: number }, id: string) => void;
  /** Every event, as the log holds it. */
  event: (e: HeroEvent, id: string) => void;
  error: (error: Error) => void;
}

export interface QueueEvents {
  on<E extends keyof QueueEventsListener>(event: E, listener: QueueEventsListener[E]): this;
  once<E extends keyof QueueEventsListener>(event: E, listener: QueueEventsListener[E]): this;
  off<E extends keyof QueueEventsListener>(event: E, listener: QueueEventsListener[E]): this;
}

export class QueueEvents extends EventEmitter {
  private base: Redis | null = null;
  private readonly url: string;
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
    strictOptions("QueueEvents", opts, QUEUE_EVENTS_OPTIONS, { connection: "url", prefix: "namespace", blockingTimeout: "(none: reads block 1 s)" });
    if (typeof name !== "string" || !/^[A-Za-z0-9_-]{1,64}$/.test(name)) throw new InvalidInput(`script type ${JSON.stringify(name)}: use 1-64 characters of A-Z a-z 0-9 _ -`);
    if (opts.lastEventId !== undefined && !/^(\$|0|\d+(-\d+)?)$/.test(opts.lastEventId)) {
      throw new InvalidInput(`lastEventId ${JSON.stringify(opts.lastEventId)}: give "$" (now), "0" (the oldest kept) or an event id (<ms>-<seq>)`);
    }
    this.keys = new Keys(opts.namespace ?? "hero");
    this.url = checkUrl(redisUrl(opts.url));
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
    // errors are `error` events (and `waitUntilReady()`'s rejection), never unhandled ones
    this.base = await openRedis(this.url);
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
    this.base?.disconnect();
  }
}

