// The worker: presence, precedence fetch, handler calls with an AbortSignal, lease renewal with
// progress and log lines, time limits, stop requests, fenced batched completion, retries by
// back-off, graceful shutdown, and every shard of a sharded namespace (one lane a shard, the
// slots shared). The names are BullMQ's where they fit: `new Worker(type, async job => …,
// { concurrency })`, `job.data`, `job.updateProgress`, `job.log`, events `completed`, `failed`,
// `error`.
import { EventEmitter } from "node:events";
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";

import { Redis } from "ioredis";

import { InvalidInput } from "./errors.js";
import { attemptsOf, DEFAULT_TIMEOUT_S, Job, jobFromText, numberField, recordText } from "./job.js";
import { Keys } from "./keys.js";
import { decode, Json } from "./msgpack.js";
import { Done, iso, nowMs, Protocol, RELEASE, retryAtMs, VERSION } from "./protocol.js";
import { redisUrl } from "./client.js";
import { ShardMap } from "./shards.js";

const NAME = /^[A-Za-z0-9_-]{1,64}$/;
const LOG_LINES = 100;
/** Reports gather this long: one call per flush for every job at once. */
const REPORT_EVERY_MS = 500;

/** Throw from a handler: try the job again after `delayMs` (within its budget). */
export class Retry extends Error {
  constructor(reason = "retry", readonly delayMs = 1000) {
    super(reason);
    this.name = "Retry";
  }
}

/** Throw from a handler: the job ends `error` now, whatever its retry budget. */
export class Abort extends Error {
  constructor(reason = "aborted") {
    super(reason);
    this.name = "Abort";
  }
}

/** BullMQ's name for [`Abort`]. */
export const UnrecoverableError = Abort;

/** The job a handler is given. */
export class WorkerJob {
  /** Why `signal` fired (`stopped`, `timeout`, `lost`, `shutdown`), once it has. */
  cancelReason: string | null = null;
  /** Made when a handler first asks for `signal`: an AbortController per job was a twentieth
   * of the worker's time, and most handlers never look. */
  private abort: AbortController | null = null;
  private progress: [number, string] | null = null;
  private lines: string[] = [];
  /** @internal when the job's time limit ends it (ms since the epoch). */
  deadline = 0;

  private parsed: Job | null = null;
  private decoded: { data: Json } | null = null;

  /** @internal from the record's fields as text (see `recordText`): the rest is parsed when
   * asked for, since a handler that reads only `data` should not pay for the whole record. */
  constructor(
    readonly id: string,
    private readonly fields: Record<string, string>,
    private readonly payload: Buffer | null,
  ) {}

  /** The job record (every field the protocol defines). */
  get record(): Job {
    return (this.parsed ??= jobFromText(this.id, this.fields, this.payload));
  }

  /** The payload (any JSON value), or null. */
  get data(): Json {
    if (this.decoded === null) {
      let data: Json = null;
      if (this.payload) {
        try {
          data = decode(this.payload);
        } catch {
          data = null;
        }
      }
      this.decoded = { data };
    }
    return this.decoded.data;
  }

  /** @internal a field of the record as text ('' when absent). */
  field(name: string): string {
    return this.fields[name] ?? "";
  }

  /** Aborted once the job must stop: stopped, timed out, its lease lost, or shutting down. */
  get signal(): AbortSignal {
    if (this.abort === null) {
      this.abort = new AbortController();
      if (this.cancelReason !== null) this.abort.abort(new Error(this.cancelReason));
    }
    return this.abort.signal;
  }

  get script(): string {
    return this.fields.script ?? "";
  }
  get name(): string {
    return this.fields.script_type ?? "";
  }
  /** 1 for the first run. */
  get attempt(): number {
    return Math.max(1, attemptsOf(this.fields));
  }

  /** How far the job is (0-100, and a short message); the latest is sent within half a second. */
  async updateProgress(percent: number, message = ""): Promise<void> {
    this.progress = [Number(percent), String(message)];
  }

  /** Appends a line to the job's log (it keeps its last 100). */
  async log(line: string): Promise<void> {
    this.lines.push(String(line));
    if (this.lines.length > LOG_LINES) this.lines.shift();
  }

  /** @internal what was reported since the last take. */
  take(): [[number, string] | null, string[]] | null {
    if (this.progress === null && this.lines.length === 0) return null;
    const out: [[number, string] | null, string[]] = [this.progress, this.lines];
    this.progress = null;
    this.lines = [];
    return out;
  }

  /** @internal */
  cancel(reason: string): void {
    if (this.cancelReason === null) this.cancelReason = reason;
    this.abort?.abort(new Error(reason));
  }
}

export type Handler = (job: WorkerJob) => Promise<unknown> | unknown;

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
}

interface Running {
  job: WorkerJob;
  lane: Lane;
  streamIndex: number;
  entry: string;
  began: number;
  settled: boolean;
}

export class Worker extends EventEmitter {
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

  constructor(types: string | string[], readonly handler: Handler, opts: WorkerOptions = {}) {
    super();
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
    this.concurrency = opts.concurrency ?? 1;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1) throw new InvalidInput("concurrency must be at least 1");
    this.free = this.concurrency;
    this.consumer = `${this.group}:${this.instance}:${randomBytes(4).toString("hex")}`;
    this.opts = {
      url: redisUrl(opts.url),
      namespace: opts.namespace ?? "hero",
      group: this.group,
      concurrency: this.concurrency,
      leaseMs: opts.leaseMs ?? 30_000,
      presenceTtlMs: opts.presenceTtlMs ?? 15_000,
      shutdownMs: opts.shutdownMs ?? 30_000,
    };
    if (this.opts.leaseMs < 300 || this.opts.presenceTtlMs < 300) throw new InvalidInput("leaseMs and presenceTtlMs must be at least 300");
    if (opts.autorun ?? true) {
      // an error at start is an `error` event (and `run()`'s rejection), never an unhandled one
      this.run().catch((e) => this.emit("error", e));
    }
  }

  /** Starts the worker (once); resolves when it has closed. */
  run(): Promise<void> {
    if (!this.running) this.running = this.serve();
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
    this.stopping = true;
    for (const w of this.slotWaiters.splice(0)) w();
    for (const lane of this.lanes.values()) lane.wake();
    await this.running?.catch(() => undefined);
  }

  private async serve(): Promise<void> {
    this.redis = new Redis(this.opts.url, { lazyConnect: true, maxRetriesPerRequest: null });
    await this.redis.connect();
    const base = new Keys(this.opts.namespace);
    try {
      await new Protocol(this.redis, base).ensureLibrary();
      let map = ShardMap.parse(await this.redis.hgetall(base.shardMap()));
      const add = async () => {
        for (const n of map.served()) {
          const keys = map.keys(base, n);
          if (!this.lanes.has(keys.prefix)) {
            const lane = new Lane(this, keys);
            this.lanes.set(keys.prefix, lane);
            await lane.start();
          }
        }
      };
      await add();
      this.emit("ready");
      // shards added while it runs are served within 2 s
      while (!this.stopping) {
        await sleep(2000, () => this.stopping);
        if (this.stopping) break;
        try {
          map = ShardMap.parse(await this.redis.hgetall(base.shardMap()));
          await add();
        } catch (e) {
          this.emit("error", e);
        }
      }
      await Promise.all([...this.lanes.values()].map((l) => l.finish()));
    } finally {
      this.redis.disconnect();
    }
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
    for (const w of this.slotWaiters.splice(0)) w();
  }

  /** @internal the worker's connection (each lane adds two blocking ones). */
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
    });
  }
}

/** The worker on one shard: its keys, streams, connections, running jobs and completions. */
class Lane {
  private readonly proto: Protocol;
  private readonly streams: string[];
  private readonly running = new Map<string, Running>();
  private done: Done[] = [];
  private doneWaiter: (() => void) | null = null;
  private control!: Redis;
  private loops: Promise<void>[] = [];
  /** The registered ones of `streams` (indexes) and the registry's signal id they were read
   * at: fetches name only those while the signal has not moved (each key of an FCALL costs
   * Redis and this process; a worker names 30 streams a type, most never used). */
  private registered: { signal: string; indexes: number[] } | null = null;
  /** Fetch loops still running (two a lane). */
  private fetchers = 2;
  /** Each queue policy's time limit (s), read every 2 s: a job naming none takes its queue's. */
  private timeLimits = new Map<string, number>();
  /** The lease to renew within (see `readPolicies`). */
  private leaseMs: number;
  /** Reports are dropped, not sent, while a live older worker would refuse them. */
  private holdReports = false;

  constructor(
    private readonly w: Worker,
    private readonly keys: Keys,
  ) {
    this.proto = new Protocol(w.connection, keys);
    this.streams = keys.precedence(w.types, w.group, w.instance);
    this.leaseMs = w.settings.leaseMs;
  }

  private get redis(): Redis {
    return this.proto.redis;
  }

  async start(): Promise<void> {
    this.control = this.redis.duplicate();
    await this.heartbeat();
    await this.readPolicies();
    // two fetches under way, as the Rust worker: the next is in Redis while this process starts
    // the jobs of the last (a fetch loop alone waited on Redis half the time)
    this.loops = [...Array.from({ length: this.fetchers }, () => this.fetchLoop()), this.completer(), this.keeper(), this.controlLoop()];
  }

  wake(): void {
    this.doneWaiter?.();
  }

  // -- fetch ----------------------------------------------------------------------------------
  private async fetchLoop(): Promise<void> {
    const max = Math.max(8, Math.floor(this.w.concurrency / 2));
    const blocking = this.redis.duplicate();
    let full = false;
    while (!this.w.isStopping) {
      // under a backlog, let the handlers that end in this turn free their slots first, so a
      // fetch asks for many jobs at once rather than one (a call's fixed cost, per job)
      if (full) await new Promise((r) => setImmediate(r));
      const free = await this.w.takeSlots(max);
      if (free === 0) break;
      let got;
      const view = this.registered;
      const named = view ? view.indexes.map((i) => this.streams[i]) : this.streams;
      try {
        got = await this.proto.fetch(named, this.w.consumer, free, view ? view.signal : "*");
        if (got.registered === "stale") {
          this.registered = null;
        } else if (Array.isArray(got.registered) && got.signal !== null) {
          this.registered = { signal: got.signal, indexes: got.registered };
        }
        if (view) {
          // the answer's stream indexes are into the streams it was given
          got.jobs = got.jobs.map(([i, entry, id]) => [view.indexes[i], entry, id]);
        }
      } catch (e) {
        this.w.releaseSlots(free);
        this.w.emit("error", e);
        await sleep(1000, () => this.w.isStopping);
        continue;
      }
      this.w.releaseSlots(free - got.jobs.length);
      full = got.jobs.length === free;
      if (got.jobs.length) await this.begin(got.jobs, got.records);
      else if (got.registered === "stale") continue;
      else if (got.cursors.length) await this.waitForWork(blocking, named, got.cursors);
    }
    blocking.disconnect();
    this.fetchers -= 1;
  }

  private async waitForWork(blocking: Redis, streams: string[], cursors: string[]): Promise<void> {
    const args: string[] = [];
    const ids: string[] = [];
    streams.forEach((s, i) => {
      if (cursors[i]) {
        args.push(s);
        ids.push(cursors[i]);
      }
    });
    if (cursors.length > streams.length && cursors[cursors.length - 1]) {
      args.push(this.keys.queueSignal());
      ids.push(cursors[cursors.length - 1]);
    }
    if (args.length === 0) return;
    try {
      // at most a second, so a close or a free slot is seen promptly
      await blocking.xread("COUNT", 1, "BLOCK", 1000, "STREAMS", ...args, ...ids);
    } catch {
      await sleep(500, () => this.w.isStopping);
    }
  }

  private async begin(jobs: [number, string, string][], records: (unknown[] | null)[]): Promise<void> {
    const missing: number[] = [];
    for (let i = 0; i < jobs.length; i++) if (records[i] === null) missing.push(i);
    if (missing.length) {
      const pipe = this.redis.pipeline();
      // the flat reply: ioredis's hgetall object transform cost a tenth of the worker's time
      for (const i of missing) pipe.callBuffer("HGETALL", this.keys.job(jobs[i][2]));
      const res = (await pipe.exec()) ?? [];
      missing.forEach((i, k) => {
        const r = res[k]?.[1];
        records[i] = Array.isArray(r) ? r : [];
      });
    }
    const now = Date.now();
    for (let i = 0; i < jobs.length; i++) {
      const [index, entry, id] = jobs[i];
      const [fields, payload] = recordText(records[i] ?? []);
      if (fields.status !== "started" || fields.lease !== entry) {
        // stopped or recovered between the fetch and the read: no longer ours
        this.w.releaseSlots(1);
        continue;
      }
      const limitS = numberField(fields, "timeout", null) ?? this.policyTimeout(fields);
      const job = new WorkerJob(id, fields, payload);
      // the keeper ends it at its deadline (a timer per job cost more than the job's start)
      job.deadline = now + limitS * 1000;
      const run: Running = { job, lane: this, streamIndex: index, entry, began: now, settled: false };
      this.running.set(id, run);
      this.w.emit("active", job);
      void this.execute(run);
    }
  }

  /** A job naming no time limit gets its queue policy's (group's, then type's), else the
   * default (300 s). */
  private policyTimeout(fields: Record<string, string>): number {
    if (this.timeLimits.size === 0) return DEFAULT_TIMEOUT_S;
    const type = fields.script_type ?? "";
    const s = (fields.group ? this.timeLimits.get(`${type}/${fields.group}`) : undefined) ?? this.timeLimits.get(type);
    return s ?? DEFAULT_TIMEOUT_S;
  }

  /** The queue policies' time limits and the lease to renew within, read every 2 s in one
   * round trip: the lease is the shortest of the worker's own, the brokers' (`lease_ms` in the
   * config hash: what recovery waits for) and any policy's of a queue of its types (a policy
   * may shorten it: docs/protocol.md §5.4). A policy this version cannot read is skipped: its
   * jobs get the default time limit. */
  private async readPolicies(): Promise<void> {
    const [[, raw], [, [brokers, lacks]]] = ((await this.redis.pipeline().hgetall(this.keys.policy()).hmget(this.keys.config(), "lease_ms", "fleet_lacks").exec()) ?? [
      [null, {}],
      [null, [null, null]],
    ]) as [[unknown, Record<string, string>], [unknown, (string | null)[]]];
    // progress and log lines are held back while the brokers say a live worker lacks them
    // (docs/protocol.md §8: it would end a job carrying them in error)
    this.holdReports = !!lacks && lacks.includes('"progress"');
    const limits = new Map<string, number>();
    let lease = this.w.settings.leaseMs;
    const configured = Number(brokers);
    if (configured > 0) lease = Math.min(lease, configured);
    for (const [q, json] of Object.entries(raw ?? {})) {
      try {
        const p = JSON.parse(json);
        const ms = Number(p.timeout_ms);
        if (ms > 0) limits.set(q, Math.max(1, Math.floor(ms / 1000)));
        const l = Number(p.lease_ms);
        if (l > 0 && this.w.types.includes(q.split("/")[0])) lease = Math.min(lease, l);
      } catch {
        // unreadable: the defaults
      }
    }
    this.timeLimits = limits;
    this.leaseMs = lease;
  }

  private async execute(run: Running): Promise<void> {
    const job = run.job;
    let outcome: Done["outcome"] = "done";
    let out = "";
    let retryAt = 0;
    try {
      const value = await this.w.handler(job);
      out = value === undefined || value === null ? "" : typeof value === "string" ? value : JSON.stringify(value);
    } catch (e) {
      if (e instanceof Retry) {
        outcome = "retry";
        out = e.message;
        retryAt = nowMs() + e.delayMs;
      } else if (e instanceof Abort) {
        outcome = "abort";
        out = e.message;
      } else {
        // the handler failed: the attempt fails, retried within the job's budget or its policy's
        outcome = "fail";
        out = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
        retryAt = retryAtMs(job.attempt);
      }
    }
    this.settle(run, outcome, out, retryAt);
    this.w.releaseSlots(1);
  }

  /** Queues the outcome for the completer, once per run; an interrupted run records none. */
  private settle(run: Running, outcome: Done["outcome"], out: string, retryAt: number): void {
    if (run.settled) return;
    run.settled = true;
    const reason = run.job.cancelReason;
    if (reason === "stopped" || reason === "lost" || reason === "shutdown") {
      this.running.delete(run.job.id);
      // a renewal answered `lost` (another delivery owns the job): the result is fenced here,
      // before a completion would have been refused with `lease_lost`
      if (reason === "lost") this.w.emit("fenced", run.job, "lost");
      return;
    }
    const report = run.job.take();
    if (report) void this.report(run, report);
    this.done.push({
      id: run.job.id,
      stream: this.streams[run.streamIndex],
      lease: run.entry,
      outcome,
      text: out,
      retryAt,
      reply: run.job.field("reply"),
      ranMs: Date.now() - run.began,
    });
    this.wake();
  }

  // -- complete -------------------------------------------------------------------------------
  private async completer(): Promise<void> {
    // up to two calls under way: the outcomes that end during one go in the next
    const inFlight = new Set<Promise<void>>();
    for (;;) {
      if (this.done.length === 0) {
        if (this.w.isStopping && this.fetchers === 0 && this.running.size === 0 && inFlight.size === 0) return;
        await new Promise<void>((r) => {
          this.doneWaiter = r;
          setTimeout(r, 200);
        });
        this.doneWaiter = null;
        continue;
      }
      if (inFlight.size >= 2) {
        await Promise.race(inFlight);
        continue;
      }
      // the outcomes of this turn's handlers go in the same call
      await new Promise((r) => setImmediate(r));
      const batch = this.done.splice(0, 100);
      const call: Promise<void> = this.record(batch).finally(() => inFlight.delete(call));
      inFlight.add(call);
    }
  }

  /** One hero_complete of `batch`, sent again until Redis answers (a second answer is
   * harmless: `already_completed`). */
  private async record(batch: Done[]): Promise<void> {
    let delay = 100;
    let answers: string[];
    for (;;) {
      try {
        answers = await this.proto.complete(this.w.consumer, batch);
        break;
      } catch (e) {
        this.w.emit("error", e);
        await sleep(delay, () => false);
        delay = Math.min(delay * 2, 5000);
      }
    }
    batch.forEach((d, i) => {
      const run = this.running.get(d.id);
      this.running.delete(d.id);
      const answer = answers[i];
      const job = run?.job;
      if (answer === "completed" && d.outcome === "done") this.w.emit("completed", job, d.text);
      else if (answer === "completed" || answer === "retrying") this.w.emit("failed", job, new Error(d.text), answer);
      else this.w.emit("fenced", job, answer);
    });
  }

  // -- leases, reports, presence --------------------------------------------------------------
  private async keeper(): Promise<void> {
    const s = this.w.settings;
    let lastBeat = Date.now();
    let lastRenew = Date.now();
    let lastReport = Date.now();
    let lastPolicies = Date.now();
    while (!(this.w.isStopping && this.fetchers === 0 && this.running.size === 0 && this.done.length === 0)) {
      await sleep(100, () => false);
      const now = Date.now();
      this.endOverdue(now);
      try {
        if (now - lastPolicies >= 2000) {
          await this.readPolicies();
          lastPolicies = now;
        }
        if (now - lastBeat >= s.presenceTtlMs / 3) {
          await this.heartbeat();
          lastBeat = now;
        }
        const renew = now - lastRenew >= this.leaseMs / 3;
        const report = now - lastReport >= REPORT_EVERY_MS;
        if (renew || report) {
          // sent together: one round trip for every running job, not one each
          const calls: Promise<void>[] = [];
          for (const run of this.running.values()) {
            if (run.settled) continue;
            const taken = run.job.take();
            if (renew || taken) calls.push(this.report(run, taken));
          }
          await Promise.all(calls);
          if (renew) lastRenew = now;
          lastReport = now;
        }
      } catch (e) {
        this.w.emit("error", e);
      }
    }
  }

  /** Ends the runs past their time limit (checked every pass, 100 ms apart). */
  private endOverdue(now: number): void {
    for (const run of this.running.values()) {
      if (!run.settled && run.job.deadline <= now) {
        run.job.cancel("timeout");
        this.settle(run, "fail", "timeout", retryAtMs(run.job.attempt));
      }
    }
  }

  private async report(run: Running, taken: [[number, string] | null, string[]] | null): Promise<void> {
    const [progress, lines] = taken && !this.holdReports ? taken : [null, []];
    const answer = await this.proto.renew(run.job.id, this.streams[run.streamIndex], run.entry, this.w.consumer, progress, lines);
    if (answer === "stopped" || answer === "lost") run.job.cancel(answer);
  }

  private async heartbeat(): Promise<void> {
    const s = this.w.settings;
    const body = this.w.presence(this.running.size);
    const pipe = this.redis.pipeline();
    const expires = nowMs() + s.presenceTtlMs;
    for (const t of this.w.types) pipe.set(this.keys.presence(t, this.w.group, this.w.instance), body, "PX", s.presenceTtlMs);
    pipe.zadd(this.keys.consumers(), expires, this.w.consumer);
    // the fleet entry says which protocol this process speaks (docs/protocol.md §8)
    const entry = { role: "worker", protocol: Number(VERSION), version: `hero-broker (npm) ${RELEASE}`, shards: true, expires_ms: expires };
    pipe.hset(this.keys.fleet(), this.w.consumer, JSON.stringify(entry));
    await pipe.exec();
  }

  // -- stop requests --------------------------------------------------------------------------
  private async controlLoop(): Promise<void> {
    const lists = this.w.types.map((t) => this.keys.ctlInstance(t, this.w.group, this.w.instance));
    while (!this.w.isStopping) {
      let got: [string, string] | null;
      try {
        got = await this.control.blpop(...lists, 1);
      } catch {
        await sleep(500, () => this.w.isStopping);
        continue;
      }
      if (!got) continue;
      const run = this.running.get(got[1]);
      if (run) run.job.cancel("stopped");
    }
  }

  // -- shutdown -------------------------------------------------------------------------------
  /** After `close()`: running jobs finish within the deadline, the rest are handed back, the
   * outcomes recorded, presence removed, connections closed. */
  async finish(): Promise<void> {
    const deadline = Date.now() + this.w.settings.shutdownMs;
    while (this.running.size > 0 && Date.now() < deadline) await sleep(50, () => false);
    for (const run of [...this.running.values()]) {
      if (run.settled) continue;
      run.job.cancel("shutdown");
      this.settle(run, "fail", "shutdown", 0);
    }
    this.wake();
    await Promise.all(this.loops);
    let handed = 0;
    for (const stream of this.streams) {
      handed += await this.proto.handBack(stream, this.w.consumer).catch(() => 0);
    }
    const pipe = this.redis.pipeline();
    for (const t of this.w.types) pipe.del(this.keys.presence(t, this.w.group, this.w.instance));
    pipe.zrem(this.keys.consumers(), this.w.consumer);
    pipe.hdel(this.keys.fleet(), this.w.consumer);
    await pipe.exec().catch(() => undefined);
    this.control.disconnect();
    this.w.emit("closed", handed);
  }
}

/** Sleeps `ms`, checking `done` every 100 ms to end early. */
async function sleep(ms: number, done: () => boolean): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until && !done()) {
    await new Promise((r) => setTimeout(r, Math.min(100, until - Date.now())));
  }
}
