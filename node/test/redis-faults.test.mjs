// Nothing lost when Redis itself fails, from Node: each test breaks a real redis-server of its
// own and counts the handlers' runs, not only the results. A worker whose Redis refuses writes
// for 3 s (too few replicas: NOREPLICAS) keeps every outcome and report and runs each job once;
// a worker started while Redis is full registers (hero_beat is allowed past maxmemory) and runs
// a job submitted before; a submit under an evicting maxmemory policy, or into a full Redis, is
// refused naming why and what to do; a worker whose calls Redis keeps refusing stops taking
// jobs, says why, removes its presence, and close() still works; the times a process sends are
// on Redis's clock, a skew said once.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Redis } from "ioredis";

// the package as a namespace: a name an older build lacks fails its own test, not the file
import * as hero from "../dist/esm/index.js";
import { redisServer, waitFor } from "./helpers.mjs";

const { Client, Worker } = hero;

/** A redis-server of the test's own, a plain connection to it, and a client; stopped after. */
async function withRedis(body) {
  const redis = await redisServer();
  const admin = new Redis(redis.url);
  const client = await Client.connect(redis.url);
  try {
    await body({ url: redis.url, admin, client });
  } finally {
    await client.close();
    admin.disconnect();
    redis.stop();
  }
}

/** Fills Redis to its maxmemory (set just above what it uses now; policy noeviction): a write
 * that adds data is then refused with OOM. Smaller values as it fills (a large value's request
 * counts while it is read, so its refusal leaves room for a small one). */
async function fill(admin) {
  const used = Number(/used_memory:(\d+)/.exec(await admin.info("memory"))[1]);
  await admin.config("SET", "maxmemory", String(used + 2 * 1024 * 1024));
  let i = 0;
  for (const size of [64 * 1024, 4096, 256, 16]) {
    const chunk = "x".repeat(size);
    for (;;) {
      if (i > 10_000) throw new Error("Redis never filled up");
      try {
        await admin.set(`fill:${i++}`, chunk);
      } catch (e) {
        if (/^OOM/.test(e.message)) break;
        throw e;
      }
    }
  }
}

/** The worker's registration as Redis holds it: its liveness deadline, fleet entry, presence. */
async function registration(admin, worker, type) {
  const [deadline, entry, presence] = await Promise.all([
    admin.zscore("hero:meta:consumers", worker.consumer),
    admin.hget("hero:meta:fleet", worker.consumer),
    admin.get(`hero:meta:actor:inst:${type}:${worker.group}:${worker.instance}`),
  ]);
  return { deadline, entry: entry && JSON.parse(entry), presence: presence && JSON.parse(presence) };
}

test("a worker whose Redis refuses writes for 3 s records every outcome after, each handler run once", async () => {
  await withRedis(async ({ url, admin, client }) => {
    const runs = new Map();
    const errors = [];
    let outageBegan;
    const began = new Promise((r) => (outageBegan = r));
    const worker = new Worker(
      "faults",
      async (job) => {
        runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
        await job.updateProgress(50, "half way");
        if (job.data.hold) {
          // the first jobs end while Redis refuses writes: their outcomes, and this last line,
          // must wait for it
          await began;
          await job.log(`ended in the outage ${job.id}`);
        }
        return `out ${job.data.n}`;
      },
      { url, concurrency: 4 },
    );
    worker.on("error", (e) => errors.push(e));
    worker.on("warning", () => undefined);
    await worker.waitUntilReady();
    const ids = [];
    for (let n = 0; n < 12; n++) ids.push(await client.submit({ type: "faults", payload: { n, hold: n < 4 } }));
    await waitFor("four handlers running", async () => runs.size >= 4);

    await admin.config("SET", "min-replicas-to-write", "1");
    const from = Date.now();
    await assert.rejects(admin.set("probe", "1"), /NOREPLICAS/);
    outageBegan();
    await waitFor("the worker to meet the refusal", async () => errors.some((e) => /^recording outcomes failed: NOREPLICAS/.test(e.message)));
    // Redis refuses writes for 3 s in all (a duration, not a wait for something)
    await new Promise((r) => setTimeout(r, Math.max(0, 3000 - (Date.now() - from))));
    assert.ok(ids.some((id) => runs.has(id)) && runs.size < 12, "jobs were still waiting when Redis healed");
    await admin.config("SET", "min-replicas-to-write", "0");

    for (const [n, id] of ids.entries()) {
      const r = await client.wait(id, 30_000);
      assert.deepEqual([r.status, r.output], ["finished", `out ${n}`], id);
    }
    assert.deepEqual(
      ids.map((id) => runs.get(id)),
      ids.map(() => 1),
      "each handler ran exactly once",
    );
    for (const id of ids.slice(0, 4)) {
      const j = await client.get(id);
      assert.equal(j.attempts, 1, id);
      assert.deepEqual(j.log, [`ended in the outage ${id}`], "the report made in the outage was kept and recorded");
      assert.deepEqual(j.progress, { percent: 50, message: "half way" });
    }
    // still serving, still registered
    const late = await client.submit({ type: "faults", payload: { n: 99 } });
    assert.equal((await client.wait(late, 20_000)).output, "out 99");
    assert.equal(runs.get(late), 1);
    const reg = await registration(admin, worker, "faults");
    assert.ok(Number(reg.deadline) > Date.now() && reg.entry && reg.presence, JSON.stringify(reg));
    await worker.close();
  });
});

test("a worker started while Redis is full registers and runs a job submitted before", async () => {
  await withRedis(async ({ url, admin, client }) => {
    const early = await client.submit({ type: "full", payload: { n: 1 } });
    await fill(admin);
    await assert.rejects(admin.set("probe", "x"), /\bOOM\b/);
    const runs = new Map();
    const worker = new Worker(
      "full",
      async (job) => {
        runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
        return "ran while full";
      },
      { url, concurrency: 2 },
    );
    worker.on("error", () => undefined);
    await worker.waitUntilReady();
    const reg = await registration(admin, worker, "full");
    assert.ok(Number(reg.deadline) > Date.now(), "its liveness deadline is set");
    assert.equal(reg.entry?.protocol, Number(hero.PROTOCOL_VERSION));
    assert.equal(reg.entry?.role, "worker");
    assert.ok(reg.entry?.expires_ms > Date.now(), "its fleet entry expires on Redis's clock");
    assert.equal(reg.presence?.consumer, worker.consumer);
    assert.equal(typeof reg.presence?.skew_ms, "number");
    const r = await client.wait(early, 20_000);
    assert.deepEqual([r.status, r.output], ["finished", "ran while full"]);
    assert.equal(runs.get(early), 1);
    await assert.rejects(admin.set("probe", "x"), /\bOOM\b/, "Redis was full all along");
    await worker.close();
  });
});

test("a submit under an evicting maxmemory-policy is refused naming the policy; a worker says so once", async () => {
  await withRedis(async ({ url, admin, client }) => {
    await admin.config("SET", "maxmemory-policy", "allkeys-lru");
    const e = await client.submit({ type: "ev", id: "ev-1" }).then(
      () => null,
      (err) => err,
    );
    assert.match(e?.message, /^Redis's maxmemory-policy is allkeys-lru: under it Redis may evict any key, a job's record included, /);
    assert.match(e.message, /Set `maxmemory-policy noeviction` .*, or accept the loss with `hero broker --accept-eviction allkeys-lru`$/);
    assert.ok(e instanceof hero.Evicting && e instanceof hero.HeroError, String(e));
    assert.equal(e.policy, "allkeys-lru");
    assert.equal(await admin.exists("hero:job:ev-1"), 0, "nothing was written");

    const warnings = [];
    const worker = new Worker("ev", async () => "ran", { url, presenceTtlMs: 600 });
    worker.on("warning", (m) => warnings.push(m));
    await worker.waitUntilReady();
    const beats = new Set();
    await waitFor("three heartbeats", async () => {
      beats.add(await admin.hget("hero:meta:fleet", worker.consumer));
      return beats.size >= 3;
    });
    assert.equal(warnings.filter((m) => /maxmemory-policy is allkeys-lru: Redis may evict any key/.test(m)).length, 1, warnings.join("\n"));
    await admin.config("SET", "maxmemory-policy", "noeviction");
    await waitFor("the worker to see noeviction", async () => warnings.some((m) => /maxmemory-policy is noeviction again/.test(m)));
    const id = await client.submit({ type: "ev" });
    assert.equal((await client.wait(id, 20_000)).output, "ran");
    await worker.close();
  });
});

test("a submit Redis refuses for want of memory says Redis is full and what to do", async () => {
  await withRedis(async ({ admin, client }) => {
    await fill(admin);
    const e = await client.submit({ type: "oom", id: "oom-1" }).then(
      () => null,
      (err) => err,
    );
    assert.match(
      e?.message,
      /^Redis is full: it reached its maxmemory and refuses writes that add data \(policy noeviction\), so nothing was written and the job was not accepted \(OOM command not allowed/,
    );
    assert.match(e.message, /Free memory \(a shorter --retention-secs, fewer waiting jobs, `hero dead purge`\) or raise maxmemory, then send it again$/);
    assert.ok(e instanceof hero.OutOfMemory && e instanceof hero.HeroError, String(e));
    assert.equal(await admin.exists("hero:job:oom-1"), 0);
  });
});

test("a worker whose calls Redis keeps refusing stops taking jobs, says why, leaves, and closes", async () => {
  await withRedis(async ({ url, admin, client }) => {
    const runs = [];
    const errors = [];
    const worker = new Worker("broken", async (job) => runs.push(job.id), { url, shutdownMs: 2000 });
    worker.on("error", (e) => errors.push(e));
    worker.on("warning", () => undefined);
    const closed = new Promise((r) => worker.once("closed", r));
    const ran = await client.submit({ type: "broken" });
    await client.wait(ran, 20_000);
    assert.ok((await registration(admin, worker, "broken")).deadline);
    // the work stream turns into a string: every read of it is refused (WRONGTYPE), which no
    // back-off mends
    const stream = "hero:q:work:type:broken";
    await admin.multi().del(stream).set(stream, "not a stream").exec();
    const failed = await waitFor("the worker to give up", async () => errors.find((e) => e instanceof hero.WorkerFailed), 30_000);
    assert.match(failed.message, /stopped taking jobs: (fetching|waiting for) jobs failed \d+ times in a row over \d+ s and cannot go on \(the last: WRONGTYPE/);
    await closed;
    const reg = await registration(admin, worker, "broken");
    assert.deepEqual(reg, { deadline: null, entry: null, presence: null }, "its presence is removed");
    await assert.rejects(worker.run(), (e) => e === failed);
    await worker.close();
    assert.deepEqual(runs, [ran]);
  });
});

test("a listener that throws does not stop the completer: said on the error event, every outcome recorded", async () => {
  await withRedis(async ({ url, client }) => {
    const runs = new Map();
    const errors = [];
    const completed = [];
    const worker = new Worker(
      "listen",
      async (job) => {
        runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
        return job.data.n;
      },
      { url, concurrency: 2 },
    );
    worker.on("error", (e) => errors.push(e));
    worker.on("completed", (job, n) => {
      completed.push(n);
      if (n === 0) throw new Error("a listener's own bug");
    });
    await worker.waitUntilReady();
    const ids = [];
    for (let n = 0; n < 6; n++) ids.push(await client.submit({ type: "listen", payload: { n } }));
    for (const [n, id] of ids.entries()) assert.equal((await client.wait(id, 20_000)).output, n);
    await waitFor("every completed event", async () => completed.length === 6);
    assert.ok(errors.some((e) => e.message === "a listener's own bug"), errors.map((e) => e.message).join("\n"));
    assert.deepEqual(
      ids.map((id) => runs.get(id)),
      ids.map(() => 1),
    );
    // still serving after it
    const late = await client.submit({ type: "listen", payload: { n: 7 } });
    assert.equal((await client.wait(late, 20_000)).output, 7);
    await worker.close();
  });
});

test("Redis's clock corrects the times a process sends; a skew over 2 s is said once, and once when it agrees again", async () => {
  const { observeClock, nowMs, clockOffsetMs } = await import("../dist/esm/protocol.js");
  const t = Date.now();
  try {
    // Redis's clock read 5 s ahead of this machine's, mid-way through a call sent and answered at t
    assert.match(observeClock(t + 5000, t - 10, t + 10) ?? "", /^this machine's clock is 5\.0 s behind Redis's: hero goes by Redis's clock/);
    assert.equal(observeClock(t + 5100, t, t), null, "said once");
    assert.equal(clockOffsetMs(), 5100);
    assert.ok(Math.abs(nowMs() - Date.now() - 5100) <= 5, "the times sent are on Redis's clock");
    // the presence a worker writes shows its clock minus Redis's
    const worker = new Worker("skew", async () => undefined, { autorun: false });
    assert.equal(JSON.parse(worker.presence(0)).skew_ms, -5100);
    assert.equal(observeClock(t + 1000, t, t), "this machine's clock agrees with Redis's again");
    assert.equal(observeClock(t, t, t), null);
  } finally {
    const now = Date.now();
    observeClock(now, now, now);
  }
});
