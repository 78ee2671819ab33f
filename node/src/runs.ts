// A lane's running jobs: the runs by id, a handler's call and how its answer becomes an
// outcome, and a run let go of once it is over. Written for the garbage collector as much as for
// the reader: at tens of thousands of jobs a second, a worker's time went half to collecting
// garbage while nearly everything it allocated survived the young generation's collections
// (scavenges). An object the collector promoted to the old generation while it was in use is not
// looked at again until a full collection; until then whatever it names is kept by every
// scavenge, and promoted in turn. So nothing long-lived names a run once it is over: the runs
// are kept in slots emptied at their end rather than in a Map (a Map under churn rehashes into a
// new table every few hundred changes, and V8 keeps the old table's entries for its iterators),
// an ended run lets go of its job, record and value (`retire`), and the fetch's answer lets go of
// each record its job takes (protocol.ts, lane.ts).
import type { Lease } from "./keeper.js";
import { boundedTrace, Done } from "./done.js";
import { nowMs, retryAtMs } from "./protocol.js";
import { resultOf } from "./value.js";
import { Abort, Handler, Retry, WorkerJob } from "./worker-job.js";

/** A job a lane runs, from its fetch to its recorded end (the keeper renews its `Lease`). */
export interface Running extends Lease {
  began: number;
  /** The record's `reply` ('' when no caller waits): the completion names the reply list. */
  reply: string;
  /** What the handler returned, or threw: the worker's `completed` and `failed` events carry
   * them as they were (the record holds their text). */
  value?: unknown;
  error?: unknown;
}

/** A run over, out of its lane's `running`: it lets go of its job and what the handler
 * answered (see above). */
export function retire(run: Running): void {
  (run as { job: WorkerJob | null }).job = null;
  run.value = undefined;
  run.error = undefined;
}

/** Where a run's outcome goes: the lane's completer (and the run's slot back). */
export type Ended = (run: Running, outcome: Done["outcome"], out: string, retryAt: number, trace?: string, bytes?: Buffer | null) => void;

/** Calls `handler` with the run's job and hands its outcome to `ended`. No async function a
 * job: the handler's own promise is the only one waited on. */
export function execute(handler: Handler, run: Running, ended: Ended): void {
  let value: unknown;
  try {
    value = handler(run.job);
  } catch (e) {
    failed(run, e, ended);
    return;
  }
  if (value instanceof Promise) {
    value.then(
      (v) => succeeded(run, v, ended),
      (e) => failed(run, e, ended),
    );
  } else if (value !== null && typeof value === "object" && typeof (value as { then?: unknown }).then === "function") {
    Promise.resolve(value).then(
      (v) => succeeded(run, v, ended),
      (e) => failed(run, e, ended),
    );
  } else {
    // a handler that answered at once: recorded as an async one's is, after this turn
    queueMicrotask(() => succeeded(run, value, ended));
  }
}

function succeeded(run: Running, value: unknown, ended: Ended): void {
  run.value = value;
  let r: { text: string; bytes: Buffer | null };
  try {
    r = resultOf(value);
  } catch (e) {
    // a value MessagePack cannot carry: the job ends error naming it (as Rust's
    // Outcome::value), never a result silently dropped or turned into `{}`
    failed(run, new Abort(`job ${run.job.id}: ${e instanceof Error ? e.message : e}; return data (MessagePack carries objects, arrays, Dates, Buffers, Maps, BigInts)`), ended);
    return;
  }
  ended(run, "done", r.text, 0, undefined, r.bytes);
}

function failed(run: Running, e: unknown, ended: Ended): void {
  run.error = e;
  if (e instanceof Retry) ended(run, "retry", e.message, nowMs() + e.delayMs);
  else if (e instanceof Abort) ended(run, "abort", e.message, 0, boundedTrace(e));
  // the handler failed: the attempt fails, retried within the job's budget or its policy's
  else ended(run, "fail", e instanceof Error ? `${e.name}: ${e.message}` : String(e), retryAtMs(run.job.attempt), boundedTrace(e));
}

/** The runs of one lane, by job id (the few calls of a Map the lane and its keeper use): a Map
 * from id to slot, the runs in slots emptied when they end (see above). */
export class Runs<R> {
  private readonly index = new Map<string, number>();
  private readonly slots: (R | undefined)[] = [];
  private readonly free: number[] = [];

  get size(): number {
    return this.index.size;
  }

  get(id: string): R | undefined {
    const i = this.index.get(id);
    return i === undefined ? undefined : this.slots[i];
  }

  set(id: string, run: R): this {
    let i = this.index.get(id);
    if (i === undefined) {
      i = this.free.length ? this.free.pop()! : this.slots.length;
      this.index.set(id, i);
    }
    this.slots[i] = run;
    return this;
  }

  delete(id: string): boolean {
    const i = this.index.get(id);
    if (i === undefined) return false;
    this.index.delete(id);
    this.slots[i] = undefined;
    this.free.push(i);
    return true;
  }

  /** The runs, in slot order; one deleted meanwhile is skipped, one added may be. */
  *values(): IterableIterator<R> {
    for (let i = 0; i < this.slots.length; i++) {
      const r = this.slots[i];
      if (r !== undefined) yield r;
    }
  }
}
