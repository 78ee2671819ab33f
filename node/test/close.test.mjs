// A Worker's close and connections, as a BullMQ port met them (issue 60, finding 4), against a
// real redis-server and no broker: an idle Worker's close() waits for no poll interval nor a
// blocked read's timeout (it was 0.75-1.2 s), and a Worker holds three connections a shard
// (it held four; the stop lists' blocking read is a protocol matter and stays).
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, Worker } from "../dist/esm/index.js";
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

test("an idle Worker's close() waits for no poll interval nor a blocked read's timeout", async (t) => {
  const { redis, client, later } = await setting(t);
  for (let i = 0; i < 3; i++) {
    const worker = new Worker("idle", async () => "ok", { url: redis.url });
    later(worker);
    await worker.waitUntilReady();
    // at a different point of the blocked reads' second each time
    await new Promise((r) => setTimeout(r, 250 + 300 * i));
    const t0 = performance.now();
    await worker.close();
    const took = performance.now() - t0;
    // idle, it waits for its few calls to Redis only (was 0.75-1.2 s: a blocked read's second)
    assert.ok(took < 400, `close took ${Math.round(took)} ms`);
  }
  // the interrupted reads took nothing: a job submitted now runs on the next worker
  const id = await client.submit({ type: "idle" });
  const worker = new Worker("idle", async () => "ran", { url: redis.url });
  later(worker);
  assert.equal((await client.wait(id, 10_000)).output, "ran");
});

test("a Worker holds three connections a shard, all closed by close()", async (t) => {
  const { redis, client, later } = await setting(t);
  const connections = async () => (await client.redis.call("CLIENT", "LIST")).trim().split("\n").length;
  const before = await connections();
  const worker = new Worker("conn", async () => "ok", { url: redis.url, concurrency: 8 });
  later(worker);
  await worker.waitUntilReady();
  // (no client.wait: its event follower would be one more connection)
  const id = await client.submit({ type: "conn" });
  await waitFor("the job to run", async () => (await client.status(id)) === "finished");
  // the worker's own (its calls), its stop lists' blocking read, its fetch loops' shared wait
  await waitFor("its connections to open", async () => (await connections()) - before >= 3, 5000);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal((await connections()) - before, 3);
  await worker.close();
  await waitFor("its connections to close", async () => (await connections()) === before, 5000);
});
