// One shard of a worker (a lane): a shard is its own streams, possibly on its own Redis node, so
// each keeps its own connections and loops and one slow or failing shard holds no other back,
// while the Worker owns the lanes and the slots they share. A lane owns the jobs it fetched from
// their fetch to their recorded end: its fetch loops (two under way, so the next fetch is in
// Redis while this process starts the last one's jobs), the handlers' runs, the completer
// (fenced, batched: an outcome is kept until Redis takes it or its lease may have run out), the
// stop-request loop, the hand-back at shutdown, and its shard's upkeep (duties.ts). What must
// reach Redis on a clock while the jobs run (heartbeat, leases, reports, time limits) is its
// keeper's (keeper.ts); how every loop lives through Redis failing, never dying silently, is
// outage.ts's. What it needs of its worker is the interface `LaneOwner`, so it imports nothing
// of worker.ts.
import { Redis } from "ioredis";

import { numberField } from "./job.js";
import { duplicate } from "./connect.js";
import { HeroError, libraryMissing, transient, WorkerFailed } from "./errors.js";
import { runDuties } from "./duties.js";
import { Keeper } from "./keeper.js";
import { Keys } from "./keys.js";
import { BACKOFF_MAX_MS, HOPELESS_FAILURES, message, Outage, sleep, wakeSleepers } from "./outage.js";
import type { Done } from "./done.js";
import { Protocol, text } from "./protocol.js";
import { execute, retire, Running, Runs } from "./runs.js";
import { Handler, isText, pickRun, RunFields, WorkerJob } from "./worker-job.js";

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
  readonly settings: { leaseMs: number; presenceTtlMs: number; shutdownMs: number; duties: boolean };
  takeSlots(max: number): Promise<number>;
  releaseSlots(n: number): void;
  presence(running: number): string;
  emit(event: string | symbol, ...args: unknown[]): boolean;
  listenerCount(event: string | symbol): number;
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

/** How long `close()` tries to hand jobs back while Redis refuses it (then recovery does). */
const HAND_BACK_FOR_MS = 10_000;
/** How long a fetch held back by a concurrency limit waits before it looks again (ms). */
const LIMITED_BLOCK_MS = 50;

/** The worker on one shard: its keys, streams, connections, running jobs and completions. */
export class Lane {
  private readonly proto: Protocol;
  private readonly streams: string[];
  private readonly running = new Runs<Running>();
  /** `begin`'s look at each record (one object, filled a job at a time). */
  private readonly picked: RunFields = { status: undefined, lease: undefined, timeout: undefined, reply: undefined };
  private done: Done[] = [];
  private doneWaiter: (() => void) | null = null;
  private control!: Redis;
  /** The lane's blocking connection for waiting on its streams, shared by its fetch loops. */
  private blocking!: Redis;
  /** The blocked read under way on `blocking`: a fetch loop with nothing to do joins it rather
   * than sending its own (a second one would queue behind it on the one connection). */
  private reading: Promise<unknown> | null = null;
  private loops: Promise<void>[] = [];
  /** The registered ones of `streams` (indexes) and the registry's signal id they were read
   * at: fetches name only those while the signal has not moved (each key of an FCALL costs
   * Redis and this process; a worker names 30 streams a type, most never used). */
  private registered: { signal: string; indexes: number[] } | null = null;
  /** Fetch loops still running (two a lane). */
  private fetchers = 2;
  /** The heartbeat, the leases and reports of `running`, the policies' time limits. */
  private readonly keeper: Keeper<Running>;
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
    this.keeper = new Keeper(w, keys, this.proto, this.streams, this.running, (run, outcome, out, retryAt) => this.settle(run, outcome, out, retryAt));
  }

  private get redis(): Redis {
    return this.proto.redis;
  }

  /** Registers (hero_beat: presence, liveness, the fleet entry) and starts the loops. The
   * heartbeat is allowed past maxmemory, so a full Redis does not keep the worker from starting;
   * an outage (a write refused for a while, Redis out of reach) is waited out with back-off and
   * said on the `error` event; a refusal fails the start. */
  async start(): Promise<void> {
    // three connections a lane with the worker's own: the worker's (calls), this one (blocking
    // reads of the stop lists: a protocol matter) and one the fetch loops share for their waits
    this.control = duplicate(this.redis, (e) => this.w.fail(e));
    this.blocking = duplicate(this.redis, (e) => this.w.fail(e));
    const outage = new Outage(this.w, "registering the worker", "it takes no job until it is registered");
    for (;;) {
      if (this.w.isStopping) return;
      try {
        await this.keeper.heartbeat();
        await this.keeper.readPolicies();
        outage.ok();
        break;
      } catch (e) {
        if (!transient(e)) throw e;
        await outage.backOff(e, this.proto, () => this.w.isStopping);
      }
    }
    // two fetches under way, as the Rust worker: the next is in Redis while this process starts
    // the jobs of the last (a fetch loop alone waited on Redis half the time)
    this.loops = [...Array.from({ length: this.fetchers }, () => this.fetchLoop()), this.completer(), this.keeper.run(() => (this.w.isStopping && this.fetchers === 0 && this.running.size === 0 && this.done.length === 0) || Date.now() > this.closeBy), this.controlLoop()];
    // the queue's upkeep on this shard (its own duty lease), unless the worker opted out: it
    // ends, handing the lease back, as soon as the worker stops taking jobs, while the running
    // ones finish
    if (this.w.settings.duties) this.loops.push(runDuties(this.w, this.proto));
  }

  /** A lane whose start failed: its connections closed. */
  abandon(): void {
    this.interrupt();
  }

  /** The worker stops taking jobs: its blocked reads end now rather than at their timeout (a
   * second), by closing their connections. Safe: a wait for work claims nothing, and a stop
   * request a closing read may have popped is told again by the lease renewals (`stopped`),
   * which go on while running jobs finish. */
  interrupt(): void {
    this.blocking?.disconnect();
    this.control?.disconnect();
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

  wake(): void {
    const w = this.doneWaiter;
    if (w !== null) {
      // once: every job that ends wakes the completer, which needs waking once a wait
      this.doneWaiter = null;
      w();
    }
  }

  // -- fetch ----------------------------------------------------------------------------------
  private async fetchLoop(): Promise<void> {
    // up to every slot (at most 100, half of a larger concurrency, at least 8): the lane's other
    // loop takes what frees meanwhile; a fetch of 100 rather than two of 50 cost Redis 8 % less
    // a job and this process 7 % less (worker-concurrent, concurrency 100)
    const max = Math.max(8, Math.floor(this.w.concurrency / 2), Math.min(this.w.concurrency, 100));
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
            for (const j of got.jobs) j[0] = view.indexes[j[0]];
          }
        } catch (e) {
          this.w.releaseSlots(free);
          full = false;
          if (!(await fetching.backOff(e, this.proto, stopping))) break;
          continue;
        }
        fetching.ok();
        this.w.releaseSlots(free - got.jobs.length);
        full = got.jobs.length === free;
        if (got.jobs.length) {
          if (got.records.includes(null)) await this.readRecords(got.jobs, got.records);
          this.begin(got.jobs, got.records, sent);
        }
        else if (got.registered === "stale") continue;
        else if (got.cursors.length) {
          try {
            await this.waitForWork(named, got.cursors, got.limited);
            waiting.ok();
          } catch (e) {
            // a read ended by `interrupt()` at close is no failure
            if (this.w.isStopping) break;
            if (!(await waiting.backOff(e, this.proto, stopping))) break;
          }
        }
      }
    } catch (e) {
      // not expected (every call above is guarded): said, and the lane's other fetch goes on
      this.w.fail(e);
    } finally {
      this.fetchers -= 1;
      // the completer and the keeper end once no fetch runs: tell them now
      this.wake();
      wakeSleepers();
    }
  }

  private async waitForWork(streams: string[], cursors: string[], limited = false): Promise<void> {
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
    // at most a second, so a free slot or a stream registered meanwhile is seen promptly; held
    // back by a concurrency limit, 50 ms (the Rust worker's LIMITED_BLOCK): the slot a running
    // job frees writes no entry to wake this read. A close ends it at once (`interrupt`).
    const ms = limited ? LIMITED_BLOCK_MS : 1000;
    if (this.reading) {
      // the lane's other fetch loop waits already, from cursors no later than these (its fetch
      // saw no more work than this one): its read wakes on what would wake ours, or ours ends
      let timer: NodeJS.Timeout | undefined;
      try {
        await Promise.race([this.reading, new Promise((r) => (timer = setTimeout(r, ms)))]);
      } finally {
        clearTimeout(timer);
      }
      return;
    }
    const read = this.blocking.xread("COUNT", 1, "BLOCK", ms, "STREAMS", ...args, ...ids);
    this.reading = read;
    try {
      await read;
    } finally {
      if (this.reading === read) this.reading = null;
    }
  }

  /** Reads the records a fetch did not hand back (a library that hands back none). */
  private async readRecords(jobs: [number, string, string][], records: (unknown[] | null)[]): Promise<void> {
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
  }

  /** Starts the handlers of fetched jobs (leased at local time `leasedAt`). Never throws: a job
   * it cannot start gives its slot back (its lease runs out, and recovery hands it on). */
  private begin(jobs: [number, string, string][], records: (unknown[] | null)[], leasedAt: number): void {
    const now = Date.now();
    const active = this.w.listenerCount("active") > 0;
    for (let i = 0; i < jobs.length; i++) {
      try {
        const [index, entry, id] = jobs[i];
        // the few fields read of every job, found in the record's pairs: the rest is decoded
        // only when a handler asks (a sixth of the worker's time went to decoding it whole)
        const pairs = records[i] ?? [];
        // the fetch's answer lets go of the record (the job holds it): see retire()
        records[i] = null;
        const f = this.picked;
        pickRun(pairs, f);
        if (!isText(f.status, "started") || !isText(f.lease, entry)) {
          // stopped or recovered between the fetch and the read: no longer ours
          this.w.releaseSlots(1);
          continue;
        }
        const job = new WorkerJob(id, pairs);
        const limitS = (f.timeout === undefined ? null : numberField({ timeout: text(f.timeout) }, "timeout", null)) ?? this.keeper.policyTimeout(job);
        // the keeper ends it at its deadline (a timer per job cost more than the job's start)
        job.deadline = now + limitS * 1000;
        const run: Running = { job, streamIndex: index, entry, began: now, renewedAt: leasedAt, settled: false, reply: f.reply === undefined ? "" : text(f.reply) };
        this.running.set(id, run);
        if (active) this.tell("active", job);
        this.execute(run);
      } catch (e) {
        this.w.releaseSlots(1);
        this.w.fail(e);
      }
    }
  }

  private execute(run: Running): void {
    execute(this.w.handler, run, this.end);
  }

  /** Where a handler's outcome goes (`execute`'s `ended`): the completer, and its slot back. */
  private readonly end = (run: Running, outcome: Done["outcome"], out: string, retryAt: number, trace?: string, bytes?: Buffer | null): void => {
    try {
      this.settle(run, outcome, out, retryAt, trace, bytes);
    } catch (e) {
      this.w.fail(e);
    }
    this.w.releaseSlots(1);
  };
  /** Queues the outcome for the completer, once per run; an interrupted run records none. */
  private settle(run: Running, outcome: Done["outcome"], out: string, retryAt: number, trace?: string, value?: Buffer | null): void {
    if (run.settled) return;
    run.settled = true;
    const reason = run.job.cancelReason;
    if (reason === "stopped" || reason === "lost" || reason === "shutdown") {
      this.running.delete(run.job.id);
      // a renewal answered `lost` (another delivery owns the job): the result is fenced here,
      // before a completion would have been refused with `lease_lost`
      if (reason === "lost") this.tell("fenced", run.job, "lost");
      retire(run);
      return;
    }
    // its last report goes with the outcome: the completer sends it just before (record)
    const d: Done = { id: run.job.id, stream: this.streams[run.streamIndex], lease: run.entry, outcome, text: out, retryAt, reply: run.reply, ranMs: Date.now() - run.began };
    if (trace && !this.keeper.holdTraces) d.trace = trace;
    if (value && outcome === "done") d.value = value;
    this.done.push(d);
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
          // woken by an outcome, or after 200 ms to look at the close again (the timer cleared
          // when woken: one left pending a wait held its promise, and what that held, 200 ms)
          await new Promise<void>((r) => {
            const timer = setTimeout(r, 200);
            this.doneWaiter = () => {
              clearTimeout(timer);
              r();
            };
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
          await outage.backOff(e, this.proto);
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
    // the events of each outcome, when someone listens (an emit a job cost when no one did)
    const completed = this.w.listenerCount("completed") > 0;
    const failed = this.w.listenerCount("failed") > 0;
    const fenced = this.w.listenerCount("fenced") > 0;
    for (let i = 0; i < batch.length; i++) {
      const d = batch[i];
      const run = this.running.get(d.id);
      this.running.delete(d.id);
      const answer = answers[i];
      const job = run?.job;
      if (answer === "completed" && d.outcome === "done") {
        if (completed) this.tell("completed", job, run ? run.value : d.text);
      } else if (answer === "completed" || answer === "retrying") {
        if (failed) this.tell("failed", job, run?.error instanceof Error ? run.error : new Error(d.text), answer);
      } else if (fenced) this.tell("fenced", job, answer);
      if (run) retire(run);
    }
  }

  /** Sends the reports (progress, log lines) the handlers of `batch` left since the keeper's
   * last: a report Redis does not take is put back, for the next try. Never rejects. */
  private lastReports(batch: Done[]): Promise<unknown> {
    const calls: Promise<void>[] = [];
    if (this.keeper.holdReports) return Promise.resolve();
    for (const d of batch) {
      const run = this.running.get(d.id);
      const taken = run?.job.take();
      if (run && taken) calls.push(this.keeper.report(run, taken, false));
    }
    return calls.length ? Promise.allSettled(calls) : Promise.resolve();
  }

  /** True when every lease of `batch` may have run out (no renewal for longer than a lease). */
  private leasesGone(batch: Done[]): boolean {
    const now = Date.now();
    return batch.every((d) => {
      const run = this.running.get(d.id);
      return !run || now - run.renewedAt > this.keeper.leaseHoldMs();
    });
  }

  /** Outcomes that cannot be recorded: said, each, and forgotten (the job's delivery stays
   * Redis's: recovery hands it on once its lease runs out, or `close()` hands it back). */
  private drop(batch: Done[], why: string): void {
    for (const d of batch) {
      const run = this.running.get(d.id);
      this.running.delete(d.id);
      if (run) retire(run);
      this.w.fail(new HeroError(`job ${d.id}: its outcome (${d.outcome}) was not recorded: ${why}. The job runs again once its lease runs out`));
    }
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
        // a read ended by `interrupt()` at close is no failure
        if (this.w.isStopping) return;
        if (!(await outage.backOff(e, this.proto, () => this.w.isStopping))) return;
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
    this.closeBy = Date.now() + this.keeper.leaseHoldMs() + BACKOFF_MAX_MS;
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
    this.interrupt();
    this.tell("closed", handed);
  }
}
