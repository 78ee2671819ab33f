// A minimal worker written from docs/protocol.md's sequences (§5.4) alone, on the package's raw
// layer (one builder per server function, `Protocol`), not its `Worker`: the page must be
// enough for a foreign client. It registers as §5.4.1 says, renews within the lease the page
// says (the shortest of the brokers' and the queue policy's), hands its jobs back at shutdown
// with the call §5.4.6 names, and finds a stop request on its own instance's stop list.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, test } from "node:test";

import { Redis } from "ioredis";

import { Client, Keys } from "../dist/esm/index.js";
import { Protocol } from "../dist/esm/protocol.js";
import { hero, heroProcess, redisServer, waitFor } from "./helpers.mjs";

let redis, broker, client, conn, proto;
const keys = new Keys("hero");

before(async () => {
  redis = await redisServer();
  // the brokers' lease is 30 s: only a queue policy makes it shorter
  broker = heroProcess(redis.url, ["broker", "--http", "off"]);
  client = await Client.connect(redis.url);
  conn = new Redis(redis.url);
  proto = new Protocol(conn, keys);
  await proto.ensureLibrary();
});

after(async () => {
  conn?.disconnect();
  await client?.close();
  await broker?.stop();
  redis?.stop();
});

/** §5.4.1: presence per type, the consumers set; a consumer name of its own instance. */
async function register(type, instance) {
  const consumer = `default:${instance}:${randomBytes(4).toString("hex")}`;
  const now = Date.now();
  const body = JSON.stringify({ pid: process.pid, hostname: "test", started_at: new Date(now).toISOString(), version: "page-client", protocol: "29", capabilities: [type], consumer, concurrency: 1, running: 0, last_heartbeat: new Date(now).toISOString() });
  await conn.set(keys.presence(type, "default", instance), body, "PX", 15_000);
  await conn.zadd(keys.consumers(), now + 15_000, consumer);
  return consumer;
}

/** §5.4.2–3: one job of `type`, its record read and checked against its lease. */
async function fetchOne(type, instance, consumer) {
  const streams = keys.precedence([type], "default", instance);
  const got = await waitFor(`a job of ${type}`, async () => {
    const r = await proto.fetch(streams, consumer, 1);
    return r.jobs.length ? r : null;
  });
  const [index, entry, id] = got.jobs[0];
  const rec = await conn.hgetall(keys.job(id));
  assert.equal(rec.status, "started");
  assert.equal(rec.lease, entry);
  return { id, entry, stream: streams[index] };
}

/** The lease §4 hero_renew says to renew within: the config hash's, unless the job's queue
 * policy sets a shorter one. */
async function leaseOf(type) {
  const brokers = Number((await conn.hget(keys.config(), "lease_ms")) ?? 30_000);
  const policy = JSON.parse((await conn.hget(keys.policy(), type)) ?? "{}");
  return Math.min(brokers, Number(policy.lease_ms ?? Infinity));
}

test("following the page, a job longer than its queue policy's lease is renewed within it and ends once", async () => {
  hero(redis.url, "queue", "set", "pagelease", "--lease", "1s");
  const id = await client.submit({ type: "pagelease", script: "long" });
  const consumer = await register("pagelease", "p1");
  const job = await fetchOne("pagelease", "p1", consumer);
  assert.equal(job.id, id);
  const lease = await leaseOf("pagelease");
  assert.equal(lease, 1000, "the policy's lease, not the brokers' 30 s");
  // a 3.5 s run, renewed every lease/3 as the page says
  const until = Date.now() + 3500;
  while (Date.now() < until) {
    await new Promise((r) => setTimeout(r, lease / 3));
    assert.equal(await proto.renew(job.id, job.stream, job.entry, consumer, null, []), "ok");
  }
  const [answer] = await proto.complete(consumer, [{ id, stream: job.stream, lease: job.entry, outcome: "done", text: "done after 3.5 s", retryAt: 0, reply: "", ranMs: 3500 }]);
  assert.equal(answer, "completed");
  const r = await client.get(id);
  assert.equal(r.status, "finished");
  assert.equal(r.attempts, 1, "never taken back while it ran");
});

test("following the page, a worker shutting down hands its job back and another takes it at once", async () => {
  const id = await client.submit({ type: "pageback", script: "x" });
  const a = await register("pageback", "p2");
  const held = await fetchOne("pageback", "p2", a);
  assert.equal(held.id, id);
  assert.equal(await proto.handBack(held.stream, a), 1);
  const events = await conn.xrevrange(keys.events(), "+", "-", "COUNT", 20);
  assert.ok(events.some(([, f]) => f.includes("recovered") && f.includes("handback") && f.includes(id)), "a recovered event, reason handback");
  const b = await register("pageback", "p3");
  const again = await fetchOne("pageback", "p3", b);
  assert.equal(again.id, id, "the other worker has it, long before the 30 s lease");
  const r = await client.get(id);
  assert.equal(r.attempts, 1, "a hand-back is no attempt");
});

test("following the page, a stop request reaches the stop list of the instance running the job, not another's", async () => {
  const one = await client.submit({ type: "pagestop", script: "x" });
  const two = await client.submit({ type: "pagestop", script: "y" });
  const c1 = await register("pagestop", "s1");
  const c2 = await register("pagestop", "s2");
  const j1 = await fetchOne("pagestop", "s1", c1);
  const j2 = await fetchOne("pagestop", "s2", c2);
  assert.deepEqual([j1.id, j2.id].sort(), [one, two].sort());
  hero(redis.url, "stop", j2.id);
  const list = (instance) => keys.ctlInstance("pagestop", "default", instance);
  assert.deepEqual(await conn.lrange(list("s2"), 0, -1), [j2.id]);
  assert.deepEqual(await conn.lrange(list("s1"), 0, -1), []);
  // and, per §5.4.5, the stopped job is not completed: its record already says so
  assert.equal((await client.get(j2.id)).status, "error");
});

test("following the page, a batch over two streams, interleaved, is answered job by job in the order given", async () => {
  // protocol 34 takes each stream once and the jobs grouped by it: the package groups the batch
  // and puts the answers back in the order it was given
  const a1 = await client.submit({ type: "pagemixa", script: "x" });
  const a2 = await client.submit({ type: "pagemixa", script: "y" });
  const b1 = await client.submit({ type: "pagemixb", script: "z" });
  const ca = await register("pagemixa", "m1");
  const cb = await register("pagemixb", "m2");
  const j1 = await fetchOne("pagemixa", "m1", ca);
  const j2 = await fetchOne("pagemixb", "m2", cb);
  const j3 = await fetchOne("pagemixa", "m1", ca);
  assert.deepEqual([j1.id, j3.id].sort(), [a1, a2].sort());
  assert.equal(j2.id, b1);
  const answers = await proto.complete(ca, [
    { id: j1.id, stream: j1.stream, lease: j1.entry, outcome: "done", text: "one", retryAt: 0, reply: "", ranMs: 3 },
    { id: j2.id, stream: j2.stream, lease: "1-1", outcome: "done", text: "not its lease", retryAt: 0, reply: "", ranMs: 3 },
    { id: j3.id, stream: j3.stream, lease: j3.entry, outcome: "abort", text: "three", retryAt: 0, reply: "", ranMs: 5 },
  ]);
  assert.deepEqual(answers, ["completed", "lease_lost", "completed"]);
  assert.equal((await client.get(j1.id)).status, "finished");
  assert.equal((await client.get(j2.id)).status, "started", "a lost lease records nothing");
  assert.equal((await client.get(j3.id)).status, "error");
});
