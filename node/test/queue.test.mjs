// `Queue`, the operator's side of a queue with BullMQ's names, and the job options of issue 48
// against a real redis-server and `hero broker`: pause and resume, getJobCounts, the policy set
// and shown as the Rust CLI shows it, dead letters retried and purged, a job promoted and
// removed, a job scheduler with data (with no broker: the worker fires its ticks), a job's own
// backoff and removeOnComplete / removeOnFail, and a parent's getChildrenValues.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, InvalidInput, JobNotFound, Queue, Worker } from "../dist/esm/index.js";
import { hero, heroProcess, redisServer, waitFor } from "./helpers.mjs";

async function setting(t, types, handler, { broker: withBroker = true } = {}) {
  const redis = await redisServer();
  const broker = withBroker ? heroProcess(redis.url, ["broker", "--http", "off"]) : null;
  const client = await Client.connect(redis.url);
  const worker = handler ? new Worker(types, handler, { url: redis.url, concurrency: 4, autorun: false }) : null;
  worker?.on("error", () => undefined);
  t.after(async () => {
    await worker?.close();
    await broker?.stop();
    await client.close();
    redis.stop();
  });
  return { redis, client, worker };
}

test("pause, resume, getJobCounts, promote and remove", async (t) => {
  const { redis, client, worker } = await setting(t, "nc", async () => "done");
  const q = new Queue("nc", { url: redis.url });
  t.after(() => q.close());
  for (const id of ["w0", "w1", "w2"]) await client.submit({ type: "nc", script: "x", id });
  await client.submit({ type: "nc", script: "x", id: "hi", level: 1 });
  await client.submit({ type: "nc", script: "x", id: "later", delay: 3_600_000 });
  const c = await q.getJobCounts();
  assert.deepEqual(
    { waiting: c.waiting, delayed: c.delayed, running: c.running, totals: c.totals },
    { waiting: 4, delayed: 1, running: 0, totals: { finished: 0, failed: 0, dead: 0 } },
  );
  assert.equal(c.streams.length, 2);
  assert.equal(await q.pause(), 2);
  assert.ok((await q.getJobCounts()).streams.every((s) => s.paused));
  worker.run();
  await q.resume();
  await waitFor("four finished", async () => (await q.getJobCounts()).totals.finished === 4);
  await q.promote("later");
  await waitFor("the promoted job", async () => (await client.status("later")) === "finished");
  await assert.rejects(q.promote("w0"), (e) => e instanceof InvalidInput && /not delayed/.test(e.message));
  await q.remove("w0");
  await assert.rejects(client.get("w0"), JobNotFound);
  assert.throws(() => new Queue("nc", { connection: { host: "x" } }), /use url/);
});

test("the policy is set, checked and shown as the CLI shows it; dead letters", async (t) => {
  const { redis, client } = await setting(t, "np", null);
  const q = new Queue("np", { url: redis.url });
  t.after(() => q.close());
  const p = await q.setPolicy({
    retries: 3,
    backoff: { type: "exponential", delay: 100, cap: 2000 },
    timeout: 30_000,
    rate: { max: 100, duration: 1000 },
    concurrency: 4,
    retention: 3_600_000,
    aging: 60_000,
    keyRate: { max: 5, duration: 1000 },
    lease: 45_000,
  });
  assert.deepEqual(p, {
    retries: 3,
    backoff: { kind: "exponential", base_ms: 100, cap_ms: 2000, jitter: 0 },
    timeout_ms: 30000,
    rate: { max: 100, per_ms: 1000 },
    concurrency: 4,
    retention_ms: 3600000,
    aging_ms: 60000,
    key_rate: { max: 5, per_ms: 1000 },
    lease_ms: 45000,
  });
  const shown = JSON.parse(hero(redis.url, "--json", "queue", "show", "np"));
  assert.deepEqual(shown.policies, [{ queue: "np", policy: p }]);
  assert.deepEqual((await q.setPolicy({ retries: 1 })).rate, { max: 100, per_ms: 1000 });
  for (const bad of [{ concurrency: 0 }, { rate: { max: 0, duration: 1000 } }, { backoff: { type: "linear" } }, { aging: 0 }, { attempts: 3 }, { limiter: {} }]) {
    await assert.rejects(q.setPolicy(bad), InvalidInput, JSON.stringify(bad));
  }
  assert.equal(await q.clearPolicy(), true);
  assert.deepEqual(await q.getPolicy(), {});

  for (const id of ["d0", "d1"]) {
    await client.submit({ type: "np", script: "x", id });
    await client.redis.xadd("hero:meta:dead", "*", "j", id, "reason", "too many deliveries", "queue", "hero:q:work:type:np");
    await client.redis.hset(`hero:job:${id}`, "status", "error", "error", "dead");
  }
  assert.deepEqual((await q.getDeadLetters()).map((d) => d.jobId), ["d0", "d1"]);
  assert.deepEqual(await q.retryDead(["d0"]), { d0: "requeued" });
  assert.deepEqual(await q.purgeDead(), { d1: "purged" });
  assert.deepEqual(await q.getDeadLetters(), []);
});

test("a job's own backoff, removeOnComplete / removeOnFail, and getChildrenValues", async (t) => {
  const { redis, client, worker } = await setting(t, "no", async (job) => {
    if (job.script === "fail") throw new Error("always");
    if (job.script === "parent") return await job.getChildrenValues();
    return `v-${job.script}`;
  });
  worker.run();
  const failing = await client.submit({ type: "no", script: "fail", retries: 1, backoff: { type: "fixed", delay: 300 }, removeOnFail: { age: 7200 } });
  assert.equal((await client.wait(failing, 20_000)).status, "error");
  const ttl = await client.redis.pttl(client.keys.job(failing));
  assert.ok(ttl > 7_100_000 && ttl <= 7_200_000, String(ttl));
  const rec = await client.get(failing);
  assert.deepEqual(rec.backoff, { kind: "fixed", base_ms: 300, cap_ms: 300, jitter: 0 });
  const quick = await client.submit({ type: "no", script: "a", removeOnComplete: true });
  assert.equal((await client.wait(quick, 20_000)).output, "v-a");
  const q = await client.redis.pttl(client.keys.job(quick));
  assert.ok(q > 0 && q <= 10_000, String(q));
  await client.submit({ type: "no", script: "one", id: "k1", removeOnComplete: true });
  await client.wait("k1", 20_000);
  await client.submit({ type: "no", script: "parent", id: "par", after: ["k1"] });
  // a value (protocol 33): the object the handler returned, its JSON the record's output text
  const par = await client.wait("par", 20_000);
  assert.deepEqual(par.output, { k1: "v-one" });
  assert.equal(par.outputText, JSON.stringify({ k1: "v-one" }));
  await client.redis.del(client.keys.job("k1"));
  assert.deepEqual(await client.children("par"), { k1: { status: "finished", output: "v-one", outputText: "v-one", error: null } });
  for (const bad of [{ removeOnComplete: 100 }, { removeOnFail: { count: 5 } }, { backoff: { type: "linear" } }, { backoff: { type: "fixed", delay: 1, unknown: 1 } }]) {
    await assert.rejects(client.submit({ type: "no", script: "x", ...bad }), InvalidInput, JSON.stringify(bad));
  }
});

test("a job scheduler's data reaches its handler, its ticks fired by the worker's upkeep", async (t) => {
  const seen = [];
  // no broker: the worker's duties fire the ticks (protocol 32)
  const { redis, worker } = await setting(t, "nr", async (job) => {
    seen.push([job.id, job.data]);
    return "ok";
  }, { broker: false });
  const q = new Queue("nr", { url: redis.url });
  t.after(() => q.close());
  const first = await q.upsertJobScheduler("tick", { every: 1000 }, { name: "s", data: { n: 7, to: "a@b.c" }, opts: { removeOnComplete: { age: 3600 } } });
  const listed = await q.getJobSchedulers();
  assert.deepEqual(listed.map((s) => [s.name, s.data]), [["tick", { n: 7, to: "a@b.c" }]]);
  worker.run();
  await waitFor("a tick to run", async () => seen.length > 0);
  assert.match(seen[0][0], /^cron-tick-\d+000$/);
  assert.ok(Number(seen[0][0].slice("cron-tick-".length)) >= first, `${seen[0][0]} is at or after the first tick ${first}`);
  assert.deepEqual(seen[0][1], { n: 7, to: "a@b.c" });
  const [shown] = await q.getJobSchedulers();
  assert.ok(shown.fires >= 1 && shown.last_ms >= first && shown.next_ms > shown.last_ms, JSON.stringify(shown));
  // the engine refuses what is no schedule: InvalidInput saying why
  await assert.rejects(q.upsertJobScheduler("bad", { pattern: "whenever" }), (e) => e instanceof InvalidInput && /not a cron expression/.test(e.message));
  await assert.rejects(q.upsertJobScheduler("bad", { every: 1000 }, { opts: { attempts: 3 } }), /retries/);
  assert.equal(await q.removeJobScheduler("tick"), true);
  assert.deepEqual(await q.getJobSchedulers(), []);
});

test("the queue reaches every shard of a sharded namespace", async (t) => {
  const { redis, client } = await setting(t, "ns", null);
  hero(redis.url, "shards", "set", "3");
  const q = new Queue("ns", { url: redis.url });
  t.after(() => q.close());
  await client.shardMap(true);
  await client.submitMany(Array.from({ length: 30 }, () => ({ type: "ns", script: "x" })));
  const counts = await q.getJobCounts();
  assert.equal(counts.waiting, 30);
  assert.deepEqual([...new Set(counts.streams.map((s) => s.shard))].sort(), [0, 1, 2]);
  assert.equal(await q.pause(), 3);
  assert.equal((await q.setPolicy({ concurrency: 7 })).concurrency, 7);
  const shown = JSON.parse(hero(redis.url, "--json", "queue", "show", "ns"));
  assert.equal(shown.policies[0].policy.concurrency, 7);
  assert.equal(await q.resume(), 3);
});
