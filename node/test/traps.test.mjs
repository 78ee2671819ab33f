// The silent traps a BullMQ port met (issue 60, findings 3 and 4), against a real redis-server
// and no broker: `delay: 0` is no delay; `priority` keeps BullMQ's order (or is refused naming
// `level`); `job.name` is the job's name (its script), its queue `job.queueName`; getJobCounts
// counts each job now in one count, ends since the namespace began apart (finding 4, a
// Worker's close and connections: close.test.mjs).
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, InvalidInput, Queue, QueueEvents, Worker } from "../dist/esm/index.js";
import { redisServer, waitFor } from "./helpers.mjs";

/** A redis-server and a client of its own; what `later` is given is closed first, last first
 * (a worker before the Redis it talks to). */
async function setting(t) {
  const redis = await redisServer();
  const client = await Client.connect(redis.url);
  const closing = [];
  t.after(async () => {
    for (const c of closing.reverse()) await c.close();
    await client.close();
    redis.stop();
  });
  return { redis, client, later: (c) => closing.push(c) };
}

test("delay: 0 (or less) is no delay: queued at once, no delayed event, run with no upkeep", async (t) => {
  const { redis, client, later } = await setting(t);
  const events = new QueueEvents("now", { url: redis.url });
  later(events);
  await events.waitUntilReady();
  const seen = [];
  for (const name of ["waiting", "delayed"]) events.on(name, ({ jobId }) => seen.push([name, jobId]));
  const zero = await client.submit({ type: "now", delay: 0 });
  const negative = await client.submit({ type: "now", delay: -250 });
  const past = await client.submit({ type: "now", at: new Date(Date.now() - 60_000) });
  for (const id of [zero, negative, past]) assert.equal(await client.status(id), "dispatched", `${id} is queued at once`);
  assert.equal((await new Queue("now", { client }).getJobCounts()).delayed, 0);
  await waitFor("three waiting events", async () => seen.filter(([e]) => e === "waiting").length === 3);
  assert.deepEqual(seen.filter(([e]) => e === "delayed"), [], "no delayed event");
  // a worker that does no upkeep (nothing promotes delayed jobs) runs them
  const worker = new Worker("now", async () => "ran", { url: redis.url, duties: false });
  later(worker);
  for (const id of [zero, negative, past]) assert.equal((await client.wait(id, 10_000)).output, "ran");
  // nor does it hold back a job with prerequisites
  await client.submit({ type: "now", after: [zero], delay: 0 });
  await assert.rejects(client.submit({ type: "now", after: [zero], delay: 10 }), /cannot also be delayed/);
  // a real delay still waits in the delayed set
  const delayed = await client.submit({ type: "now", delay: 60_000 });
  assert.equal(await client.status(delayed), "waiting");
});

test("priority means what it means in BullMQ: none first, then 1, 2, …; the rest refused naming level", async (t) => {
  const { redis, client, later } = await setting(t);
  const order = [];
  const submitted = [
    ["p4", { priority: 4 }],
    ["p1", { priority: 1 }],
    ["none", {}],
    ["p2", { priority: 2 }],
    ["p0", { priority: 0 }],
    ["level0", { level: 0 }],
    ["p1-again", { priority: 1 }],
  ];
  for (const [id, o] of submitted) await client.submit({ type: "prio", id, ...o });
  // BullMQ's order: hero's level 0 (no BullMQ priority comes before it), then the jobs without a
  // priority (0 is none) in submit order, then 1 (FIFO), 2, 4
  const worker = new Worker("prio", async (job) => void order.push(job.id), { url: redis.url, concurrency: 1 });
  later(worker);
  await waitFor("all seven to run", async () => order.length === 7);
  assert.deepEqual(order, ["level0", "none", "p0", "p1", "p1-again", "p2", "p4"]);
  const p2 = await client.get("p2");
  assert.deepEqual([p2.priority, p2.level], [2, 7], "read back as given, and as hero's level");
  assert.deepEqual([(await client.get("none")).priority, (await client.get("level0")).priority], [0, null]);
  // a priority BullMQ would order differently from any level left is refused, naming level
  for (const p of [5, 10, 2_097_152]) {
    await assert.rejects(client.submit({ type: "prio", priority: p }), (e) => e instanceof InvalidInput && /served after every job without one/.test(e.message) && /level/.test(e.message), `priority ${p}`);
  }
  for (const p of [-1, 1.5, 2_097_153, "high"]) await assert.rejects(client.submit({ type: "prio", priority: p }), /out of range/);
  await assert.rejects(client.submit({ type: "prio", priority: 1, level: 2 }), /not both/);
  await assert.rejects(client.submit({ type: "prio", level: 10 }), /level 10 is out of range/);
  await assert.rejects(new Queue("prio", { client }).upsertJobScheduler("r", { every: 60_000 }, { opts: { priority: 7 } }), /level/);
});

test("job.name is the job's name (BullMQ's queue.add(name, …), hero's script); its queue is job.queueName", async (t) => {
  const { redis, client, later } = await setting(t);
  const seen = [];
  const worker = new Worker("mail", async (job) => void seen.push([job.name, job.queueName, job.type, job.script]), { url: redis.url });
  later(worker);
  await client.wait(await client.submit({ type: "mail", script: "send-welcome" }), 10_000);
  assert.deepEqual(seen, [["send-welcome", "mail", "mail", "send-welcome"]]);
});

test("getJobCounts: each job now in one count; ends since the namespace began are totals apart", async (t) => {
  const { redis, client } = await setting(t);
  const q = new Queue("cnt", { client });
  const worker = new Worker("cnt", async () => "ok", { url: redis.url });
  await client.wait(await client.submit({ type: "cnt", id: "done-once" }), 10_000);
  await worker.close();
  await client.submit({ type: "cnt", id: "queued" });
  await client.submit({ type: "cnt", id: "later", delay: 60_000 });
  // the finished job queued again: one job waiting, one end counted
  await q.requeue("done-once");
  const c = await q.getJobCounts();
  assert.deepEqual({ waiting: c.waiting, delayed: c.delayed, running: c.running }, { waiting: 2, delayed: 1, running: 0 });
  assert.equal(c.waiting + c.delayed + c.running, 3, "three jobs, three counted");
  // completed and failed are the ended jobs held now (BullMQ's meaning), not counters: the
  // requeued job is waiting, not completed
  assert.deepEqual(Object.keys(c).sort(), ["completed", "delayed", "failed", "running", "streams", "totals", "waiting"], "no end counter among the job counts");
  assert.deepEqual([c.completed, c.failed], [0, 0]);
  assert.deepEqual(c.totals, { finished: 1, failed: 0, dead: 0 });
  assert.deepEqual(c.streams[0].totals, { finished: 1, failed: 0, dead: 0 });
});

test("a job stopped while queued leaves waiting at once: counted once, as an end", async (t) => {
  const { client } = await setting(t);
  const q = new Queue("stp", { client });
  const ids = [];
  for (let i = 0; i < 3; i++) ids.push(await client.submit({ type: "stp" }));
  assert.equal(await client.stop(ids[1]), "cancelled");
  const c = await q.getJobCounts();
  // hero_stop deletes its entry (protocol 32): the two others wait, the stopped one is an end
  assert.deepEqual([c.waiting, c.delayed, c.running, c.totals.failed], [2, 0, 0, 1]);
});
