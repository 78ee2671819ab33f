// The producer against a real redis-server, a real `hero broker` and the Rust Rhai worker
// (`hero worker`): every submit option written, bad input refused, run and wait, stop, a
// batch's callback, a sharded namespace, and the payload's MessagePack read back.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Client, InvalidInput, JobNotFound, decodePayload, fnv1a, jump, shardOfId } from "../dist/esm/index.js";
import { hero, heroProcess, redisServer, waitFor } from "./helpers.mjs";

let redis, broker, worker, client;

before(async () => {
  redis = await redisServer();
  broker = heroProcess(redis.url, ["broker", "--http", "off"]);
  worker = heroProcess(redis.url, ["worker", "--types", "rhai", "--concurrency", "8"]);
  client = await Client.connect(redis.url);
  await waitFor("the Rust worker to register", async () => (await client.redis.zcard("hero:meta:consumers")) > 0);
});

after(async () => {
  await client?.close();
  await worker?.stop();
  await broker?.stop();
  redis?.stop();
});

test("a submit writes every option and refuses bad input", async () => {
  const id = await client.submit({
    type: "rhai",
    script: "1",
    group: "g1",
    priority: 2,
    timeout: 60_000,
    retries: 3,
    delay: 60_000,
    tags: ["a", "b"],
    env: { K: "v" },
    unique: "once-only",
    limitKey: "customer-1",
    callerId: "tests",
    payload: { n: 1, s: "x", list: [true, null, 2.5] },
  });
  const job = await client.get(id);
  assert.equal(job.scriptType, "rhai");
  assert.equal(job.group, "g1");
  assert.equal(job.priority, 2);
  assert.equal(job.level, 7, "BullMQ's 2: after the jobs without a priority (level 5) and 1 (6)");
  assert.equal(job.timeout, 60_000);
  assert.equal(job.retries, 3);
  assert.deepEqual(job.tags, ["a", "b"]);
  assert.deepEqual(job.env, { K: "v" });
  assert.equal(job.unique, "once-only");
  assert.equal(job.limitKey, "customer-1");
  assert.equal(job.status, "waiting", "delayed a minute");
  assert.deepEqual(decodePayload(job.payload), { n: 1, s: "x", list: [true, null, 2.5] });
  // the uniqueness key is held: the holder answers
  const [again] = await client.submitMany([{ type: "rhai", script: "1", unique: "once-only" }]);
  assert.equal(again.created, false);
  assert.equal(again.duplicateOf, id);
  // bad input, each refused before anything is written
  await assert.rejects(client.submit({ type: "no spaces allowed", script: "1" }), InvalidInput);
  await assert.rejects(client.submit({ type: "rhai", script: "1", priority: 12 }), /priority 12: .*level/);
  await assert.rejects(client.submit({ type: "rhai", script: "1", after: ["x"], delay: 5 }), /cannot also be delayed/);
  await assert.rejects(client.get("never-there"), JobNotFound);
  // the server's own checks name what was wrong
  await assert.rejects(client.submit({ type: "rhai", script: "1", id: "bad id" }), InvalidInput);
});

test("run waits for the job's result; stop cancels a queued job", async () => {
  const r = await client.run({ type: "rhai", script: "40 + 2" }, 20_000);
  assert.deepEqual([r.status, r.output, r.ok], ["finished", "42", true]);
  const failed = await client.run({ type: "rhai", script: "throw \"no\"" }, 20_000);
  assert.equal(failed.ok, false);
  const later = await client.submit({ type: "rhai", script: "1", delay: 60_000 });
  assert.equal(await client.stop(later), "cancelled");
  assert.equal(await client.status(later), "error");
});

test("a batch calls back once every member ended", async () => {
  const members = await client.addToBatch("nightly", [1, 2, 3].map((n) => ({ type: "rhai", script: `${n}` })));
  assert.equal(members.length, 3);
  await client.closeBatch("nightly", { onComplete: { type: "rhai", script: "\"all done\"" } });
  const info = await waitFor("the batch to be done", async () => {
    const b = await client.batch("nightly");
    return b?.state === "done" ? b : undefined;
  });
  assert.equal(info.finished, 3);
  const cb = await client.wait(info.completeId, 20_000);
  assert.equal(cb.output, "all done");
});

test("a sharded namespace: jobs spread over the shards, each on its own, all run", async () => {
  // the same five homes as the Rust and Python clients
  const homes = [["k1", 4], ["acct-7", 8], ["u3", 4], ["customer-42", 64], ["x", 2]].map(([k, n]) => jump(fnv1a(k), n));
  assert.deepEqual(homes, [2, 2, 3, 61, 1]);
  hero(redis.url, "shards", "set", "3");
  assert.equal((await client.shardMap(true)).k, 3);
  // the worker started at K = 1 serves the shards added since, within 2 s
  const answers = await client.submitMany(Array.from({ length: 30 }, (_, i) => ({ type: "rhai", script: `${i}` })));
  const shards = new Set(answers.map((a) => shardOfId(a.id) ?? 0));
  assert.deepEqual([...shards].sort(), [0, 1, 2]);
  const routed = await client.submitMany(Array.from({ length: 5 }, () => ({ type: "rhai", script: "7", route: "acct-7" })));
  assert.equal(new Set(routed.map((a) => shardOfId(a.id) ?? 0)).size, 1, "one route key, one shard");
  for (const a of [...answers, ...routed]) {
    const r = await client.wait(a.id, 20_000);
    assert.equal(r.status, "finished", a.id);
  }
  // the Rust CLI reads a Node-submitted job where it is
  assert.match(hero(redis.url, "status", answers[1].id), /finished/);
  // producers that live for one job each (a script, a serverless function) spread over every
  // shard too: each client starts its turn at a random shard (missing one of 3 in 30 tries:
  // 3 x (2/3)^30, about 2 in 100,000)
  const oneEach = new Set();
  for (let i = 0; i < 30; i++) {
    const short = await Client.connect(redis.url);
    oneEach.add(shardOfId(await short.submit({ type: "rhai", script: `${i}` })) ?? 0);
    await short.close();
  }
  assert.deepEqual([...oneEach].sort(), [0, 1, 2]);
  hero(redis.url, "shards", "set", "1");
});
