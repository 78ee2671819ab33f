// The Node worker against a real redis-server and a real `hero broker`: jobs run with their
// payload, progress and log lines; a stop aborts the handler's signal and fences its result; a
// time limit; retries by back-off through the broker; a SIGKILLed worker process's jobs run
// elsewhere; close() finishes what runs; a sharded namespace served whole.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, test } from "node:test";

import { Client, Worker } from "../dist/esm/index.js";
import { hero, heroProcess, redisServer, waitFor, ROOT } from "./helpers.mjs";

let redis, broker, client;

before(async () => {
  redis = await redisServer();
  broker = heroProcess(redis.url, ["broker", "--http", "off", "--lease-ms", "2000"]);
  client = await Client.connect(redis.url);
});

after(async () => {
  await client?.close();
  await broker?.stop();
  redis?.stop();
});

test("a worker runs jobs with their payload, reports progress and log lines, and says so", async () => {
  const completed = [];
  const worker = new Worker(
    "node",
    async (job) => {
      await job.updateProgress(50, "half way");
      await job.log(`attempt ${job.attempt}`);
      await new Promise((r) => setTimeout(r, 700));
      return job.data.n * 2;
    },
    { url: redis.url, concurrency: 4 },
  );
  worker.on("completed", (job, result) => completed.push([job.id, result]));
  const id = await client.submit({ type: "node", payload: { n: 21 } });
  const seen = await waitFor("progress to show", async () => {
    const j = await client.get(id);
    return j.progress ? j : undefined;
  });
  assert.deepEqual(seen.progress, { percent: 50, message: "half way" });
  const r = await client.wait(id, 20_000);
  assert.deepEqual([r.status, r.output, r.outputText], ["finished", 42, "42"]);
  assert.deepEqual((await client.get(id)).log, ["attempt 1"]);
  await waitFor("the completed event", async () => completed.length === 1);
  // BullMQ's completed event: what the handler returned, as it returned it
  assert.deepEqual(completed[0], [id, 42]);
  await worker.close();
});

test("a stop aborts the handler's signal and its result is fenced; a time limit fails the job", async () => {
  let aborted = null;
  const worker = new Worker(
    "slow",
    async (job) => {
      await new Promise((resolve) => {
        const t = setTimeout(resolve, 30_000);
        job.signal.addEventListener("abort", () => {
          aborted = job.cancelReason;
          clearTimeout(t);
          resolve();
        });
      });
      return "finished anyway";
    },
    { url: redis.url, concurrency: 2 },
  );
  const id = await client.submit({ type: "slow" });
  await waitFor("the job to start", async () => (await client.status(id)) === "started");
  assert.equal(await client.stop(id), "interrupted");
  await waitFor("the handler to see the stop", async () => aborted === "stopped");
  const j = await client.get(id);
  assert.equal(j.status, "error");
  assert.notEqual(j.output, "finished anyway", "the late result was not recorded");
  const limited = await client.submit({ type: "slow", timeout: 1000 });
  const r = await client.wait(limited, 20_000);
  assert.equal(r.status, "error");
  assert.match(r.error, /timeout/);
  await worker.close();
});

function failOnPurpose() {
  throw new TypeError("first try fails");
}

test("a failing handler is retried within its budget, its stack kept; Abort ends it at once", async () => {
  const seen = [];
  const worker = new Worker(
    "flaky",
    async (job) => {
      if (job.script === "abort") {
        const { Abort } = await import("../dist/esm/index.js");
        throw new Abort("no use");
      }
      seen.push(job.stacktrace);
      if (job.attempt < 2) failOnPurpose();
      return `attempt ${job.attempt}`;
    },
    { url: redis.url },
  );
  const r = await client.run({ type: "flaky", script: "x", retries: 2 }, 20_000);
  assert.deepEqual([r.status, r.output], ["finished", "attempt 2"]);
  // the first attempt's stack, as BullMQ's job.stacktrace: in the record, and in the handler's
  // job on the retry; kept once the retry succeeded
  assert.deepEqual(seen[0], []);
  assert.match(seen[1][0], /^TypeError: first try fails\n\s+at failOnPurpose .*worker\.test\.mjs/);
  const job = await client.get(r.id);
  assert.deepEqual(job.stacktrace, seen[1]);
  const a = await client.run({ type: "flaky", script: "abort", retries: 5 }, 20_000);
  assert.deepEqual([a.status, a.error], ["error", "no use"]);
  assert.match((await client.get(a.id)).stacktrace[0], /^Abort: no use\n\s+at /);
  await worker.close();
});

test("the jobs of a SIGKILLed worker process run elsewhere; close() lets running jobs finish", async () => {
  // a worker in a process of its own, dead to the broker 1 s after it stops answering
  const code = `
    import { Worker } from ${JSON.stringify(ROOT + "/node/dist/esm/index.js")};
    const w = new Worker("kill", async () => { await new Promise((r) => setTimeout(r, 60000)); return "never"; },
      { url: process.env.HERO_REDIS_URL, concurrency: 5, presenceTtlMs: 1000 });
    w.on("ready", () => console.log("ready"));
    w.on("active", (job) => console.log("active " + job.id));`;
  const child = spawn(process.execPath, ["--input-type=module", "-e", code], {
    env: { ...process.env, HERO_REDIS_URL: redis.url },
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  const ids = [];
  for (let i = 0; i < 5; i++) ids.push(await client.submit({ type: "kill" }));
  await waitFor("the child to hold every job", async () => ids.every((id) => out.includes(`active ${id}`)));
  child.kill("SIGKILL");
  const survivor = new Worker("kill", async () => "survivor", { url: redis.url, concurrency: 5 });
  for (const id of ids) {
    const r = await client.wait(id, 30_000);
    assert.deepEqual([r.status, r.output], ["finished", "survivor"], id);
    assert.equal((await client.get(id)).attempts, 2, "run again once");
  }
  await survivor.close();
  // close() lets a running job finish
  const w = new Worker("graceful", async () => {
    await new Promise((r) => setTimeout(r, 800));
    return "done";
  }, { url: redis.url });
  const id = await client.submit({ type: "graceful" });
  await waitFor("it to start", async () => (await client.status(id)) === "started");
  await w.close();
  assert.equal((await client.get(id)).output, "done");
});

test("a worker serves every shard of a sharded namespace", async () => {
  hero(redis.url, "shards", "set", "3");
  await client.shardMap(true);
  const worker = new Worker("sharded", async (job) => `ran ${job.id}`, { url: redis.url, concurrency: 8 });
  const answers = await client.submitMany(Array.from({ length: 24 }, () => ({ type: "sharded" })));
  for (const a of answers) {
    const r = await client.wait(a.id, 20_000);
    assert.equal(r.output, `ran ${a.id}`);
  }
  await worker.close();
  hero(redis.url, "shards", "set", "1");
});

test("a stalled worker process's late result is fenced; SIGTERM finishes the running job and hands the rest back", async () => {
  // a worker in a process of its own that prints what it sees
  const code = (type, presence) => `
    import { Worker } from ${JSON.stringify(ROOT + "/node/dist/esm/index.js")};
    const w = new Worker(${JSON.stringify(type)}, async (job) => { await new Promise((r) => setTimeout(r, Number(job.script))); return "child"; },
      { url: process.env.HERO_REDIS_URL, concurrency: 1, presenceTtlMs: ${presence}, shutdownMs: 5000 });
    w.on("active", (job) => console.log("active " + job.id));
    w.on("fenced", (job, answer) => console.log("fenced " + job.id + " " + answer));
    w.on("completed", (job) => console.log("completed " + job.id));
    w.on("closed", (n) => console.log("closed " + n));
    await w.runUntilSignal();
    console.log("exited");`;
  const child = (type, presence) => {
    const p = spawn(process.execPath, ["--input-type=module", "-e", code(type, presence)], {
      env: { ...process.env, HERO_REDIS_URL: redis.url },
      stdio: ["ignore", "pipe", "inherit"],
    });
    p.out = "";
    p.stdout.on("data", (d) => (p.out += d));
    return p;
  };
  // stalled past its presence: the job runs elsewhere; woken, its result is refused
  const a = child("stall", 1000);
  const id = await client.submit({ type: "stall", script: "1500" });
  await waitFor("the child to take it", async () => a.out.includes(`active ${id}`));
  a.kill("SIGSTOP");
  const b = new Worker("stall", async () => "survivor", { url: redis.url });
  const r = await client.wait(id, 30_000);
  assert.deepEqual([r.status, r.output], ["finished", "survivor"]);
  a.kill("SIGCONT");
  // fenced either by its renewal (answered `lost`) or by its completion (answered `lease_lost`),
  // whichever the woken process sends first
  await waitFor("the late result to be fenced", async () => a.out.includes(`fenced ${id} l`), 20_000);
  assert.equal((await client.get(id)).output, "survivor");
  a.kill("SIGKILL");
  await b.close();
  // SIGTERM: the running job finishes, the queued one goes back at once
  const c = child("term", 15000);
  const running = await client.submit({ type: "term", script: "800" });
  await waitFor("it to start", async () => c.out.includes(`active ${running}`));
  const queued = await client.submit({ type: "term", script: "1" });
  c.kill("SIGTERM");
  await waitFor("the child to exit", async () => c.out.includes("exited"), 20_000);
  assert.ok(c.out.includes(`completed ${running}`), c.out);
  assert.equal((await client.get(running)).output, "child");
  assert.equal(await client.status(queued), "dispatched", "handed back, not run");
});

test("a batch run by the Node worker calls back once", async () => {
  const worker = new Worker(["member", "callback"], async (job) => `${job.queueName} ${job.data?.n ?? ""}`.trim(), {
    url: redis.url,
    concurrency: 4,
  });
  const members = await client.addToBatch("node-batch", [1, 2, 3, 4].map((n) => ({ type: "member", payload: { n } })));
  assert.equal(members.length, 4);
  await client.closeBatch("node-batch", { onComplete: { type: "callback" } });
  const info = await waitFor("the batch to be done", async () => {
    const b = await client.batch("node-batch");
    return b?.state === "done" ? b : undefined;
  });
  assert.deepEqual([info.total, info.finished, info.failed], [4, 4, 0]);
  const cb = await client.wait(info.completeId, 20_000);
  assert.equal(cb.output, "callback");
  for (const m of members) assert.match((await client.get(m.id)).output, /^member \d$/);
  await worker.close();
});
