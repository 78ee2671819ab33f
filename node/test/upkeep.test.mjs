// Nothing waits silently (issue 59): a producer is told once, as a process warning naming the
// namespace and the Redis with its db (3 here), when it submits a job only the queue's upkeep can
// move (delayed, or with retries), or stores a recurring job (whose ticks the upkeep fires,
// protocol 32), where no live process holds the duty lease; with a worker (duties on by
// default), or `hero broker`, running in that db, nothing is said.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Redis } from "ioredis";

import { Client, Queue, Worker } from "../dist/esm/index.js";
import { heroProcess, redisServer, waitFor } from "./helpers.mjs";

const UPKEEP = "no live process does the queue's upkeep";
const TICKS = "recurring jobs' ticks wait until one runs";

let redis, url, db3;
const closers = [];

before(async () => {
  redis = await redisServer();
  url = `${redis.url}/3`;
  db3 = new Redis(url);
});

after(async () => {
  for (const c of closers.reverse()) await c().catch(() => undefined);
  db3?.disconnect();
  redis?.stop();
});

/** The package's warnings emitted while `f` runs (process warnings are emitted on the next
 * tick: this waits for them). */
async function warned(f) {
  const seen = [];
  const listen = (w) => {
    if (w.name === "HeroBrokerWarning") seen.push(w);
  };
  process.on("warning", listen);
  try {
    await f();
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setTimeout(r, 20));
  } finally {
    process.off("warning", listen);
  }
  return seen;
}

async function connect() {
  const c = await Client.connect(url);
  closers.push(() => c.close());
  return c;
}

test("a delayed submit with no one doing the upkeep warns once per client, naming the db", async () => {
  assert.equal(await db3.exists("hero:meta:duties"), 0);
  const c = await connect();
  // a job due now, without retries, needs no upkeep: no look, nothing said
  assert.deepEqual(await warned(() => c.submit({ type: "nobody" })), []);
  const first = await warned(() => c.submit({ type: "nobody", delay: 5000 }));
  assert.equal(first.length, 1, first.map((w) => w.message).join("\n"));
  assert.equal(first[0].code, "HERO_NO_UPKEEP");
  assert.ok(first[0].message.includes(UPKEEP), first[0].message);
  assert.ok(first[0].message.includes("/3"), first[0].message);
  assert.ok(first[0].message.includes("namespace hero"), first[0].message);
  assert.ok(first[0].message.includes("hero broker"), first[0].message);
  // once per client: later submits of the same client say nothing more
  const later = await warned(async () => {
    await c.submit({ type: "nobody", delay: 5000 });
    await c.submitMany([{ type: "nobody", retries: 2 }, { type: "nobody", at: new Date(Date.now() + 60_000) }]);
  });
  assert.deepEqual(later, []);
  // retries alone need the upkeep too (their back-off), told by a client of its own
  const c2 = await connect();
  const retries = await warned(() => c2.submit({ type: "nobody", retries: 1 }));
  assert.equal(retries.length, 1);
  assert.ok(retries[0].message.includes(UPKEEP));
  // a Queue's own client, and a batch's members, are submits like any other
  const c3 = await connect();
  const batch = await warned(() => c3.addToBatch("b1", [{ type: "nobody", delay: 2000 }]));
  assert.equal(batch.length, 1);
});

test("with a worker running (it holds the duty lease) a delayed submit says nothing", async (t) => {
  const w = new Worker("other", async () => "ok", { url });
  t.after(() => w.close());
  w.on("error", () => undefined);
  await w.waitUntilReady();
  await waitFor("a holder of the duty lease in db 3", async () => (await db3.exists("hero:meta:duties")) === 1, 10_000);
  const c = await connect();
  const seen = await warned(async () => {
    await c.submit({ type: "nobody", delay: 5000 });
    await c.submit({ type: "nobody", retries: 3 });
  });
  assert.deepEqual(seen.map((x) => x.message), []);
});

test("a recurring job stored with no one doing the upkeep warns once, naming the job and the db", async () => {
  assert.equal(await db3.exists("hero:meta:duties"), 0);
  const q = new Queue("reports", { url });
  closers.push(() => q.close());
  const first = await warned(() => q.upsertJobScheduler("lonely", { every: 3_600_000 }));
  assert.equal(first.length, 1, first.map((x) => x.message).join("\n"));
  assert.equal(first[0].code, "HERO_NO_UPKEEP");
  for (const part of [UPKEEP, TICKS, "recurring job lonely stored", "/3", "namespace hero", "hero broker"]) {
    assert.ok(first[0].message.includes(part), `${part} in: ${first[0].message}`);
  }
  // stored all the same
  assert.equal((await q.getJobSchedulers()).length, 1);
  // once per queue (its client)
  assert.deepEqual(await warned(() => q.upsertJobScheduler("lonelier", { pattern: "0 * * * *" })), []);
  // one look per client: a client told already (of a delayed job) is not told again
  const c = await connect();
  assert.equal((await warned(() => c.submit({ type: "nobody", delay: 5000 }))).length, 1);
  const shared = new Queue("reports", { client: c });
  assert.deepEqual(await warned(() => shared.upsertJobScheduler("lonely", { every: 3_600_000 })), []);
  // a live broker's fleet entry is no holder of the duties: what the warning looks at is the lease
  const [sec] = await db3.time();
  await db3.hset("hero:meta:fleet", "broker:idle", JSON.stringify({ role: "broker", protocol: 32, expires_ms: Number(sec) * 1000 + 60_000 }));
  const q2 = new Queue("reports", { url });
  closers.push(() => q2.close());
  assert.equal((await warned(() => q2.upsertJobScheduler("lonely", { every: 3_600_000 }))).length, 1);
  await db3.hdel("hero:meta:fleet", "broker:idle");
  for (const name of ["lonely", "lonelier"]) await q.removeJobScheduler(name);
});

test("with a worker running (it holds the duty lease, and so fires the ticks) a recurring job is stored without a word", async (t) => {
  const w = new Worker("other", async () => "ok", { url });
  t.after(() => w.close());
  w.on("error", () => undefined);
  await w.waitUntilReady();
  await waitFor("a holder of the duty lease in db 3", async () => (await db3.exists("hero:meta:duties")) === 1, 10_000);
  const q = new Queue("reports", { url });
  closers.push(() => q.close());
  assert.deepEqual((await warned(() => q.upsertJobScheduler("kept", { every: 3_600_000 }))).map((x) => x.message), []);
  assert.ok(await q.removeJobScheduler("kept"));
});

test("with `hero broker` running a recurring job is stored without a word", async (t) => {
  const broker = heroProcess(url, ["broker", "--http", "off"]);
  t.after(() => broker.stop());
  await waitFor(
    "the broker in the fleet of db 3",
    async () => {
      if (broker.proc.exitCode !== null) throw new Error(`hero broker exited: ${broker.output()}`);
      const [sec] = await db3.time();
      return Object.values(await db3.hgetall("hero:meta:fleet")).some((j) => {
        const v = JSON.parse(j);
        return v.role === "broker" && v.expires_ms >= Number(sec) * 1000;
      });
    },
    20_000,
  );
  // the broker holds the duty lease (and so fires the ticks): nothing is said
  await waitFor("a holder of the duty lease in db 3", async () => (await db3.exists("hero:meta:duties")) === 1, 10_000);
  const q = new Queue("reports", { url });
  closers.push(() => q.close());
  assert.deepEqual((await warned(() => q.upsertJobScheduler("watched", { every: 3_600_000 }))).map((x) => x.message), []);
  const c = await connect();
  assert.deepEqual((await warned(() => c.submit({ type: "nobody", delay: 5000 }))).map((x) => x.message), []);
});
