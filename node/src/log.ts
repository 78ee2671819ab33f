// Reading the event log (`<ns>:meta:events`): an entry decoded into the events of the jobs it
// names, the log's state (`XINFO STREAM`), its cap, and the entries of an XREAD reply. Shared by
// the subscriptions (`events.ts`) and the waits' follower (`waiter.ts`).
import { Redis } from "ioredis";

import { HeroError } from "./errors.js";
import { Keys } from "./keys.js";

export const COUNT = 1000;
export const BLOCK_MS = 1000;
/** Kinds that never end a job: they do not wake a wait. */
export const NOT_ENDS = new Set(["submitted", "dispatched", "started", "progress", "logged", "paused", "resumed", "bridged_in", "bridged_out"]);

/** The namespace's event log is off (`events_max 0`): there are no events to subscribe to. */
export class EventLogOff extends HeroError {}

/** One change of a job's state as hero logs it. */
export interface HeroEvent {
  /** The log entry's id (`<ms>-<seq>`): pass it as `lastEventId` to resume after it. */
  id: string;
  event: string;
  jobId: string;
  queue?: string;
  worker?: string;
  attempt?: number;
  reason?: string;
  dueMs?: number;
  /** A finished job's output, read with its event by the reading rule (its `value` decoded,
   * else its `output` text; absent once the job is deleted). */
  output?: unknown;
  /** The finished job's `output` text (a string result, or the JSON of a value). */
  outputText?: string;
  shard: number;
}

export type Fields = string[];

/** The events one log entry holds (jobs of one call share an entry). */
export function decodeEntry(id: string, fields: Fields, shard = 0): HeroEvent[] {
  const f: Record<string, string> = {};
  for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i]] = fields[i + 1];
  if (!f.e || !f.j) return [];
  const base = {
    id,
    event: f.e,
    shard,
    ...(f.q ? { queue: f.q } : {}),
    ...(f.w ? { worker: f.w } : {}),
    ...(f.r ? { reason: f.r } : {}),
    ...(f.d && /^\d+$/.test(f.d) ? { dueMs: Number(f.d) } : {}),
  };
  const ids = f.j.split(" ");
  const attempts = (f.a ?? "").split(" ");
  return ids.map((jobId, k) => ({ ...base, jobId, ...(/^\d+$/.test(attempts[k] ?? "") ? { attempt: Number(attempts[k]) } : {}) }));
}

export function sid(id: string): [number, number] {
  const [ms, seq] = id.split("-");
  return [Number(ms), Number(seq ?? 0)];
}

export function before(a: string, b: string): boolean {
  const [x, y] = [sid(a), sid(b)];
  return x[0] < y[0] || (x[0] === y[0] && x[1] < y[1]);
}

export async function eventsMax(redis: Redis, keys: Keys): Promise<number> {
  const v = await redis.hget(keys.config(), "events_max");
  const n = v === null ? 10000 : Number(v);
  return Number.isFinite(n) ? n : 10000;
}

export interface LogInfo {
  added: number;
  length: number;
  first: string | null;
  last: string;
}

export function parseInfo(raw: unknown): LogInfo {
  const a = raw as unknown[];
  const info: LogInfo = { added: 0, length: 0, first: null, last: "0-0" };
  for (let i = 0; i + 1 < a.length; i += 2) {
    const [k, v] = [String(a[i]), a[i + 1]];
    if (k === "entries-added") info.added = Number(v);
    else if (k === "length") info.length = Number(v);
    else if (k === "last-generated-id") info.last = String(v);
    else if (k === "first-entry") info.first = Array.isArray(v) ? String(v[0]) : null;
  }
  return info;
}

export async function logInfo(redis: Redis, key: string): Promise<LogInfo> {
  if (!(await redis.exists(key))) return { added: 0, length: 0, first: null, last: "0-0" };
  return parseInfo(await redis.call("XINFO", "STREAM", key));
}

export type Entries = [string, Fields][];

export function entriesOf(reply: unknown): Entries {
  if (!Array.isArray(reply) || reply.length === 0) return [];
  return (reply[0] as [string, Entries])[1] ?? [];
}
