// One shard of a worker (a lane): its fetch loops (two under way), the handlers' runs, the
// completer (fenced, batched), the keeper of presence, leases, reports and policy time limits,
// the stop-request loop, and the hand-back at shutdown. The Worker owns the lanes and the slots
// they share.
//
// Redis failing is an outage, not a verdict: every loop keeps what it was writing (an outcome, a
// report, a renewal) through a lost connection or a write Redis refuses for a while (full, a
// failing disk, too few replicas, turned replica: `transient` in errors.ts) and tries again
// with back-off (100 ms doubling to 5 s), saying so on the worker's `error` event (the first
// failure at once, then every 30 s) and once on its `warning` event when it works again. No
// loop dies silently: an unexpected error is reported and retried the same way, and a loop
// whose calls Redis keeps refusing (not an outage: the same answer again) halts the worker,
// which stops taking jobs, says why and removes its presence (`LaneOwner.halt`).
import { Redis } from "ioredis";

import { DEFAULT_TIMEOUT_S, numberField, recordText } from "./job.js";
import { duplicate } from "./connect.js";
import { HeroError, libraryMissing, transient, WorkerFailed } from "./errors.js";
import { Keys } from "./keys.js";
import { boundedTrace, Done, nowMs, observeClock, Protocol, RELEASE, retryAtMs, VERSION } from "./protocol.js";
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
  /** Something the operator should know that is no failed call (a skewed clock, an evicting
   * maxmemory policy, a loop working again): the `warning` event, or a logged line. */
  warn(message: string): void;
  /** The maxmemory policy a heartbeat read (said once per change when it is not noeviction). */
  notePolicy(policy: string): void;
  /** A loop cannot go on: the worker stops taking jobs, says why, removes its presence. */
  halt(e: WorkerFailed): void;
}

/** Back-off between tries of a failing call: 100 ms doubling to 5 s, reset on success (the Rust
 * `outage::Backoff`). */
const BACKOFF_FIRST_MS = 100;
const BACKOFF_MAX_MS = 5000;
/** How long a failing loop stays quiet between two reports on the `error` event. */
const REPORT_FAILING_EVERY_MS = 30_000;
/** A loop cannot go on once Redis refused its call (not an outage: Redis answered, and would
 * answer the same again) this many times in a row, over at least HOPELESS_MS. */
const HOPELESS_FAILURES = 5;
const HOPELESS_MS = 5000;
/** How long `close()` tries to hand jobs back while Redis refuses it (then recovery does). */
const HAND_BACK_FOR_MS = 10_000;

/** The fleet entry (docs/protocol.md §8): which protocol this process speaks; hero_beat adds
 * its `expires_ms` on Redis's clock. */
const FLEET_ENTRY = JSON.stringify({ role: "worker", protocol: Number(VERSION), version: `hero-broker (npm) ${RELEASE}`, shards: true });

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** The failures of one loop (or one call it keeps trying), as the worker reports them: the
 * first at once, then at most one report every 30 s with how many failed since, and a warning
 * when it works again; the back-off to wait; whether it can go on (the Rust `outage::Outage`). */
class Outage {
  private delay = BACKOFF_FIRST_MS;
  private failures = 0;
  private since = 0;
  private reportedAt = 0;
  private unreported = 0;
  /** Failures in a row that were no outage, and since when. */
  private refusals = 0;
  private refusedSince = 0;

  /** `what` names the loop ("recording outcomes"); `kept` says what waits meanwhile. */
  constructor(
    private readonly w: LaneOwner,
    readonly what: string,
    private readonly kept: string,
  ) {}

  /** Counts and reports failure `e`; answers how long to wait before trying again. */
  failed(e: unknown): number {
    const now = Date.now();
    if (this.failures === 0) this.since = now;
    this.failures += 1;
    this.unreported += 1;
    if (transient(e)) {
      this.refusals = 0;
    } else {
      if (this.refusals === 0) this.refusedSince = now;
      this.refusals += 1;
    }
    if (this.reportedAt === 0 || now - this.reportedAt >= REPORT_FAILING_EVERY_MS) {
      const how =
        this.failures === 1
          ? "failed"
          : `still failing (${this.unreported} failures in the last ${Math.round((now - this.reportedAt) / 1000)} s, ${Math.round((now - this.since) / 1000)} s in all)`;
      const err = new HeroError(`${this.what} ${how}: ${message(e).replace(/\.$/, "")}; ${this.kept}, retrying with back-off`);
      err.cause = e;
      this.w.fail(err);
      this.reportedAt = now;
      this.unreported = 0;
    }
    const d = this.delay;
    this.delay = Math.min(this.delay * 2, BACKOFF_MAX_MS);
    return d;
  }

  /** A success: the back-off starts again from 100 ms; said once when it had failed. */
  ok(): void {
    if (this.failures === 0) return;
    const secs = ((Date.now() - this.since) / 1000).toFixed(1);
    const n = this.failures;
    this.delay = BACKOFF_FIRST_MS;
    this.failures = this.unreported = this.refusals = 0;
    this.reportedAt = 0;
    this.w.warn(`${this.what} works again, after ${n} failure${n === 1 ? "" : "s"} in ${secs} s`);
  }

  /** True once Redis refused the call HOPELESS_FAILURES times in a row over HOPELESS_MS. */
  get hopeless(): boolean {
    return this.refusals >= HOPELESS_FAILURES && Date.now() - this.refusedSince >= HOPELESS_MS;
  }

  /** Why the worker cannot go on, for its `error` event and `run()`'s rejection. */
  giveUp(e: unknown, consumer: string): WorkerFailed {
    const err = new WorkerFailed(
      `worker ${consumer} stopped taking jobs: ${this.what} failed ${this.refusals} times in a row over ${Math.round((Date.now() - this.refusedSince) / 1000)} s and cannot go on (the last: ${message(e)}). Its running jobs finish and are recorded, the rest are handed back, its presence is removed; fix the cause and start it again`,
    );
    err.cause = e;
    return err;
  }
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
  /** This machine's clock when the lease was last taken or renewed (sent): it holds at least
   * until then plus the lease. */
  renewedAt: number;
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
  /** The brokers' lease (`lease_ms` in the config hash: what recovery waits for), 0 unknown. */
  private brokersLeaseMs = 0;
  /** Single outcomes Redis refused in a row (not an outage): the completer cannot go on. */
  private refusedOutcomes = 0;
  /** After `close()` (or a halt): when the loops stop waiting for Redis whatever is left. */
  private closeBy = Infinity;

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

  /** Registers (hero_beat: presence, liveness, the fleet entry) and starts the loops. The
   * heartbeat is allowed past maxmemory, so a full Redis does not keep the worker from starting;
   * an outage (a write refused for a while, Redis out of reach) is waited out with back-off and
   * said on the `error` event; a refusal fails the start. */
  async start(): Promise<void> {
    this.control = duplicate(this.redis, (e) => this.w.fail(e));
    const outage = new Outage(this.w, "registering the worker", "it takes no job until it is registered");
    for (;;) {
      if (this.w.isStopping) return;
      try {
        await this.heartbeat();
        await this.readPolicies();
        outage.ok();
        break;
      } catch (e) {
        if (!transient(e)) throw e;
        await this.backOff(outage, e, () => this.w.isStopping);
      }
    }
    // two fetches under way, as the Rust worker: the next is in Redis while this process starts
    // the jobs of the last (a fetch loop alone waited on Redis half the time)
    this.loops = [...Array.from({ length: this.fetchers }, () => this.fetchLoop()), this.completer(), this.keeper(), this.controlLoop()];
  }

  /** A lane whose start failed: its connection closed. */
  abandon(): void {
    this.control?.disconnect();
  }

  /** After failure `e` of `outage`'s call: loads the library again when Redis lost it, halts
   * the worker when the call cannot go on (answering false), else waits the back-off (ending
   * early once `done`) and answers true. */
  private async backOff(outage: Outage, e: unknown, done: () => boolean = () => false): Promise<boolean> {
    const delay = outage.failed(e);
    if (outage.hopeless) {
      this.w.halt(outage.giveUp(e, this.w.consumer));
      return false;
    }
    if (libraryMissing(e)) await this.proto.ensureLibrary().catch(() => undefined);
    await sleep(delay, done);
    return true;
  }

  /** The worker's event, a listener's exception reported rather than thrown into the loop. */
  private tell(event: string, ...args: unknown[]): void {
    try {
      this.w.emit(event, ...args);
    } catch (e) {
      try {
        this.w.fail(e);
      } catch {
        // an `error` listener that throws: nothing more to tell it
      }
    }
  }

  /** How long a lease this worker took may hold without a renewal: the longest of its own and
   * the brokers' (a queue policy may only shorten it). */
  private leaseHoldMs(): number {
    return Math.max(this.w.settings.leaseMs, this.brokersLeaseMs);
  }

  wake(): void {
    this.doneWaiter?.();
  }

  // -- fetch ----------------------------------------------------------------------------------
  private async fetchLoop(): Promise<void> {
    const max = Math.max(8, Math.floor(this.w.concurrency / 2));
    const blocking = duplicate(this.redis, (e) => this.w.fail(e));
    const fetching = new Outage(this.w, "fetching jobs", "no job is taken meanwhile");
    const waiting = new Outage(this.w, "waiting for jobs", "the worker looks again");
    const stopping = () => this.w.isStopping;
    let full = false;
    try {
      while (!this.w.isStopping) {
        // under a backlog, let the handlers that end in this turn free their slots first, so a
        // fetch asks for many jobs at once rather than one (a call's fixed cost, per job)
        if (full) await new Promise((r) => setImmediate(r));
        const free = await this.w.takeSlots(max);
        if (free === 0) break;
        let got;
        const view = this.registered;
        const named = view ? view.indexes.map((i) => this.streams[i]) : this.streams;
        const sent = Date.now();
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
          full = false;
          if (!(await this.backOff(fetching, e, stopping))) break;
          continue;
        }
        fetching.ok();
        this.w.releaseSlots(free - got.jobs.length);
        full = got.jobs.length === free;
        if (got.jobs.length) await this.begin(got.jobs, got.records, sent);
        else if (got.registered === "stale") continue;
        else if (got.cursors.length) {
          try {
            await this.waitForWork(blocking, named, got.cursors, got.limited);
            waiting.ok();
          } catch (e) {
            if (!(await this.backOff(waiting, e, stopping))) break;
          }
        }
      }
    } catch (e) {
      // not expected (every call above is guarded): said, and the lane's other fetch goes on
      this.w.fail(e);
    } finally {
      blocking.disconnect();
      this.fetchers -= 1;
    }
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
    // at most a second, so a close or a free slot is seen promptly; held back by a concurrency
    // limit, 50 ms (the Rust worker's LIMITED_BLOCK): the slot a running job frees writes no
    // entry to wake this read
    await blocking.xread("COUNT", 1, "BLOCK", limited ? LIMITED_BLOCK_MS : 1000, "STREAMS", ...args, ...ids);
  }

  /** Starts the handlers of fetched jobs (leased at local time `leasedAt`). Never throws: a job
   * it cannot start gives its slot back (its lease runs out, and recovery hands it on). */
  private async begin(jobs: [number, string, string][], records: (unknown[] | null)[], leasedAt: number): Promise<void> {
    const missing: number[] = [];
    for (let i = 0; i < jobs.length; i++) if (records[i] === null) missing.push(i);
    if (missing.length) {
      const outage = new Outage(this.w, "reading fetched jobs' records", "their jobs wait");
      for (;;) {
        try {
          const pipe = this.redis.pipeline();
          // the flat reply: ioredis's hgetall object transform cost a tenth of the worker's time
          for (const i of missing) pipe.callBuffer("HGETALL", this.keys.job(jobs[i][2]));
          const res = (await pipe.exec()) ?? [];
          missing.forEach((i, k) => {
            const r = res[k]?.[1];
            records[i] = Array.isArray(r) ? r : [];
          });
          outage.ok();
          break;
        } catch (e) {
          if (!transient(e) || this.w.isStopping) {
            outage.failed(e);
            break;
          }
          await sleep(outage.failed(e), () => this.w.isStopping);
        }
      }
    }
    const now = Date.now();
    for (let i = 0; i < jobs.length; i++) {
      try {
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
        const run: Running = { job, lane: this, streamIndex: index, entry, began: now, renewedAt: leasedAt, settled: false };
        this.running.set(id, run);
        this.tell("active", job);
        void this.execute(run);
      } catch (e) {
        this.w.releaseSlots(1);
        this.w.fail(e);
      }
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
    const [[policyErr, raw], [configErr, [brokers, lacks] = [null, null]]] = ((await this.redis.pipeline().hgetall(this.keys.policy()).hmget(this.keys.config(), "lease_ms", "fleet_lacks").exec()) ?? [
      [null, {}],
      [null, [null, null]],
    ]) as [[unknown, Record<string, string>], [unknown, (string | null)[]]];
    // a pipeline answers each command's error in its place: thrown here, so the keeper backs off
    if (policyErr || configErr) throw policyErr || configErr;
    // progress and log lines are held back while the brokers say a live worker lacks them
    // (docs/protocol.md §8: it would end a job carrying them in error)
    this.holdReports = !!lacks && lacks.includes('"progress"');
    this.holdTraces = !!lacks && lacks.includes('"trace"');
    const limits = new Map<string, number>();
    let lease = this.w.settings.leaseMs;
    const configured = Number(brokers);
    if (configured > 0) lease = Math.min(lease, configured);
    this.brokersLeaseMs = configured > 0 ? configured : 0;
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
    try {
      this.settle(run, outcome, out, retryAt, trace);
    } catch (e) {
      this.w.fail(e);
    }
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
      if (reason === "lost") this.tell("fenced", run.job, "lost");
      return;
    }
    // its last report goes with the outcome: the completer sends it just before (record)
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
    const guard = new Outage(this.w, "the completer", "the outcomes are kept");
    for (;;) {
      try {
        if (this.done.length === 0) {
          if (this.w.isStopping && this.fetchers === 0 && this.running.size === 0 && inFlight.size === 0) return;
          if (Date.now() > this.closeBy && inFlight.size === 0) return;
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
        const call: Promise<void> = this.record(batch)
          .catch((e) => this.w.fail(e))
          .finally(() => inFlight.delete(call));
        inFlight.add(call);
        guard.ok();
      } catch (e) {
        // not expected: said, and the completer goes on (it alone records the outcomes)
        await sleep(guard.failed(e), () => false);
      }
    }
  }

  /** One hero_complete of `batch`, after the last reports of its jobs (on the same connection,
   * so Redis takes them first). Through an outage (Redis out of reach, or refusing writes for a
   * while) the outcomes are kept and sent again with back-off until Redis takes them (a second
   * answer is harmless: `already_completed`); never dropped while their leases may hold, and
   * after `close()` not past that. A refusal (Redis answered, and would answer the same) splits
   * the batch, so one outcome Redis refuses costs no other its record; an outcome refused three
   * times is dropped, said on the `error` event (its job runs again once its lease runs out),
   * and HOPELESS_FAILURES of them in a row halt the worker. */
  private async record(batch: Done[]): Promise<void> {
    const outage = new Outage(this.w, "recording outcomes", `${batch.length === 1 ? "the outcome is" : `the ${batch.length} outcomes are`} kept`);
    let answers: string[] | null = null;
    let refused = 0;
    while (answers === null) {
      const reports = this.lastReports(batch);
      try {
        answers = await this.proto.complete(this.w.consumer, batch);
        outage.ok();
        this.refusedOutcomes = 0;
      } catch (e) {
        if (transient(e)) {
          if (this.w.isStopping && this.leasesGone(batch)) {
            this.drop(batch, `${message(e)}; the worker is closing and their leases have run out`);
            return;
          }
          await this.backOff(outage, e);
          continue;
        }
        if (batch.length > 1) {
          for (const d of batch) await this.record([d]);
          return;
        }
        refused += 1;
        const delay = outage.failed(e);
        if (refused < 3) {
          await sleep(delay, () => false);
          continue;
        }
        this.drop(batch, message(e));
        this.refusedOutcomes += 1;
        if (this.refusedOutcomes >= HOPELESS_FAILURES) {
          const err = new WorkerFailed(
            `worker ${this.w.consumer} stopped taking jobs: Redis refused to record ${this.refusedOutcomes} outcomes in a row and the worker cannot go on (the last: ${message(e)}). Their jobs run again once their leases run out; the rest are handed back, its presence is removed; fix the cause and start it again`,
          );
          err.cause = e;
          this.w.halt(err);
        }
        return;
      } finally {
        await reports;
      }
    }
    batch.forEach((d, i) => {
      const run = this.running.get(d.id);
      this.running.delete(d.id);
      const answer = answers![i];
      const job = run?.job;
      if (answer === "completed" && d.outcome === "done") this.tell("completed", job, run ? run.value : d.text);
      else if (answer === "completed" || answer === "retrying") this.tell("failed", job, run?.error instanceof Error ? run.error : new Error(d.text), answer);
      else this.tell("fenced", job, answer);
    });
  }

  /** Sends the reports (progress, log lines) the handlers of `batch` left since the keeper's
   * last: a report Redis does not take is put back, for the next try. Never rejects. */
  private lastReports(batch: Done[]): Promise<unknown> {
    const calls: Promise<void>[] = [];
    if (this.holdReports) return Promise.resolve();
    for (const d of batch) {
      const run = this.running.get(d.id);
      const taken = run?.job.take();
      if (run && taken) calls.push(this.report(run, taken, false));
    }
    return calls.length ? Promise.allSettled(calls) : Promise.resolve();
  }

  /** True when every lease of `batch` may have run out (no renewal for longer than a lease). */
  private leasesGone(batch: Done[]): boolean {
    const now = Date.now();
    return batch.every((d) => {
      const run = this.running.get(d.id);
      return !run || now - run.renewedAt > this.leaseHoldMs();
    });
  }

  /** Outcomes that cannot be recorded: said, each, and forgotten (the job's delivery stays
   * Redis's: recovery hands it on once its lease runs out, or `close()` hands it back). */
  private drop(batch: Done[], why: string): void {
    for (const d of batch) {
      this.running.delete(d.id);
      this.w.fail(new HeroError(`job ${d.id}: its outcome (${d.outcome}) was not recorded: ${why}. The job runs again once its lease runs out`));
    }
  }

  // -- leases, reports, presence --------------------------------------------------------------
  private async keeper(): Promise<void> {
    const s = this.w.settings;
    const guard = new Outage(this.w, "the worker's keeper", "its jobs run on");
    const beat = new Outage(this.w, "the heartbeat", "the worker keeps its jobs (its presence holds until it expires)");
    const renewal = new Outage(this.w, "renewing leases", "the jobs run on, their progress and log lines are kept");
    const policies = new Outage(this.w, "reading queue policies", "the last read still apply");
    const start = Date.now();
    let nextBeat = start + s.presenceTtlMs / 3;
    let nextRenew = start + this.leaseMs / 3;
    let nextReport = start + REPORT_EVERY_MS;
    let nextPolicies = start + 2000;
    while (!(this.w.isStopping && this.fetchers === 0 && this.running.size === 0 && this.done.length === 0)) {
      if (Date.now() > this.closeBy) break;
      await sleep(100, () => false);
      try {
        const now = Date.now();
        this.endOverdue(now);
        if (now >= nextPolicies) nextPolicies = Date.now() + (await this.duty(policies, () => this.readPolicies(), 2000));
        if (now >= nextBeat) nextBeat = Date.now() + (await this.duty(beat, () => this.heartbeat(), s.presenceTtlMs / 3));
        const renew = now >= nextRenew;
        if (renew || now >= nextReport) {
          const every = renew ? this.leaseMs / 3 : REPORT_EVERY_MS;
          const wait = await this.duty(renewal, () => this.renewAll(renew), every);
          if (wait < every) {
            // failed: again after the back-off (the renewals with it when they were due)
            if (renew) nextRenew = Date.now() + wait;
            nextReport = Date.now() + wait;
          } else {
            if (renew) nextRenew = now + this.leaseMs / 3;
            nextReport = now + REPORT_EVERY_MS;
          }
        }
        guard.ok();
      } catch (e) {
        await this.backOff(guard, e);
      }
    }
  }

  /** One of the keeper's duties: how long until it runs again (`every` ms after a success, the
   * back-off, at most `every`, after a failure). */
  private async duty(outage: Outage, run: () => Promise<void>, every: number): Promise<number> {
    try {
      await run();
      outage.ok();
      return every;
    } catch (e) {
      const delay = outage.failed(e);
      if (outage.hopeless) this.w.halt(outage.giveUp(e, this.w.consumer));
      if (libraryMissing(e)) await this.proto.ensureLibrary().catch(() => undefined);
      return Math.min(delay, every - 1);
    }
  }

  /** Renews every lease (with `renew`) and sends the reports the handlers made, in one round
   * trip for all: sent together, not one each. A run already ended is renewed too while its
   * outcome waits for Redis (an outage): its lease holds until it is recorded. Throws the first
   * failure, after every call has settled (a report not sent is put back). */
  private async renewAll(renew: boolean): Promise<void> {
    const calls: Promise<void>[] = [];
    for (const run of this.running.values()) {
      if (run.settled) {
        if (renew) calls.push(this.renewEnded(run));
        continue;
      }
      const taken = run.job.take();
      if (renew || taken) calls.push(this.report(run, taken));
    }
    const failed = (await Promise.allSettled(calls)).find((r) => r.status === "rejected") as PromiseRejectedResult | undefined;
    if (failed) throw failed.reason;
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

  /** Renews `run`'s lease, sending `taken` (its handler's report) with it; a report Redis did
   * not take is put back for the next. With `cancel`, a `stopped` or `lost` answer aborts the
   * handler. */
  private async report(run: Running, taken: [[number, string] | null, string[]] | null, cancel = true): Promise<void> {
    const send = taken && !this.holdReports ? taken : null;
    const [progress, lines] = send ?? [null, []];
    const sent = Date.now();
    let answer: string;
    try {
      answer = await this.proto.renew(run.job.id, this.streams[run.streamIndex], run.entry, this.w.consumer, progress, lines);
    } catch (e) {
      if (send) run.job.putBack(send);
      throw e;
    }
    if (answer === "ok") run.renewedAt = sent;
    if (cancel && (answer === "stopped" || answer === "lost")) run.job.cancel(answer);
  }

  /** Renews the lease of a run whose outcome waits for the completer (the answer changes
   * nothing: its completion says whether it still held). */
  private async renewEnded(run: Running): Promise<void> {
    const sent = Date.now();
    const answer = await this.proto.renew(run.job.id, this.streams[run.streamIndex], run.entry, this.w.consumer, null, []);
    if (answer === "ok") run.renewedAt = sent;
  }

  /** One heartbeat: hero_beat writes presence, liveness and the fleet entry (which protocol
   * this process speaks, docs/protocol.md §8) on Redis's clock, allowed past maxmemory, so
   * neither a full Redis nor a skewed clock makes a live worker look dead. Its answer sets this
   * process's clock offset (said once when the clocks are more than 2 s apart, and once when
   * they agree again) and says the maxmemory policy. */
  private async heartbeat(): Promise<void> {
    const presenceKeys = this.w.types.map((t) => this.keys.presence(t, this.w.group, this.w.instance));
    const beat = await this.proto.beat(this.w.consumer, this.w.settings.presenceTtlMs, FLEET_ENTRY, presenceKeys, this.w.presence(this.running.size));
    const said = observeClock(beat.nowMs, beat.sentMs, beat.gotMs);
    if (said) this.w.warn(said);
    this.w.notePolicy(beat.policy);
    if (beat.leaseMs) this.brokersLeaseMs = beat.leaseMs;
  }

  // -- stop requests --------------------------------------------------------------------------
  private async controlLoop(): Promise<void> {
    const lists = this.w.types.map((t) => this.keys.ctlInstance(t, this.w.group, this.w.instance));
    const outage = new Outage(this.w, "reading stop requests", "they wait in Redis");
    while (!this.w.isStopping) {
      let got: [string, string] | null;
      try {
        got = await this.control.blpop(...lists, 1);
        outage.ok();
      } catch (e) {
        if (!(await this.backOff(outage, e, () => this.w.isStopping))) return;
        continue;
      }
      if (!got) continue;
      const run = this.running.get(got[1]);
      if (run) run.job.cancel("stopped");
    }
  }

  // -- shutdown -------------------------------------------------------------------------------
  /** After `close()` (or a halt): running jobs finish within the deadline, the rest are handed
   * back, the outcomes recorded (through an outage, until their leases may have run out), the
   * presence removed, connections closed. Never throws. */
  async finish(): Promise<void> {
    const deadline = Date.now() + this.w.settings.shutdownMs;
    const handling = () => [...this.running.values()].some((r) => !r.settled);
    while (handling() && Date.now() < deadline) await sleep(50, () => false);
    for (const run of [...this.running.values()]) {
      if (run.settled) continue;
      run.job.cancel("shutdown");
      this.settle(run, "fail", "shutdown", 0);
    }
    // the loops wait for Redis no longer than every lease this worker holds may last
    this.closeBy = Date.now() + this.leaseHoldMs() + BACKOFF_MAX_MS;
    this.wake();
    await Promise.allSettled(this.loops);
    for (const d of this.done.splice(0)) this.drop([d], "the worker closed before Redis took it");
    let handed = 0;
    const outage = new Outage(this.w, "handing jobs back", "recovery hands them on once their leases run out");
    const until = Date.now() + HAND_BACK_FOR_MS;
    for (const stream of this.streams) {
      for (;;) {
        try {
          handed += await this.proto.handBack(stream, this.w.consumer);
          break;
        } catch (e) {
          const delay = outage.failed(e);
          if (!transient(e) || Date.now() + delay > until) break;
          if (libraryMissing(e)) await this.proto.ensureLibrary().catch(() => undefined);
          await sleep(delay, () => false);
        }
      }
      if (Date.now() > until) break;
    }
    try {
      const pipe = this.redis.pipeline();
      for (const t of this.w.types) pipe.del(this.keys.presence(t, this.w.group, this.w.instance));
      pipe.zrem(this.keys.consumers(), this.w.consumer);
      pipe.hdel(this.keys.fleet(), this.w.consumer);
      const failed = ((await pipe.exec()) ?? []).find(([err]) => err);
      if (failed) throw failed[0];
    } catch (e) {
      this.w.warn(`could not remove the worker's presence (${message(e)}): it expires by itself within ${this.w.settings.presenceTtlMs} ms`);
    }
    this.control?.disconnect();
    this.tell("closed", handed);
  }
}

/** Sleeps `ms`, checking `done` every 100 ms to end early. */
export async function sleep(ms: number, done: () => boolean): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until && !done()) {
    await new Promise((r) => setTimeout(r, Math.min(100, until - Date.now())));
  }
}
