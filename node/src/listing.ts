// Listing a queue's jobs by state with BullMQ's names (`getJobs`, `getFailed`, `getCompleted`,
// `getDelayed`, `getWaiting`, `getActive`) and counting the ended ones a queue holds, over
// hero_list (protocol 33: one bounded page a call, at most 1,000 candidates read), on every
// shard of the namespace. `Queue` (queue.ts) exposes them.
import type { Client } from "./client.js";
import { HeroError, InvalidInput } from "./errors.js";
import { Job, jobFromRecord } from "./job.js";
import type { Keys } from "./keys.js";
import type { Protocol } from "./protocol.js";

type Shard = [number, Keys, Protocol];

/** hero's states, as hero_list takes them. */
export type HeroState = "finished" | "error" | "delayed" | "waiting" | "running";

/** BullMQ's job types hero has (and hero's own state names, taken too). */
export type JobType = "completed" | "failed" | "delayed" | "waiting" | "wait" | "active" | HeroState;

const STATES: Record<string, HeroState> = {
  completed: "finished",
  finished: "finished",
  failed: "error",
  error: "error",
  delayed: "delayed",
  waiting: "waiting",
  wait: "waiting",
  active: "running",
  running: "running",
};

/** BullMQ's types hero has no state for, and why. */
const NONE: Record<string, string> = {
  prioritized: "hero's `waiting` holds the jobs with a priority too (its levels are streams of one queue): ask for `waiting`",
  "waiting-children": "a job waiting for its prerequisites (`after`) is in no list hero keeps: `client.children(id)` shows what a parent waits for",
  paused: "a paused queue's jobs stay `waiting` (isPaused() says whether the queue is paused)",
  repeat: "recurring jobs are getJobSchedulers()",
};

const OFFERED = "completed, failed, delayed, waiting (or wait), active";

/** hero's state for a BullMQ type, or `InvalidInput` naming what hero offers. */
export function stateOf(type: unknown): HeroState {
  if (typeof type === "string" && type in STATES) return STATES[type];
  const why = typeof type === "string" ? NONE[type] : undefined;
  throw new InvalidInput(`job type ${JSON.stringify(type)} is not one hero lists${why ? `: ${why}` : ""}; hero lists ${OFFERED}`);
}

/** The types asked (a name or a list of names; none: every one hero has), as hero's states,
 * each once, in the order given. */
export function statesOf(types: unknown, dflt: HeroState[] = ["running", "waiting", "delayed", "finished", "error"]): HeroState[] {
  if (types === undefined) return dflt;
  const list = Array.isArray(types) ? types : [types];
  if (list.length === 0) return dflt;
  return [...new Set(list.map(stateOf))];
}

/** The most ids a hero_list call is asked for. */
const PAGE = 1000;

async function server<T>(f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    throw HeroError.fromServer(e);
  }
}

/** The ids of queue `name`'s jobs in `state`, shard after shard, each shard in hero_list's order
 * (finished and error: newest end first; delayed: soonest first; waiting and running: in their
 * streams' order), each job once; `want` of them at most (null: all). Every call is one bounded
 * hero_list page; this reads on until it holds `want` or every shard is at its end. */
export async function listIds(shards: Shard[], state: HeroState, name: string, want: number | null): Promise<[number, string][]> {
  const out: [number, string][] = [];
  const seen = new Set<string>();
  for (const [n, , p] of shards) {
    let cursor = "";
    do {
      if (want !== null && out.length >= want) return out;
      const [next, ids] = await server(() => p.list(state, name, cursor, want === null ? PAGE : Math.min(PAGE, want - out.length)));
      for (const id of ids) {
        // a job ended twice (ended, queued again, ended again) is named by two retention entries
        if (seen.has(id)) continue;
        seen.add(id);
        out.push([n, id]);
      }
      cursor = next;
    } while (cursor !== "");
  }
  return want === null ? out : out.slice(0, want);
}

/** How many of queue `name`'s jobs are in `state` now: every page of hero_list (one call reads
 * at most 1,000 candidates: counting the ended jobs reads the whole retention stream, a call per
 * 1,000 ends the namespace keeps). */
export async function countState(shards: Shard[], state: HeroState, name: string): Promise<number> {
  return (await listIds(shards, state, name, null)).length;
}

/** The records of `ids` (one pipeline of HGETALL a shard), in order; a job deleted since it was
 * listed is left out. */
export async function readJobs(c: Client, shards: Shard[], ids: [number, string][]): Promise<Job[]> {
  const keysOf = new Map(shards.map(([n, k]) => [n, k]));
  const out: (Job | null)[] = new Array(ids.length).fill(null);
  for (let i = 0; i < ids.length; i += PAGE) {
    const chunk = ids.slice(i, i + PAGE);
    const pipe = c.redis.pipeline();
    // the flat reply as Buffers: the payload and the value are bytes, never UTF-8 text
    for (const [n, id] of chunk) pipe.callBuffer("HGETALL", keysOf.get(n)!.job(id));
    const got = (await pipe.exec()) ?? [];
    chunk.forEach(([, id], k) => {
      const [err, rec] = got[k] ?? [null, null];
      if (err) throw HeroError.fromServer(err);
      if (Array.isArray(rec) && rec.length > 0) out[i + k] = jobFromRecord(id, rec);
    });
  }
  return out.filter((j): j is Job => j !== null);
}

/** `getJobs`' range checked: [start, end (-1: to the end)]. */
export function rangeOf(start: unknown, end: unknown): [number, number] {
  if (typeof start !== "number" || !Number.isInteger(start) || start < 0) throw new InvalidInput(`start ${JSON.stringify(start)} is not a whole number of at least 0`);
  if (typeof end !== "number" || !Number.isInteger(end) || end < -1) {
    throw new InvalidInput(`end ${JSON.stringify(end)} is not a whole number of at least -1 (-1: to the last; hero takes no other negative end)`);
  }
  return [start, end];
}

/** BullMQ's `getJobs(types, start, end, asc)`: per type, in the order given, the jobs at
 * positions `start` to `end` (inclusive, -1 the last) of that type's list, concatenated. The
 * lists are hero_list's order (finished and error: newest end first, as BullMQ's default;
 * delayed: soonest first; waiting, active: next to run first); `asc` reverses them (reading the
 * whole list first). */
export async function getJobs(c: Client, shards: Shard[], name: string, types: unknown, start: unknown, end: unknown, asc: unknown): Promise<Job[]> {
  const states = statesOf(types);
  const [from, to] = rangeOf(start, end);
  if (typeof asc !== "boolean") throw new InvalidInput(`asc ${JSON.stringify(asc)} is not true or false`);
  const ids: [number, string][] = [];
  for (const state of states) {
    let list = await listIds(shards, state, name, asc || to === -1 ? null : to + 1);
    if (asc) list = list.reverse();
    ids.push(...list.slice(from, to === -1 ? undefined : to + 1));
  }
  return readJobs(c, shards, ids);
}
