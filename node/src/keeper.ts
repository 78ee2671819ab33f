// The keeper of one lane: what must reach Redis on a clock while the handlers run, apart from
// their outcomes. A lease renewed late is a job run twice and a heartbeat missed is a live worker
// declared dead, so these calls have a loop of their own, which never waits on a fetch or a
// completion: the heartbeat (presence, liveness, the fleet entry, on Redis's clock), the leases of
// running jobs and of ended ones whose outcomes still wait for Redis, the handlers' reports
// (progress, log lines) sent with the renewals, each run's time limit, and the queue policies that
// set those limits and may shorten the lease. Each duty backs off on its own (outage.ts), so a
// failing one holds no other back. The lane owns the runs; the keeper only renews and ends them.
import { DEFAULT_TIMEOUT_S } from "./job.js";
import { libraryMissing } from "./errors.js";
import { Keys } from "./keys.js";
import { observeClock, Protocol, RELEASE, retryAtMs, VERSION } from "./protocol.js";
import { Outage, sleep, type Reporter } from "./outage.js";
import type { WorkerJob } from "./worker-job.js";

/** What the keeper needs of the worker (the `LaneOwner` of lane.ts is one). */
export interface KeeperOwner extends Reporter {
  readonly types: string[];
  readonly group: string;
  readonly instance: string;
  readonly settings: { leaseMs: number; presenceTtlMs: number };
  presence(running: number): string;
  /** The maxmemory policy a heartbeat read (said once per change when it is not noeviction). */
  notePolicy(policy: string): void;
}

/** What the keeper renews of a lane's run: its job and its delivery. */
export interface Lease {
  job: WorkerJob;
  streamIndex: number;
  entry: string;
  /** This machine's clock when the lease was last taken or renewed (sent): it holds at least
   * until then plus the lease. */
  renewedAt: number;
  settled: boolean;
}

/** Reports gather this long: one call per flush for every job at once. */
const REPORT_EVERY_MS = 500;

/** The fleet entry (docs/protocol.md §8): which protocol this process speaks; hero_beat adds
 * its `expires_ms` on Redis's clock. */
const FLEET_ENTRY = JSON.stringify({ role: "worker", protocol: Number(VERSION), version: `hero-broker (npm) ${RELEASE}`, shards: true });

/** The keeper of one lane's runs `running` (of `streams`), and of what the queue policies and
 * the brokers say about them. */
export class Keeper<R extends Lease> {
  /** Each queue policy's time limit (s), read every 2 s: a job naming none takes its queue's. */
  private timeLimits = new Map<string, number>();
  /** The lease to renew within (see `readPolicies`). */
  private leaseMs: number;
  /** Reports are dropped, not sent, while a live older worker would refuse them. */
  holdReports = false;
  /** A live reader before protocol 29 would refuse a record's `trace`: failures go without. */
  holdTraces = false;
  /** The brokers' lease (`lease_ms` in the config hash: what recovery waits for), 0 unknown. */
  private brokersLeaseMs = 0;

  /** `settle` is the lane's: it queues a run's outcome for the completer. */
  constructor(
    private readonly w: KeeperOwner,
    private readonly keys: Keys,
    private readonly proto: Protocol,
    private readonly streams: string[],
    private readonly running: { readonly size: number; values(): IterableIterator<R> },
    private readonly settle: (run: R, outcome: "fail", out: string, retryAt: number) => void,
  ) {
    this.leaseMs = w.settings.leaseMs;
  }

  /** How long a lease this worker took may hold without a renewal: the longest of its own and
   * the brokers' (a queue policy may only shorten it). */
  leaseHoldMs(): number {
    return Math.max(this.w.settings.leaseMs, this.brokersLeaseMs);
  }

  /** The keeper's loop, every 100 ms until `over` (the lane has nothing left to keep, or no
   * more time for Redis after `close()`). */
  async run(over: () => boolean): Promise<void> {
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
    while (!over()) {
      await sleep(100, over);
      if (over()) break;
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
        await guard.backOff(e, this.proto);
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
  async report(run: R, taken: [[number, string] | null, string[]] | null, cancel = true): Promise<void> {
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
  private async renewEnded(run: R): Promise<void> {
    const sent = Date.now();
    const answer = await this.proto.renew(run.job.id, this.streams[run.streamIndex], run.entry, this.w.consumer, null, []);
    if (answer === "ok") run.renewedAt = sent;
  }

  /** One heartbeat: hero_beat writes presence, liveness and the fleet entry (which protocol
   * this process speaks, docs/protocol.md §8) on Redis's clock, allowed past maxmemory, so
   * neither a full Redis nor a skewed clock makes a live worker look dead. Its answer sets this
   * process's clock offset (said once when the clocks are more than 2 s apart, and once when
   * they agree again) and says the maxmemory policy. */
  async heartbeat(): Promise<void> {
    const presenceKeys = this.w.types.map((t) => this.keys.presence(t, this.w.group, this.w.instance));
    const beat = await this.proto.beat(this.w.consumer, this.w.settings.presenceTtlMs, FLEET_ENTRY, presenceKeys, this.w.presence(this.running.size));
    const said = observeClock(beat.nowMs, beat.sentMs, beat.gotMs);
    if (said) this.w.warn(said);
    this.w.notePolicy(beat.policy);
    if (beat.leaseMs) this.brokersLeaseMs = beat.leaseMs;
  }

  /** A job naming no time limit gets its queue policy's (group's, then type's), else the
   * default (300 s). */
  policyTimeout(job: WorkerJob): number {
    if (this.timeLimits.size === 0) return DEFAULT_TIMEOUT_S;
    const type = job.field("script_type");
    const group = job.field("group");
    const s = (group ? this.timeLimits.get(`${type}/${group}`) : undefined) ?? this.timeLimits.get(type);
    return s ?? DEFAULT_TIMEOUT_S;
  }

  /** The queue policies' time limits and the lease to renew within, read every 2 s in one
   * round trip: the lease is the shortest of the worker's own, the brokers' (`lease_ms` in the
   * config hash: what recovery waits for) and any policy's of a queue of its types (a policy
   * may shorten it: docs/protocol.md §5.4). A policy this version cannot read is skipped: its
   * jobs get the default time limit. */
  async readPolicies(): Promise<void> {
    const [[policyErr, raw], [configErr, [brokers, lacks] = [null, null]]] = ((await this.proto.redis.pipeline().hgetall(this.keys.policy()).hmget(this.keys.config(), "lease_ms", "fleet_lacks").exec()) ?? [
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
}
