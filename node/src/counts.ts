// A queue's counts (BullMQ's `getJobCounts` and its kin): the jobs now from hero_counts (one
// read-only call a shard: waiting, running, delayed per work stream, and the ends counted since
// the namespace began), and the ended jobs the queue holds, `completed` and `failed`, counted
// over hero_list (listing.ts): hero_counts has no gauge of them (protocol 33), so they cost a
// bounded call per 1,000 ends the namespace keeps.
import { HeroError } from "./errors.js";
import type { Keys } from "./keys.js";
import { countState, JobType, stateOf } from "./listing.js";
import type { Protocol } from "./protocol.js";

type Shard = [number, Keys, Protocol];

/** Ends counted since each stream began (an obliterated queue's go with it): events, not jobs now. A job that ended and was
 * queued again (a retried dead letter, a requeue) is counted at each end, and a job deleted at
 * its retention stays counted; none of them is a job in `waiting`, `delayed` or `running`. */
export interface JobTotals {
  /** Jobs that ended `finished`. */
  finished: number;
  /** Jobs that ended `error`, whatever the reason: a handler's failure past its retry budget, a
   * time limit, `Abort`, a stop (of a running or a queued job), a failed prerequisite. */
  failed: number;
  /** Of those, the jobs dead-lettered: given up after their worker died too often (see
   * `JobOptions.retries` for the rule). */
  dead: number;
}

/** One work stream: its jobs now (`waiting`, `running`, `delayed`: each job in one of them at
 * most) and its ends since the namespace began (`totals`). */
export interface StreamCounts {
  stream: string;
  /** Queued, not yet taken by a worker (a fair queue's jobs in its gate too). A job stopped while
   * queued leaves it at once (its entry is deleted), unless more than 1,000 jobs were ahead of
   * it: then it is counted here until a worker reaches its entry and drops it. */
  waiting: number;
  /** Taken by a worker and not yet ended (BullMQ's `active`). */
  running: number;
  /** Due later: a `delay`, an `at`, or a retry waiting out its back-off. */
  delayed: number;
  totals: JobTotals;
  paused: boolean;
  oldestWaitingMs: number | null;
  shard: number;
}

/** A queue's jobs, summed over its work streams (every priority, group, instance, shard), each
 * job in one count at most: `waiting` (BullMQ's `waiting` + `prioritized`), `delayed`, `running`
 * (BullMQ's `active`, which reads the same: not enumerable, so a sum of the values counts no
 * job twice), and the ended jobs the queue holds now, `completed` (hero's `finished`) and
 * `failed` (`error`), as BullMQ counts them. `totals` counts ends since the namespace began
 * (events, not jobs). */
export interface JobCounts {
  waiting: number;
  delayed: number;
  running: number;
  /** BullMQ's name for `running` (not enumerable). */
  readonly active: number;
  /** Jobs that ended `finished` and are kept (not yet deleted by their retention or `clean`). */
  completed: number;
  /** Jobs that ended `error` and are kept: what `getFailed()` lists. */
  failed: number;
  totals: JobTotals;
  streams: StreamCounts[];
}

async function server<T>(f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    throw HeroError.fromServer(e);
  }
}

/** Queue `name`'s counts (see `JobCounts`); `ended` false leaves `completed` and `failed` 0
 * (for a caller that needs the jobs now only). */
export async function jobCounts(shards: Shard[], name: string, ended = true): Promise<JobCounts> {
  const out = { waiting: 0, delayed: 0, running: 0, completed: 0, failed: 0, totals: { finished: 0, failed: 0, dead: 0 }, streams: [] as StreamCounts[] };
  for (const [n, , p] of shards) {
    for (const [stream, waiting, running, delayed, finished, failed, dead, paused, age] of await server(() => p.counts(name))) {
      out.streams.push({ stream, waiting, running, delayed, totals: { finished, failed, dead }, paused: paused === 1, oldestWaitingMs: age < 0 ? null : age, shard: n });
      out.waiting += waiting;
      out.delayed += delayed;
      out.running += running;
      out.totals.finished += finished;
      out.totals.failed += failed;
      out.totals.dead += dead;
    }
  }
  if (ended) {
    out.completed = await countState(shards, "finished", name);
    out.failed = await countState(shards, "error", name);
  }
  return Object.defineProperty(out, "active", { get: () => out.running, enumerable: false }) as JobCounts;
}

/** BullMQ's `getJobCounts(...types)`: the counts of `types` only, by the names given (each type
 * checked: one hero has no count for is refused naming what it has). */
export async function countsOf(shards: Shard[], name: string, types: JobType[]): Promise<Record<string, number>> {
  const states = types.map((t) => [t, stateOf(t)] as const);
  const ended = states.some(([, s]) => s === "finished" || s === "error");
  const now = states.some(([, s]) => s !== "finished" && s !== "error") ? await jobCounts(shards, name, false) : null;
  const out: Record<string, number> = {};
  for (const [t, s] of states) {
    if (s === "finished" || s === "error") out[t] = ended ? await countState(shards, s, name) : 0;
    else out[t] = now![s];
  }
  return out;
}
