// Recurring jobs (BullMQ's job schedulers) as the Queue stores and shows them: the spec a
// `repeat` and a job template make (the JSON every language writes: `CronJob` in the Rust
// protocol's cron.rs), the arguments of a look at a schedule's next ticks, and the stored specs
// read back. What a schedule or zone may be is not decided here: `hero_cron` and
// `hero_cron_next` check them with the one cron engine in the function library, the one the
// upkeep (`hero_duties`) fires ticks by, so a schedule any language stores is one it fires, and
// its ticks are the same whoever asks.
import type { Redis } from "ioredis";

import { InvalidInput, strictOptions } from "./errors.js";
import { Keys } from "./keys.js";
import { decode } from "./msgpack.js";
import { backoffJson, JobOptions, jobSpec } from "./options.js";

/** BullMQ's repeat options: `pattern` (a cron expression of 5 or 6 fields, `@hourly` and the
 * like) or `every` (ms, at least 1000: ticks at whole multiples of it since the epoch), read in
 * `tz` (an IANA zone name, UTC by default). The cron engine checks them when the job is stored. */
export interface RepeatOptions {
  pattern?: string;
  every?: number;
  tz?: string;
  /** A tick found more than 1 s late (no process did the upkeep meanwhile): fired once on
   * return (`catch-up`) or not (`skip`, the default). */
  missed?: "skip" | "catch-up";
}
const REPEAT_OPTIONS = new Set(["pattern", "every", "tz", "missed"]);

/** The job each tick submits: BullMQ's `{ name, data, opts }` (`name` is the script). */
export interface JobTemplate {
  name?: string;
  data?: unknown;
  opts?: Pick<JobOptions, "group" | "instance" | "priority" | "level" | "timeout" | "retries" | "tags" | "backoff" | "removeOnComplete" | "removeOnFail">;
}
const TEMPLATE_OPTIONS = new Set(["name", "data", "opts"]);
const TEMPLATE_JOB_OPTIONS = new Set(["group", "instance", "priority", "level", "timeout", "retries", "tags", "backoff", "removeOnComplete", "removeOnFail"]);

/** What `Queue.cronNext` takes. */
export interface CronNextOptions {
  /** The IANA zone name the schedule is read in (default UTC). */
  tz?: string;
  /** The ticks strictly after this instant (ms since the epoch, or a Date; default now). */
  after?: number | Date;
  /** How many ticks, 1-100 (default 5). */
  count?: number;
}
const CRON_NEXT_OPTIONS = new Set(["tz", "after", "count"]);

/** The spec of recurring job `id` of script type `type` that `hero_cron` stores: the options
 * strict (one BullMQ has and hero does not fails, naming it), the template's job checked as a
 * submit checks it, the schedule's form only (its meaning is the engine's). */
export function cronSpec(type: string, id: string, repeat: RepeatOptions, template: JobTemplate): Record<string, unknown> {
  strictOptions("repeat", repeat, REPEAT_OPTIONS, { cron: "pattern", limit: "(none)", startDate: "(none)", endDate: "(none)", immediately: "(none)", offset: "(none)", utc: "tz", count: "(none)" });
  strictOptions("job template", template, TEMPLATE_OPTIONS);
  strictOptions("job template opts", template.opts ?? {}, TEMPLATE_JOB_OPTIONS, { attempts: "retries (attempts after the first)", jobId: "(none: a tick's id is cron-<name>-<tick>)" });
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(id)) throw new InvalidInput(`recurring job name ${JSON.stringify(id)}: use 1-64 characters of A-Z a-z 0-9 _ -`);
  const schedule = scheduleOf(repeat);
  if (repeat.tz !== undefined && typeof repeat.tz !== "string") throw new InvalidInput(`repeat.tz ${JSON.stringify(repeat.tz)} is not an IANA zone name (e.g. UTC, Europe/Amsterdam)`);
  const o = template.opts ?? {};
  // the submit's own checks, on the job a tick would submit
  const spec = jobSpec({ type, script: template.name ?? "", payload: template.data, ...o }, false);
  const field = (f: string) => spec.fields.find(([k]) => k === f)?.[1];
  const job: Record<string, unknown> = { script_type: type, script: template.name ?? "", retries: o.retries ?? 0 };
  if (o.group) job.group = o.group;
  if (o.instance) job.instance = o.instance;
  // the level BullMQ's priority (or hero's level) maps to: what the upkeep queues a tick at
  if (spec.priority !== 5) job.priority = spec.priority;
  if (field("timeout") !== undefined) job.timeout_secs = Number(field("timeout"));
  if (o.tags?.length) job.tags = o.tags;
  const payload = field("payload");
  if (payload !== undefined) job.payload = Buffer.from(payload).toString("base64");
  if (o.backoff !== undefined) job.backoff = backoffJson(o.backoff);
  if (field("keep") !== undefined) job.keep_ms = Number(field("keep"));
  if (field("keep_failed") !== undefined) job.keep_failed_ms = Number(field("keep_failed"));
  return { name: id, schedule, tz: repeat.tz ?? "UTC", missed: repeat.missed ?? "skip", paused: false, job };
}

/** The schedule stored for `repeat`: its pattern as given, or `every <n>ms`. */
function scheduleOf(repeat: RepeatOptions): string {
  if ((repeat.pattern === undefined) === (repeat.every === undefined)) throw new InvalidInput("give repeat.pattern (a cron expression) or repeat.every (ms), one of them");
  if (repeat.every !== undefined) {
    // a whole number: a fraction or a sign would read as another duration than the one meant
    if (typeof repeat.every !== "number" || !Number.isSafeInteger(repeat.every) || repeat.every < 0) throw new InvalidInput(`repeat.every ${JSON.stringify(repeat.every)}: a whole number of ms, at least 1000`);
    return `every ${repeat.every}ms`;
  }
  if (typeof repeat.pattern !== "string") throw new InvalidInput(`repeat.pattern ${JSON.stringify(repeat.pattern)} is not a cron expression (5 or 6 fields, or @hourly ...)`);
  return repeat.pattern.trim();
}

/** `cronNext`'s options checked, with their defaults: [zone, after (ms; null for now, to be
 * read from Redis's clock, the one the upkeep fires by), count]. */
export function cronNextArgs(schedule: string, opts: CronNextOptions): [string, number | null, number] {
  strictOptions("cronNext", opts, CRON_NEXT_OPTIONS, { n: "count", limit: "count", from: "after", startDate: "after", currentDate: "after" });
  if (typeof schedule !== "string") throw new InvalidInput(`schedule ${JSON.stringify(schedule)} is not a cron expression nor \`every <duration>\``);
  const tz = opts.tz ?? "UTC";
  if (typeof tz !== "string") throw new InvalidInput(`tz ${JSON.stringify(tz)} is not an IANA zone name (e.g. UTC, Europe/Amsterdam)`);
  const after = opts.after === undefined ? null : opts.after instanceof Date ? opts.after.getTime() : opts.after;
  if (after !== null && (typeof after !== "number" || !Number.isSafeInteger(after) || after < 0)) throw new InvalidInput(`after ${JSON.stringify(opts.after)} is not a Date nor a whole number of ms since the epoch`);
  const count = opts.count ?? 5;
  if (typeof count !== "number" || !Number.isInteger(count) || count < 1 || count > 100) throw new InvalidInput(`count ${JSON.stringify(count)} is not a whole number of 1-100`);
  return [tz, after, count];
}

/** The recurring jobs of script type `type` by name: each as stored, with its payload decoded
 * as `data`, and `next_ms`, `fires`, `last_ms` (null until the upkeep first looked at it). */
export async function schedulers(redis: Redis, keys: Keys, type: string): Promise<Record<string, unknown>[]> {
  const state = await redis.hgetall(keys.cronNext());
  const all = await redis.hgetall(keys.cron());
  const num = (k: string) => (/^\d+$/.test(state[k] ?? "") ? Number(state[k]) : null);
  const out: Record<string, unknown>[] = [];
  for (const name of Object.keys(all).sort()) {
    let spec: Record<string, unknown>;
    try {
      spec = JSON.parse(all[name]);
    } catch {
      continue;
    }
    const job = spec?.job as Record<string, unknown> | undefined;
    if (job?.script_type !== type) continue;
    // its payload stored as base64 MessagePack (every language writes it so): BullMQ's `data`
    let data: unknown = null;
    if (typeof job.payload === "string") {
      try {
        data = decode(Buffer.from(job.payload, "base64"));
      } catch (e) {
        throw new InvalidInput(`recurring job ${name}: its stored payload is not MessagePack (${e instanceof Error ? e.message : e}); add it again`);
      }
    }
    out.push({ ...spec, data, next_ms: num(name), fires: num(`${name}|fires`) ?? 0, last_ms: num(`${name}|last`) });
  }
  return out;
}
