// The producer: submit jobs with every option `hero submit` has, run one and wait, read a job's
// status and record, stop it, and batches; in a sharded namespace each job goes to its shard as
// the Rust client sends it (docs/sharding.md).
import { Redis } from "ioredis";

import { HeroError, InvalidInput, JobNotFound, OlderProcesses, WaitTimedOut } from "./errors.js";
import { BatchInfo, ChildResult, Job, jobFromRecord, Result, Submitted } from "./job.js";
import { Keys } from "./keys.js";
import { checkUrl, openRedis, redisUrl } from "./connect.js";
import { jobSpec, JobOptions, Spec } from "./options.js";
import { iso, Protocol, text } from "./protocol.js";
import { ShardMap, shardOfId } from "./shards.js";
import { Upkeep } from "./upkeep.js";
import { Waiter } from "./waiter.js";

const NAME = /^[A-Za-z0-9_-]{1,64}$/;
const JOB_ID = /^[A-Za-z0-9_.-]{1,128}$/;

function name(what: string, v: string): string {
  if (!NAME.test(v ?? "")) throw new InvalidInput(`${what} ${JSON.stringify(v)}: use 1-64 characters of A-Z a-z 0-9 _ -`);
  return v;
}

/** Record field -> the feature the brokers' `fleet_lacks` summary names it by. */
const GATED: Record<string, string> = { unique: "unique", tags: "tags", limit_key: "limit_key", batch: "batch", backoff: "job_policy", keep: "job_policy", keep_failed: "job_policy" };

/** [job id, feature] of each gated feature `specs` use (see `checkFleet`). */
function gatedUse(specs: Spec[]): [string, string][] {
  const used: [string, string][] = [];
  for (const s of specs) {
    const f = s.fields;
    for (let i = 0; i < f.length; i++) {
      const [k, v] = f[i];
      if (Object.hasOwn(GATED, k) && v !== "" && v !== "[]") used.push([s.id, GATED[k]]);
    }
  }
  return used;
}

export class Client {
  readonly keys: Keys;
  private readonly proto: Protocol;
  private map = new ShardMap();
  private mapAt = 0;
  private readonly protos = new Map<string, Protocol>();
  /** The waits' shared followers of the event log, one a shard (see `Waiter`). */
  private readonly waiters = new Map<string, Waiter>();
  // a random start: a process that submits one job and ends would otherwise put every unkeyed
  // job on shard 0
  private turn = Math.floor(Math.random() * 2 ** 30);
  /** Whether anyone does the queue's upkeep (and so fires recurring jobs' ticks): looked at
   * once (upkeep.ts). */
  private readonly upkeep: Upkeep;

  private constructor(
    readonly redis: Redis,
    namespace: string,
    cluster: boolean,
    url: string | null,
  ) {
    this.keys = cluster ? Keys.cluster(name("namespace", namespace)) : new Keys(name("namespace", namespace));
    this.proto = new Protocol(redis, this.keys);
    this.protos.set(this.keys.prefix, this.proto);
    this.upkeep = new Upkeep(redis, this.keys, url);
  }

  /** Connects (loading this version's library when the server lacks it). */
  static async connect(url?: string, opts: { namespace?: string; redis?: Redis } = {}): Promise<Client> {
    const redis = opts.redis ?? (await openRedis(checkUrl(redisUrl(url))));
    const c = new Client(redis, opts.namespace ?? "hero", false, opts.redis ? null : redisUrl(url));
    try {
      await c.proto.ensureLibrary();
      await c.shardMap(true);
    } catch (e) {
      if (!opts.redis) redis.disconnect();
      throw e;
    }
    return c;
  }

  /** Closes the connection (when this client opened it). */
  async close(): Promise<void> {
    for (const w of this.waiters.values()) w.close();
    await this.redis.quit().catch(() => this.redis.disconnect());
  }

  // -- shards ---------------------------------------------------------------------------------
  /** The shard map, read again when older than 2 s (or now with `fresh`). */
  async shardMap(fresh = false): Promise<ShardMap> {
    if (fresh || Date.now() - this.mapAt >= 2000) {
      const raw = await this.redis.hgetall(this.keys.shardMap());
      this.map = ShardMap.parse(raw);
      this.mapAt = Date.now();
    }
    return this.map;
  }

  /** @internal shard n's keys and calls. */
  shard(n: number): [Keys, Protocol] {
    const keys = this.map.keys(this.keys, n);
    let p = this.protos.get(keys.prefix);
    if (!p) {
      p = new Protocol(this.redis, keys);
      this.protos.set(keys.prefix, p);
    }
    return [keys, p];
  }

  /** `key`'s home, or an older home that still holds its state. */
  private async keyed(key: string, state: (k: Keys) => string): Promise<number> {
    for (const n of this.map.olderHomes(key)) {
      if (await this.redis.exists(state(this.shard(n)[0]))) return n;
    }
    return this.map.home(key);
  }

  /** The keys of the shard that holds job `id`. */
  /** @internal */
  async holder(id: string): Promise<Keys> {
    const m = await this.shardMap();
    if (!m.sharded) return this.keys;
    const order = [shardOfId(id), m.home(id), ...m.olderHomes(id), ...[...m.tags.keys()].sort((a, b) => a - b), 0];
    const asked = new Set<number>();
    for (const n of order) {
      if (n === null || asked.has(n) || (n !== 0 && !m.tags.has(n))) continue;
      asked.add(n);
      const keys = this.shard(n)[0];
      if (await this.redis.exists(keys.job(id))) return keys;
    }
    return this.shard(m.home(id))[0];
  }

  private async place(spec: Spec, here: Map<string, number>, follow: number | null): Promise<number> {
    const m = this.map;
    const field = (f: string) => spec.fields.find(([k]) => k === f)?.[1]?.toString();
    if (spec.route !== null) return m.home(spec.route);
    const batch = field("batch");
    if (batch) return this.keyed(batch, (k) => k.batch(batch));
    const after: string[] = JSON.parse(field("prerequisites") ?? "[]");
    if (after.length) {
      let at: [number, string] | null = null;
      for (const p of after) {
        let n = here.get(p);
        if (n === undefined) {
          const holder = await this.holder(p);
          n = [0, ...m.tags.keys()].find((i) => this.shard(i)[0].prefix === holder.prefix) ?? 0;
        }
        if (at && at[0] !== n) {
          throw new InvalidInput(
            `job ${spec.id} waits on ${at[1]} (shard ${at[0]}) and ${p} (shard ${n}): prerequisites must share a shard; submit them with one route key (route) or in one submitMany`,
          );
        }
        at = at ?? [n, p];
      }
      return at![0];
    }
    const unique = field("unique");
    if (unique) return this.keyed(unique, (k) => k.unique(unique));
    const limitKey = field("limit_key");
    if (limitKey) return m.home(limitKey);
    if (!spec.generated) return this.keyed(spec.id, (k) => k.job(spec.id));
    if (follow !== null) return follow;
    return this.turn++ % m.k;
  }

  // -- submit ---------------------------------------------------------------------------------
  private lacks: { at: number; summary: Record<string, { what?: string; since?: number; processes?: string[] }> } | null = null;

  /** Refuses a job using a feature the brokers say a live older process lacks (their
   * `fleet_lacks` summary in the config hash, read at most every 2 s and only when a job uses
   * such a feature: docs/protocol.md §8). */
  private async checkFleet(used: [string, string][]): Promise<void> {
    if (used.length === 0) return;
    if (this.lacks === null || Date.now() - this.lacks.at >= 2000) {
      const raw = await this.redis.hget(this.keys.config(), "fleet_lacks");
      let summary = {};
      try {
        summary = raw ? JSON.parse(raw) : {};
      } catch {
        summary = {};
      }
      this.lacks = { at: Date.now(), summary };
    }
    for (const [id, key] of used) {
      const lack = this.lacks.summary[key];
      if (lack) {
        throw new OlderProcesses(
          `job ${id} uses ${lack.what ?? key} (protocol ${lack.since ?? "?"} and later), which these live processes do not serve: ${(lack.processes ?? []).join(", ")}. Upgrade them (or wait until they are gone) and send it again; \`hero actors\` shows each process's protocol`,
        );
      }
    }
  }

  private spec(o: JobOptions<unknown>, reply = false): Spec {
    return jobSpec(o, reply);
  }

  /** @internal after recurring job `name` was stored: says once when no live process does the
   * queue's upkeep, whose holder fires its ticks. */
  async noteRecurring(name: string): Promise<void> {
    await this.upkeep.noteRecurring(name);
  }

  /** Submits one job; resolves to its id (see `submitMany` for the whole answer). */
  async submit<Data = unknown>(job: JobOptions<Data>): Promise<string> {
    const [s] = await this.submitMany([job]);
    return s.id;
  }

  /** Submits jobs in one call (one a shard in a sharded namespace); one answer each, in order. An
   * id that exists already changes nothing (`created` false); a held uniqueness key answers the
   * holder (`duplicateOf`). The first submit of a job that needs the queue's upkeep (a delay, a
   * date to come, retries) looks once whether anyone does it, and warns when no one does (a
   * process warning, `HERO_NO_UPKEEP`, naming the namespace and the Redis with its db). */
  async submitMany<Data = unknown>(jobs: JobOptions<Data>[], reply = false): Promise<Submitted[]> {
    const specs = jobs.map((j) => this.spec(j, reply));
    // each look below awaits only when it has something to do (a bulk submit's fixed cost)
    if (this.upkeep.pending) await this.upkeep.note(jobs.map((j, i) => [j, specs[i]]));
    const used = gatedUse(specs);
    if (used.length) await this.checkFleet(used);
    const m = Date.now() - this.mapAt < 2000 ? this.map : await this.shardMap();
    if (!m.sharded) return this.submitOn(this.proto, this.keys, specs);
    const ids = new Set(specs.map((s) => s.id));
    const flow = specs.some((s) => JSON.parse((s.fields.find(([k]) => k === "prerequisites")?.[1] ?? "[]").toString()).some((p: string) => ids.has(p)));
    const here = new Map<string, number>();
    const renamed = new Map<string, string>();
    const placed: [number, Spec][] = [];
    let first: number | null = null;
    for (const s0 of specs) {
      const s = { ...s0, fields: s0.fields.map(([k, v]) => [k, v] as [string, string | Buffer]) };
      if (renamed.size) {
        const p = s.fields.find(([k]) => k === "prerequisites");
        if (p) p[1] = JSON.stringify(JSON.parse(p[1].toString()).map((x: string) => renamed.get(x) ?? x));
      }
      const n = await this.place(s, here, flow ? first : null);
      if (first === null) first = n;
      if (s.generated && n > 0) {
        const next = `${s.id}.s${n}`;
        renamed.set(s.id, next);
        s.id = next;
      }
      here.set(s.id, n);
      placed.push([n, s]);
    }
    const out: Submitted[] = new Array(placed.length);
    const shards = [...new Set(placed.map(([n]) => n))];
    await Promise.all(
      shards.map(async (n) => {
        const idx = placed.map(([m2], i) => (m2 === n ? i : -1)).filter((i) => i >= 0);
        const [keys, proto] = this.shard(n);
        const answers = await this.submitOn(proto, keys, idx.map((i) => placed[i][1]));
        idx.forEach((i, j) => (out[i] = answers[j]));
      }),
    );
    return out;
  }

  private async submitOn(proto: Protocol, keys: Keys, specs: Spec[]): Promise<Submitted[]> {
    let answers: [string, string][];
    try {
      // a bulk submit's jobs mostly share a work stream: its key made once for a run of them
      let last: Spec | null = null;
      let stream = "";
      answers = await proto.submit(
        specs.map((s) => {
          if (last === null || s.type !== last.type || s.group !== last.group || s.instance !== last.instance || s.priority !== last.priority) {
            stream = keys.work(s.type, s.group, s.instance, s.priority);
            last = s;
          }
          return [s.id, stream, s.runAt, s.fields];
        }),
      );
    } catch (e) {
      throw HeroError.fromServer(e);
    }
    return specs.map((s, i) => {
      const [kind, status] = answers[i];
      if (kind.startsWith("duplicate:")) {
        const holder = kind.slice("duplicate:".length);
        return { id: holder, created: false, status, duplicateOf: holder };
      }
      return { id: s.id, created: kind === "created", status, duplicateOf: null };
    });
  }

  /** Submits a job and waits up to `waitMs` for it to end. */
  async run<Data = unknown>(job: JobOptions<Data>, waitMs = 30_000): Promise<Result> {
    const id = await this.submit(job);
    return this.wait(id, waitMs);
  }

  /** Waits up to `waitMs` for a job to end, whoever runs it. It wakes on the job's end in the
   * event log, read by one follower all this client's waits share (one connection a shard),
   * then reads the record: no poll per job (with the log off, a read every 250 ms). */
  async wait(id: string, waitMs = 30_000): Promise<Result> {
    // a span of this machine's time (the clock offset a worker measures may change meanwhile)
    const deadline = Date.now() + waitMs;
    const keys = await this.holder(id);
    let waiter = this.waiters.get(keys.prefix);
    if (!waiter) this.waiters.set(keys.prefix, (waiter = new Waiter(this.redis, keys)));
    let woken: (() => void) | null = null;
    let woke = false;
    const unregister = await waiter.register(id, () => {
      woke = true;
      woken?.();
    });
    try {
      for (;;) {
        woke = false;
        const job = await this.get(id);
        if (job.status === "finished" || job.status === "error") {
          return { id, status: job.status, output: job.output, returnvalue: job.output, outputText: job.outputText ?? "", error: job.error ?? "", ok: job.status === "finished" };
        }
        const left = deadline - Date.now();
        if (left <= 0) throw new WaitTimedOut(`job ${id} did not end within ${waitMs} ms (it is ${job.status})`);
        if (!woke) {
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, left);
            woken = () => {
              clearTimeout(timer);
              resolve();
            };
          });
          woken = null;
        }
      }
    } finally {
      unregister();
    }
  }

  // -- read -----------------------------------------------------------------------------------
  async get(id: string): Promise<Job> {
    const keys = await this.holder(id);
    const rec = (await this.redis.callBuffer("HGETALL", keys.job(id))) as unknown[];
    if (!Array.isArray(rec) || rec.length === 0) throw new JobNotFound(id);
    return jobFromRecord(id, rec);
  }

  /** A parent's prerequisites (its flow's children, or the jobs it was submitted `after`) and
   * what each gave, by id: an ended child's result as its end wrote it into the parent's record
   * (so it outlives the child's retention), a child not yet ended with its status only. */
  async children(id: string): Promise<Record<string, ChildResult>> {
    const parent = await this.get(id);
    const out: Record<string, ChildResult> = { ...parent.results };
    for (const child of parent.prerequisites) {
      if (child in out) continue;
      try {
        const c = await this.get(child);
        out[child] = { status: c.status, output: c.output, outputText: c.outputText, error: c.error };
      } catch (e) {
        if (!(e instanceof JobNotFound)) throw e;
      }
    }
    return out;
  }

  async status(id: string): Promise<string> {
    const keys = await this.holder(id);
    const s = await this.redis.hget(keys.job(id), "status");
    if (s === null) throw new JobNotFound(id);
    return s;
  }

  // -- stop -----------------------------------------------------------------------------------
  /** Stops a job wherever it is: `cancelled` (it never starts), `interrupted` (its worker is
   * told), `already_completed`. */
  async stop(id: string): Promise<string> {
    const keys = await this.holder(id);
    const proto = this.protos.get(keys.prefix) ?? new Protocol(this.redis, keys);
    for (let i = 0; i < 5; i++) {
      const [t, g, inst, p, worker] = (await this.redis.hmget(keys.job(id), "script_type", "group", "instance", "priority", "worker_id")).map((x) => x ?? "");
      const stream = t ? keys.work(t, g || null, inst || null, /^\d$/.test(p) ? Number(p) : 5) : keys.job(id);
      const parts = worker.split(":");
      const ctl = t && parts.length === 3 ? keys.ctlInstance(t, parts[0], parts[1]) : null;
      let answer: string;
      try {
        answer = await proto.stop(id, stream, ctl, worker);
      } catch (e) {
        throw HeroError.fromServer(e);
      }
      if (answer !== "changed") return answer;
    }
    throw new HeroError(`job ${id} kept changing hands while it was being stopped; try again`);
  }

  // -- batches --------------------------------------------------------------------------------
  /** Adds members to batch `name` (made with its first member); one answer each. */
  async addToBatch(batch: string, jobs: JobOptions[]): Promise<Submitted[]> {
    return this.submitMany(jobs.map((j) => ({ ...j, batch })));
  }

  /** Closes batch `name`: `onComplete` is submitted once every member ended, `onSuccess` once
   * every member finished, exactly once. */
  async closeBatch(batch: string, callbacks: { onComplete?: JobOptions; onSuccess?: JobOptions }): Promise<BatchInfo> {
    name("batch name", batch);
    if (!callbacks.onComplete && !callbacks.onSuccess) throw new InvalidInput("close a batch with onComplete or onSuccess");
    const m = await this.shardMap();
    const [keys, proto] = m.sharded ? this.shard(await this.keyed(batch, (k) => k.batch(batch))) : [this.keys, this.proto];
    const spec = (cb: JobOptions | undefined, which: string) => {
      if (!cb) return null;
      const s = this.spec({ ...cb, id: cb.id ?? `batch-${batch}-${which}` });
      const flat = s.fields.filter(([k]) => k !== "created_at").flatMap(([k, v]) => [k, v.toString()]);
      return { id: s.id, key: keys.job(s.id), stream: keys.work(s.type, s.group, s.instance, s.priority), registry: keys.queues(), group: "workers", fields: flat };
    };
    // the callbacks are submitted when the batch ends: their retries need the upkeep too
    const callbackJobs = [callbacks.onComplete, callbacks.onSuccess].filter((cb): cb is JobOptions => cb !== undefined);
    await this.upkeep.note(callbackJobs.map((cb) => [cb, this.spec(cb)]));
    const r = await proto.closeBatch(batch, spec(callbacks.onComplete, "complete"), spec(callbacks.onSuccess, "success"));
    const word = text(r[0]);
    return {
      name: batch,
      total: Number(r[1]),
      pending: Number(r[2]),
      finished: Number(r[3]),
      failed: Number(r[4]),
      state: word === "done" || word === "already_done" ? "done" : "closed",
      completeId: text(r[5]) || null,
      successId: text(r[6]) || null,
    };
  }

  /** Batch `name` as it stands (null when there is none, or it expired). */
  async batch(batch: string): Promise<BatchInfo | null> {
    name("batch name", batch);
    const m = await this.shardMap();
    const keys = m.sharded ? this.shard(await this.keyed(batch, (k) => k.batch(batch)))[0] : this.keys;
    const h = await this.redis.hgetall(keys.batch(batch));
    if (!h || Object.keys(h).length === 0) return null;
    const n = (k: string) => Math.max(0, Number(h[k] ?? 0) || 0);
    return {
      name: batch,
      total: n("total"),
      pending: n("pending"),
      finished: n("finished"),
      failed: n("failed"),
      state: "done_at" in h ? "done" : h.closed === "1" ? "closed" : "open",
      completeId: h.complete_id ?? null,
      successId: h.success_id ?? null,
    };
  }
}
