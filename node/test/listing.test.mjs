// A queue's jobs by state with BullMQ's names (issue 60), over hero_list on a real
// redis-server: getCompleted / getFailed / getDelayed / getWaiting / getActive and getJobs with
// ranges and `asc`, each job with its returnvalue and retry(); a type hero has no list for is
// refused naming what it has; getJobCounts puts each job in one count and counts the ended jobs
// the queue holds (BullMQ's completed and failed), not ends since the namespace began; a listing
// that takes several hero_list calls (1,500 completed, 5 failed: getFailed finds the 5); and
// queue.add(name, data, opts) with BullMQ's meaning, its options strict.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, InvalidInput, Queue, UnrecoverableError, Worker } from "../dist/esm/index.js";
import { redisServer, waitFor } from "./helpers.mjs";

/** A redis-server and a client; `later(f)` closes what a test opened, last first, before the
 * server stops. */
async function setting(t) {
  const redis = await redisServer();
  const client = await Client.connect(redis.url);
  const stack = [];
  t.after(async () => {
    for (const f of stack.reverse()) await f();
    await client.close();
    redis.stop();
  });
  return { redis, client, later: (f) => stack.push(f) };
}

const ids = (jobs) => jobs.map((j) => j.id);

test("jobs listed by state with BullMQ's names; counts put each job in one count", async (t) => {
  const { redis, client, later } = await setting(t);
  let release;
  const hold = new Promise((r) => (release = r));
  const w = new Worker(
    "lst",
    async (job) => {
      if (job.script === "fail") throw new UnrecoverableError("it fails");
      if (job.script === "hold") await hold;
      return { n: job.data };
    },
    { url: redis.url, concurrency: 1 },
  );
  w.on("error", () => undefined);
  later(async () => {
    release();
    await w.close();
  });
  const q = new Queue("lst", { client });
  for (const id of ["ok1", "ok2", "ok3", "f1", "f2"]) {
    await client.submit({ type: "lst", script: id.startsWith("f") ? "fail" : "ok", id, payload: id });
    await client.wait(id, 10_000);
  }
  await client.submit({ type: "lst", script: "hold", id: "h" });
  await waitFor("h running", async () => (await client.status("h")) === "started");
  // waiting: the one worker's one slot is taken; delayed: due in a minute
  await client.submitMany([
    { type: "lst", id: "w1" },
    { type: "lst", id: "w2" },
    { type: "lst", id: "d1", delay: 60_000 },
    { type: "other", id: "x1" },
  ]);

  assert.deepEqual(ids(await q.getCompleted()), ["ok3", "ok2", "ok1"], "newest end first");
  assert.deepEqual(ids(await q.getFailed()).sort(), ["f1", "f2"]);
  assert.deepEqual(ids(await q.getActive()), ["h"]);
  assert.deepEqual(ids(await q.getWaiting()), ["w1", "w2"], "next to run first; another queue's job not listed");
  assert.deepEqual(ids(await q.getDelayed()), ["d1"]);
  assert.deepEqual(ids(await q.getJobs(["wait"])), ["w1", "w2"], "BullMQ's wait is waiting");
  assert.deepEqual(ids(await q.getJobs("completed", 0, 0)), ["ok3"]);
  assert.deepEqual(ids(await q.getJobs("completed", 1, 1)), ["ok2"]);
  assert.deepEqual(ids(await q.getJobs("completed", 0, -1, true)), ["ok1", "ok2", "ok3"], "asc");
  assert.deepEqual(ids(await q.getJobs(["completed", "failed"], 0, 0)).length, 2, "a range per type");
  assert.equal((await q.getJobs()).length, 9, "every type hero has");
  const [ok3] = await q.getCompleted(0, 0);
  assert.deepEqual(ok3.returnvalue, { n: "ok3" });
  const [failed] = await q.getFailed(0, 0);
  assert.equal(failed.status, "error");
  assert.equal(typeof failed.retry, "function");

  for (const type of ["prioritized", "waiting-children", "paused", "repeat", "nonsense"]) {
    await assert.rejects(q.getJobs(type), (e) => e instanceof InvalidInput && e.message.includes(JSON.stringify(type)) && /hero lists completed, failed, delayed, waiting/.test(e.message), type);
    await assert.rejects(q.getJobCounts(type), InvalidInput, type);
  }
  await assert.rejects(q.getJobs("failed", -1), InvalidInput);
  await assert.rejects(q.getJobs("failed", 0, -5), InvalidInput);

  const counts = await q.getJobCounts();
  assert.equal(counts.waiting, 2);
  assert.equal(counts.delayed, 1);
  assert.equal(counts.running, 1);
  assert.equal(counts.active, 1, "BullMQ's name reads the same");
  assert.equal(counts.completed, 3);
  assert.equal(counts.failed, 2);
  assert.equal(Object.keys(counts).includes("active"), false, "not enumerable: a sum counts no job twice");
  const sum = Object.values(counts).filter((v) => typeof v === "number").reduce((a, b) => a + b, 0);
  assert.equal(sum, 9, "the queue's 9 jobs, each counted once");
  assert.deepEqual(await q.getJobCounts("failed", "waiting", "active"), { failed: 2, waiting: 2, active: 1 });
  assert.equal(await q.getJobCountByTypes("completed", "failed"), 5);

  // a failed job retried leaves failed (and is counted where it is now); a completed one
  // deleted leaves completed: counts are of jobs held now, not ends since the namespace began
  await failed.retry();
  await q.remove("ok1");
  const after = await q.getJobCounts();
  assert.equal(after.failed, 1);
  assert.equal(after.completed, 2);
  assert.equal(after.totals.failed, 2, "ends counted since the namespace began: apart");
  assert.equal(after.totals.finished, 3);
});

test("getFailed finds every failed job behind 1,500 completed ones (several hero_list calls)", async (t) => {
  const { redis, client, later } = await setting(t);
  const w = new Worker("many", async (job) => {
    if (job.script === "fail") throw new UnrecoverableError("no");
    return "ok";
  }, { url: redis.url, concurrency: 50 });
  later(() => w.close());
  const q = new Queue("many", { client });
  await client.submitMany(Array.from({ length: 5 }, (_, i) => ({ type: "many", script: "fail", id: `f${i}` })));
  await waitFor("5 failed", async () => (await q.getJobCounts()).totals.failed === 5);
  for (let i = 0; i < 1500; i += 500) await client.submitMany(Array.from({ length: 500 }, (_, k) => ({ type: "many", script: "ok", id: `ok${i + k}` })));
  await waitFor("1,500 finished", async () => (await q.getJobCounts()).totals.finished === 1500, 60_000);
  assert.deepEqual(ids(await q.getFailed()).sort(), ["f0", "f1", "f2", "f3", "f4"]);
  assert.equal(await q.getFailedCount(), 5);
  assert.equal(await q.getCompletedCount(), 1500);
  assert.equal((await q.getCompleted(0, 9)).length, 10);
  assert.equal(new Set(ids(await q.getCompleted())).size, 1500);
});

test("queue.add(name, data, opts) is BullMQ's: job.name the name, job.data the data; unknown options refused", async (t) => {
  const { redis, client, later } = await setting(t);
  const seen = [];
  const w = new Worker("mail", async (job) => {
    seen.push([job.name, job.data, job.queueName]);
    return "sent";
  }, { url: redis.url });
  later(() => w.close());
  const q = new Queue("mail", { client });
  const job = await q.add("send-welcome", { to: "a@example.com", at: new Date(0) }, { retries: 2, id: "m1" });
  assert.equal(job.id, "m1");
  assert.equal(job.script, "send-welcome");
  assert.equal(job.scriptType, "mail");
  assert.equal(job.retries, 2);
  // the job add() answers, and getJob's, read with BullMQ's names too
  assert.equal(job.name, "send-welcome");
  assert.deepEqual(job.data, { to: "a@example.com", at: new Date(0) });
  assert.equal(job.queueName, "mail");
  assert.equal((await client.wait("m1", 10_000)).output, "sent");
  const got = await q.getJob("m1");
  assert.equal(got.name, "send-welcome");
  assert.deepEqual(got.data, { to: "a@example.com", at: new Date(0) });
  assert.equal(got.returnvalue, "sent");
  assert.equal(got.attemptsMade, 1);
  assert.ok(got.finishedOn >= got.timestamp && got.timestamp > 0, `${got.timestamp} ${got.finishedOn}`);
  assert.equal(got.failedReason, null);
  assert.deepEqual(seen[0], ["send-welcome", { to: "a@example.com", at: new Date(0) }, "mail"]);
  const bulk = await q.addBulk([{ name: "a", data: 1 }, { name: "b", data: [2], opts: { id: "b1" } }]);
  assert.equal(bulk[1], "b1");
  await client.wait(bulk[0], 10_000);
  await client.wait("b1", 10_000);
  assert.deepEqual(seen.slice(1).sort(), [["a", 1, "mail"], ["b", [2], "mail"]]);

  for (const [opts, word] of [
    [{ attempts: 3 }, /attempts.*retries/],
    [{ jobId: "x" }, /jobId.*\bid\b/],
    [{ lifo: true }, /lifo/],
    [{ repeat: { every: 1000 } }, /repeat.*upsertJobScheduler/],
    [{ removeOnComplete: 5 }, /count/],
    [{ dealy: 5 }, /delay/],
    [{ type: "other" }, /queue's name/],
    [{ payload: 1 }, /data argument/],
    [{ script: "x" }, /name argument/],
  ]) {
    await assert.rejects(q.add("n", {}, opts), (e) => e instanceof InvalidInput && word.test(e.message), JSON.stringify(opts));
  }
  await assert.rejects(q.add({ to: "a" }), (e) => e instanceof InvalidInput && /name/.test(e.message), "data where the name goes");
  await assert.rejects(q.addBulk([{ name: "a", data: 1, options: {} }]), InvalidInput);
});
