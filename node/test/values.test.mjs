// Results as values (protocol 33, issue 60): a handler's return is read back of its own type by
// every reader (the worker's `completed` event, QueueEvents' `returnvalue`, `client.get(id)`'s
// `output` / `returnvalue`, `client.wait`, `queue.getJob`, `getChildrenValues` and
// `client.children`), while the record's `output` keeps the JSON text older readers show; a
// string is written as text only, as before, and a record a foreign worker wrote with text only
// reads as that string. A value MessagePack cannot carry ends the job naming it.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, Queue, QueueEvents, Worker } from "../dist/esm/index.js";
import { redisServer, waitFor } from "./helpers.mjs";

// script -> [what the handler returns, what every reader gives, the record's output text, a value field written]
const CASES = {
  object: [{ a: 1, nested: { b: [1, 2] } }, { a: 1, nested: { b: [1, 2] } }, '{"a":1,"nested":{"b":[1,2]}}', true],
  array: [[1, "two", null], [1, "two", null], '[1,"two",null]', true],
  null: [null, null, "null", true],
  undefined: [undefined, null, "null", true],
  date: [new Date("2026-01-02T03:04:05.678Z"), new Date("2026-01-02T03:04:05.678Z"), '"2026-01-02T03:04:05.678Z"', true],
  buffer: [Buffer.from([0, 1, 2, 255]), Buffer.from([0, 1, 2, 255]), '"AAEC/w=="', true],
  number: [42.5, 42.5, "42.5", true],
  zero: [0, 0, "0", true],
  bigint: [2n ** 60n, 2n ** 60n, "1152921504606846976", true],
  map: [new Map([[1, "one"]]), new Map([[1, "one"]]), '{"1":"one"}', true],
  jsonstring: ['{"a":1}', '{"a":1}', '{"a":1}', false],
  empty: ["", "", "", false],
};

/** A redis-server and a client; `later(f)` closes what a test opened, last opened first, before
 * the server stops. */
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

test("a handler's return reads back of its own type everywhere; output keeps its JSON text", async (t) => {
  const { redis, client, later } = await setting(t);
  const events = new QueueEvents("vals", { url: redis.url });
  await events.waitUntilReady();
  later(() => events.close());
  const fromEvents = new Map();
  events.on("completed", ({ jobId, returnvalue }) => fromEvents.set(jobId, returnvalue));
  const fromWorker = new Map();
  const w = new Worker("vals", async (job) => CASES[job.script][0], { url: redis.url, concurrency: 4 });
  w.on("completed", (job, result) => fromWorker.set(job.id, result));
  later(() => w.close());
  const q = new Queue("vals", { client });
  for (const script of Object.keys(CASES)) await client.submit({ type: "vals", script, id: `v-${script}` });
  for (const [script, [returned, read, text, hasValue]] of Object.entries(CASES)) {
    const id = `v-${script}`;
    const r = await client.wait(id, 10_000);
    assert.equal(r.status, "finished", script);
    assert.deepEqual(r.output, read, `${script}: client.wait().output`);
    assert.deepEqual(r.returnvalue, read, `${script}: client.wait().returnvalue`);
    assert.equal(r.outputText, text, `${script}: outputText`);
    const job = await client.get(id);
    assert.deepEqual(job.output, read, `${script}: client.get().output`);
    assert.deepEqual(job.returnvalue, read, `${script}: job.returnvalue`);
    assert.deepEqual((await q.getJob(id)).returnvalue, read, `${script}: queue.getJob().returnvalue`);
    // older readers: the record's output is the JSON text; the value is its own binary field
    assert.equal(await client.redis.hget(`hero:job:${id}`, "output"), text, `${script}: the stored output`);
    assert.equal(await client.redis.hexists(`hero:job:${id}`, "value"), hasValue ? 1 : 0, `${script}: value written`);
    await waitFor(`${script}'s completed event`, async () => fromEvents.has(id), 10_000);
    assert.deepEqual(fromEvents.get(id), read, `${script}: QueueEvents returnvalue`);
    if (script !== "undefined") assert.deepEqual(fromWorker.get(id), returned, `${script}: the worker's completed event`);
  }
  assert.ok((await client.get("v-date")).output instanceof Date);
  assert.ok(Buffer.isBuffer((await client.get("v-buffer")).output));
  assert.equal(typeof (await client.get("v-jsonstring")).output, "string");
});

test("a record with only output text (a foreign or older worker's) reads as the string", async (t) => {
  const { client } = await setting(t);
  await client.redis.hset("hero:job:foreign", "id", "foreign", "status", "finished", "script", "x", "script_type", "vals", "output", '{"a":1}', "created_at", new Date().toISOString());
  const job = await client.get("foreign");
  assert.equal(job.output, '{"a":1}');
  assert.equal(job.returnvalue, '{"a":1}');
  assert.equal(job.outputText, '{"a":1}');
  assert.equal((await new Queue("vals", { client }).getJob("foreign")).returnvalue, '{"a":1}');
  assert.equal((await client.wait("foreign", 1000)).output, '{"a":1}');
  await client.redis.hset("hero:job:bare", "id", "bare", "status", "started", "script", "x", "script_type", "vals");
  assert.equal((await client.get("bare")).output, null, "no output: null");
});

test("getChildrenValues and client.children give each child's value (its text when it has none)", async (t) => {
  const { redis, client, later } = await setting(t);
  let seen = null;
  const w = new Worker(
    "flow",
    async (job) => {
      if (job.script === "parent") {
        seen = await job.getChildrenValues();
        return "parent done";
      }
      return CASES[job.script][0];
    },
    { url: redis.url, concurrency: 4 },
  );
  later(() => w.close());
  const children = ["object", "null", "undefined", "date", "buffer", "jsonstring"];
  await client.submitMany([
    ...children.map((s) => ({ type: "flow", script: s, id: `c-${s}` })),
    { type: "flow", script: "parent", id: "p", after: children.map((s) => `c-${s}`) },
  ]);
  assert.equal((await client.wait("p", 10_000)).status, "finished");
  const want = Object.fromEntries(children.map((s) => [`c-${s}`, CASES[s][1]]));
  assert.deepEqual(seen, want);
  assert.ok(seen["c-date"] instanceof Date);
  const kept = await client.children("p");
  for (const s of children) {
    assert.deepEqual(kept[`c-${s}`].output, CASES[s][1], s);
    assert.equal(kept[`c-${s}`].outputText, CASES[s][2], s);
  }
});

test("a value MessagePack cannot carry ends the job, naming it", async (t) => {
  const { redis, client, later } = await setting(t);
  const failed = [];
  const w = new Worker(
    "bad",
    async (job) => (job.script === "fn" ? { ok: true, call: () => 1 } : job.script === "set" ? new Set([1]) : Symbol("s")),
    { url: redis.url },
  );
  w.on("failed", (_job, e) => failed.push(e.message));
  later(() => w.close());
  for (const [script, word] of [["fn", /\.call is a function/], ["set", /is a Set/], ["symbol", /is a symbol/]]) {
    const r = await client.run({ type: "bad", script, retries: 3 }, 10_000);
    assert.equal(r.status, "error", script);
    assert.match(r.error, word, script);
    assert.match(r.error, /the value the handler returned/, script);
    assert.equal((await client.get(r.id)).attempts, 1, `${script}: not retried (no retry changes what it returns)`);
  }
  assert.equal(failed.length, 3);
});
