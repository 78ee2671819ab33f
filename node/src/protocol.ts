// The protocol's server functions (docs/protocol.md §4), one builder each, all in this file:
// what every other module calls. The package carries the Lua library of its protocol version
// (packed at build time from the repository's generated docs/hero-library.lua) and loads it
// when the server lacks it, so a process of this version runs whatever version the brokers run
// (§8).
import type { Redis } from "ioredis";

import { byStream, type Done, LETTERS } from "./done.js";
import { HeroError } from "./errors.js";
import { GROUP, Keys } from "./keys.js";
import { LIBRARY_SOURCE } from "./library.generated.js";
import { submitsByStream, type NewJobArgs } from "./submits.js";
import { Arg, rawOk, RawCommand, Resp, text, whole, Words } from "./resp.js";

export const VERSION = "35";
/** This package's release (package.json says the same: a test holds them equal). */
export const RELEASE = "1.1.0";

export { text } from "./resp.js";

/** The calls of one protocol version on one connection, for one shard's keys. */
export class Protocol {
  private xackdelFlag: string | null = null;
  /** The keys every fetch and completion names, built once. */
  private readonly hot: { queues: string; config: string; events: string; stats: string; delayed: string; retention: string; jobPrefix: string; replyPrefix: string };
  /** Whether the connection takes commands written here (resp.ts): not with a key prefix. */
  private readonly raw: boolean;

  constructor(
    readonly redis: Redis,
    readonly keys: Keys,
    readonly version: string = VERSION,
    private readonly library: string = LIBRARY_SOURCE,
  ) {
    const k = keys;
    this.hot = { queues: k.queues(), config: k.config(), events: k.events(), stats: k.stats(), delayed: k.delayed(), retention: k.retention(), jobPrefix: k.jobPrefix(), replyPrefix: k.replyPrefix() };
    this.raw = rawOk(redis);
  }

  fn(name: string): string {
    return `hero_v${this.version}_${name}`;
  }

  /** FCALL of function `name` on `keys` with `argv`; the reply as `callBuffer` answers it. */
  async fcall(name: string, keys: string[], argv: Arg[]): Promise<unknown> {
    if (!this.raw) return this.redis.callBuffer("FCALL", this.fn(name), keys.length, ...keys, ...argv);
    const w = new Resp().str("FCALL").str(this.fn(name)).num(keys.length);
    for (let i = 0; i < keys.length; i++) w.str(keys[i]);
    for (let i = 0; i < argv.length; i++) w.arg(argv[i]);
    return this.send(w);
  }

  private send(w: Resp): Promise<unknown> {
    return this.redis.sendCommand(new RawCommand("fcall", w.done())) as Promise<unknown>;
  }

  /** Loads this version's library unless the server has it (never replaces another version). */
  async ensureLibrary(): Promise<void> {
    try {
      if (text(await this.fcall("version", [], [])) === this.version) return;
    } catch (e) {
      if (!String(e).includes("Function not found")) throw e;
    }
    await this.redis.call("FUNCTION", "LOAD", "REPLACE", this.library);
  }

  /** '1' when the server has XACKDEL (asked once), else '0'. */
  async xackdel(): Promise<string> {
    if (this.xackdelFlag !== null) return this.xackdelFlag;
    {
      try {
        await this.redis.call("XACKDEL");
        this.xackdelFlag = "1";
      } catch (e) {
        // a command the server lacks is "unknown"; one it has refuses the missing arguments
        this.xackdelFlag = String(e).toLowerCase().includes("unknown command") ? "0" : "1";
      }
    }
    return this.xackdelFlag;
  }

  /** hero_submit of [job id, work stream, run-at ms or 0, record fields] each; answers
   * [kind, status] per job: kind `created`, `exists` or `duplicate:<id>`. Since protocol 35 the
   * call names each stream once and a job as its id, a code `<stream>.<values>[@<run-at>]` and
   * its pairs without `created_at` and `script_type`, which the function writes. */
  async submit(jobs: NewJobArgs[]): Promise<[string, string][]> {
    const k = this.keys;
    const h = this.hot;
    let answer: unknown[];
    if (Number(this.version) >= 35) {
      const { streams, codes, kept } = submitsByStream(jobs);
      if (this.raw) {
        // written straight into the command's bytes (resp.ts)
        const w = new Resp().str("FCALL").str(this.fn("submit")).num(6 + streams.length);
        w.str(h.delayed).str(h.queues).str(k.bridgeRegistry()).str(h.config).str(h.events).str(h.stats);
        for (const stream of streams) w.str(stream);
        w.str(GROUP).str(h.jobPrefix).num(nowMs());
        jobs.forEach(([id], j) => {
          w.str(id).str(codes[j]);
          const f = kept[j];
          for (let i = 0; i < f.length; i++) w.str(f[i][0]).arg(f[i][1]);
        });
        answer = (await this.send(w)) as unknown[];
      } else {
        const keys = [h.delayed, h.queues, k.bridgeRegistry(), h.config, h.events, h.stats, ...streams];
        const argv: Arg[] = [GROUP, h.jobPrefix, nowMs()];
        jobs.forEach(([id], j) => {
          argv.push(id, codes[j]);
          for (const [f, v] of kept[j]) argv.push(f, v);
        });
        answer = (await this.fcall("submit", keys, argv)) as unknown[];
      }
    } else if (this.raw) {
      // protocols before 35: two keys and three counts a job, written straight into the
      // command's bytes, a job's key as prefix and id (resp.ts)
      const w = new Resp().str("FCALL").str(this.fn("submit")).num(6 + 2 * jobs.length);
      w.str(h.delayed).str(h.queues).str(k.bridgeRegistry()).str(h.config).str(h.events).str(h.stats);
      for (const job of jobs) w.str2(h.jobPrefix, job[0]).str(job[1]);
      w.str(GROUP);
      for (const [id, , runAt, fields] of jobs) {
        w.str(id).num(runAt).num(fields.length * 2);
        for (let i = 0; i < fields.length; i++) w.str(fields[i][0]).arg(fields[i][1]);
      }
      answer = (await this.send(w)) as unknown[];
    } else {
      const keys = [h.delayed, h.queues, k.bridgeRegistry(), h.config, h.events, h.stats];
      const argv: Arg[] = [GROUP];
      for (const [id, stream, runAt, fields] of jobs) {
        keys.push(k.job(id), stream);
        argv.push(id, runAt, fields.length * 2);
        for (const [f, v] of fields) argv.push(f, v);
      }
      answer = (await this.fcall("submit", keys, argv)) as unknown[];
    }
    // the same few words each job (`created`, `dispatched`): each read once a call
    const words = new Words();
    const out: [string, string][] = new Array(answer.length >> 1);
    for (let i = 0, j = 0; i + 1 < answer.length; i += 2, j++) out[j] = [words.of(answer[i]), words.of(answer[i + 1])];
    return out;
  }

  async stop(id: string, stream: string, ctl: string | null, worker: string, why = "stopped"): Promise<string> {
    const k = this.keys;
    const keys = [k.job(id), stream, k.delayed(), k.reply(id), k.config(), ctl ?? k.config(), k.retention(), k.events(), k.stats()];
    const argv = [GROUP, ctl ? worker : "", iso(), await this.xackdel(), id, why];
    return text(await this.fcall("stop", keys, argv));
  }

  async closeBatch(name: string, onComplete: object | null, onSuccess: object | null): Promise<unknown[]> {
    const k = this.keys;
    const keys = [k.batch(name), k.config(), k.batches(), k.events()];
    const argv = [name, iso(), onComplete ? JSON.stringify(onComplete) : "", onSuccess ? JSON.stringify(onSuccess) : ""];
    return (await this.fcall("batch", keys, argv)) as unknown[];
  }
  // -- operator -----------------------------------------------------------------------------
  /** hero_pause: pauses or resumes queue `name`; answers the streams it moved. */
  async pause(name: string, pause: boolean): Promise<number> {
    const k = this.keys;
    const keys = [k.queues(), k.pausedQueues(), k.pausedNames(), k.config(), k.events()];
    return Number(text(await this.fcall("pause", keys, [pause ? "pause" : "resume", name])));
  }

  /** hero_pause of one limit key of fair queue `name` (ARGV[3], since protocol 30): holds it
   * in the gate or gives it its turns again; answers in how many work streams it had jobs. */
  async pauseKey(name: string, key: string, pause: boolean): Promise<number> {
    const k = this.keys;
    const keys = [k.queues(), k.pausedQueues(), k.pausedNames(), k.config(), k.events()];
    return Number(text(await this.fcall("pause", keys, [pause ? "pause" : "resume", name, key])));
  }

  /** hero_counts (read-only): per work stream of queue `name`, [stream, waiting, running,
   * delayed, finished, failed, dead, paused, oldest waiting ms or -1]. */
  async counts(name: string): Promise<[string, ...number[]][]> {
    const k = this.keys;
    const keys = [k.queues(), k.pausedQueues(), k.stats()];
    const flat = (await this.redis.callBuffer("FCALL_RO", this.fn("counts"), keys.length, ...keys, GROUP, name)) as unknown[];
    const out: [string, ...number[]][] = [];
    for (let i = 0; i < flat.length; i += 9) out.push([text(flat[i]), ...flat.slice(i + 1, i + 9).map((x) => Number(text(x)))]);
    return out;
  }

  /** hero_policy: stores the whole policy of queue `name` on this shard ('' clears it). */
  async setPolicy(name: string, json: string): Promise<string> {
    const k = this.keys;
    return text(await this.fcall("policy", [k.policy(), k.config()], [name, json]));
  }

  /** hero_remove: `removed`, `running`, `queued` or `missing`. */
  async remove(id: string): Promise<string> {
    return text(await this.fcall("remove", [this.keys.job(id)], [id]));
  }

  /** hero_requeue: moves a job from stream `old` to `next` of `target` ([type, group, instance,
   * priority]); answers [requeued | searching | changed | missing, cursor]. */
  async requeue(id: string, old: string, next: string, ctl: string | null, worker: string, cursor: string, target: [string, string, string, number]): Promise<[string, string]> {
    const k = this.keys;
    const keys = [k.job(id), old, next, k.delayed(), k.queues(), k.config(), k.events(), k.stats(), ctl ?? k.config()];
    const [t, g, i, p] = target;
    const argv = [GROUP, iso(), await this.xackdel(), id, ctl ? worker : "", cursor, t, g, i, p === 5 ? "" : String(p)];
    const r = (await this.fcall("requeue", keys, argv)) as unknown[];
    return [text(r[0]), text(r[1])];
  }

  /** hero_clean: deletes up to `limit` ended jobs of queue `name` ('' every queue) of `status`
   * ('finished', 'error', '' both) that ended at least `graceMs` ago, oldest first; answers [the
   * next cursor ('' when through), the deleted ids]. */
  async clean(graceMs: number, status: string, name: string, limit: number, cursor: string): Promise<[string, string[]]> {
    const k = this.keys;
    const r = (await this.fcall("clean", [k.retention()], [k.jobPrefix(), graceMs, status, name, limit, cursor])) as unknown[];
    return [text(r[0]), r.slice(1).map(text)];
  }

  /** hero_list (read-only, protocol 33): one bounded page of queue `name`'s jobs ('' every
   * queue) in `state` (finished, error, delayed, waiting, running), going on from `cursor` (''
   * at first): [next cursor ('' at the end), ids]. A call reads at most 1,000 candidates, so a
   * page may be short, even empty, with a cursor to go on with. */
  async list(state: string, name: string, cursor: string, limit: number): Promise<[string, string[]]> {
    const k = this.keys;
    const keys = [k.retention(), k.delayed(), k.queues()];
    const r = (await this.redis.callBuffer("FCALL_RO", this.fn("list"), keys.length, ...keys, k.jobPrefix(), state, name, cursor, limit)) as unknown[];
    return [text(r[0]), r.slice(1).map(text)];
  }

  /** hero_keys (read-only, protocol 33): one page of fair queue `name`'s limit keys on this
   * shard, read from index `from`, at most `page` (0-1000; 0 counts only): the keys in its
   * rings (`total`), how many were read, the paused keys under or over it, and the keys read
   * with jobs waiting. */
  async keysPage(name: string, from: number, page: number): Promise<{ total: number; read: number; held: string[]; waiting: [string, number][] }> {
    const k = this.keys;
    const keys = [k.queues(), k.held()];
    const r = (await this.redis.callBuffer("FCALL_RO", this.fn("keys"), keys.length, ...keys, name, from, page)) as unknown[];
    const flat = (r[3] as unknown[]).map((x) => x);
    const waiting: [string, number][] = [];
    for (let i = 0; i + 1 < flat.length; i += 2) waiting.push([text(flat[i]), Number(flat[i + 1])]);
    return { total: Number(r[0]), read: Number(r[1]), held: (r[2] as unknown[]).map(text), waiting };
  }

  /** hero_drain: one step deleting queue `name`'s waiting jobs (and delayed ones when `delayed`;
   * the queue itself once empty when `remove`), at most `budget`, the delayed set's walk going on
   * at `cursor` ('0' at first). */
  async drain(name: string, delayed: boolean, budget: number, remove: boolean, cursor: string): Promise<{ deleted: number; more: boolean; running: number; cursor: string }> {
    const k = this.keys;
    const keys = [k.queues(), k.delayed(), k.config(), k.stats()];
    const r = (await this.fcall("drain", keys, [GROUP, k.jobPrefix(), name, delayed ? "1" : "0", budget, remove ? "1" : "0", cursor])) as unknown[];
    const n = (i: number) => Math.max(0, Number(text(r[i])) || 0);
    return { deleted: n(0), more: n(1) === 1, running: n(2), cursor: text(r[3]) || "0" };
  }

  /** hero_dead of [entry id, job id, its work stream] each: `retry` or `purge`. */
  async dead(action: "retry" | "purge", letters: [string, string, string][]): Promise<string[]> {
    const k = this.keys;
    const keys = [k.deadLetter(), k.queues(), k.config(), k.events(), k.stats()];
    const argv: Arg[] = [GROUP, iso(), action];
    for (const [entry, id, stream] of letters) {
      keys.push(k.job(id), stream);
      argv.push(entry, id);
    }
    return ((await this.fcall("dead", keys, argv)) as unknown[]).map(text);
  }

  // -- recurring jobs -----------------------------------------------------------------------
  /** hero_cron: stores recurring job `name`'s spec (JSON), checked by the cron engine that fires
   * it (a schedule, zone or template it refuses is `HERO_INVALID_CRON <why>`); answers its next
   * tick (ms), -1 when the schedule has none. `json` '' removes it and its state: answers 1, or
   * 0 when there was none. Recurring jobs live on shard 0 (the namespace's own keys). */
  async cron(name: string, json: string): Promise<number> {
    const k = this.keys;
    const r = await this.fcall("cron", [k.cron(), k.cronNext()], [name, json]);
    if (!Array.isArray(r) || r.length < 2 || !["stored", "removed"].includes(text(r[0]))) {
      throw new HeroError(`hero_cron answered ${Array.isArray(r) ? r.map(text).join(" ") : typeof r}, not stored or removed and a number`);
    }
    return Number(text(r[1]));
  }

  /** hero_cron_next (read-only): the next `n` (1-100) ticks (ms) of `schedule` in zone `tz`
   * strictly after `afterMs`, by the cron engine the duties fire by (fewer when the schedule
   * has no more). */
  async cronNext(schedule: string, tz: string, afterMs: number, n: number): Promise<number[]> {
    const r = (await this.redis.callBuffer("FCALL_RO", this.fn("cron_next"), 0, schedule, tz, afterMs, n)) as unknown[];
    return r.map((x) => Number(text(x)));
  }

  // -- worker -------------------------------------------------------------------------------
  /** hero_fetch over `streams` in precedence order, asking for the records of every fetch:
   * jobs as [stream index from 0, entry, job id], the wake-up cursors, records in the order of jobs. With
   * `registry`, the registry cursor (ARGV[9]): `*` asks which of `streams` are registered
   * (answered in `registered`, indexes from 0, with the registry's `signal`); a signal id names
   * only registered streams, read without asking the registry while it has not moved
   * (`registered` is then `stale` once it has: nothing was claimed, ask again with `*`).
   * `limited`: a concurrency limit held jobs back (look again soon: no entry will wake). */
  async fetch(
    streams: string[],
    consumer: string,
    count: number,
    registry: string | null = null,
  ): Promise<{ jobs: [number, string, string][]; cursors: string[]; records: (unknown[] | null)[]; signal: string | null; registered: number[] | "stale" | null; limited: boolean }> {
    const h = this.hot;
    const xackdel = this.xackdelFlag ?? (await this.xackdel());
    // "2": every fetch hands the records back, so no read a job follows (one ioredis command a
    // job cost this process more than the fetch itself; Redis spends about the same)
    let reply: unknown[];
    if (this.raw) {
      const w = new Resp().str("FCALL").str(this.fn("fetch")).num(4 + streams.length).str(h.queues).str(h.config).str(h.events).str(h.stats);
      for (let i = 0; i < streams.length; i++) w.str(streams[i]);
      w.str(GROUP).str(consumer).num(count).str(h.jobPrefix).str(iso()).str(xackdel).str("").str("2");
      if (registry !== null) w.str(registry);
      reply = (await this.send(w)) as unknown[];
    } else {
      const argv: Arg[] = [GROUP, consumer, count, h.jobPrefix, iso(), xackdel, "", "2"];
      if (registry !== null) argv.push(registry);
      reply = (await this.fcall("fetch", [h.queues, h.config, h.events, h.stats, ...streams], argv)) as unknown[];
    }
    const flat = reply[0] as unknown[];
    const jobs: [number, string, string][] = new Array(flat.length / 3);
    for (let i = 0, j = 0; i + 2 < flat.length; i += 3, j++) jobs[j] = [whole(flat[i]) - 1, text(flat[i + 1]), text(flat[i + 2])];
    const cursors = ((reply[2] as unknown[]) ?? []).map(text);
    // a concurrency limit (a queue's, or a fair queue's key's) held jobs back: a slot it frees
    // writes no entry that would wake a blocked read
    const limited = text(reply[3]) === "1";
    // per job, its record as HGETALL's flat pairs when the fetch handed it back, else null
    const records: (unknown[] | null)[] = new Array(jobs.length).fill(null);
    if (reply.length > 4 && Array.isArray(reply[4])) {
      const recs = reply[4] as unknown[];
      for (let i = 0; i < jobs.length && i < recs.length; i++) {
        if (Array.isArray(recs[i])) records[i] = recs[i] as unknown[];
        // moved, not shared: the reply holds no record once its job has it (lane.ts, retire())
        recs[i] = null;
      }
    }
    let signal: string | null = null;
    let registered: number[] | "stale" | null = null;
    if (registry !== null && reply.length > 6) {
      signal = text(reply[5]);
      const r = reply[6];
      if (Array.isArray(r)) registered = registry === "*" ? r.map((x) => Number(text(x)) - 1) : null;
      else if (text(r) === "stale") registered = "stale";
    }
    return { jobs, cursors, records, signal, registered, limited };
  }

  /** hero_renew: `ok`, `stopped` or `lost`; with a report, records it in the same call. */
  async renew(id: string, stream: string, lease: string, consumer: string, progress: [number, string] | null, lines: string[]): Promise<string> {
    const k = this.keys;
    if (progress === null && lines.length === 0) {
      return text(await this.fcall("renew", [k.job(id), stream], [lease, GROUP, consumer]));
    }
    let p = "";
    if (progress !== null) {
      const percent = Number.isFinite(progress[0]) ? Math.max(0, Math.min(100, progress[0])) : 0;
      p = JSON.stringify({ percent, message: clip(progress[1], 200) });
    }
    return text(await this.fcall("renew", [k.job(id), stream, k.events(), k.config()], [lease, GROUP, consumer, id, p, ...lines.map((l) => clip(l, 1000))]));
  }

  /** hero_complete of a batch of outcomes; per job: completed, retrying, already_completed or
   * lease_lost, in the order given. */
  async complete(consumer: string, given: Done[]): Promise<string[]> {
    const h = this.hot;
    const xackdel = this.xackdelFlag ?? (await this.xackdel());
    const version = Number(this.version);
    // since protocol 34 the call takes each stream once and the jobs grouped by it
    const { done, streams, counts, order } = version >= 34 ? byStream(given) : { done: given, streams: [], counts: [], order: null };
    let ids = "";
    for (let i = 0; i < done.length; i++) ids = i === 0 ? done[i].id : `${ids} ${done[i].id}`;
    let answer: unknown[];
    if (version >= 34 && this.raw) {
      // written straight into the command's bytes
      const w = new Resp().str("FCALL").str(this.fn("complete")).num(6 + streams.length);
      w.str(h.delayed).str(h.config).str(h.retention).str(h.events).str(h.stats).str(h.queues);
      for (const s of streams) w.str(s);
      w.str(GROUP).str(iso()).str(xackdel).str(ids).str(consumer).str("").str(h.jobPrefix).str(counts.join(" "));
      // the outcome's letter and the run time: most often one code for a whole batch
      for (const d of done) w.str(d.lease).str(d.id).str2(LETTERS[d.outcome], String(d.ranMs)).str(d.text);
      for (let i = 0; i < done.length; i++) {
        const d = done[i];
        if (d.outcome !== "done" && d.outcome !== "abort") w.str2("t", String(i)).num(d.retryAt);
        if (d.reply) w.str2("w", String(i)).str(d.reply);
        if (d.trace && d.outcome !== "done") w.num(i).str(d.trace);
        if (d.value && d.outcome === "done") w.str2("v", String(i)).bytes(d.value);
      }
      answer = (await this.send(w)) as unknown[];
    } else if (version >= 34) {
      const argv: Arg[] = [GROUP, iso(), xackdel, ids, consumer, "", h.jobPrefix, counts.join(" ")];
      for (const d of done) argv.push(d.lease, d.id, `${LETTERS[d.outcome]}${d.ranMs}`, d.text);
      done.forEach((d, i) => {
        if (d.outcome !== "done" && d.outcome !== "abort") argv.push(`t${i}`, d.retryAt);
        if (d.reply) argv.push(`w${i}`, d.reply);
        if (d.trace && d.outcome !== "done") argv.push(i, d.trace);
        if (d.value && d.outcome === "done") argv.push(`v${i}`, d.value);
      });
      answer = (await this.fcall("complete", [h.delayed, h.config, h.retention, h.events, h.stats, h.queues, ...streams], argv)) as unknown[];
    } else {
      // protocols before 34: three keys and seven arguments a job, then traces (30) and values (33)
      const keys = [h.delayed, h.config, h.retention, h.events, h.stats, h.queues];
      const argv: Arg[] = [GROUP, iso(), xackdel, ids, consumer, ""];
      for (const d of done) {
        keys.push(this.keys.job(d.id), d.stream, d.reply ? this.keys.reply(d.id) : d.stream);
        argv.push(d.lease, d.outcome, d.text, d.retryAt, d.id, d.reply, d.ranMs);
      }
      if (version >= 30) done.forEach((d, i) => d.trace && d.outcome !== "done" && argv.push(i, d.trace));
      if (version >= 33) done.forEach((d, i) => d.value && d.outcome === "done" && argv.push(`v${i}`, d.value));
      answer = (await this.fcall("complete", keys, argv)) as unknown[];
    }
    const words = new Words();
    if (!order) return answer.map((a) => words.of(a));
    const out: string[] = new Array(order.length);
    for (let at = 0; at < order.length; at++) out[order[at]] = words.of(answer[at]);
    return out;
  }

  /** hero_beat: the heartbeat of process `name` (a worker's consumer), on Redis's clock and
   * allowed past maxmemory: its fleet entry (`entry`, a JSON object without `expires_ms`, which
   * the function adds), and for a worker its presence JSON on each of `presenceKeys` and its
   * liveness deadline, all for `ttlMs`. Answers Redis's clock, the brokers' lease and fleet
   * summary (null when absent) and the maxmemory policy; `sentMs` and `gotMs` are this
   * machine's clock (uncorrected) around the call, for {@link observeClock}. */
  async beat(name: string, ttlMs: number, entry: string, presenceKeys: string[], presence: string): Promise<Beat> {
    const k = this.keys;
    const keys = [k.consumers(), k.fleet(), k.config(), k.memory(), ...presenceKeys];
    const sentMs = Date.now();
    const r = (await this.fcall("beat", keys, [name, Math.max(1, Math.floor(ttlMs)), entry, presence])) as unknown[];
    const gotMs = Date.now();
    const lease = Number(text(r[1]));
    return {
      nowMs: Number(text(r[0])),
      leaseMs: r[1] === null || !(lease > 0) ? null : lease,
      fleetLacks: r[2] === null || r[2] === undefined ? null : text(r[2]),
      policy: text(r[3]),
      sentMs,
      gotMs,
    };
  }

  /** hero_duties: one bounded step of the queue's upkeep (due delayed jobs and retries
   * promoted, dead workers' jobs and idle deliveries recovered, running jobs past their time
   * limit ended, ended jobs past their retention deleted, dead letters trimmed, recurring
   * jobs' due ticks fired) by `holder` when it holds the duty lease (taking it when nobody
   * does, for `leaseMs`); any other caller gets the holder's name after one HGET. A `leaseMs`
   * of 0 hands the lease back when `holder` holds it. `budget`: the most jobs the step looks
   * at; `recover` false holds recovery back (this process saw Redis out of reach or refusing
   * writes lately). */
  async duties(holder: string, leaseMs: number, budget: number, recover: boolean): Promise<Duties> {
    const k = this.keys;
    const keys = [k.duties(), k.delayed(), k.consumers(), k.queues(), k.config(), k.events(), k.stats(), k.retention(), k.deadLetter()];
    const argv: Arg[] = [holder, Math.max(0, Math.floor(leaseMs)), budget, GROUP, k.jobPrefix(), recover ? "1" : "0", await this.xackdel()];
    return parseDuties(await this.fcall("duties", keys, argv));
  }

  /** Puts every delivery `consumer` holds on `stream` back without counting an attempt. */
  async handBack(stream: string, consumer: string): Promise<number> {
    const k = this.keys;
    const keys = [stream, k.deadLetter(), k.config(), k.retention(), k.events(), k.stats()];
    let total = 0;
    let cursor = "0-0";
    for (;;) {
      const r = (await this.fcall("recover", keys, [GROUP, "consumer", consumer, 0, 1000, k.jobPrefix(), k.replyPrefix(), 1_000_000, cursor, "1", iso(), await this.xackdel()])) as unknown[];
      total += Number(text(r[0]));
      cursor = text(r[3]);
      if (cursor === "0-0") return total;
    }
  }
}

/** hero_beat's answer (see {@link Protocol.beat}). */
export interface Beat {
  /** Redis's clock (ms since the epoch) during the call. */
  nowMs: number;
  /** The brokers' lease (`lease_ms` in the config hash), null when they published none. */
  leaseMs: number | null;
  /** The brokers' `fleet_lacks` summary (JSON), null when absent. */
  fleetLacks: string | null;
  /** Redis's maxmemory-policy (`noeviction` is the one that loses nothing). */
  policy: string;
  /** This machine's clock, uncorrected, when the call was sent and answered. */
  sentMs: number;
  gotMs: number;
}

/** hero_duties's answer (see {@link Protocol.duties}). */
export interface Duties {
  /** The caller holds the duty lease (it did this step). */
  held: boolean;
  /** Who holds it ('' when nobody: the caller handed it back). */
  holder: string;
  /** Due delayed jobs and retries moved into their streams. */
  promoted: number;
  /** Deliveries of dead workers and idle ones put back into their streams. */
  recovered: number;
  /** Of those, the jobs out of attempts: dead-lettered. */
  dead: number;
  /** Running jobs ended past their time limit. */
  timedOut: number;
  /** Ended jobs deleted past their retention. */
  expired: number;
  /** The budget ran out before the step was through: call again at once. */
  more: boolean;
  /** Recurring jobs' ticks whose job was submitted (protocol 32). */
  fired: number;
  /** Recurring jobs' ticks missed under the `skip` policy (due more than 1 s ago). */
  skipped: number;
}

/** hero_duties's reply, `{held, holder, promoted, recovered, dead, timed_out, expired, more,
 * fired, skipped}`, as {@link Duties}. The last two came with protocol 32 and are 0 when absent
 * (a caller that holds no lease gets 8 items); fewer than 8 throws (a library that is not this
 * version's). */
export function parseDuties(reply: unknown): Duties {
  if (!Array.isArray(reply) || reply.length < 8) {
    throw new HeroError(`hero_duties answered ${Array.isArray(reply) ? `${reply.length} items` : typeof reply}, not the 10 of protocol ${VERSION}`);
  }
  const n = (i: number) => Math.max(0, Number(text(reply[i])) || 0);
  return {
    held: n(0) === 1,
    holder: text(reply[1]),
    promoted: n(2),
    recovered: n(3),
    dead: n(4),
    timedOut: n(5),
    expired: n(6),
    more: n(7) === 1,
    fired: n(8),
    skipped: n(9),
  };
}

/** 1 s × 2^(attempt-1), ±20 %, capped at an hour: the SDKs' back-off (docs/protocol.md §6). */
export function retryAtMs(attempt: number): number {
  const delay = Math.min(3_600_000, 1000 * 2 ** Math.max(0, attempt - 1));
  return nowMs() + Math.floor(delay * (0.8 + Math.random() * 0.4));
}

// -- the clock: Redis's, as this process last measured it -------------------------------------
// Every deadline the functions compare is on Redis's clock: a retry's run-at, a delayed job's,
// the timestamps of a record. The process corrects its own clock by the offset a worker's
// heartbeat measures (`observeClock`), and says once when the two are more than SKEW_WARN_MS
// apart (the Rust `clock` module, hero-py's `observe`).

/** How far this machine's clock may be from Redis's before a worker says so. */
export const SKEW_WARN_MS = 2000;

/** Redis's clock minus this machine's, as last measured (0 until then). */
let offsetMs = 0;
let skewSaid = false;

/** Redis's clock as this process knows it: the local clock plus the offset last measured. Every
 * time the package sends (a retry's or a delayed job's run-at, a record's timestamps) is this. */
export function nowMs(): number {
  return Date.now() + offsetMs;
}

/** Redis's clock minus this machine's, as last measured (0 until a worker's first heartbeat). */
export function clockOffsetMs(): number {
  return offsetMs;
}

/** Records Redis's time `redisMs`, read by a call sent at local `sentMs` and answered at local
 * `gotMs` (the server's reading taken as the round trip's middle). Answers what to say, once
 * when the clocks turn more than SKEW_WARN_MS apart and once when they agree again (null
 * otherwise, and for the same turn seen again: once a process, whichever worker saw it). */
export function observeClock(redisMs: number, sentMs: number, gotMs: number): string | null {
  if (!Number.isFinite(redisMs) || redisMs <= 0) return null;
  const offset = Math.round(redisMs - (sentMs + gotMs) / 2);
  offsetMs = offset;
  const off = Math.abs(offset) > SKEW_WARN_MS;
  if (off === skewSaid) return null;
  skewSaid = off;
  if (off) {
    return `this machine's clock is ${(Math.abs(offset) / 1000).toFixed(1)} s ${offset < 0 ? "ahead of" : "behind"} Redis's: hero goes by Redis's clock (deadlines, retries, delays, liveness), but fix the clock (NTP)`;
  }
  return "this machine's clock agrees with Redis's again";
}

/** True for a maxmemory policy that may evict keys (anything but noeviction). */
export function evictingPolicy(policy: string): boolean {
  return policy !== "" && policy !== "noeviction";
}

let lastIso: [number, string] = [0, new Date(0).toISOString()];

/** RFC 3339 UTC with milliseconds (`2026-11-25T17:40:07.123Z`); the text of the last ms is
 * kept, since a bulk submit or a fetch asks for the same one many times. */
export function iso(ms: number = nowMs()): string {
  if (ms !== lastIso[0]) lastIso = [ms, new Date(ms).toISOString()];
  return lastIso[1];
}

/** `s` cut to at most `limit` UTF-8 bytes, on a character boundary. */
export function clip(s: string, limit: number): string {
  const b = Buffer.from(s, "utf8");
  if (b.length <= limit) return s;
  let end = limit;
  while (end > 0 && (b[end] & 0xc0) === 0x80) end--;
  return b.subarray(0, end).toString("utf8");
}
