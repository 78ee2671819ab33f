// One shard of a worker (a lane): its fetch loops (two under way), the handlers' runs, the
// completer (fenced, batched), the keeper of presence, leases, reports and policy time limits,
// the stop-request loop, and the hand-back at shutdown. The Worker owns the lanes and the slots
// they share.
import { Redis } from "ioredis";

import { DEFAULT_TIMEOUT_S, numberField, recordText } from "./job.js";
import { duplicate } from "./connect.js";
import { Keys } from "./keys.js";
import { boundedTrace, Done, nowMs, Protocol, RELEASE, retryAtMs, VERSION } from "./protocol.js";
import { Abort, Handler, Retry, WorkerJob } from "./worker-job.js";

/** What a lane needs of the worker that owns it (the `Worker`, whose lanes share its slots). */
export interface LaneOwner {
  readonly types: string[];
  readonly group: string;
  readonly instance: string;
  readonly consumer: string;
  readonly concurrency: number;
  readonly handler: Handler;
  readonly connection: Redis;
  readonly isStopping: boolean;
  readonly settings: { leaseMs: number; presenceTtlMs: number; shutdownMs: number };
  takeSlots(max: number): Promise<number>;
  releaseSlots(n: number): void;
  presence(running: number): string;
  emit(event: string | symbol, ...args: unknown[]): boolean;
  /** An error of the worker's: its `error` event, or a logged line when no one listens. */
  fail(e: unknown): void;
}

/** Reports gather this long: one call per flush for every job at once. */
const REPORT_EVERY_MS = 500;
/** How long a fetch held back by a concurrency limit waits before it looks again (ms). */
const LIMITED_BLOCK_MS = 50;

interface Running {
  job: WorkerJob;
  lane: Lane;
  streamIndex: number;
  entry: string;
  began: number;
  settled: boolean;
  /** What the handler returned, or threw: the worker's `completed` and `failed` events carry
   * them as they were (the record holds their text). */
  value?: unknown;
  error?: unknown;
}

/** The worker on one shard: its keys, streams, connections, running jobs and completions. */
export class Lane {
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
  /** A live reader before protocol 29 would refuse a record's `trace`: failures go without. */
  private holdTraces = false;

  constructor(
    private readonly w: LaneOwner,
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
    this.control = duplicate(this.redis, (e) => this.w.fail(e));
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
    const blocking = duplicate(this.redis, (e) => this.w.fail(e));
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
        this.w.fail(e);
        await sleep(1000, () => this.w.isStopping);
        continue;
      }
      this.w.releaseSlots(free - got.jobs.length);
      full = got.jobs.length === free;
      if (got.jobs.length) await this.begin(got.jobs, got.records);
      else if (got.registered === "stale") continue;
      else if (got.cursors.length) await this.waitForWork(blocking, named, got.cursors, got.limited);
    }
    blocking.disconnect();
    this.fetchers -= 1;
  }

  private async waitForWork(blocking: Redis, streams: string[], cursors: string[], limited = false): Promise<void> {
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
      // at most a second, so a close or a free slot is seen promptly; held back by a
      // concurrency limit, 50 ms (the Rust worker's LIMITED_BLOCK): the slot a running job frees
      // writes no entry to wake this read
      await blocking.xread("COUNT", 1, "BLOCK", limited ? LIMITED_BLOCK_MS : 1000, "STREAMS", ...args, ...ids);
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
    this.holdTraces = !!lacks && lacks.includes('"trace"');
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
    let trace: string | undefined;
    try {
      const value = await this.w.handler(job);
      run.value = value;
      out = value === undefined || value === null ? "" : typeof value === "string" ? value : JSON.stringify(value);
    } catch (e) {
      run.error = e;
      if (e instanceof Retry) {
        outcome = "retry";
        out = e.message;
        retryAt = nowMs() + e.delayMs;
      } else if (e instanceof Abort) {
        outcome = "abort";
        out = e.message;
        trace = boundedTrace(e);
      } else {
        // the handler failed: the attempt fails, retried within the job's budget or its policy's
        outcome = "fail";
        out = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
        retryAt = retryAtMs(job.attempt);
        trace = boundedTrace(e);
      }
    }
    this.settle(run, outcome, out, retryAt, trace);
    this.w.releaseSlots(1);
  }

  /** Queues the outcome for the completer, once per run; an interrupted run records none. */
  private settle(run: Running, outcome: Done["outcome"], out: string, retryAt: number, trace?: string): void {
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
      ...(trace && !this.holdTraces ? { trace } : {}),
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
        this.w.fail(e);
        await sleep(delay, () => false);
        delay = Math.min(delay * 2, 5000);
      }
    }
    batch.forEach((d, i) => {
      const run = this.running.get(d.id);
      this.running.delete(d.id);
      const answer = answers[i];
      const job = run?.job;
      if (answer === "completed" && d.outcome === "done") this.w.emit("completed", job, run ? run.value : d.text);
      else if (answer === "completed" || answer === "retrying") this.w.emit("failed", job, run?.error instanceof Error ? run.error : new Error(d.text), answer);
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
        this.w.fail(e);
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
export async function sleep(ms: number, done: () => boolean): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until && !done()) {
    await new Promise((r) => setTimeout(r, Math.min(100, until - Date.now())));
  }
}
