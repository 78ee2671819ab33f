// Failed-job tooling and a queue's cleanup against a real redis-server, as tests/tests/cleanup.rs
// holds them for Rust: a failed job retried (`getJob(id).retry()`) runs again and another status
// is refused; clean deletes ended jobs by queue, status and age and nothing else, and refuses
// the types of waiting jobs; drain deletes a queue's waiting jobs (and, asked, its delayed ones)
// and leaves other queues; obliterate is refused while a job of the queue runs (and refuses
// `force`), then removes the queue whole; isPaused answers what pause and resume did.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, InvalidInput, Queue, UnrecoverableError, Worker } from "../dist/esm/index.js";
import { redisServer, waitFor } from "./helpers.mjs";

async function setting(t) {
  const redis = await redisServer();
  const client = await Client.connect(redis.url);
  t.after(async () => {
    await client.close();
    redis.stop();
  });
  return { redis, client };
}

/** A worker of `types`: `fail` fails on its first run, `always-fail` always, the rest finish. */
function worker(t, url, types, runs = { n: 0 }, hold = null) {
  const w = new Worker(
    types,
    async (job) => {
      runs.n += 1;
      if (job.script === "fail" && runs.n === 1) throw new UnrecoverableError("first time fails");
      if (job.script === "always-fail") throw new UnrecoverableError("fails");
      if (job.script === "hold") await hold;
      return "ok";
    },
    { url, concurrency: 4 },
  );
  w.on("error", () => undefined);
  t.after(() => w.close());
  return w;
}

const ended = (client, id) => waitFor(`${id} ended`, async () => ["finished", "error"].includes(await client.status(id)));

test("a failed job retried runs again; another status is refused; getJob", async (t) => {
  const { redis, client } = await setting(t);
  const runs = { n: 0 };
  const w = worker(t, redis.url, "rt", runs);
  const q = new Queue("rt", { client });
  await client.submit({ type: "rt", script: "fail", id: "f1" });
  await ended(client, "f1");
  const job = await q.getJob("f1");
  assert.equal(job.status, "error");
  assert.equal(job.id, "f1");
  await job.retry();
  await waitFor("the retried job finished", async () => (await client.status("f1")) === "finished");
  assert.equal(runs.n, 2);
  await assert.rejects(job.retry(), (e) => e instanceof InvalidInput && /f1 is finished, not failed/.test(e.message));
  await w.close();
  await client.submit({ type: "other", script: "x", id: "o1" });
  assert.equal(await q.getJob("o1"), undefined, "another queue's job");
  assert.equal(await q.getJob("none"), undefined);
  assert.deepEqual(Object.keys(await q.getJob("f1")).includes("retry"), false, "retry is not a field");
});

test("clean deletes ended jobs by queue, status and age and nothing else", async (t) => {
  const { redis, client } = await setting(t);
  const w = worker(t, redis.url, ["ca", "cb"], { n: 1 });
  const ids = [];
  for (let i = 0; i < 10; i++) ids.push([`a-ok-${i}`, "ca", "ok"]);
  for (let i = 0; i < 5; i++) ids.push([`a-bad-${i}`, "ca", "always-fail"]);
  for (let i = 0; i < 3; i++) ids.push([`b-bad-${i}`, "cb", "always-fail"]);
  for (const [id, type, script] of ids) await client.submit({ type, script, id });
  for (const [id] of ids) await ended(client, id);
  await w.close();
  const qa = new Queue("ca", { client });
  const qb = new Queue("cb", { client });
  assert.deepEqual(await qa.clean(3_600_000, 100, "failed"), [], "younger than an hour: nothing");
  const gone = (await qa.clean(0, 100, "failed")).sort();
  assert.deepEqual(gone, [0, 1, 2, 3, 4].map((i) => `a-bad-${i}`));
  for (const [id] of ids) assert.equal(await client.redis.exists(client.keys.job(id)), gone.includes(id) ? 0 : 1, id);
  assert.deepEqual(await qb.clean(0, 100, "completed"), []);
  // a limit, then everything ended of the queue
  assert.equal((await qa.clean(0, 4)).length, 4);
  assert.equal((await qa.clean(0, 100, "completed")).length, 6);
  assert.equal((await qb.clean(0, 100)).length, 3);
  for (const type of ["wait", "active", "delayed", "paused", "prioritized"]) {
    await assert.rejects(qa.clean(0, 10, type), (e) => e instanceof InvalidInput && /drain/.test(e.message), type);
  }
  await assert.rejects(qa.clean(0, 0), (e) => e instanceof InvalidInput && /limit 0/.test(e.message));
  await assert.rejects(qa.clean(-1, 10), InvalidInput);
});

test("drain deletes a queue's waiting jobs, and its delayed ones when asked", async (t) => {
  const { client } = await setting(t);
  const jobs = [];
  for (let i = 0; i < 1200; i++) jobs.push({ type: "dr", script: "x", id: `w${i}` });
  for (let i = 0; i < jobs.length; i += 200) await client.submitMany(jobs.slice(i, i + 200));
  for (let i = 0; i < 3; i++) await client.submit({ type: "dr", script: "x", id: `d${i}`, delay: 3_600_000 });
  await client.submit({ type: "other", script: "x", id: "o1" });
  const q = new Queue("dr", { client });
  assert.equal(await q.drain(), 1200);
  const c = await q.getJobCounts();
  assert.deepEqual([c.waiting, c.delayed], [0, 3]);
  assert.equal(await client.redis.exists(client.keys.job("w7")), 0);
  assert.equal(await q.drain(true), 3);
  assert.equal((await q.getJobCounts()).delayed, 0);
  assert.equal(await client.status("o1"), "dispatched", "another queue's job stays");
  await assert.rejects(q.drain("yes"), InvalidInput);
});

test("obliterate is refused while a job runs, then removes the queue whole; isPaused", async (t) => {
  const { redis, client } = await setting(t);
  let release;
  const hold = new Promise((r) => (release = r));
  const w = worker(t, redis.url, "ob", { n: 1 }, hold);
  for (let i = 0; i < 5; i++) await client.submit({ type: "ob", script: "x", id: `e${i}` });
  for (let i = 0; i < 5; i++) await ended(client, `e${i}`);
  await client.submit({ type: "ob", script: "hold", id: "held" });
  await waitFor("the held job runs", async () => (await client.status("held")) === "started");
  const q = new Queue("ob", { client });
  assert.equal(await q.isPaused(), false);
  await q.pause();
  for (let i = 0; i < 4; i++) await client.submit({ type: "ob", script: "x", id: `q${i}` });
  assert.equal(await q.isPaused(), true);
  await assert.rejects(q.obliterate(), (e) => e instanceof InvalidInput && /1 jobs of ob are running/.test(e.message));
  await assert.rejects(q.obliterate({ force: true }), (e) => e instanceof InvalidInput && /refuses while jobs of the queue run/.test(e.message));
  assert.equal(await client.status("q0"), "dispatched", "nothing deleted");
  release();
  await ended(client, "held");
  await w.close();
  await q.setPolicy({ retries: 2 });
  assert.equal(await q.obliterate(), 10, "4 waiting, 6 ended");
  const stream = client.keys.work("ob");
  assert.equal(await client.redis.exists(stream), 0, "its stream is gone");
  const registered = await client.redis.sunion(client.keys.queues(), client.keys.pausedQueues());
  assert.ok(!registered.includes(stream), registered.join(", "));
  assert.equal(await q.isPaused(), false);
  assert.equal((await q.getJobCounts()).waiting, 0);
  assert.deepEqual(await q.getPolicy(), {}, "its policy cleared");
  await q.resume();
  assert.equal(await q.isPaused(), false);
});
