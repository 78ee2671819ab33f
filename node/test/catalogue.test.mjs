// Careless inputs, as a port from BullMQ (or a tired hand) writes them, against a real
// redis-server: each throws a HeroError naming the problem (and hero's word for BullMQ's), and
// nothing is written (every key's DUMP unchanged). Then a bad Redis URL fails in one clear line,
// within the connect timeout, and lets the process exit; a Worker without a handler or with an
// option hero does not know throws at construction; one without an `error` listener logs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";

import { Client, HeroError, InvalidInput, Queue, Worker } from "../dist/esm/index.js";
import { freePort, redisServer, ROOT } from "./helpers.mjs";

const circular = () => {
  const o = { name: "loop" };
  o.self = { back: o };
  return o;
};

// [what a user wrote, the job options, what the error must say]
const JOBS = [
  ["BullMQ's attempts", { type: "t", attempts: 3 }, /"attempts" is not one hero knows; use retries \(the attempts after the first/],
  ["BullMQ's jobId", { type: "t", jobId: "a" }, /"jobId" .*use id/],
  ["BullMQ's data", { type: "t", data: { a: 1 } }, /"data" .*use payload/],
  ["BullMQ's job name", { type: "t", name: "send" }, /"name" .*use script/],
  ["BullMQ's repeat", { type: "t", repeat: { every: 1000 } }, /use Queue.upsertJobScheduler/],
  ["BullMQ's lifo", { type: "t", lifo: true }, /"lifo" .*level/],
  ["a typo'd delay", { type: "t", dealy: 5000 }, /"dealy" is not one hero knows; use delay/],
  ["a typo'd priority", { type: "t", priorty: 1 }, /use priority/],
  ["a delay as text", { type: "t", delay: "5s" }, /delay "5s" is not a number of ms.*write e.g. 5000/],
  ["a delay that is no number", { type: "t", delay: NaN }, /delay NaN is not a number of ms/],
  ["a timeout in seconds", { type: "t", timeout: 30 }, /timeout 30 ms is under a second: a time limit is in ms.*30000/],
  ["a timeout as text", { type: "t", timeout: "5m" }, /timeout "5m" is not a number of ms/],
  ["a BullMQ priority hero cannot order so", { type: "t", priority: 12 }, /priority 12: as in BullMQ, a priority is served after every job without one.*give 1-4, or hero's level/],
  ["a level out of range", { type: "t", level: 12 }, /level 12 is out of range/],
  ["a priority as a word", { type: "t", priority: "high" }, /priority "high" is out of range/],
  ["negative retries", { type: "t", retries: -1 }, /retries -1 is not a whole number of at least 0/],
  ["retries as text", { type: "t", retries: "3" }, /retries "3" .*a number, not a string/],
  ["no type", { script: "x" }, /script type undefined/],
  ["a type with a space", { type: "my queue" }, /script type "my queue": use 1-64 characters/],
  ["an object as the script", { type: "t", script: { a: 1 } }, /script is a object: give the job's script as a string \(its data goes in payload\)/],
  ["an id with a space", { type: "t", id: "bad id" }, /job id "bad id"/],
  ["a function as the payload", { type: "t", payload: () => 1 }, /payload is a function/],
  ["a function inside the payload", { type: "t", payload: { user: { notify: () => 1 } } }, /payload.user.notify is a function/],
  ["a circular payload", { type: "t", payload: circular() }, /payload.self.back refers back to an object that contains it/],
  ["a symbol in the payload", { type: "t", payload: [Symbol("s")] }, /payload\[0\] is a symbol/],
  ["a Set in the payload", { type: "t", payload: { tags: new Set(["a"]) } }, /payload.tags is a Set: give an array/],
  ["a BigInt past 64 bits", { type: "t", payload: 2n ** 70n }, /beyond 64 bits/],
  ["an invalid Date in the payload", { type: "t", payload: { at: new Date("nope") } }, /payload.at is an invalid Date/],
  ["at as text", { type: "t", at: "tomorrow" }, /at "tomorrow" is not a valid Date/],
  ["both delay and at", { type: "t", delay: 10, at: new Date() }, /give delay or at, not both/],
  ["after as a string", { type: "t", after: "parent-1" }, /after "parent-1": give an array of job ids/],
  ["tags as a string", { type: "t", tags: "urgent" }, /tags "urgent": give an array of strings/],
  ["an env value that is a number", { type: "t", env: { PORT: 8080 } }, /environment variable PORT is a number: give a string/],
  ["removeOnComplete as a count", { type: "t", removeOnComplete: 100 }, /keeps a count of jobs; hero keeps ended jobs by age/],
  ["an unknown back-off type", { type: "t", backoff: { type: "linear", delay: 100 } }, /backoff .*"fixed" \| "exponential"/],
  ["a back-off delay as text", { type: "t", backoff: { type: "fixed", delay: "1s" } }, /backoff delay "1s" is not a number of ms/],
  ["an instance without its group", { type: "t", instance: "i1" }, /an instance needs a group/],
  ["uniqueTtl without unique", { type: "t", uniqueTtl: 1000 }, /uniqueTtl needs a unique key/],
];

test("every careless submit is refused naming the problem, and nothing is written", async (t) => {
  const redis = await redisServer();
  const client = await Client.connect(redis.url);
  t.after(async () => {
    await client.close();
    redis.stop();
  });
  const snapshot = async () => {
    const keys = (await client.redis.keys("*")).sort();
    return Promise.all(keys.map(async (k) => [k, (await client.redis.dumpBuffer(k))?.toString("hex")]));
  };
  const before = await snapshot();
  assert.ok(JOBS.length >= 25);
  for (const [what, job, says] of JOBS) {
    const e = await client.submit(job).then(() => null, (err) => err);
    assert.ok(e instanceof InvalidInput, `${what}: ${e}`);
    assert.match(e.message, says, what);
  }
  assert.deepEqual(await snapshot(), before, "nothing was written");
  // in a batch, the one bad job refuses the whole submit
  await assert.rejects(client.submitMany([{ type: "t" }, { type: "t", attempts: 2 }]), /attempts/);
  assert.deepEqual(await snapshot(), before, "nothing of the batch was written");
});

test("Worker and Queue refuse what they do not know at construction", () => {
  assert.throws(() => new Worker("x"), /the handler is missing; give an async function \(job\) => result/);
  assert.throws(() => new Worker("x", "./processor.js"), /a processor file path, BullMQ's sandbox, is not supported/);
  assert.throws(() => new Worker("x", async () => 1, { limiter: { max: 10, duration: 1000 }, autorun: false }), /"limiter" .*setPolicy\(\{ rate/);
  assert.throws(() => new Worker("x", async () => 1, { connection: { host: "h" }, autorun: false }), /"connection" .*use url/);
  assert.throws(() => new Worker("x", async () => 1, { concurrency: 0, autorun: false }), /concurrency 0 is not a whole number of at least 1/);
  assert.throws(() => new Worker("x", async () => 1, { url: "http://127.0.0.1:6391", autorun: false }), /`http:\/\/` is not a Redis URL scheme/);
  assert.throws(() => new Queue("x", { connection: {} }), /"connection" .*use url/);
});

test("a bad Redis URL fails once, in one clear line, and lets the process exit", async () => {
  const dead = `redis://127.0.0.1:${await freePort()}`;
  const began = Date.now();
  const e = await Client.connect(dead).then(() => null, (err) => err);
  assert.ok(e instanceof HeroError, String(e));
  assert.match(e.message, new RegExp(`cannot connect to Redis at ${dead}/?: .*ECONNREFUSED.*is redis-server running`));
  assert.ok(Date.now() - began < 6000, "within the connect timeout");
  const secret = `redis://app:s3cret@127.0.0.1:${await freePort()}`;
  const hidden = await Client.connect(secret).then(() => null, (err) => err);
  assert.match(hidden.message, /redis:\/\/app:\*\*\*@127\.0\.0\.1/);
  assert.doesNotMatch(hidden.message, /s3cret/);
  await assert.rejects(Client.connect("http://127.0.0.1:6391"), /`http:\/\/` is not a Redis URL scheme .*redis, rediss \(TLS\) and unix/);
  await assert.rejects(Client.connect("127.0.0.1:6391"), /is not a Redis URL scheme|does not parse/);

  // in a process of its own: one line, no reconnect log, and the process exits by itself
  const dist = join(ROOT, "node", "dist", "esm", "index.js");
  const run = (body) =>
    spawnSync(process.execPath, ["--input-type=module", "-e", `import { Client, Worker } from ${JSON.stringify(dist)};\n${body}`], { encoding: "utf8", timeout: 20_000 });
  const producer = run(`try { await Client.connect(${JSON.stringify(dead)}); } catch (e) { console.log(e.name + ": " + e.message); }`);
  assert.equal(producer.status, 0, producer.stderr);
  assert.match(producer.stdout, /^HeroError: cannot connect to Redis at /);
  assert.doesNotMatch(producer.stdout + producer.stderr, /\[ioredis\]/);
  // a Worker with no `error` listener logs the failure instead of crashing the process
  const worker = run(`new Worker("x", async () => 1, { url: ${JSON.stringify(dead)} });`);
  assert.equal(worker.status, 0, `exit ${worker.status} ${worker.signal}: ${worker.stderr}`);
  assert.equal(worker.stderr.trim().split("\n").length, 1, worker.stderr);
  assert.match(worker.stderr, /hero-broker worker .*cannot connect to Redis at .*listen with worker.on\("error"/);
  // waitUntilReady rejects with the same error
  const ready = run(`const w = new Worker("x", async () => 1, { url: ${JSON.stringify(dead)} }); w.on("error", () => {}); try { await w.waitUntilReady(); } catch (e) { console.log(e.name); }`);
  assert.equal(ready.stdout.trim(), "HeroError", ready.stderr);
});
