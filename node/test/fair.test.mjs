// Fair share (issue 52) from Node, against a real redis-server, `hero broker` and a Node
// worker: the policy's fair, fairWeights and keyConcurrency set and shown as the CLI shows
// them; getKeys answering what `hero queues --keys` answers; one key paused with pauseKey
// waits while the others run (each key at most keyConcurrency at once), and runs once
// resumeKey releases it; the same over the shards of a sharded namespace; and what cannot
// be served fairly refused with a clear error.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, InvalidInput, Queue, Worker } from "../dist/esm/index.js";
import { hero, heroProcess, redisServer, waitFor } from "./helpers.mjs";

/** A redis-server, a broker and a client; `defer(close)` closes a worker or a queue before
 * they go (last deferred first). */
async function setting(t) {
  const redis = await redisServer();
  const broker = heroProcess(redis.url, ["broker", "--http", "off"]);
  const client = await Client.connect(redis.url);
  const closers = [];
  t.after(async () => {
    for (const close of closers.reverse()) await close();
    await broker.stop();
    await client.close();
    redis.stop();
  });
  return { redis, client, defer: (close) => closers.push(close) };
}

const keyed = (type, key, n) => Array.from({ length: n }, (_, i) => ({ type, script: "x", id: `${key}-${i}`, limitKey: key }));

/** A Node worker of `type` recording the ids it starts, in order, and the most of each key
 * (the id's part before '-') running at once. */
function worker(defer, url, type, concurrency, ms) {
  const seen = { order: [], running: {}, most: {} };
  const w = new Worker(
    type,
    async (job) => {
      const key = job.id.split("-")[0];
      seen.order.push(job.id);
      seen.running[key] = (seen.running[key] ?? 0) + 1;
      seen.most[key] = Math.max(seen.most[key] ?? 0, seen.running[key]);
      await new Promise((r) => setTimeout(r, ms));
      seen.running[key] -= 1;
      return job.id;
    },
    { url, concurrency, autorun: false },
  );
  w.on("error", () => undefined);
  defer(() => w.close());
  return { w, seen };
}

// what a key view says, without its paging (read, next)
const shape = ({ keys, top, held }) => ({ keys, top, held });

const keysCli = (url, queue) => {
  const v = JSON.parse(hero(url, "--json", "queues", "--keys", queue));
  delete v.queue;
  return v;
};

test("a fair queue's policy; getKeys; a paused key waits while the others run, each key within its concurrency", async (t) => {
  const { redis, client, defer } = await setting(t);
  const q = new Queue("nf", { url: redis.url });
  defer(() => q.close());
  const p = await q.setPolicy({ fair: true, keyConcurrency: 2, fairWeights: { B: 2 } });
  assert.deepEqual(p, { fair: true, key_concurrency: 2, fair_weights: { B: 2 } });
  assert.deepEqual(await q.getPolicy(), p);
  const shown = JSON.parse(hero(redis.url, "--json", "queue", "show", "nf"));
  assert.deepEqual(shown.policies, [{ queue: "nf", policy: p }]);
  // the other fields stay as they were set
  assert.deepEqual(await q.setPolicy({ retries: 1 }), { ...p, retries: 1 });

  assert.equal(await q.pauseKey("A"), 0, "A has no jobs yet");
  await client.submitMany([...keyed("nf", "A", 10), ...keyed("nf", "B", 10), ...keyed("nf", "C", 5)]);
  const keys = await q.getKeys();
  assert.equal(keys.read, 3);
  assert.equal(keys.next, null);
  assert.deepEqual(shape(keys), {
    keys: 3,
    top: [
      { key: "A", waiting: 10 },
      { key: "B", waiting: 10 },
      { key: "C", waiting: 5 },
    ],
    held: ["nf|A"],
  });
  assert.deepEqual(keys, keysCli(redis.url, "nf"), "the CLI answers the same");
  assert.deepEqual(shape(await q.getKeys({ top: 1 })), { keys: 3, top: [{ key: "A", waiting: 10 }], held: ["nf|A"] });

  const { w, seen } = worker(defer, redis.url, "nf", 8, 40);
  w.run();
  // 40 ms each, two of a key at once: well under a second, unless the worker, held back by a
  // key's concurrency, slept on its blocked read instead of looking again soon
  await waitFor("B's and C's 15 jobs to finish", async () => (await q.getJobCounts()).totals.finished === 15, 3000);
  // what the worker finds on a few more fetches
  await new Promise((r) => setTimeout(r, 400));
  assert.equal(seen.order.length, 15, `none of A's started: ${seen.order}`);
  assert.ok(seen.order.every((id) => !id.startsWith("A-")), String(seen.order));
  assert.deepEqual(seen.most, { B: 2, C: 2 }, "each key ran at most 2 at once, and did reach 2");
  assert.deepEqual(shape(await q.getKeys()), { keys: 1, top: [{ key: "A", waiting: 10 }], held: ["nf|A"] });
  assert.equal((await q.getJobCounts()).waiting, 10, "A's jobs are counted as waiting");

  assert.equal(await q.resumeKey("A"), 1, "A has jobs in one work stream");
  await waitFor("A's jobs to finish once resumed", async () => (await q.getJobCounts()).totals.finished === 25);
  assert.equal(seen.most.A, 2);
  assert.deepEqual([...new Set(seen.order)].length, 25, "every job ran once");
  assert.deepEqual(shape(await q.getKeys()), { keys: 0, top: [], held: [] });
});

test("what cannot be served fairly is refused; options are strict", async (t) => {
  const { redis, defer } = await setting(t);
  const q = new Queue("nr", { url: redis.url });
  const g = new Queue("nr", { url: redis.url, group: "io" });
  defer(() => Promise.all([q.close(), g.close()]));
  // a key's concurrency needs the gate; a key of a first in, first out queue cannot be held
  await assert.rejects(q.setPolicy({ keyConcurrency: 2 }), (e) => e instanceof InvalidInput && /needs fair share/.test(e.message));
  await assert.rejects(q.pauseKey("A"), (e) => e instanceof InvalidInput && /is not fair/.test(e.message));
  await assert.rejects(q.resumeKey("A"), (e) => e instanceof InvalidInput && /is not fair/.test(e.message));
  assert.deepEqual(await q.getPolicy(), {}, "nothing was written");
  // fair is turned off by clearing the policy
  await assert.rejects(q.setPolicy({ fair: false }), (e) => e instanceof InvalidInput && /clear its policy/.test(e.message));
  for (const [bad, says] of [
    [{ fair: "yes" }, /fair "yes"/],
    [{ fairWeights: { gold: 0 } }, /gold/],
    [{ fairWeights: { gold: 1.5 } }, /gold/],
    [{ fairWeights: { gold: "3" } }, /gold/],
    [{ fairWeights: { "a b": 1 } }, /"a b"/],
    [{ fairWeights: { "": 1 } }, /name the limit key/],
    [{ fairWeights: [3] }, /object of limit key/],
    [{ keyConcurrency: 0 }, /keyConcurrency/],
    [{ fairness: true }, /"fairness" is not one hero knows/],
    [{ key_concurrency: 2 }, /"key_concurrency" is not one hero knows; use keyConcurrency/],
  ]) {
    await assert.rejects(q.setPolicy(bad), (e) => e instanceof InvalidInput && says.test(e.message), JSON.stringify(bad));
  }
  await assert.rejects(q.getKeys({ limit: 5 }), (e) => e instanceof InvalidInput && /"limit" is not one hero knows; use top/.test(e.message));
  await assert.rejects(q.getKeys({ top: -1 }), InvalidInput);
  await assert.rejects(q.pauseKey(7), InvalidInput);
  // a group's key concurrency under its type's fair share; a key of the group held
  await q.setPolicy({ fair: true });
  assert.deepEqual(await g.setPolicy({ keyConcurrency: 1 }), { key_concurrency: 1 });
  assert.equal(await g.pauseKey("A"), 0);
  assert.deepEqual(shape(await q.getKeys()), { keys: 0, top: [], held: ["nr/io|A"] }, "a key held under the queue");
  assert.equal(await g.resumeKey("A"), 0);
  assert.equal(await q.clearPolicy(), true);
  assert.deepEqual(await q.getPolicy(), {});
});

test("getKeys, pauseKey and resumeKey reach every shard of a sharded namespace", async (t) => {
  const { redis, client, defer } = await setting(t);
  hero(redis.url, "shards", "set", "3");
  await client.shardMap(true);
  const q = new Queue("nz", { url: redis.url });
  defer(() => q.close());
  await q.setPolicy({ fair: true });
  const jobs = [];
  for (const key of ["k0", "k1", "k2", "k3", "k4", "k5"]) jobs.push(...keyed("nz", key, 3));
  jobs.push(...keyed("nz", "big", 7));
  await client.submitMany(jobs);
  assert.ok(new Set((await q.getJobCounts()).streams.map((s) => s.shard)).size > 1, "the keys are on more than one shard");
  const keys = await q.getKeys({ top: 3 });
  assert.deepEqual(shape(keys), {
    keys: 7,
    top: [
      { key: "big", waiting: 7 },
      { key: "k0", waiting: 3 },
      { key: "k1", waiting: 3 },
    ],
    held: [],
  });
  assert.equal(await q.pauseKey("big"), 1, "big's jobs are in one stream, on its home shard");
  assert.deepEqual((await q.getKeys({ top: 1 })).held, ["nz|big"], "held on every shard, listed once");
  const { w, seen } = worker(defer, redis.url, "nz", 4, 0);
  w.run();
  await waitFor("the other keys' 18 jobs to finish", async () => (await q.getJobCounts()).totals.finished === 18);
  await new Promise((r) => setTimeout(r, 400));
  assert.ok(seen.order.every((id) => !id.startsWith("big-")), String(seen.order));
  assert.deepEqual(shape(await q.getKeys()), { keys: 1, top: [{ key: "big", waiting: 7 }], held: ["nz|big"] });
  assert.deepEqual(await q.getKeys(), keysCli(redis.url, "nz"));
  assert.equal(await q.resumeKey("big"), 1);
  await waitFor("big's jobs to finish", async () => (await q.getJobCounts()).totals.finished === 25);
  assert.deepEqual(shape(await q.getKeys()), { keys: 0, top: [], held: [] });
});
