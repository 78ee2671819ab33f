// docs/clients.md's Node column against a real redis-server and `hero broker`: every capability
// the table names in Node is called here once, and a name the table gives that this file never
// calls fails the check.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import { Client, Queue, QueueEvents, Retry, UnrecoverableError, Worker } from "../dist/esm/index.js";
import { heroProcess, redisServer, ROOT, waitFor } from "./helpers.mjs";

/** The first backticked name of each cell of `header`'s column, in every table of `doc`. */
function column(doc, header) {
  const out = [];
  let at = null;
  for (const line of doc.split("\n")) {
    if (!line.startsWith("|")) {
      at = null;
      continue;
    }
    const cells = line.trim().replace(/^\||\|$/g, "").split("|").map((c) => c.trim());
    if (cells[0] === "capability") {
      at = cells.indexOf(header);
      continue;
    }
    const m = at !== null && at >= 0 ? /`([^`]+)`/.exec(cells[at] ?? "") : null;
    if (m) out.push(m[1]);
  }
  return out;
}

const callToken = (name) => name.split("(")[0].split(/[.:]/).pop();

test("every Node name the table gives is called here", () => {
  const names = column(readFileSync(join(ROOT, "docs", "clients.md"), "utf8"), "Node");
  const body = readFileSync(fileURLToPath(import.meta.url), "utf8").split("every capability of the Node column").pop();
  assert.ok(names.length >= 15, names.join(", "));
  // a call, or a field read (`.results.`, `.stacktrace[0]`)
  const missing = names.filter((n) => !body.includes(`${callToken(n)}(`) && !body.includes(`.${callToken(n)}.`) && !body.includes(`.${callToken(n)}[`));
  assert.deepEqual(missing, [], "named in docs/clients.md, never called");
});

test("every capability of the Node column answers against a real broker", async () => {
  const redis = await redisServer();
  const broker = heroProcess(redis.url, ["broker", "--http", "off"]);
  const client = await Client.connect(redis.url);
  const worker = new Worker(
    "c",
    async (job) => {
      await job.updateProgress(50, "half");
      await job.log("a line");
      if (job.script === "retry" && job.attempt < 2) throw new Retry("again", 10);
      if (job.script === "abort") throw new UnrecoverableError("no");
      if (job.script === "fail") throw new RangeError("disk full");
      if (job.script === "parent") return Object.values(await job.getChildrenValues()).join(",");
      return job.script.toUpperCase();
    },
    { url: redis.url, concurrency: 4 },
  );
  worker.on("error", () => undefined);
  const events = new QueueEvents("c", { url: redis.url });
  try {
    await events.waitUntilReady();
    const completed = new Promise((resolve) => events.once("completed", resolve));
    const id = await client.submit({ type: "c", script: "one" });
    assert.ok((await client.submitMany([{ type: "c", script: "two" }]))[0].created);
    assert.equal((await client.run({ type: "c", script: "ran" }, 20_000)).output, "RAN");
    assert.equal((await client.wait(id, 20_000)).output, "ONE");
    assert.equal(await client.status(id), "finished");
    assert.equal((await client.get(id)).output, "ONE");
    assert.equal((await client.run({ type: "c", script: "retry", retries: 1 }, 20_000)).status, "finished");
    assert.equal((await client.run({ type: "c", script: "abort" }, 20_000)).status, "error");
    const failed = await client.run({ type: "c", script: "fail" }, 20_000);
    assert.match((await client.get(failed.id)).stacktrace[0], /^RangeError: disk full\n\s+at /);
    const later = await client.submit({ type: "c", script: "x", delay: 600_000 });
    assert.equal(await client.stop(later), "cancelled");
    assert.ok((await completed).returnvalue);
    await client.addToBatch("b1", [{ type: "c", script: "member" }]);
    await client.closeBatch("b1", { onComplete: { type: "c", script: "done" } });
    await waitFor("the batch", async () => (await client.batch("b1")) !== null);
    assert.equal((await client.shardMap()).k, 1);
    // a flow, a job's own back-off and retention, children's results
    const child = await client.submit({ type: "c", script: "child" });
    const parent = await client.submit({ type: "c", script: "parent", after: [child] });
    assert.equal((await client.wait(parent, 20_000)).output, "CHILD");
    assert.equal((await client.children(parent))[child].output, "CHILD");
    assert.ok((await client.run({ type: "c", script: "own", backoff: { type: "fixed", delay: 1000 }, removeOnComplete: { age: 60 }, removeOnFail: true }, 20_000)).ok);
    // operator
    const q = new Queue("c", { client });
    await q.pause();
    await q.resume();
    assert.ok((await q.getJobCounts()).totals.finished >= 1);
    assert.equal((await q.setPolicy({ retries: 2 })).retries, 2);
    assert.equal((await q.getPolicy()).retries, 2);
    assert.ok(await q.clearPolicy());
    const fq = new Queue("fq", { client });
    await fq.setPolicy({ fair: true });
    await fq.pauseKey("acme");
    await fq.resumeKey("acme");
    assert.equal((await fq.getKeys()).keys, 0);
    const idle = new Queue("dl", { client });
    for (const id of ["dead-0", "dead-1"]) {
      await client.submit({ type: "dl", script: "x", id });
      await client.redis.xadd(client.keys.deadLetter(), "*", "j", id, "reason", "too many deliveries", "queue", client.keys.work("dl"));
      await client.redis.hset(client.keys.job(id), "status", "error");
    }
    assert.equal((await idle.getDeadLetters()).length, 2);
    assert.deepEqual(await idle.retryDead(["dead-0"]), { "dead-0": "requeued" });
    assert.deepEqual(await idle.purgeDead(), { "dead-1": "purged" });
    assert.ok(await idle.requeue("dead-0"));
    const delayed = await client.submit({ type: "dl", script: "x", delay: 600_000 });
    await idle.promote(delayed);
    await idle.remove(delayed);
    const first = await q.upsertJobScheduler("nightly", { pattern: "0 3 * * *" }, { name: "x", data: { n: 1 } });
    assert.deepEqual(await q.cronNext("0 3 * * *", { after: first - 1, count: 1 }), [first]);
    assert.equal((await q.getJobSchedulers()).length, 1);
    assert.ok(await q.removeJobScheduler("nightly"));
    // a failed job retried, a queue cleaned, drained, obliterated
    await (await q.getJob(failed.id)).retry();
    await waitFor("the retried job", async () => (await client.get(failed.id)).attempts === 1 && (await client.status(failed.id)) === "error");
    assert.ok((await q.clean(0, 1000, "completed")).length >= 1);
    assert.equal(await q.isPaused(), false);
    assert.ok(Array.isArray(await q.getJobs(["completed"], 0, 9)));
    const ran = await client.run({ type: "c", script: "ran" }, 20_000);
    assert.equal((await client.get(ran.id)).returnvalue.toLowerCase(), "ran", "text stays text");
    assert.equal(typeof (await q.drain()), "number");
    assert.ok((await idle.obliterate()) >= 1);
  } finally {
    await events.close();
    await worker.close();
    await broker.stop();
    await client.close();
    redis.stop();
  }
});
