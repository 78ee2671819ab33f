// Failed-job tooling and a queue's cleanup, what BullMQ users reach for (`job.retry()`,
// `queue.clean`, `queue.drain`, `queue.obliterate`): the orchestration of hero-admin's
// cleanup.rs over the server functions every language calls (hero_requeue, hero_clean,
// hero_drain), a bounded step a call, over every shard of the namespace. `Queue` (queue.ts)
// exposes them.
import type { Client } from "./client.js";
import { HeroError, InvalidInput, JobNotFound } from "./errors.js";
import type { Job } from "./job.js";
import type { Keys } from "./keys.js";
import type { Protocol } from "./protocol.js";

/** The jobs one hero_clean or hero_drain call deletes at most: a call stays a few milliseconds
 * of Redis. */
export const STEP = 500;

type Shard = [number, Keys, Protocol];

/** BullMQ's types of `queue.clean`: the ended jobs hero keeps (`completed` is hero's status
 * `finished`, `failed` its `error`). */
export type CleanType = "completed" | "failed";
const CLEAN_STATUS: Record<CleanType, string> = { completed: "finished", failed: "error" };

/** BullMQ's `obliterate` options: hero takes none (no `force`: it refuses while jobs run). */
export type ObliterateOptions = Record<string, never>;

/** A job as `queue.getJob` answers it: the record, and `retry()` for a failed one. */
export interface QueueJob extends Job {
  /** BullMQ's `job.retry()`: runs this failed job (status `error`: its attempts spent, timed
   * out, stopped or dead-lettered) again with a fresh retry budget, in its own queue; a job in
   * any other state is refused with `InvalidInput` naming its status. */
  retry(): Promise<void>;
}

async function server<T>(f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    throw HeroError.fromServer(e);
  }
}

/** `clean`'s arguments checked: [grace ms, limit, hero's status ('' both)]. */
export function cleanArgs(grace: unknown, limit: unknown, type: unknown): [number, number, string] {
  if (typeof grace !== "number" || !Number.isInteger(grace) || grace < 0) throw new InvalidInput(`grace ${JSON.stringify(grace)} is not a whole number of ms of at least 0`);
  if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1) {
    throw new InvalidInput(`limit ${JSON.stringify(limit)} is not a whole number of at least 1 (hero has no unlimited clean: give the most jobs to delete)`);
  }
  if (type === undefined) return [grace, limit, ""];
  if (type === "completed" || type === "failed") return [grace, limit, CLEAN_STATUS[type]];
  throw new InvalidInput(`clean takes completed or failed jobs, not ${JSON.stringify(type)}: drain() deletes waiting (and delayed) ones`);
}

/** Deletes up to `limit` ended jobs of queue `name` ('' every queue) of `status` that ended at
 * least `graceMs` ago, oldest first, shard after shard; answers their ids. */
export async function clean(shards: Shard[], name: string, graceMs: number, limit: number, status: string): Promise<string[]> {
  const out: string[] = [];
  for (const [, , p] of shards) {
    let cursor = "";
    while (out.length < limit) {
      const [next, ids] = await server(() => p.clean(graceMs, status, name, Math.min(limit - out.length, STEP), cursor));
      out.push(...ids);
      if (!next) break;
      cursor = next;
    }
  }
  return out;
}

/** hero_drain steps on one shard until it says there is no more: [deleted, running]. */
export async function drainSteps(p: Protocol, name: string, delayed: boolean, remove: boolean): Promise<[number, number]> {
  let cursor = "0";
  let deleted = 0;
  for (;;) {
    const d = await server(() => p.drain(name, delayed, STEP, remove, cursor));
    deleted += d.deleted;
    if (!d.more) return [deleted, d.running];
    cursor = d.cursor;
  }
}

/** Deletes every waiting job of queue `name` (its delayed ones too when `delayed`), leaving the
 * running ones; answers how many. */
export async function drain(shards: Shard[], name: string, delayed: boolean): Promise<number> {
  let deleted = 0;
  for (const [, , p] of shards) deleted += (await drainSteps(p, name, delayed, false))[0];
  return deleted;
}

/** What obliterate needs of its `Queue`. */
export interface Obliterated {
  shards(): Promise<Shard[]>;
  running(): Promise<number>;
  pause(): Promise<unknown>;
  clearPolicy(): Promise<unknown>;
}

/** Removes queue `name` whole, as hero-admin's `Admin::obliterate`: refused while jobs of it run
 * (nothing deleted then); paused; its waiting and delayed jobs deleted, its ended ones, then its
 * streams, its names and its policy. Answers how many jobs it deleted. */
export async function obliterate(name: string, q: Obliterated, opts: ObliterateOptions): Promise<number> {
  for (const k of Object.keys(opts ?? {})) {
    if (k === "force") throw new InvalidInput(`obliterate takes no force: hero refuses while jobs of the queue run; stop them (client.stop) or wait for their end`);
    throw new InvalidInput(`obliterate option ${JSON.stringify(k)} is not one hero knows: it takes none`);
  }
  const running = await q.running();
  if (running > 0) {
    throw new InvalidInput(`${running} jobs of ${name} are running: stop them (client.stop) or wait for their end, then obliterate`);
  }
  await q.pause();
  const shards = await q.shards();
  let deleted = await drain(shards, name, true);
  for (;;) {
    const ids = await clean(shards, name, 0, 10 * STEP, "");
    deleted += ids.length;
    if (ids.length < 10 * STEP) break;
  }
  for (const [, , p] of shards) {
    const [n, left] = await drainSteps(p, name, true, true);
    deleted += n;
    if (left > 0) throw new InvalidInput(`${left} jobs of ${name} started meanwhile: obliterate again once they end`);
  }
  await q.clearPolicy();
  return deleted;
}

/** `job` with its `retry()` (not enumerable: the record reads as `client.get`'s). */
export function queueJob(c: Client, job: Job, requeue: (id: string) => Promise<unknown>): QueueJob {
  const retry = async (): Promise<void> => {
    const keys = await c.holder(job.id);
    const status = await c.redis.hget(keys.job(job.id), "status");
    if (status === null) throw new JobNotFound(job.id);
    if (status !== "error") throw new InvalidInput(`job ${job.id} is ${status}, not failed: only a failed job is retried (queue.requeue moves any job)`);
    await requeue(job.id);
  };
  return Object.defineProperty(job, "retry", { value: retry, enumerable: false }) as QueueJob;
}
