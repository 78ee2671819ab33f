// The worker: presence, precedence fetch, handler calls with an AbortSignal, lease renewal with
// progress and log lines, time limits, stop requests, fenced batched completion, retries by
// back-off, graceful shutdown, every shard of a sharded namespace (one lane a shard, the slots
// shared), and a turn at the queue's upkeep (duties.ts), so no `hero broker` need run. The
// names are BullMQ's where they fit: `new Worker(type, async job => …, { concurrency })`,
// `job.data`, `job.updateProgress`, `job.log`, events `completed`, `failed`, `error`.
import { EventEmitter } from "node:events";
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";

import { Redis } from "ioredis";

import { InvalidInput, strictOptions, WorkerFailed } from "./errors.js";
import { millis, whole } from "./options.js";
import { Keys } from "./keys.js";
import { clockOffsetMs, evictingPolicy, iso, Protocol, RELEASE, VERSION } from "./protocol.js";
import { checkUrl, openRedis, redisUrl } from "./connect.js";
import { ShardMap } from "./shards.js";
import { Lane } from "./lane.js";
import { sleep, wakeSleepers } from "./outage.js";
import type { Handler, WorkerJob } from "./worker-job.js";

export { Abort, Retry, UnrecoverableError, WorkerJob } from "./worker-job.js";
export type { Handler } from "./worker-job.js";

const NAME = /^[A-Za-z0-9_-]{1,64}$/;

const WORKER_OPTIONS: ReadonlySet<string> = new Set(["url", "namespace", "group", "instance", "concurrency", "leaseMs", "presenceTtlMs", "shutdownMs", "autorun", "duties"]);

/** BullMQ's Worker options and what hero calls them (or why it has none). */
const WORKER_HINTS: Record<string, string> = {
  connection: "url (a Redis URL: redis://host:port)",
  prefix: "namespace",
  limiter: "a queue policy, kept by the server for every worker: new Queue(type, { url }).setPolicy({ rate: { max, duration } })",
  lockDuration: "leaseMs",
  lockRenewTime: "(none: the lease is renewed every third of leaseMs)",
  stalledInterval: "(none: the workers' upkeep recovers a silent worker's jobs after presenceTtlMs)",
  skipStalledCheck: "duties: false (this worker then leaves the queue's upkeep to other workers or a `hero broker`)",
  maxStalledCount: "a queue policy's retries (a recovered job counts an attempt)",
  removeOnComplete: "the submit option removeOnComplete",
  removeOnFail: "the submit option removeOnFail",
  runRetryDelay: "(none: a failed fetch backs off on its own)",
  useWorkerThreads: "(none: run several Worker processes)",
  drainDelay: "(none: an idle worker blocks on Redis until a job comes)",
  name: "instance",
};

export interface WorkerOptions {
  /** Redis URL (default HERO_REDIS_URL, else redis://127.0.0.1:6379). */
  url?: string;
  namespace?: string;
  group?: string;
  instance?: string;
  /** Handlers at once (default 1, as BullMQ). */
  concurrency?: number;
  leaseMs?: number;
  presenceTtlMs?: number;
  /** How long `close()` lets running jobs finish before handing them back. */
  shutdownMs?: number;
  /** Start at once (default true, as BullMQ); else call `run()`. */
  autorun?: boolean;
  /** Take a turn at the queue's upkeep (default true): promoting due delayed jobs and retries,
   * recovering the jobs of dead workers, ending jobs past their time limit, deleting ended jobs
   * past their retention, firing recurring jobs' due ticks. One process at a time does it,
   * however many workers run, so no `hero broker` is needed. `false` leaves it to other workers
   * or a broker (with none, recurring jobs do not fire). */
  duties?: boolean;
}

/** The worker's events and their arguments (BullMQ's names): `worker.on("completed", (job,
 * result) => …)` is typed by them. */
export interface WorkerListener<Data = any, Result = unknown> {
  /** Connected and registered: it fetches. */
  ready: () => void;
  /** A job's handler starts. */
  active: (job: WorkerJob<Data>) => void;
  /** A job finished: what its handler returned. */
  completed: (job: WorkerJob<Data>, result: Result) => void;
  /** An attempt failed (`answer`: `completed` when that ended the job, `retrying` when it runs
   * again): what its handler threw. */
  failed: (job: WorkerJob<Data> | undefined, error: Error, answer: "completed" | "retrying") => void;
  /** A late result refused: `lost` (a renewal found the job taken away) or `lease_lost`. */
  fenced: (job: WorkerJob<Data> | undefined, why: string) => void;
  /** A failing call of the worker's (it goes on, backing off: Redis out of reach or refusing
   * writes for a while, said at once and then every 30 s), or why it stopped (`WorkerFailed`:
   * a loop that cannot go on; it took no more jobs and removed its presence). */
  error: (error: Error) => void;
  /** What the operator should know that is no failed call: this machine's clock more than 2 s
   * from Redis's (and agreeing again), Redis's maxmemory-policy turned evicting (and back), a
   * failing call working again. */
  warning: (message: string) => void;
  /** Closed: how many jobs went back to their queues. */
  closed: (handedBack: number) => void;
}

export interface Worker<Data = any, Result = unknown> {
  on<E extends keyof WorkerListener<Data, Result>>(event: E, listener: WorkerListener<Data, Result>[E]): this;
  once<E extends keyof WorkerListener<Data, Result>>(event: E, listener: WorkerListener<Data, Result>[E]): this;
  off<E extends keyof WorkerListener<Data, Result>>(event: E, listener: WorkerListener<Data, Result>[E]): this;
}

/** A worker of `types`: `new Worker<Data, Result>(type, async (job) => result, { url,
 * concurrency })`. `Data` is what its jobs' `data` is (their payload's type), `Result` what the
 * handler returns. */
export class Worker<Data = any, Result = unknown> extends EventEmitter {
  readonly types: string[];
  readonly group: string;
  readonly instance: string;
  readonly consumer: string;
  readonly concurrency: number;
  private readonly opts: Required<Omit<WorkerOptions, "url" | "instance" | "autorun">> & { url: string };
  private redis!: Redis;
  private readonly lanes = new Map<string, Lane>();
  private free: number;
  private slotWaiters: (() => void)[] = [];
  private stopping = false;
  private running: Promise<void> | null = null;
  private readonly startedAt = iso();

  private lastLogged: [string, number] | null = null;
  private lastWarned: [string, number] | null = null;
  /** The maxmemory policy the heartbeat last read ('' before the first). */
  private policy = "";
  /** Why the worker stopped on its own (a loop that could not go on), once it has. */
  private failure: WorkerFailed | null = null;
  private readonly ready: Promise<void>;
  private markStarted!: () => void;
  private markFailed!: (e: unknown) => void;

  constructor(types: string | string[], readonly handler: Handler<Data, Result>, opts: WorkerOptions = {}) {
    super();
    if (typeof handler !== "function") {
      throw new InvalidInput(`new Worker(type, handler, options): the handler is ${handler === undefined ? "missing" : `a ${typeof handler}`}; give an async function (job) => result${typeof handler === "string" ? " (a processor file path, BullMQ's sandbox, is not supported: import its function)" : ""}`);
    }
    if (opts === null || typeof opts !== "object") throw new InvalidInput("Worker options are an object: { url, concurrency, ... }");
    strictOptions("Worker", opts, WORKER_OPTIONS, WORKER_HINTS);
    this.ready = new Promise<void>((resolve, reject) => {
      this.markStarted = resolve;
      this.markFailed = reject;
    });
    this.ready.catch(() => undefined);
    this.types = (Array.isArray(types) ? types : [types]).map((t) => {
      if (!NAME.test(t)) throw new InvalidInput(`script type ${JSON.stringify(t)}: use 1-64 characters of A-Z a-z 0-9 _ -`);
      return t;
    });
    if (this.types.length === 0) throw new InvalidInput("no script types: name at least one");
    this.group = opts.group ?? "default";
    this.instance = opts.instance ?? `node-${process.pid}`;
    for (const [what, v] of [["group", this.group], ["instance", this.instance], ["namespace", opts.namespace ?? "hero"]]) {
      if (!NAME.test(v)) throw new InvalidInput(`${what} ${JSON.stringify(v)}: use 1-64 characters of A-Z a-z 0-9 _ -`);
    }
    this.concurrency = whole("concurrency", opts.concurrency ?? 1, 1);
    for (const k of ["leaseMs", "presenceTtlMs", "shutdownMs"] as const) if (opts[k] !== undefined) millis(k, opts[k]);
    // `duties: "false"` would be truthy: a wrong form fails loudly rather than doing the upkeep
    if (opts.duties !== undefined && typeof opts.duties !== "boolean") throw new InvalidInput(`duties ${JSON.stringify(opts.duties)} is not true or false`);
    this.free = this.concurrency;
    this.consumer = `${this.group}:${this.instance}:${randomBytes(4).toString("hex")}`;
    this.opts = {
      url: checkUrl(redisUrl(opts.url)),
      namespace: opts.namespace ?? "hero",
      group: this.group,
      concurrency: this.concurrency,
      leaseMs: opts.leaseMs ?? 30_000,
      presenceTtlMs: opts.presenceTtlMs ?? 15_000,
      shutdownMs: opts.shutdownMs ?? 30_000,
      // on by default, as BullMQ users expect: no second daemon to run beside the workers
      duties: opts.duties ?? true,
    };
    if (this.opts.leaseMs < 300 || this.opts.presenceTtlMs < 300) throw new InvalidInput("leaseMs and presenceTtlMs must be at least 300");
    if (opts.autorun ?? true) {
      // an error at start is an `error` event (or one logged line) and `waitUntilReady()`'s
      // rejection, never an unhandled one
      this.run().catch((e) => {
        if (e !== this.failure) this.fail(e);
      });
    }
  }

  /** Resolves once the worker fetches (connected, registered); rejects with why it could not
   * start (a `HeroError` naming the URL when Redis cannot be reached). */
  async waitUntilReady(): Promise<void> {
    if (!this.running) this.run().catch(() => undefined);
    await this.ready;
  }

  /** @internal an error of the worker's: its `error` event when someone listens; otherwise one
   * line on stderr (the same message at most once a minute), never a crash of the process
   * (EventEmitter throws an `error` no one listens to). */
  fail(e: unknown): void {
    if (this.listenerCount("error") > 0) {
      this.emit("error", e);
      return;
    }
    const msg = e instanceof Error ? e.message : String(e);
    const now = Date.now();
    if (this.lastLogged?.[0] !== msg || now - this.lastLogged[1] > 60_000) {
      this.lastLogged = [msg, now];
      console.error(`hero-broker worker ${this.consumer}: ${msg} (listen with worker.on("error", ...) to handle it)`);
    }
  }

  /** @internal what the operator should know that is no failed call: the `warning` event when
   * someone listens, otherwise one line on stderr (the same at most once a minute). */
  warn(message: string): void {
    if (this.listenerCount("warning") > 0) {
      this.emit("warning", message);
      return;
    }
    const now = Date.now();
    if (this.lastWarned?.[0] !== message || now - this.lastWarned[1] > 60_000) {
      this.lastWarned = [message, now];
      console.warn(`hero-broker worker ${this.consumer}: ${message}`);
    }
  }

  /** @internal the maxmemory policy a heartbeat read: said once per change, when it turns to
   * one that may evict a job's record (anything but noeviction) and when it is noeviction again. */
  notePolicy(policy: string): void {
    if (!policy || policy === this.policy) return;
    const was = this.policy;
    this.policy = policy;
    if (evictingPolicy(policy)) {
      this.warn(
        `Redis's maxmemory-policy is ${policy}: Redis may evict any key, a job's record included, and lose the job without a trace. Submits are refused until it is noeviction (CONFIG SET maxmemory-policy noeviction), unless accepted with \`hero broker --accept-eviction ${policy}\``,
      );
    } else if (evictingPolicy(was)) {
      this.warn(`Redis's maxmemory-policy is ${policy} again: submits are accepted`);
    }
  }

  /** @internal a loop cannot go on: the worker stops taking jobs and says why (its `error`
   * event, then `run()`'s rejection); its running jobs finish within `shutdownMs`, the rest go
   * back, its presence is removed, and `close()` resolves as ever. */
  halt(e: WorkerFailed): void {
    if (this.failure) return;
    this.failure = e;
    this.fail(e);
    this.stopNow();
  }

  /** Starts the worker (once); resolves when it has closed, rejects with a `WorkerFailed` when
   * it stopped on its own (a loop that could not go on). */
  run(): Promise<void> {
    if (!this.running) {
      this.running = this.serve();
      this.running.catch((e) => this.markFailed(e));
    }
    return this.running;
  }

  /** Runs until SIGTERM or SIGINT, then closes gracefully (signal handlers only while it runs). */
  async runUntilSignal(): Promise<void> {
    const stop = () => void this.close();
    process.once("SIGTERM", stop);
    process.once("SIGINT", stop);
    try {
      await this.run();
    } finally {
      process.off("SIGTERM", stop);
      process.off("SIGINT", stop);
    }
  }

  /** Stops taking jobs, lets running ones finish within `shutdownMs`, hands the rest back,
   * removes its presence and closes its connections. */
  async close(): Promise<void> {
    this.stopNow();
    await this.running?.catch(() => undefined);
  }

  /** Stops taking jobs, and tells every loop at once: an idle worker's close waits for no poll
   * interval nor a blocked read's timeout, only for its calls to Redis. */
  private stopNow(): void {
    this.stopping = true;
    for (const w of this.slotWaiters.splice(0)) w();
    for (const lane of this.lanes.values()) {
      lane.interrupt();
      lane.wake();
    }
    wakeSleepers();
  }

  private async serve(): Promise<void> {
    this.redis = await openRedis(this.opts.url, { blocking: true, onError: (e) => this.fail(e) });
    const base = new Keys(this.opts.namespace);
    let failed: unknown = null;
    try {
      try {
        await new Protocol(this.redis, base).ensureLibrary();
        let map = ShardMap.parse(await this.redis.hgetall(base.shardMap()));
        const add = async () => {
          for (const n of map.served()) {
            const keys = map.keys(base, n);
            if (!this.lanes.has(keys.prefix)) {
              const lane = new Lane(this, keys);
              this.lanes.set(keys.prefix, lane);
              try {
                await lane.start();
              } catch (e) {
                // tried again with the next look at the shard map
                this.lanes.delete(keys.prefix);
                lane.abandon();
                throw e;
              }
            }
          }
        };
        await add();
        this.markStarted();
        this.emit("ready");
        // shards added while it runs are served within 2 s
        while (!this.stopping) {
          await sleep(2000, () => this.stopping);
          if (this.stopping) break;
          try {
            map = ShardMap.parse(await this.redis.hgetall(base.shardMap()));
            await add();
          } catch (e) {
            this.fail(e);
          }
        }
      } catch (e) {
        // the start failed: the lanes already started stop as at a close
        failed = e;
        this.stopping = true;
        for (const w of this.slotWaiters.splice(0)) w();
      }
      await Promise.allSettled([...this.lanes.values()].map((l) => l.finish()));
    } finally {
      this.redis.disconnect();
    }
    if (failed !== null) throw failed;
    if (this.failure) throw this.failure;
  }

  // -- slots ----------------------------------------------------------------------------------
  /** @internal up to `max` free slots, waiting for one when none is free (0 once stopping). */
  async takeSlots(max: number): Promise<number> {
    while (this.free === 0 && !this.stopping) await new Promise<void>((r) => this.slotWaiters.push(r));
    if (this.stopping) return 0;
    const n = Math.min(max, this.free);
    this.free -= n;
    return n;
  }

  /** @internal */
  releaseSlots(n: number): void {
    this.free += n;
    if (this.slotWaiters.length) for (const w of this.slotWaiters.splice(0)) w();
  }

  /** @internal the worker's connection (each lane adds two blocking ones: its stop lists', and
   * one its fetch loops share). */
  get connection(): Redis {
    return this.redis;
  }

  /** @internal */
  get isStopping(): boolean {
    return this.stopping;
  }

  /** @internal */
  get settings() {
    return this.opts;
  }

  /** @internal the presence JSON. */
  presence(running: number): string {
    return JSON.stringify({
      pid: process.pid,
      hostname: hostname(),
      started_at: this.startedAt,
      version: `hero-broker (npm) ${RELEASE}`,
      protocol: VERSION,
      capabilities: this.types,
      consumer: this.consumer,
      concurrency: this.concurrency,
      running,
      last_heartbeat: iso(),
      // this machine's clock minus Redis's, as last measured (`hero actors` shows it)
      skew_ms: -clockOffsetMs(),
    });
  }
}
