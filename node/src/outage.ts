// How a worker's loops live through Redis failing, kept in one place so that every loop (the
// fetches, the completer, the keeper, the stop requests, the hand-back) fails the same way and
// none dies silently. Redis failing is an outage, not a verdict: a loop keeps what it was writing
// (an outcome, a report, a renewal) through a lost connection or a write Redis refuses for a
// while (full, a failing disk, too few replicas, turned replica: `transient` in errors.ts) and
// tries again with back-off (100 ms doubling to 5 s), saying so on the worker's `error` event
// (the first failure at once, then every 30 s) and once on its `warning` event when it works
// again. An unexpected error is reported and retried the same way; a call Redis keeps refusing
// (not an outage: the same answer again) halts the worker, which stops taking jobs, says why and
// removes its presence (`Reporter.halt`). The Rust worker's `outage` module is the same.
import { HeroError, libraryMissing, transient, WorkerFailed } from "./errors.js";
import type { Protocol } from "./protocol.js";

/** What an outage needs of the worker whose loop failed (the `LaneOwner` of lane.ts is one). */
export interface Reporter {
  readonly consumer: string;
  /** An error of the worker's: its `error` event, or a logged line when no one listens. */
  fail(e: unknown): void;
  /** Something the operator should know that is no failed call (a loop working again): the
   * `warning` event, or a logged line. */
  warn(message: string): void;
  /** A loop cannot go on: the worker stops taking jobs, says why, removes its presence. */
  halt(e: WorkerFailed): void;
}

/** Back-off between tries of a failing call: 100 ms doubling to 5 s, reset on success (the Rust
 * `outage::Backoff`). */
const BACKOFF_FIRST_MS = 100;
export const BACKOFF_MAX_MS = 5000;
/** How long a failing loop stays quiet between two reports on the `error` event. */
const REPORT_FAILING_EVERY_MS = 30_000;
/** A loop cannot go on once Redis refused its call (not an outage: Redis answered, and would
 * answer the same again) this many times in a row, over at least HOPELESS_MS. */
export const HOPELESS_FAILURES = 5;
const HOPELESS_MS = 5000;

export function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** The failures of one loop (or one call it keeps trying), as the worker reports them: the
 * first at once, then at most one report every 30 s with how many failed since, and a warning
 * when it works again; the back-off to wait; whether it can go on (the Rust `outage::Outage`). */
export class Outage {
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
    private readonly w: Reporter,
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
      noteOutage();
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

  /** After failure `e` of this call: loads the library again (through `proto`) when Redis lost
   * it, halts the worker when the call cannot go on (answering false), else waits the back-off
   * (ending early once `done`) and answers true. */
  async backOff(e: unknown, proto: Protocol, done: () => boolean = () => false): Promise<boolean> {
    const delay = this.failed(e);
    if (this.hopeless) {
      this.w.halt(this.giveUp(e, this.w.consumer));
      return false;
    }
    if (libraryMissing(e)) await proto.ensureLibrary().catch(() => undefined);
    await sleep(delay, done);
    return true;
  }
}

// -- the process's last outage ---------------------------------------------------------------
// Recovery (of dead workers' jobs, of idle deliveries) is held back a while after this process
// saw Redis out of reach or refusing writes: every worker's heartbeat and renewals failed
// through that outage too, and back off up to 5 s, so a live worker must get its next one in
// before the upkeep judges it dead or its deliveries idle, or its jobs would run twice (the Rust
// `duties::RECOVERY_HOLD`, `outage::note_outage`).

/** How long after this process last saw an outage the upkeep recovers nothing. */
export const RECOVERY_HOLD_MS = 10_000;

/** When a call (or a connection) of this process last found Redis out of reach or refusing
 * writes (performance.now(), immune to the wall clock's jumps); null: never. */
let lastOutageAt: number | null = null;

/** Notes that a call of this process found Redis out of reach, refusing writes, or its
 * connection broken (a restart: what Redis holds may be older than what was last seen). */
export function noteOutage(): void {
  lastOutageAt = performance.now();
}

/** Whether the upkeep may recover jobs now: not within RECOVERY_HOLD_MS of an outage this
 * process saw (hero_duties's ARGV[6]). */
export function mayRecover(): boolean {
  return lastOutageAt === null || performance.now() - lastOutageAt >= RECOVERY_HOLD_MS;
}

/** The sleeps under way, each woken by `wakeSleepers` to look at its `done` again. */
const sleepers = new Set<() => void>();

/** Wakes every sleep under way to look at its `done` at once (a closing worker: its loops end
 * now rather than at their next look, so `close()` waits for no poll interval). A sleep whose
 * `done` is still false sleeps on. */
export function wakeSleepers(): void {
  for (const wake of [...sleepers]) wake();
}

/** Sleeps `ms`, ending early once `done`: looked at every 100 ms and when `wakeSleepers` is
 * called. */
export async function sleep(ms: number, done: () => boolean): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until && !done()) {
    await new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        sleepers.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, Math.min(100, until - Date.now()));
      sleepers.add(wake);
    });
  }
}
