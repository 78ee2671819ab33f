// The operator's side of one queue, BullMQ's `Queue` (hero-admin's `Admin` for a script type):
// pause and resume, job counts, the queue policy, dead letters, a job requeued, promoted or
// removed, recurring jobs (BullMQ's job schedulers), and a fair queue's limit keys (pauseKey,
// getKeys: fair.ts). Thin wrappers over the server functions hero-admin calls (hero_pause,
// hero_counts, hero_policy, hero_dead, hero_requeue, hero_remove; hero_cron and hero_cron_next
// for recurring jobs: cron.ts; hero_clean, hero_drain for clean, drain, obliterate: cleanup.ts),
// on every shard of a sharded namespace (recurring jobs on the
// namespace's own keys). Options are strict: one hero does not know is an error naming it.
import { clean, cleanArgs, CleanType, drain, obliterate, ObliterateOptions, queueJob, QueueJob } from "./cleanup.js";
import { Client } from "./client.js";
import { CronNextOptions, cronNextArgs, cronSpec, JobTemplate, RepeatOptions, schedulers } from "./cron.js";
import { backoffJson, BackoffOptions, KeepJobs } from "./options.js";
import { HeroError, InvalidInput, JobNotFound, strictOptions } from "./errors.js";
import { fairFields, FairKeys, fairKeys, limitKey, requireFair } from "./fair.js";
import { Keys } from "./keys.js";
import { addJob, addJobs, AddOptions, BulkJob } from "./adding.js";
import { countsOf, JobCounts, jobCounts, JobTotals, StreamCounts } from "./counts.js";
import { getJobs, JobType } from "./listing.js";
import { Protocol } from "./protocol.js";

export interface QueueOptions {
  /** The Redis URL (BullMQ's `connection`). */
  url?: string;
  namespace?: string;
  /** The queue of one group of workers (`<type>/<group>`). */
  group?: string;
  /** Share a client's connection. */
  client?: Client;
}
const QUEUE_OPTIONS = new Set(["url", "namespace", "group", "client"]);

/** What `setPolicy` takes: times in ms, rates as BullMQ's limiter (`{ max, duration }`). */
export interface PolicyOptions {
  /** Attempts after the first for the queue's jobs: a job's budget is the larger of this and its
   * own `retries`; the broker's `--max-attempts` applies only to jobs whose worker died (the
   * rule: `JobOptions.retries`). */
  retries?: number;
  backoff?: number | BackoffOptions;
  timeout?: number;
  lease?: number;
  concurrency?: number;
  rate?: { max: number; duration: number };
  keyRate?: { max: number; duration: number };
  retention?: number;
  aging?: number;
  /** Fair share: within each priority level the queue's jobs are served by their `limitKey`
   * in turns, not first in, first out (jobs without a key are one key of their own). `true`
   * only: to turn it off, `clearPolicy()` and set the rest again. */
  fair?: boolean;
  /** Turns per round of a limit key under fair share (whole, at least 1; default 1 each). */
  fairWeights?: Record<string, number>;
  /** At most this many running jobs of one limit key across every worker (needs `fair`, on
   * this policy or its type's). */
  keyConcurrency?: number;
}
const POLICY_OPTIONS = new Set(["retries", "backoff", "timeout", "lease", "concurrency", "rate", "keyRate", "retention", "aging", "fair", "fairWeights", "keyConcurrency"]);

/** A policy as stored (and as every language shows it): ms, `{max, per_ms}` rates, snake_case
 * names; a field a newer version stores comes back too. */
export interface Policy {
  retries?: number;
  backoff?: { kind: string; base_ms: number; cap_ms: number; jitter: number };
  timeout_ms?: number;
  lease_ms?: number;
  concurrency?: number;
  rate?: { max: number; per_ms: number };
  key_rate?: { max: number; per_ms: number };
  retention_ms?: number;
  aging_ms?: number;
  fair?: boolean;
  fair_weights?: Record<string, number>;
  key_concurrency?: number;
  [field: string]: unknown;
}

export interface DeadLetter {
  entry: string;
  jobId: string;
  reason: string;
  queue: string;
  shard: number;
}

export class Queue {
  /** `<type>` or `<type>/<group>`. */
  readonly queueName: string;
  private ready: Promise<Client> | null = null;
  private own = false;

  constructor(
    readonly name: string,
    private readonly opts: QueueOptions = {},
  ) {
    strictOptions("Queue", opts, QUEUE_OPTIONS, { connection: "url", prefix: "namespace", defaultJobOptions: "(none: give each job its options)" });
    if (typeof name !== "string" || !/^[A-Za-z0-9_-]{1,64}$/.test(name)) throw new InvalidInput(`script type ${JSON.stringify(name)}: use 1-64 characters of A-Z a-z 0-9 _ -`);
    if (opts.group !== undefined && !/^[A-Za-z0-9_-]{1,64}$/.test(opts.group)) throw new InvalidInput(`group ${JSON.stringify(opts.group)}: use 1-64 characters of A-Z a-z 0-9 _ -`);
    this.queueName = opts.group ? `${name}/${opts.group}` : name;
  }

  /** Resolves once connected (the library loaded when the server lacked it). */
  async waitUntilReady(): Promise<Client> {
    if (!this.ready) {
      if (this.opts.client) this.ready = Promise.resolve(this.opts.client);
      else {
        this.own = true;
        this.ready = Client.connect(this.opts.url, { namespace: this.opts.namespace });
      }
    }
    return this.ready;
  }

  /** Closes the connection (when this queue opened it). */
  async close(): Promise<void> {
    if (this.ready && this.own) await (await this.ready).close();
  }

  private async shards(): Promise<[number, Keys, Protocol][]> {
    const c = await this.waitUntilReady();
    const m = await c.shardMap();
    return (m.sharded ? m.served() : [0]).map((n) => [n, ...c.shard(n)] as [number, Keys, Protocol]);
  }

  private async call<T>(f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (e) {
      throw HeroError.fromServer(e);
    }
  }

  // -- adding jobs (BullMQ's add: adding.ts) ------------------------------------------------
  /** BullMQ's `add(name, data, opts)`: submits a job to this queue whose `job.name` is `name`
   * (hero's `script`) and whose `job.data` is `data` (its payload, any value MessagePack
   * carries); `opts` are the submit options (`JobOptions` less `type`, `script`, `payload`). An
   * option hero does not know, BullMQ's included, is refused naming hero's word. Resolves to the
   * job as `getJob` answers it (the job holding its `unique` key when that was held). */
  async add<Data = unknown>(name: string, data?: Data, opts?: AddOptions): Promise<QueueJob> {
    const job = addJob(this.name, this.opts.group, name, data, opts);
    const c = await this.waitUntilReady();
    const id = await c.submit(job);
    return queueJob(c, await c.get(id), (i) => this.requeue(i));
  }

  /** BullMQ's `addBulk([{ name, data, opts }])`: the jobs in one call (one a shard); resolves
   * to their ids, in order. */
  async addBulk(jobs: BulkJob[]): Promise<string[]> {
    const specs = addJobs(this.name, this.opts.group, jobs);
    const c = await this.waitUntilReady();
    return (await c.submitMany(specs)).map((s) => s.id);
  }

  // -- pause ----------------------------------------------------------------------------------
  /** No worker takes a new job of the queue (running ones finish; submits still queue) until
   * `resume()`. Resolves to how many work streams it covers. */
  async pause(): Promise<number> {
    let n = 0;
    for (const [, , p] of await this.shards()) n += await this.call(() => p.pause(this.queueName, true));
    return n;
  }

  async resume(): Promise<number> {
    let n = 0;
    for (const [, , p] of await this.shards()) n += await this.call(() => p.pause(this.queueName, false));
    return n;
  }

  // -- a fair queue's limit keys -------------------------------------------------------------
  /** Pauses one limit key of this fair queue: its jobs wait in the gate while the queue's other
   * keys flow, until `resumeKey(key)` (`""`: the jobs without a key). Rejects for a queue that
   * is not fair. Resolves to in how many work streams the key has jobs. */
  async pauseKey(key: string): Promise<number> {
    return this.keyCall(limitKey(key), true);
  }

  /** Resumes a paused limit key: it gets its turns again where it has jobs. */
  async resumeKey(key: string): Promise<number> {
    return this.keyCall(limitKey(key), false);
  }

  private async keyCall(key: string, pause: boolean): Promise<number> {
    const c = await this.waitUntilReady();
    await requireFair(c.redis, c.keys, `pausing a key of queue ${this.queueName}`);
    let n = 0;
    for (const [, , p] of await this.shards()) n += await this.call(() => p.pauseKey(this.queueName, key, pause));
    return n;
  }

  /** The limit keys with jobs waiting in this fair queue's gates (every priority, group,
   * instance, shard): how many keys, the `top` with the most (most first, ties by key) among a
   * page of 1,000 keys read from `from` (0; then the page's `next`), and the paused ones
   * (`<queue>|<key>`); what `hero queues --keys` shows. */
  async getKeys(opts: { top?: number; from?: number } = {}): Promise<FairKeys> {
    strictOptions("getKeys", opts, new Set(["top", "from"]), { limit: "top", count: "top", cursor: "from" });
    const top = opts.top === undefined ? 10 : opts.top;
    if (typeof top !== "number" || !Number.isInteger(top) || top < 0) throw new InvalidInput(`top ${JSON.stringify(top)} is not a whole number of at least 0`);
    const from = opts.from === undefined ? 0 : opts.from;
    if (typeof from !== "number" || !Number.isInteger(from) || from < 0) throw new InvalidInput(`from ${JSON.stringify(from)} is not a whole number of at least 0 (a page's next)`);
    await this.waitUntilReady();
    const shards = (await this.shards()).map(([, , p]) => p);
    return this.call(() => fairKeys(shards, this.queueName, top, from));
  }


  // -- counts ---------------------------------------------------------------------------------
  /** BullMQ's `getJobCounts`: the queue's jobs now, each in one count at most: `waiting`,
   * `delayed`, `running` (also read as BullMQ's `active`), and the ended ones it holds,
   * `completed` and `failed` (BullMQ's meaning: jobs kept, not ends counted); ends since the
   * namespace began apart in `totals`; each stream's own in `streams`. Given types (BullMQ's
   * names: `getJobCounts("failed", "waiting")`), an object of those counts only; counting
   * `completed` and `failed` reads the retention stream a bounded page a call (see
   * `countState`), so ask only for what you need on a namespace that keeps many ended jobs. */
  async getJobCounts(): Promise<JobCounts>;
  async getJobCounts(...types: JobType[]): Promise<Record<string, number>>;
  async getJobCounts(...types: JobType[]): Promise<JobCounts | Record<string, number>> {
    const shards = await this.shards();
    return types.length === 0 ? jobCounts(shards, this.queueName) : countsOf(shards, this.queueName, types);
  }

  /** BullMQ's `getJobCountByTypes`: the sum of the counts of `types` (each job in one). */
  async getJobCountByTypes(...types: JobType[]): Promise<number> {
    return Object.values(await countsOf(await this.shards(), this.queueName, types)).reduce((a, b) => a + b, 0);
  }

  /** BullMQ's `getCompletedCount`, `getFailedCount`, `getDelayedCount`, `getWaitingCount`,
   * `getActiveCount`: one count of `getJobCounts`. */
  async getCompletedCount(): Promise<number> {
    return this.getJobCountByTypes("completed");
  }
  async getFailedCount(): Promise<number> {
    return this.getJobCountByTypes("failed");
  }
  async getDelayedCount(): Promise<number> {
    return this.getJobCountByTypes("delayed");
  }
  async getWaitingCount(): Promise<number> {
    return this.getJobCountByTypes("waiting");
  }
  async getActiveCount(): Promise<number> {
    return this.getJobCountByTypes("active");
  }

  // -- listing (BullMQ's getJobs and its kin: listing.ts) --------------------------------------
  /** BullMQ's `getJobs(types, start, end, asc)`: the queue's jobs of `types` (BullMQ's names:
   * `completed`, `failed`, `delayed`, `waiting`/`wait`, `active`; a type hero has no list for,
   * such as `prioritized`, `waiting-children` or `paused`, is refused naming why), per type in
   * the order given, positions `start` to `end` of each (inclusive; -1 the last). Orders: ended
   * jobs newest end first (BullMQ's default), delayed ones soonest first, waiting and active ones
   * next to run first; `asc` reverses each list. Over hero_list, one bounded page a call, on
   * every shard (shard after shard). Each job as `getJob` answers it (`retry()` included). */
  async getJobs(types?: JobType | JobType[], start = 0, end = -1, asc = false): Promise<QueueJob[]> {
    const c = await this.waitUntilReady();
    const jobs = await getJobs(c, await this.shards(), this.queueName, types, start, end, asc);
    return jobs.map((j) => queueJob(c, j, (id) => this.requeue(id)));
  }

  /** BullMQ's `getFailed`: the jobs that ended `error` (their attempts spent, timed out,
   * stopped, `Abort`, dead-lettered), newest first; `job.retry()` runs one again. */
  async getFailed(start = 0, end = -1): Promise<QueueJob[]> {
    return this.getJobs("failed", start, end);
  }
  /** BullMQ's `getCompleted`: the jobs that ended `finished` and are still kept, newest first. */
  async getCompleted(start = 0, end = -1): Promise<QueueJob[]> {
    return this.getJobs("completed", start, end);
  }
  /** BullMQ's `getDelayed`: jobs due later (a `delay`, an `at`, a retry's back-off), soonest first. */
  async getDelayed(start = 0, end = -1): Promise<QueueJob[]> {
    return this.getJobs("delayed", start, end);
  }
  /** BullMQ's `getWaiting`: queued jobs no worker took yet, next to run first. */
  async getWaiting(start = 0, end = -1): Promise<QueueJob[]> {
    return this.getJobs("waiting", start, end);
  }
  /** BullMQ's `getActive`: jobs a worker runs now. */
  async getActive(start = 0, end = -1): Promise<QueueJob[]> {
    return this.getJobs("active", start, end);
  }

  // -- policy ---------------------------------------------------------------------------------
  /** The policy set for the queue itself, as stored (ms, `{max, per_ms}` rates, the back-off's
   * `{kind, base_ms, cap_ms, jitter}`); `{}` when none. */
  async getPolicy(): Promise<Policy> {
    const c = await this.waitUntilReady();
    const m = await c.shardMap();
    let raw: string | null = null;
    if (m.sharded) raw = await c.redis.hget(c.keys.wholePolicies(), this.queueName);
    raw ??= await c.redis.hget(c.keys.policy(), this.queueName);
    if (!raw) return {};
    try {
      const p = JSON.parse(raw);
      return p && typeof p === "object" && !Array.isArray(p) ? p : {};
    } catch {
      throw new HeroError(`the policy of queue ${this.queueName} is not JSON; set it again with setPolicy`);
    }
  }

  /** Sets the fields given, keeping the others; resolves to the whole policy. */
  async setPolicy(p: PolicyOptions): Promise<Policy> {
    strictOptions("setPolicy", p, POLICY_OPTIONS, { limiter: "rate", attempts: "retries (attempts after the first)" });
    if (this.queueName.split("/").length > 2) throw new InvalidInput("a policy is per type or type/group, not per instance");
    const whole = (what: string, v: unknown, least: number): number => {
      if (typeof v !== "number" || !Number.isInteger(v) || v < least) throw new InvalidInput(`${what} ${JSON.stringify(v)} is not a whole number of at least ${least}`);
      return v;
    };
    const rate = (what: string, r: { max: number; duration: number }) => {
      strictOptions(what, r, new Set(["max", "duration"]));
      return { max: whole(`${what}.max`, r.max, 1), per_ms: whole(`${what}.duration`, r.duration, 1) };
    };
    const given: Policy = {};
    if (p.retries !== undefined) given.retries = whole("retries", p.retries, 0);
    if (p.backoff !== undefined) given.backoff = backoffJson(p.backoff);
    if (p.timeout !== undefined) given.timeout_ms = whole("timeout (ms)", p.timeout, 0);
    if (p.lease !== undefined) given.lease_ms = whole("lease (ms)", p.lease, 0);
    if (p.concurrency !== undefined) given.concurrency = whole("concurrency (to run nothing, pause the queue)", p.concurrency, 1);
    if (p.rate !== undefined) given.rate = rate("rate", p.rate);
    if (p.keyRate !== undefined) given.key_rate = rate("keyRate", p.keyRate);
    if (p.retention !== undefined) given.retention_ms = whole("retention (ms)", p.retention, 0);
    if (p.aging !== undefined) given.aging_ms = whole("aging (ms; 0 would serve every job at the highest level)", p.aging, 1);
    Object.assign(given, fairFields(p));
    const merged = { ...(await this.getPolicy()), ...given };
    await this.store(merged);
    return merged;
  }

  /** Removes the queue's policy: its jobs get the defaults again. */
  async clearPolicy(): Promise<boolean> {
    const c = await this.waitUntilReady();
    const had = await c.redis.hexists(c.keys.policy(), this.queueName);
    await c.redis.hdel(c.keys.wholePolicies(), this.queueName);
    for (const [, , p] of await this.shards()) await this.call(() => p.setPolicy(this.queueName, ""));
    return had === 1;
  }

  private async store(policy: Policy): Promise<void> {
    const c = await this.waitUntilReady();
    const shards = await this.shards();
    if (shards.length === 1) {
      await this.call(() => shards[0][2].setPolicy(this.queueName, JSON.stringify(policy)));
      return;
    }
    // each shard enforces its share of a concurrency limit or a rate (hero-admin's `split`)
    await c.redis.hset(c.keys.wholePolicies(), this.queueName, JSON.stringify(policy));
    const k = Math.max(1, (await c.shardMap()).k);
    for (const [n, , p] of shards) await this.call(() => p.setPolicy(this.queueName, JSON.stringify(split(policy, n, k))));
  }

  // -- dead letters ---------------------------------------------------------------------------
  /** The queue's dead letters, oldest first (every shard's). */
  async getDeadLetters(limit = 1000): Promise<DeadLetter[]> {
    const c = await this.waitUntilReady();
    const out: DeadLetter[] = [];
    for (const [n, keys] of await this.shards()) {
      let cursor = "-";
      while (out.length < limit) {
        const page = (await c.redis.xrange(keys.deadLetter(), cursor, "+", "COUNT", 1000)) as [string, string[]][];
        for (const [entry, f] of page) {
          const d: Record<string, string> = {};
          for (let i = 0; i + 1 < f.length; i += 2) d[f[i]] = f[i + 1];
          if (this.covers(d.queue ?? "")) out.push({ entry, jobId: d.j ?? "", reason: d.reason ?? "", queue: d.queue ?? "", shard: n });
        }
        if (page.length < 1000) break;
        cursor = `(${page[page.length - 1][0]}`;
      }
    }
    return out.slice(0, limit);
  }

  /** Queues the jobs of the queue's dead letters (all, or those of `jobIds`) again with a fresh
   * attempt budget; resolves to the answer per job (requeued, not_dead, gone, missing). */
  async retryDead(jobIds?: string[]): Promise<Record<string, string>> {
    return this.dead("retry", jobIds);
  }

  /** Deletes the queue's dead letters (all, or those of `jobIds`) and their jobs. */
  async purgeDead(jobIds?: string[]): Promise<Record<string, string>> {
    return this.dead("purge", jobIds);
  }

  private async dead(action: "retry" | "purge", jobIds?: string[]): Promise<Record<string, string>> {
    const c = await this.waitUntilReady();
    let letters = await this.getDeadLetters(Number.MAX_SAFE_INTEGER);
    if (jobIds !== undefined) {
      const wanted = new Set(jobIds);
      letters = letters.filter((d) => wanted.has(d.jobId));
      const missing = jobIds.filter((id) => !letters.some((d) => d.jobId === id));
      if (missing.length) throw new InvalidInput(`job ${missing[0]} has no dead letter in queue ${this.queueName}`);
    }
    const out: Record<string, string> = {};
    for (const [n, keys, p] of await this.shards()) {
      const mine = letters.filter((d) => d.shard === n);
      for (let i = 0; i < mine.length; i += 100) {
        const chunk = mine.slice(i, i + 100);
        const args: [string, string, string][] = [];
        for (const d of chunk) args.push([d.entry, d.jobId, (await streamOf(c, keys, d.jobId)) ?? keys.job(d.jobId)]);
        const answers = await this.call(() => p.dead(action, args));
        chunk.forEach((d, j) => (out[d.jobId] = answers[j]));
      }
    }
    return out;
  }

  // -- one job --------------------------------------------------------------------------------
  /** Moves a job to its own queue again wherever it is (queued; running: its lease revoked;
   * delayed; ended: a fresh attempt budget); resolves to the stream it is in now. */
  async requeue(jobId: string): Promise<string> {
    const c = await this.waitUntilReady();
    const keys = await c.holder(jobId);
    const p = await this.protoOf(keys);
    let cursor = "0-0";
    for (let n = 0; n < 10_000; n++) {
      const rec = await c.redis.hmget(keys.job(jobId), "script_type", "group", "instance", "priority", "worker_id");
      if (rec.every((x) => x === null)) throw new JobNotFound(jobId);
      const [t, g, i, pr, worker] = rec.map((x) => x ?? "");
      if (!t) throw new InvalidInput(`job ${jobId} names no script type, so it is in no queue of ours`);
      const prio = /^\d$/.test(pr) ? Number(pr) : 5;
      const stream = keys.work(t, g || null, i || null, prio);
      const parts = worker.split(":");
      const ctl = parts.length === 3 ? keys.ctlInstance(t, parts[0], parts[1]) : null;
      const [word, next] = await this.call(() => p.requeue(jobId, stream, stream, ctl, worker, cursor, [t, g, i, prio]));
      if (word === "requeued") return stream;
      if (word === "missing") throw new JobNotFound(jobId);
      cursor = word === "searching" ? next : "0-0";
    }
    throw new HeroError(`job ${jobId} kept changing hands while it was being requeued; try again`);
  }

  /** BullMQ's `job.promote()`: a delayed job (or a retry waiting out its back-off) queued now. */
  async promote(jobId: string): Promise<void> {
    const c = await this.waitUntilReady();
    const keys = await c.holder(jobId);
    const status = await c.redis.hget(keys.job(jobId), "status");
    if (status === null) throw new JobNotFound(jobId);
    if (status !== "waiting" || (await c.redis.zscore(keys.delayed(), jobId)) === null) {
      throw new InvalidInput(`job ${jobId} is not delayed (it is ${status}): only a delayed job or a retry waiting out its back-off can be promoted`);
    }
    await this.requeue(jobId);
  }

  /** BullMQ's `remove(jobId)`: deletes a job; a queued or delayed one is stopped first, a
   * running one refused (stop it first, or wait for its end). */
  async remove(jobId: string): Promise<void> {
    const c = await this.waitUntilReady();
    const keys = await c.holder(jobId);
    const p = await this.protoOf(keys);
    for (let i = 0; i < 3; i++) {
      const word = await this.call(() => p.remove(jobId));
      if (word === "removed") return;
      if (word === "missing") throw new JobNotFound(jobId);
      if (word === "running") throw new InvalidInput(`job ${jobId} is running: stop it first (client.stop), or wait for its end`);
      await c.stop(jobId);
    }
    throw new HeroError(`job ${jobId} kept changing state while it was being removed; try again`);
  }

  /** BullMQ's `getJob`: the job, with `retry()` for a failed one; undefined when there is none
   * in this queue. */
  async getJob(jobId: string): Promise<QueueJob | undefined> {
    const c = await this.waitUntilReady();
    let job;
    try {
      job = await c.get(jobId);
    } catch (e) {
      if (e instanceof JobNotFound) return undefined;
      throw e;
    }
    if (job.scriptType !== this.name || (this.opts.group !== undefined && job.group !== this.opts.group)) return undefined;
    return queueJob(c, job, (id) => this.requeue(id));
  }

  // -- cleanup ----------------------------------------------------------------------------------
  /** BullMQ's `clean`: deletes up to `limit` jobs of the queue that ended at least `grace` ms
   * ago, oldest first, `completed` (hero's `finished`) or `failed` (`error`) ones, or both;
   * resolves to their ids. Waiting jobs are `drain()`'s. */
  async clean(grace: number, limit: number, type?: CleanType): Promise<string[]> {
    const [ms, most, status] = cleanArgs(grace, limit, type);
    return clean(await this.shards(), this.queueName, ms, most, status);
  }

  /** BullMQ's `drain`: deletes the queue's waiting jobs (its delayed ones too when `delayed`),
   * leaving the running ones; resolves to how many it deleted. */
  async drain(delayed = false): Promise<number> {
    if (typeof delayed !== "boolean") throw new InvalidInput(`drain takes delayed true or false, not ${JSON.stringify(delayed)}`);
    return drain(await this.shards(), this.queueName, delayed);
  }

  /** BullMQ's `obliterate`: removes the queue whole (paused, its jobs of every state deleted,
   * then its streams, its names and its policy); refused while jobs of it run (no `force`: stop
   * them, or wait for their end). Resolves to how many jobs it deleted. */
  async obliterate(opts: ObliterateOptions = {}): Promise<number> {
    const q = { shards: () => this.shards(), running: async () => (await jobCounts(await this.shards(), this.queueName, false)).running, pause: () => this.pause(), clearPolicy: () => this.clearPolicy() };
    return obliterate(this.queueName, q, opts);
  }

  /** BullMQ's `isPaused`: whether the queue is paused, by its name as `pause()` paused it. */
  async isPaused(): Promise<boolean> {
    const c = await this.waitUntilReady();
    return (await c.redis.sismember(c.keys.pausedNames(), this.queueName)) === 1;
  }

  // -- recurring jobs (BullMQ's job schedulers) -----------------------------------------------
  /** Adds (or replaces) recurring job `id` of this queue: each tick of `repeat` submits the
   * template's job, its `data` (the payload) and options included, as job
   * `cron-<id>-<tick ms>`. The spec is stored through `hero_cron`, which checks the schedule
   * and zone with the cron engine that fires it (in the function library, the same for every
   * language): one it refuses rejects with `InvalidInput` saying why, and nothing is stored.
   * The ticks are fired by whichever process does the queue's upkeep (any worker with duties
   * on, or a `hero broker`): with none live in the namespace this says so once (a process
   * warning, `HERO_NO_UPKEEP`), naming the Redis and its db. Resolves to the first tick the
   * upkeep will fire (ms since the epoch), null when the schedule has none. A replaced one
   * with the same schedule and zone keeps its next tick. */
  async upsertJobScheduler(id: string, repeat: RepeatOptions, template: JobTemplate = {}): Promise<number | null> {
    // checked before connecting: a wrong option fails the same with Redis out of reach
    const spec = cronSpec(this.name, id, repeat, template);
    const c = await this.waitUntilReady();
    const next = await this.cronCall(id, async () => (await this.main()).cron(id, JSON.stringify(spec)));
    // the upkeep fires the ticks: with no one doing it, say so (once per client)
    await c.noteRecurring(id);
    return next >= 0 ? next : null;
  }

  /** The next ticks of `schedule` (a cron expression of 5 or 6 fields, `@hourly` and the like,
   * or `every <duration>` such as `every 30s`), ms since the epoch, by the cron engine the
   * upkeep fires recurring jobs by, so what it shows is what fires: `count` of them (1-100,
   * default 5) strictly after `after` (ms or a Date; default now on Redis's clock), read in
   * zone `tz` (an IANA name, default UTC); fewer when the schedule has no more. A schedule or
   * zone the engine refuses rejects with `InvalidInput` saying why (Rust's
   * `Client::cron_next`, Python's `Queue.cron_next`). */
  async cronNext(schedule: string, opts: CronNextOptions = {}): Promise<number[]> {
    const [tz, after, count] = cronNextArgs(schedule, opts);
    const p = await this.main();
    return this.call(async () => {
      const [secs, micros] = after === null ? await p.redis.time() : [0, 0];
      return p.cronNext(schedule, tz, after ?? Number(secs) * 1000 + Math.floor(Number(micros) / 1000), count);
    });
  }

  /** The queue's recurring jobs by name: each as stored, with its payload decoded as `data`,
   * and `next_ms`, `fires`, `last_ms` (null until the upkeep first looked at it). */
  async getJobSchedulers(): Promise<Record<string, unknown>[]> {
    const c = await this.waitUntilReady();
    return schedulers(c.redis, c.keys, this.name);
  }

  /** Removes recurring job `id` and its state, through `hero_cron` (the jobs it fired stay);
   * false when there was none. */
  async removeJobScheduler(id: string): Promise<boolean> {
    return (await this.cronCall(id, async () => (await this.main()).cron(id, ""))) > 0;
  }

  /** The namespace's own calls: recurring jobs live on shard 0, whose upkeep fires them. */
  private async main(): Promise<Protocol> {
    return (await this.waitUntilReady()).shard(0)[1];
  }

  /** A hero_cron call, a refusal naming the recurring job it was about. */
  private async cronCall(id: string, f: () => Promise<number>): Promise<number> {
    try {
      return await f();
    } catch (e) {
      const err = HeroError.fromServer(e);
      throw err instanceof InvalidInput ? new InvalidInput(`recurring job ${id}: ${err.message}`) : err;
    }
  }

  private async protoOf(keys: Keys): Promise<Protocol> {
    for (const [, k, p] of await this.shards()) if (k.prefix === keys.prefix) return p;
    return (await this.shards())[0][2];
  }

  /** Whether work stream `stream` is under this queue's name. */
  private covers(stream: string): boolean {
    const m = /:q:work:type:([^:]+)(?::group:([^:]+))?/.exec(stream);
    if (!m || m[1] !== this.name) return false;
    return this.opts.group === undefined || m[2] === this.opts.group;
  }
}

async function streamOf(c: Client, keys: Keys, id: string): Promise<string | null> {
  const [t, g, i, p] = (await c.redis.hmget(keys.job(id), "script_type", "group", "instance", "priority")).map((x) => x ?? "");
  return t ? keys.work(t, g || null, i || null, /^\d$/.test(p) ? Number(p) : 5) : null;
}

/** Shard n's share of a policy over k active shards (hero-admin's `split`). */
function split(policy: Policy, n: number, k: number): Policy {
  const share = (total: number) => (n >= k ? 1 : Math.max(1, Math.floor(total / k) + (n < total % k ? 1 : 0)));
  const p: Policy = { ...policy };
  if (typeof p.concurrency === "number") p.concurrency = share(p.concurrency);
  const r = p.rate as { max: number; per_ms: number } | undefined;
  if (r) p.rate = { ...r, max: share(r.max) };
  return p;
}

export type { AddOptions, BulkJob, JobCounts, JobTotals, JobType, StreamCounts };
export type { BackoffOptions, CleanType, CronNextOptions, JobTemplate, KeepJobs, ObliterateOptions, QueueJob, RepeatOptions };
