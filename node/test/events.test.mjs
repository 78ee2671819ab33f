// Job events (`QueueEvents`, BullMQ's names) and `wait` against a real redis-server, a real
// `hero broker` and Rust workers (`hero worker`): every job of a 10,000-job run seen ending exactly
// once with its output, through retries and a worker's SIGKILL; a subscriber whose event loop was
// held past the log's cap gets a `gap` with the count; the log off refuses a subscription and
// `wait` still works; `wait` after a plain submit returns within milliseconds of the end.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { test } from "node:test";

import { Client, EventLogOff, InvalidInput, QueueEvents } from "../dist/esm/index.js";
import { heroProcess, redisServer, ROOT, waitFor } from "./helpers.mjs";

async function rhaiWorker(client, url) {
  const before = await client.redis.zcard("hero:meta:consumers");
  const w = heroProcess(url, ["worker", "--types", "rhai", "--concurrency", "8"]);
  await waitFor("the worker to register", async () => (await client.redis.zcard("hero:meta:consumers")) > before);
  return w;
}

test("QueueEvents sees every job of a 10,000-job run end once, with its output, through retries and a SIGKILL", async () => {
  const redis = await redisServer();
  const broker = heroProcess(redis.url, ["broker", "--http", "off", "--lease-ms", "2000"]);
  const client = await Client.connect(redis.url);
  const events = new QueueEvents("rhai", { url: redis.url });
  await events.waitUntilReady();
  const ends = new Map();
  let retried = 0;
  let stalled = 0;
  const end = (kind) => ({ jobId, returnvalue, failedReason }) => {
    if (!ends.has(jobId)) ends.set(jobId, []);
    ends.get(jobId).push([kind, returnvalue ?? failedReason]);
  };
  events.on("completed", end("completed"));
  events.on("failed", end("failed"));
  // a failing job's second attempt follows its retry or, when the SIGKILL took its first
  // attempt, its recovery (which spends the attempt, so no `retried` follows)
  const secondAttempt = new Set();
  events.on("retried", ({ jobId }) => (retried++, secondAttempt.add(jobId)));
  events.on("stalled", ({ jobId }) => (stalled++, secondAttempt.add(jobId)));
  events.on("gap", (g) => assert.fail(`a gap in a subscription that kept up: ${JSON.stringify(g)}`));
  const a = await rhaiWorker(client, redis.url);
  const b = await rhaiWorker(client, redis.url);
  const n = 10_000;
  try {
    for (let i = 0; i < n; i += 500) {
      // every 100th job throws: retried once, then it fails
      await client.submitMany(
        Array.from({ length: 500 }, (_, k) => i + k).map((j) => ({ type: "rhai", id: `n${j}`, retries: 1, script: j % 100 === 0 ? 'throw "on purpose"' : `let x = 0; for k in 0..2000 { x += k; } ${j} * 2` })),
      );
      if (i === n / 2) a.proc.kill("SIGKILL"); // mid-run, with jobs in its hands
      await new Promise((r) => setImmediate(r));
    }
    await waitFor("every job's end", async () => ends.size >= n, 300_000);
    await new Promise((r) => setTimeout(r, 500));
  } finally {
    await events.close();
    a.proc.kill("SIGKILL");
    await b.stop();
    await broker.stop();
    await client.close();
    redis.stop();
  }
  assert.deepEqual([...ends].filter(([, v]) => v.length !== 1), [], "each job ended once");
  assert.equal([...ends.values()].filter((v) => v[0][0] === "failed").length, n / 100);
  const notAgain = Array.from({ length: n / 100 }, (_, k) => `n${k * 100}`).filter((id) => !secondAttempt.has(id));
  assert.deepEqual(notAgain, [], "each failing job was retried or recovered");
  for (let i = 1; i < n; i += 97) if (i % 100) assert.deepEqual(ends.get(`n${i}`), [["completed", String(i * 2)]]);
  console.log(`10,000 jobs: ${retried} retried, ${stalled} stalled, each end seen once`);
  assert.ok(stalled > 0, "the killed worker's jobs were recovered");
});

test("a subscriber held past the log's cap gets a gap with the count, then keeps up", async () => {
  const redis = await redisServer();
  const client = await Client.connect(redis.url);
  await client.redis.hset("hero:meta:config", "events_max", "100");
  const events = new QueueEvents("rhai", { url: redis.url });
  await events.waitUntilReady();
  let seen = 0;
  let missed = 0;
  let gaps = 0;
  events.on("waiting", () => seen++);
  events.on("gap", ({ missed: m }) => {
    assert.notEqual(m, null);
    missed += m;
    gaps++;
  });
  try {
    // another process submits 2,000 jobs one a call while this event loop is held (execFileSync)
    const script = `import { Client } from ${JSON.stringify(join(ROOT, "node", "dist", "esm", "index.js"))};
      const c = await Client.connect(${JSON.stringify(redis.url)});
      for (let i = 0; i < 2000; i++) await c.submit({ type: "rhai", script: "1", id: "g" + i });
      await c.close();`;
    execFileSync(process.execPath, ["--input-type=module", "-e", script], { timeout: 120_000 });
    await waitFor("every submit seen or counted", async () => seen + missed >= 2000, 30_000);
    assert.equal(seen + missed, 2000);
    assert.ok(gaps >= 1 && missed > 0, `${gaps} gaps, ${missed} missed`);
    await client.submit({ type: "rhai", script: "1", id: "after" });
    await waitFor("the next event", async () => seen + missed === 2001, 10_000);
  } finally {
    await events.close();
    await client.close();
    redis.stop();
  }
});

test("options a port from BullMQ would carry are refused by name; the log off refuses a subscription; wait still works", async () => {
  assert.throws(() => new QueueEvents("rhai", { connection: {} }), (e) => e instanceof InvalidInput && /connection/.test(e.message) && /url/.test(e.message));
  assert.throws(() => new QueueEvents("rhai", { lastEventId: "yesterday" }), InvalidInput);
  const redis = await redisServer();
  const client = await Client.connect(redis.url);
  await client.redis.hset("hero:meta:config", "events_max", "0");
  const events = new QueueEvents("rhai", { url: redis.url, autorun: false });
  await assert.rejects(events.waitUntilReady(), (e) => e instanceof EventLogOff && /events_max/.test(e.message));
  await events.close();
  const w = await rhaiWorker(client, redis.url);
  try {
    const r = await client.wait(await client.submit({ type: "rhai", script: "40 + 2" }), 20_000);
    assert.deepEqual([r.status, r.output], ["finished", "42"]);
  } finally {
    await w.stop();
    await client.close();
    redis.stop();
  }
});

test("wait after a plain submit returns within milliseconds of the job's end, many waits on one connection", async () => {
  const redis = await redisServer();
  const client = await Client.connect(redis.url);
  const w = await rhaiWorker(client, redis.url);
  try {
    const lag = async () => {
      // a Rhai busy loop of a few hundred ms
      const id = await client.submit({ type: "rhai", script: "let x = 0; for i in 0..200000 { x += i; } x" });
      const r = await client.wait(id, 20_000);
      const back = Date.now();
      assert.equal(r.status, "finished");
      return back - Date.parse((await client.get(id)).finishedAt);
    };
    let worst = 0;
    for (let i = 0; i < 10; i++) worst = Math.max(worst, await lag());
    const connections = async () => (await client.redis.client("LIST")).trim().split("\n").length;
    const baseline = await connections();
    const pending = Promise.all(Array.from({ length: 20 }, lag));
    await new Promise((r) => setTimeout(r, 100));
    const during = await connections();
    worst = Math.max(worst, ...(await pending));
    console.log(`worst wait after the end: ${worst} ms; connections ${baseline} before 20 waits, ${during} during`);
    assert.ok(worst < 150, `wait returned ${worst} ms after the end`);
    assert.ok(during <= baseline, `20 waits opened ${during - baseline} connections`);
  } finally {
    await w.stop();
    await client.close();
    redis.stop();
  }
});

test("QueueEvents resumes after a lastEventId, and \"0\" replays what the log keeps", async () => {
  const redis = await redisServer();
  const client = await Client.connect(redis.url);
  try {
    for (let i = 0; i < 3; i++) await client.submit({ type: "rhai", script: "1", id: `r${i}` });
    const all = new QueueEvents("rhai", { url: redis.url, lastEventId: "0" });
    const seen = [];
    all.on("waiting", ({ jobId }, id) => seen.push([jobId, id]));
    await waitFor("the three submits", async () => seen.length >= 3, 10_000);
    await all.close();
    assert.deepEqual(seen.map((s) => s[0]), ["r0", "r1", "r2"]);
    const resumed = new QueueEvents("rhai", { url: redis.url, lastEventId: seen[0][1] });
    const first = await new Promise((resolve) => resumed.once("waiting", ({ jobId }) => resolve(jobId)));
    await resumed.close();
    assert.equal(first, "r1");
  } finally {
    await client.close();
    redis.stop();
  }
});
