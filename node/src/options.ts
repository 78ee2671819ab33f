// A job's submit options: their types, their checks and the record fields they become. Every
// option is checked by name and by form before anything is written: an option hero does not
// know throws naming it (and its hero equivalent for BullMQ's words: `attempts`, `jobId`,
// `data`), and a value of the wrong type or form throws naming the option and the form it
// wants, so a port from BullMQ fails at its first wrong line instead of dropping behaviour.
// Durations are ms, as every Node duration (`delay`, `timeout`, `uniqueTtl`, a back-off).
import { randomUUID } from "node:crypto";

import { InvalidInput, strictOptions } from "./errors.js";
import { encode } from "./msgpack.js";
import { iso, nowMs } from "./protocol.js";

const NAME = /^[A-Za-z0-9_-]{1,64}$/;
const JOB_ID = /^[A-Za-z0-9_.-]{1,128}$/;
export const MAX_SCRIPT_BYTES = 1 << 20;

/** Every option of `hero submit`. `Data` is the payload's type (`submit<Data>`). Durations are
 * in ms: `delay`, `timeout` (kept by the record in whole seconds, rounded up), `uniqueTtl`. */
export interface JobOptions<Data = unknown> {
  type: string;
  script?: string;
  id?: string;
  group?: string;
  instance?: string;
  /** BullMQ's priority, meaning what it means there: absent or 0 is no priority (hero's default
   * level 5, served before any job with a priority); 1 to 4 are served after every job without
   * one, lower first (hero's levels 6 to 9). BullMQ's 5 to 2,097,152 are refused (`InvalidInput`):
   * hero has 10 levels, and no 5th one below the default would keep BullMQ's order. For hero's
   * own levels, give `level` instead. */
  priority?: number;
  /** hero's level, as every other language writes `priority`: 0 (served first) to 9; default 5.
   * Levels 0 to 4 come before jobs without a priority (BullMQ has none such). */
  level?: number;
  /** The handler's time limit, in ms (at least 1000; default: its queue policy's, else 300 s). */
  timeout?: number;
  /** Attempts after the first (BullMQ's `attempts: 3` is `retries: 2`). The rule, the same in
   * every language: a failed attempt (the handler throws, throws `Retry`, or runs past its time
   * limit) is tried again while the job's attempts are within its budget, the larger of this and
   * its queue policy's `retries` (default 0). A job whose worker died, or whose lease ran out, is
   * handed out again until its attempts reach the larger of the broker's `--max-attempts`
   * (default 5) and that budget + 1, then dead-lettered: `--max-attempts` is a floor for such
   * jobs, never a cap on this one (`retries: 5` outlives `--max-attempts 3`). `Abort` ends it at
   * once, whatever its budget. */
  retries?: number;
  /** ms before it is due; 0 or less is no delay (queued at once, as BullMQ). */
  delay?: number;
  /** When it is due (a time now or past: queued at once). */
  at?: Date;
  /** Job ids it waits for (a flow): it starts when they finished. */
  after?: string[];
  unique?: string;
  /** ms the uniqueness key is held at most. */
  uniqueTtl?: number;
  tags?: string[];
  limitKey?: string;
  env?: Record<string, string>;
  batch?: string;
  callerId?: string;
  contextId?: string;
  /** Any value MessagePack carries, of its own type: a Date, a Buffer, a Map, a BigInt too
   * (what handlers in every language read; see msgpack.ts). */
  payload?: Data;
  /** In a sharded namespace, every job with this key goes to one shard, in submit order. */
  route?: string;
  /** Its own back-off between failed attempts, as BullMQ writes it: a number (a fixed delay in
   * ms) or `{ type: "fixed" | "exponential", delay, jitter?, cap? }` (ms; jitter 0 to 1). The
   * server applies the longer of it and its queue policy's. */
  backoff?: number | BackoffOptions;
  /** BullMQ's: `true` removes it once finished (as soon as a waiting caller cannot miss it,
   * 10 s), `{ age }` keeps it `age` seconds. A count (`5`, `{ count }`) is refused: hero keeps
   * ended jobs by age. */
  removeOnComplete?: boolean | KeepJobs;
  /** As `removeOnComplete`, once it failed. */
  removeOnFail?: boolean | KeepJobs;
}

export interface BackoffOptions {
  type: "fixed" | "exponential";
  /** ms: the fixed delay, or the first of the doubling ones. */
  delay?: number;
  /** 0 to 1: each delay varies by up to this share either way. */
  jitter?: number;
  /** ms: the longest delay (exponential). */
  cap?: number;
}

export interface KeepJobs {
  /** Seconds to keep the ended job. */
  age?: number;
  count?: number;
}

const JOB_OPTIONS: ReadonlySet<string> = new Set([
  "type", "script", "id", "group", "instance", "priority", "level", "timeout", "retries", "delay", "at", "after", "unique",
  "uniqueTtl", "tags", "limitKey", "env", "batch", "callerId", "contextId", "payload", "route", "backoff",
  "removeOnComplete", "removeOnFail",
]);

/** BullMQ's (and other queues') words for hero's options, or why there is none. */
export const JOB_HINTS: Record<string, string> = {
  attempts: "retries (the attempts after the first: attempts 3 is retries 2)",
  jobId: "id",
  data: "payload",
  name: "script (a job's name is its script; its queue is its type)",
  queue: "type",
  queueName: "type",
  lifo: "level (0 is served first; there is no last-in-first-out)",
  repeat: "Queue.upsertJobScheduler",
  parent: "after (the parent waits for its children: give the children's ids to the parent)",
  failParentOnFailure: "(none needed: a failed prerequisite fails the jobs after it)",
  removeDependencyOnFailure: "(none: a failed prerequisite fails the jobs after it)",
  deduplication: "unique (and uniqueTtl)",
  debounce: "unique (and uniqueTtl)",
  stackTraceLimit: "(none: the last failed attempt's stack is kept, its first 16 KiB)",
  keepLogs: "(none: a job keeps its last 100 log lines)",
  sizeLimit: "(none: a payload is at most 1 MiB)",
  timestamp: "(none: the server dates the job)",
  ttl: "timeout (ms)",
};

function name(what: string, v: unknown): string {
  if (typeof v !== "string" || !NAME.test(v)) throw new InvalidInput(`${what} ${JSON.stringify(v)}: use 1-64 characters of A-Z a-z 0-9 _ -`);
  return v;
}

function text(what: string, v: unknown, max = 200): string {
  if (typeof v !== "string" || v.length === 0 || Buffer.byteLength(v) > max) {
    throw new InvalidInput(`${what} ${JSON.stringify(v)}: give a string of 1 to ${max} bytes`);
  }
  return v;
}

/** A whole number of at least `least`, or an error naming the option and the form. */
export function whole(what: string, v: unknown, least: number, unit = ""): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < least) {
    throw new InvalidInput(`${what} ${typeof v === "string" ? JSON.stringify(v) : String(v)} is not a whole number${unit} of at least ${least}${typeof v === "string" ? " (a number, not a string)" : ""}`);
  }
  return v;
}

/** A duration in ms: a finite number of at least 0 (`delay: "5s"` names the form it wants). */
export function millis(what: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0) {
    const hint = typeof v === "string" ? `; durations are numbers of ms here (${JSON.stringify(v)}: write e.g. 5000)` : "";
    throw new InvalidInput(`${what} ${typeof v === "string" ? JSON.stringify(v) : String(v)} is not a number of ms of at least 0${hint}`);
  }
  return v;
}

/** A time limit given in ms as the record's whole seconds (rounded up). Under a second is refused:
 * it is the mark of a limit written in seconds (before 1.0 `timeout` was seconds). */
export function timeoutSecs(what: string, v: unknown): number {
  const ms = millis(what, v);
  if (ms < 1000) {
    throw new InvalidInput(`${what} ${ms} ms is under a second: a time limit is in ms (since 1.0; before, seconds): 30 s is 30000`);
  }
  return Math.ceil(ms / 1000);
}

function strings(what: string, v: unknown, check: (s: string) => boolean, form: string): string[] {
  if (!Array.isArray(v) || !v.every((s) => typeof s === "string" && check(s))) {
    throw new InvalidInput(`${what} ${JSON.stringify(v)}: give an array of ${form}`);
  }
  return v;
}

/** BullMQ's back-off as the record stores one (`{kind, base_ms, cap_ms, jitter}`). */
export function backoffJson(b: unknown): { kind: string; base_ms: number; cap_ms: number; jitter: number } {
  const o = (typeof b === "number" ? { type: "fixed", delay: b } : b) as BackoffOptions;
  if (!o || typeof o !== "object" || (o.type !== "fixed" && o.type !== "exponential")) {
    throw new InvalidInput(`backoff ${JSON.stringify(b)}: give a delay in ms or { type: "fixed" | "exponential", delay }`);
  }
  strictOptions("backoff", o, new Set(["type", "delay", "jitter", "cap"]));
  const delay = millis("backoff delay", o.delay ?? 1000);
  const jitter = o.jitter ?? 0;
  if (typeof jitter !== "number" || !(jitter >= 0 && jitter <= 1)) throw new InvalidInput(`backoff jitter ${jitter} is not from 0 to 1`);
  const base = Math.floor(delay);
  const cap = o.cap !== undefined ? Math.floor(millis("backoff cap", o.cap)) : o.type === "fixed" ? base : 3_600_000;
  return { kind: o.type, base_ms: base, cap_ms: Math.max(cap, base), jitter };
}

/** BullMQ's removeOnComplete / removeOnFail as a retention in ms (null: the queue's or the
 * broker's). */
export function keepMs(what: string, v: unknown): number | null {
  if (v === undefined || v === false) return null;
  if (v === true) return 0;
  if (typeof v === "number" || (typeof v === "object" && v !== null && "count" in v)) {
    throw new InvalidInput(`${what}: ${JSON.stringify(v)} keeps a count of jobs; hero keeps ended jobs by age: give true or { age: <seconds> }`);
  }
  const age = (v as KeepJobs | null)?.age;
  if (typeof v !== "object" || v === null || typeof age !== "number" || !(age >= 0)) {
    throw new InvalidInput(`${what}: ${JSON.stringify(v)}; give true or { age: <seconds> }`);
  }
  strictOptions(what, v, new Set(["age"]));
  return Math.round(age * 1000);
}

/** A delay in ms: any finite number (0 or less is none, as BullMQ reads it). */
function delayMs(v: unknown): number {
  if (typeof v !== "number" || !Number.isFinite(v)) {
    const hint = typeof v === "string" ? `; durations are numbers of ms here (${JSON.stringify(v)}: write e.g. 5000)` : "";
    throw new InvalidInput(`delay ${typeof v === "string" ? JSON.stringify(v) : String(v)} is not a number of ms${hint}`);
  }
  return v;
}

/** BullMQ's highest priority (2^21). */
const BULLMQ_PRIORITY_LIMIT = 2_097_152;
/** The BullMQ priorities that keep their order on hero's levels: 1-4 are levels 6-9. */
const MAPPED_PRIORITIES = 4;

/** The hero level (0 served first … 9, default 5) of `priority` (BullMQ's) or `level` (hero's).
 * BullMQ serves jobs without a priority first, then 1, 2, … : absent and 0 are the default level,
 * 1-4 the four below it, in order. A larger one has no level that keeps BullMQ's order (its 1
 * and 5 would run as equals, or 5 above a job without a priority): refused, naming `level`. */
export function levelOf(o: { priority?: unknown; level?: unknown }): number {
  if (o.level !== undefined) {
    if (o.priority !== undefined) throw new InvalidInput("give priority (BullMQ's: 0 none, 1 first of the rest) or level (hero's: 0 first … 9, default 5), not both");
    const l = o.level;
    if (typeof l !== "number" || !Number.isInteger(l) || l < 0 || l > 9) {
      throw new InvalidInput(`level ${JSON.stringify(l)} is out of range: use 0 (served first) to 9 (last); 5 is the default`);
    }
    return l;
  }
  const p = o.priority ?? 0;
  if (typeof p !== "number" || !Number.isInteger(p) || p < 0 || p > BULLMQ_PRIORITY_LIMIT) {
    throw new InvalidInput(`priority ${JSON.stringify(p)} is out of range: BullMQ's priority is 0 (none) or 1 (first) to ${BULLMQ_PRIORITY_LIMIT}; here 1-${MAPPED_PRIORITIES} (or hero's level 0-9)`);
  }
  if (p > MAPPED_PRIORITIES) {
    throw new InvalidInput(
      `priority ${p}: as in BullMQ, a priority is served after every job without one, lower first, and hero keeps that order for 1-${MAPPED_PRIORITIES} only (its levels ${10 - MAPPED_PRIORITIES}-9, below the default 5); give 1-${MAPPED_PRIORITIES}, or hero's level instead (level: 0 is served first, 9 last, 5 the default, where jobs without a priority are)`,
    );
  }
  return p === 0 ? 5 : 5 + p;
}

/** A checked submit: what `Protocol.submit` takes, and where it goes. */
export interface Spec {
  id: string;
  generated: boolean;
  route: string | null;
  type: string;
  group: string | null;
  instance: string | null;
  /** The level it is queued at, hero's 0-9 (what the stream's name and the record carry). */
  priority: number;
  runAt: number;
  fields: [string, string | Buffer][];
}

/** `o` checked whole, as the record fields a submit writes (`reply`: a caller waits on it). */
export function jobSpec(o: JobOptions, reply = false): Spec {
  if (!o || typeof o !== "object" || Array.isArray(o)) throw new InvalidInput("a job is an object: { type, script, ... }");
  strictOptions("job", o, JOB_OPTIONS, JOB_HINTS);
  const id = o.id === undefined ? randomUUID() : o.id;
  if (o.id !== undefined && (typeof id !== "string" || !JOB_ID.test(id))) throw new InvalidInput(`job id ${JSON.stringify(id)}: use 1-128 characters of A-Z a-z 0-9 _ - .`);
  const type = name("script type", o.type);
  const script = o.script ?? "";
  if (typeof script !== "string") throw new InvalidInput(`script is a ${typeof script}: give the job's script as a string (its data goes in payload)`);
  if (o.instance !== undefined && o.group === undefined) throw new InvalidInput("an instance needs a group: give group as well");
  if (o.group !== undefined) name("group", o.group);
  if (o.instance !== undefined) name("instance", o.instance);
  const priority = levelOf(o);
  // (a UTF-8 byte is at most three a UTF-16 unit: a short script is measured by its length)
  if (script.length * 3 > MAX_SCRIPT_BYTES && Buffer.byteLength(script) > MAX_SCRIPT_BYTES) {
    throw new InvalidInput(`the script is ${Buffer.byteLength(script)} bytes; the limit is ${MAX_SCRIPT_BYTES}`);
  }
  if (o.route !== undefined) text("route key", o.route);
  const f: [string, string | Buffer][] = [["script", script], ["script_type", type], ["created_at", iso()]];
  if (o.group !== undefined) f.push(["group", o.group]);
  if (o.instance !== undefined) f.push(["instance", o.instance]);
  if (priority !== 5) f.push(["priority", String(priority)]);
  if (o.timeout !== undefined) f.push(["timeout", String(timeoutSecs("timeout", o.timeout))]);
  if (o.retries !== undefined && whole("retries", o.retries, 0) > 0) f.push(["retries", String(o.retries)]);
  if (o.callerId !== undefined) f.push(["caller_id", text("callerId", o.callerId, 1000)]);
  if (o.contextId !== undefined) f.push(["context_id", text("contextId", o.contextId, 1000)]);
  if (o.env !== undefined) {
    if (typeof o.env !== "object" || o.env === null || Array.isArray(o.env)) throw new InvalidInput("env is an object of strings: { NAME: \"value\" }");
    for (const [k, v] of Object.entries(o.env)) {
      if (!k || k.includes("=")) throw new InvalidInput(`environment variable name ${JSON.stringify(k)} is empty or contains '='`);
      if (typeof v !== "string") throw new InvalidInput(`environment variable ${k} is a ${typeof v}: give a string`);
    }
    if (Object.keys(o.env).length) f.push(["env_vars", JSON.stringify(o.env)]);
  }
  if (o.delay !== undefined && o.at !== undefined) throw new InvalidInput("give delay or at, not both");
  if (o.after !== undefined) {
    const after = strings("after", o.after, (s) => JOB_ID.test(s), "job ids");
    if (after.length) f.push(["prerequisites", JSON.stringify(after)]);
  }
  if (o.tags !== undefined) {
    const tags = strings("tags", o.tags, (s) => s.length > 0 && Buffer.byteLength(s) <= 200, "strings of 1 to 200 bytes");
    if (tags.length) f.push(["tags", JSON.stringify(tags)]);
  }
  if (o.unique !== undefined) {
    f.push(["unique", text("unique key", o.unique)]);
    if (o.uniqueTtl !== undefined) f.push(["unique_ttl", String(Math.max(1, Math.floor(millis("uniqueTtl", o.uniqueTtl))))]);
  } else if (o.uniqueTtl !== undefined) {
    throw new InvalidInput("uniqueTtl needs a unique key");
  }
  if (o.limitKey !== undefined) f.push(["limit_key", text("limit key", o.limitKey)]);
  if (o.batch !== undefined) f.push(["batch", name("batch name", o.batch)]);
  if (o.payload !== undefined) {
    const bytes = encode(o.payload, "payload");
    if (bytes.length > MAX_SCRIPT_BYTES) throw new InvalidInput(`the payload is ${bytes.length} bytes; the limit is ${MAX_SCRIPT_BYTES}`);
    f.push(["payload", bytes]);
  }
  if (o.backoff !== undefined) f.push(["backoff", JSON.stringify(backoffJson(o.backoff))]);
  const keep = keepMs("removeOnComplete", o.removeOnComplete);
  if (keep !== null) f.push(["keep", String(keep)]);
  const keepFailed = keepMs("removeOnFail", o.removeOnFail);
  if (keepFailed !== null) f.push(["keep_failed", String(keepFailed)]);
  if (reply) f.push(["reply", "1"]);
  let runAt = 0;
  if (o.at !== undefined) {
    if (!(o.at instanceof Date) || Number.isNaN(o.at.getTime())) throw new InvalidInput(`at ${JSON.stringify(o.at)} is not a valid Date`);
    runAt = o.at.getTime();
  } else if (o.delay !== undefined) runAt = nowMs() + Math.floor(delayMs(o.delay));
  // due now (BullMQ's `delay: 0`): queued at once, not parked in the delayed set, which costs a
  // `delayed` event, up to the upkeep's pace in latency, and needs a process doing the upkeep
  if (runAt !== 0 && runAt <= nowMs()) runAt = 0;
  if (runAt > 0 && f.some(([k]) => k === "prerequisites")) {
    throw new InvalidInput("a job with prerequisites cannot also be delayed: it starts when they finish");
  }
  return {
    id,
    generated: o.id === undefined,
    route: o.route ?? null,
    type,
    group: o.group ?? null,
    instance: o.instance ?? null,
    priority,
    runAt,
    fields: f,
  };
}
