// The queue's upkeep with Node workers alone (issue 59): no `hero broker` runs in this file. The
// workers take turns at `hero_duties` (one holder of the duty lease at a time) and so promote
// delayed jobs and retries, recover a SIGKILLed worker's job, end a job past its time limit that
// its own (stopped) worker cannot end, and delete ended jobs past their retention, all in the db
// their URL names (3), nothing in db 0. `{ duties: false }` opts out; close() hands the lease back.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, test } from "node:test";

import { Redis } from "ioredis";

import { Client, InvalidInput, JobNotFound, Worker } from "../dist/esm/index.js";
import { redisServer, waitFor, ROOT } from "./helpers.mjs";

let redis, url, client, db3, db0;
const children = [];

before(async () => {
  redis = await redisServer();
  url = `${redis.url}/3`;
  client = await Client.connect(url);
  db3 = new Redis(url);
  db0 = new Redis(redis.url);
});

after(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  await client?.close();
  db3?.disconnect();
  db0?.disconnect();
  redis?.stop();
});

/** A Node worker of `type` in a process of its own (so it can be stopped or killed -9): its
 * handler waits `job.script` ms, ignoring its abort signal (a stopped process ends nothing). It
 * prints `ready` and `active <id>`. */
function child(type, opts) {
  const code = `
    import { Worker } from ${JSON.stringify(ROOT + "/node/dist/esm/index.js")};
    const w = new Worker(${JSON.stringify(type)}, async (job) => { await new Promise((r) => setTimeout(r, Number(job.script))); return "child"; },
      { url: process.env.HERO_REDIS_URL, ...${JSON.stringify(opts)} });
    w.on("error", () => undefined);
    w.on("ready", () => console.log("ready"));
    w.on("active", (job) => console.log("active " + job.id));`;
  const p = spawn(process.execPath, ["--input-type=module", "-e", code], {
    env: { ...process.env, HERO_REDIS_URL: url },
    stdio: ["ignore", "pipe", "inherit"],
  });
  p.out = "";
  p.stdout.on("data", (d) => (p.out += d));
  children.push(p);
  return p;
}

/** Polls until job `id` ended (finished or error); its record. */
async function ended(id, ms = 20_000) {
  return waitFor(`job ${id} to end`, async () => {
    const j = await client.get(id);
    return j.status === "finished" || j.status === "error" ? j : undefined;
  }, ms);
}

/** `w`, closed when test `t` ends however it ends (a failed test leaves no holder behind). */
function closing(t, w) {
  t.after(() => w.close());
  return w;
}

test("a delayed job runs once its delay passed and not before, promoted by a worker", async (t) => {
  let ranAt = 0;
  const w = closing(t, new Worker("later", async () => {
    ranAt = Date.now();
    return "on time";
  }, { url }));
  await w.waitUntilReady();
  const t0 = Date.now();
  const id = await client.submit({ type: "later", delay: 1500 });
  // a delayed job waits in the delayed set until its time
  assert.equal(await client.status(id), "waiting");
  assert.notEqual(await db3.zscore("hero:meta:delayed", id), null);
  const j = await ended(id);
  assert.deepEqual([j.status, j.output], ["finished", "on time"]);
  // Redis's clock and this machine's are the same clock here (the offset the heartbeat measures
  // is a round trip's half at most)
  assert.ok(ranAt - t0 >= 1450, `ran ${ranAt - t0} ms after the submit, before its delay of 1500`);
});

test("a failing job is retried on its back-off by the workers' upkeep, then ends error", async (t) => {
  let runs = 0;
  closing(t, new Worker("flaky", async () => {
    runs += 1;
    throw new Error(`fails, run ${runs}`);
  }, { url }));
  const id = await client.submit({ type: "flaky", retries: 2, backoff: { type: "fixed", delay: 300 } });
  const j = await ended(id);
  assert.equal(j.status, "error");
  assert.equal(j.attempts, 3, "the first attempt and both retries");
  assert.equal(runs, 3);
});

test("a worker killed -9 mid-job: its job runs on another worker once its presence expired", async (t) => {
  const doomed = child("orphan", { presenceTtlMs: 1000 });
  await waitFor("the child to be ready", async () => doomed.out.includes("ready"));
  const id = await client.submit({ type: "orphan", script: "60000" });
  await waitFor("the child to run the job", async () => doomed.out.includes(`active ${id}`));
  doomed.kill("SIGKILL");
  closing(t, new Worker("orphan", async () => "survivor", { url }));
  const j = await ended(id, 30_000);
  assert.deepEqual([j.status, j.output], ["finished", "survivor"]);
  assert.equal(j.attempts, 2, "run again once");
});

test("a job past its time limit, on a worker too stopped to end it, is ended by the upkeep", async (t) => {
  // a long presence and lease: only its time limit can end the job while its worker is stopped
  const stuck = child("stuck", { presenceTtlMs: 60_000, leaseMs: 60_000 });
  await waitFor("the child to be ready", async () => stuck.out.includes("ready"));
  // the upkeep of a worker of another type: any worker keeps the whole queue
  const other = closing(t, new Worker("other", async () => "x", { url }));
  await other.waitUntilReady();
  const id = await client.submit({ type: "stuck", script: "60000", timeout: 1000 });
  await waitFor("the child to run the job", async () => stuck.out.includes(`active ${id}`));
  stuck.kill("SIGSTOP");
  try {
    // its limit (1 s) plus the 2 s the worker has to end it itself, plus a lease the stopped
    // child may hold (3 s)
    const j = await ended(id, 20_000);
    assert.equal(j.status, "error");
    assert.match(j.error ?? "", /timeout/);
  } finally {
    stuck.kill("SIGKILL");
  }
});

test("several workers: one holds the duty lease, and each delayed job runs once", async (t) => {
  const runs = new Map();
  const workers = Array.from({ length: 5 }, () => closing(t, new Worker("many", async (job) => {
    runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
    return "ok";
  }, { url, concurrency: 4 })));
  await Promise.all(workers.map((w) => w.waitUntilReady()));
  const answers = await client.submitMany(Array.from({ length: 50 }, () => ({ type: "many", delay: 500 })));
  for (const a of answers) assert.equal((await ended(a.id)).status, "finished");
  assert.ok(answers.every((a) => runs.get(a.id) === 1), "each ran once");
  const holder = await db3.hget("hero:meta:duties", "holder");
  assert.ok(workers.some((w) => w.consumer === holder), `the holder ${holder} is one of the workers`);
  await Promise.all(workers.map((w) => w.close()));
  assert.equal(await db3.exists("hero:meta:duties"), 0, "the holder handed the lease back at close");
});

test("{ duties: false } leaves the upkeep to others; close() hands the lease back", async (t) => {
  assert.throws(() => new Worker("x", async () => 1, { url, duties: "no", autorun: false }), (e) => e instanceof InvalidInput && /duties "no" is not true or false/.test(e.message));
  assert.throws(() => new Worker("x", async () => 1, { url, dutie: false, autorun: false }), /"dutie" is not one hero knows; use duties/);
  assert.throws(() => new Worker("x", async () => 1, { url, skipStalledCheck: true, autorun: false }), /use duties: false/);
  // every holder before closed and handed the lease back: nobody holds it
  assert.equal(await db3.exists("hero:meta:duties"), 0);
  const idle = closing(t, new Worker("optout", async () => "ran", { url, duties: false }));
  await idle.waitUntilReady();
  const id = await client.submit({ type: "optout", delay: 100 });
  // what must not happen can only be waited for: a second, ten times the holder's pace
  await new Promise((r) => setTimeout(r, 1000));
  assert.notEqual(await db3.zscore("hero:meta:delayed", id), null, "nobody promoted it");
  assert.equal(await client.status(id), "waiting");
  assert.equal(await db3.exists("hero:meta:duties"), 0, "the opted-out worker took no lease");
  // a worker of another type does the upkeep: the job is promoted and runs on the first
  const keeper = closing(t, new Worker("keeper", async () => "x", { url }));
  const j = await ended(id);
  assert.deepEqual([j.status, j.output], ["finished", "ran"]);
  assert.equal(await db3.hget("hero:meta:duties", "holder"), keeper.consumer);
  const t0 = Date.now();
  await keeper.close();
  // handed back, not left to run out (3 s)
  assert.equal(await db3.exists("hero:meta:duties"), 0, "the lease handed back at close");
  assert.ok(Date.now() - t0 < 2500, `close took ${Date.now() - t0} ms`);
});

test("ended jobs are deleted past their retention; all of it in db 3, nothing in db 0", async (t) => {
  // the config hash is where the upkeep of every language reads its settings
  await db3.hset("hero:meta:config", "retention_ms", 1500);
  const w = closing(t, new Worker("kept", async () => "done", { url }));
  const id = await client.submit({ type: "kept" });
  const j = await ended(id);
  assert.equal(j.status, "finished");
  const endedAt = Date.now();
  await waitFor("the ended job to be deleted", async () => {
    try {
      await client.get(id);
      return false;
    } catch (e) {
      if (e instanceof JobNotFound) return true;
      throw e;
    }
  }, 20_000);
  assert.ok(Date.now() - endedAt >= 1000, "not long before its retention of 1.5 s");
  await w.close();
  assert.ok((await db3.dbsize()) > 0, "the queue lives in db 3");
  assert.deepEqual(await db0.keys("*"), [], "nothing written to db 0");
});
