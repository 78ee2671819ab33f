// Recurring jobs in a Node-only deployment (protocol 32): no `hero broker` runs in this file. The
// ticks are fired by whichever worker holds the duty lease (hero_duties, by the one cron engine
// in the function library), each tick once however many workers contend, and go on within
// seconds when that holder is killed -9. The engine checks what is stored (a bad pattern,
// interval or zone is InvalidInput saying why, and nothing is stored) and answers `cronNext`,
// here across both of Amsterdam's clock changes. All of it in db 3.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, test } from "node:test";

import { Redis } from "ioredis";

import { InvalidInput, Queue, Worker } from "../dist/esm/index.js";
import { redisServer, waitFor, ROOT } from "./helpers.mjs";

let redis, url, db3, queue;
const children = [];

before(async () => {
  redis = await redisServer();
  url = `${redis.url}/3`;
  db3 = new Redis(url);
  queue = new Queue("tick", { url });
});

after(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  await queue?.close();
  db3?.disconnect();
  redis?.stop();
});

/** A Node worker of another type in a process of its own, duties on (the default): it only
 * contends for the duty lease, so killing it -9 loses no tick's job. Prints `ready <consumer>`. */
function bystander() {
  const code = `
    import { Worker } from ${JSON.stringify(ROOT + "/node/dist/esm/index.js")};
    const w = new Worker("bystander", async () => "x", { url: process.env.HERO_REDIS_URL });
    w.on("error", () => undefined);
    w.on("ready", () => console.log("ready " + w.consumer));`;
  const p = spawn(process.execPath, ["--input-type=module", "-e", code], {
    env: { ...process.env, HERO_REDIS_URL: url },
    stdio: ["ignore", "pipe", "inherit"],
  });
  p.out = "";
  p.stdout.on("data", (d) => (p.out += d));
  children.push(p);
  return p;
}

/** The ticks (ms) whose job recurring job `name` submitted, in order. */
async function fired(name) {
  const keys = await db3.keys(`hero:job:cron-${name}-*`);
  return keys.map((k) => Number(k.slice(`hero:job:cron-${name}-`.length))).sort((a, b) => a - b);
}

async function redisMs() {
  const [s, us] = await db3.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

/** Whether `ticks` follow one another a second apart, none missing, none twice. */
function consecutive(ticks) {
  return ticks.every((t, i) => t % 1000 === 0 && (i === 0 || t - ticks[i - 1] === 1000));
}

test("Node workers alone fire each tick once, and go on within seconds of the holder's kill -9", async (t) => {
  const procs = [bystander(), bystander(), bystander()];
  await waitFor("the bystanders to be ready", async () => procs.every((p) => p.out.includes("ready ")), 20_000);
  // the ticks' jobs run here, on a worker that leaves the upkeep to the bystanders
  const runs = new Map();
  const w = new Worker("tick", async (job) => {
    runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
    return "ran";
  }, { url, duties: false, concurrency: 4 });
  t.after(() => w.close());
  w.on("error", () => undefined);
  await waitFor("a holder of the duty lease", async () => (await db3.exists("hero:meta:duties")) === 1, 10_000);
  const from = await redisMs();
  const first = await queue.upsertJobScheduler("beat", { every: 1000 }, { name: "s", data: { n: 1 } });
  const to = await redisMs();
  // the first whole second after the store
  assert.ok(first > from && first % 1000 === 0 && first <= to + 1000, `the first tick ${first}, stored between ${from} and ${to}`);
  await waitFor("4 ticks fired", async () => (await fired("beat")).length >= 4, 15_000);
  const before = await fired("beat");
  assert.ok(consecutive(before), `ticks ${before.join(" ")}`);

  const holder = await db3.hget("hero:meta:duties", "holder");
  const doomed = procs.find((p) => p.out.includes(`ready ${holder}\n`));
  assert.ok(doomed, `the holder ${holder} is a bystander`);
  doomed.kill("SIGKILL");
  const killed = await redisMs();
  // its lease runs out (3 s), a contender takes it at its next call (1 s), the next tick fires
  await waitFor("a tick after the kill", async () => (await fired("beat")).some((x) => x > killed + 1000), 15_000);
  const resumed = (await fired("beat")).find((x) => x > killed + 1000);
  assert.ok(resumed - killed <= 6000, `the first tick after the kill came ${resumed - killed} ms after it`);
  const newHolder = await db3.hget("hero:meta:duties", "holder");
  assert.ok(newHolder && newHolder !== holder, `another bystander holds the duties (${newHolder})`);
  await waitFor("3 more ticks", async () => (await fired("beat")).filter((x) => x >= resumed).length >= 3, 15_000);

  // the ticks fired by count (hero_duties' `|fires`) and by job, read at one instant: a tick
  // fired twice would count twice though its job id is the same
  const [[, fires], [, jobs]] = await db3.multi().hget("hero:meta:cron:next", "beat|fires").keys("hero:job:cron-beat-*").exec();
  assert.equal(Number(fires), jobs.length);
  assert.ok(await queue.removeJobScheduler("beat"));
  assert.equal(await db3.hexists("hero:meta:cron:next", "beat|fires"), 0, "its state removed with it");
  const all = await fired("beat");
  // a tick due while nobody held the duties was more than 1 s late: skipped (the default)
  assert.ok(consecutive(all.filter((x) => x <= killed)), `ticks before the kill ${all.join(" ")}`);
  assert.ok(consecutive(all.filter((x) => x >= resumed)), `ticks after it ${all.join(" ")}`);
  // each tick's job ran once
  await waitFor("every tick's job to run", async () => all.every((x) => runs.has(`cron-beat-${x}`)), 10_000);
  assert.ok(all.every((x) => runs.get(`cron-beat-${x}`) === 1), JSON.stringify([...runs]));
  assert.equal((await db3.hget(`hero:job:cron-beat-${all[0]}`, "tags")) ?? "", JSON.stringify(["cron:beat"]));
  for (const p of procs) p.kill("SIGKILL");
});

test("a pattern, an interval or a zone the engine refuses is InvalidInput saying why; nothing stored", async () => {
  const cases = [
    [{ pattern: "61 * * * *" }, /recurring job bad: schedule "61 \* \* \* \*" .*minute.*61/],
    [{ every: 500 }, /recurring job bad: schedule "every 500ms": the shortest interval is 1s/],
    [{ pattern: "0 3 * * *", tz: "Mars/Base" }, /recurring job bad: time zone "Mars\/Base" is not an IANA zone name/],
    [{ pattern: "whenever" }, /schedule "whenever" is not a cron expression/],
  ];
  for (const [repeat, message] of cases) {
    await assert.rejects(queue.upsertJobScheduler("bad", repeat), (e) => e instanceof InvalidInput && message.test(e.message), JSON.stringify(repeat));
  }
  assert.equal(await db3.hexists("hero:meta:cron", "bad"), 0);
  // strict options, BullMQ's habits named (before any call to Redis)
  await assert.rejects(queue.upsertJobScheduler("bad", { every: 1000, limit: 3 }), (e) => e instanceof InvalidInput && /"limit" is not one hero knows/.test(e.message));
  await assert.rejects(queue.upsertJobScheduler("bad", { cron: "* * * * *" }), /use pattern/);
  await assert.rejects(queue.upsertJobScheduler("bad", { every: 1000.5 }), /a whole number of ms/);
  await assert.rejects(queue.upsertJobScheduler("bad", { every: 1000, pattern: "@hourly" }), /one of them/);
  // what the engine takes is stored; removing it twice finds it once
  assert.equal(typeof (await queue.upsertJobScheduler("fine", { pattern: "@hourly", tz: "Europe/Amsterdam" })), "number");
  assert.equal(await queue.removeJobScheduler("fine"), true);
  assert.equal(await queue.removeJobScheduler("fine"), false);
  assert.deepEqual(await queue.getJobSchedulers(), []);
});

test("cronNext gives the engine's ticks, across Amsterdam's clock changes", async () => {
  const iso = (ticks) => ticks.map((x) => new Date(x).toISOString());
  // 03:00 in Amsterdam: 02:00Z in winter (CET), 01:00Z in summer (CEST, from 29 March 2026)
  const spring = await queue.cronNext("0 3 * * *", { tz: "Europe/Amsterdam", after: Date.UTC(2026, 2, 27, 12), count: 3 });
  assert.deepEqual(iso(spring), ["2026-03-28T02:00:00.000Z", "2026-03-29T01:00:00.000Z", "2026-03-30T01:00:00.000Z"]);
  // back to CET on 25 October 2026 (02:00-02:59 twice; 03:00 once)
  const autumn = await queue.cronNext("0 3 * * *", { tz: "Europe/Amsterdam", after: new Date(Date.UTC(2026, 9, 24)), count: 3 });
  assert.deepEqual(iso(autumn), ["2026-10-24T01:00:00.000Z", "2026-10-25T02:00:00.000Z", "2026-10-26T02:00:00.000Z"]);
  // UTC by default; strictly after `after`
  assert.deepEqual(await queue.cronNext("0 3 * * *", { after: Date.UTC(2026, 0, 1, 3), count: 1 }), [Date.UTC(2026, 0, 2, 3)]);
  // 5 by default, from now on Redis's clock
  const now = await redisMs();
  const every = await queue.cronNext("every 10s");
  assert.equal(every.length, 5);
  assert.ok(every[0] > now - 1000 && every.every((x, i) => x % 10_000 === 0 && (i === 0 || x - every[i - 1] === 10_000)), every.join(" "));
  await assert.rejects(queue.cronNext("0 3 * * *", { tz: "Mars/Base" }), (e) => e instanceof InvalidInput && /Mars\/Base/.test(e.message));
  await assert.rejects(queue.cronNext("61 * * * *"), (e) => e instanceof InvalidInput && /minute/.test(e.message));
  await assert.rejects(queue.cronNext("@hourly", { count: 0 }), (e) => e instanceof InvalidInput && /1-100/.test(e.message));
  await assert.rejects(queue.cronNext("@hourly", { n: 3 }), /use count/);
});
