// The hero side of `benches/node-compare`: the npm package's Node worker and producer (node/,
// built), one scenario against the Redis it is given, its figures as one JSON object on stdout,
// named and defined as benches/peer/bullmq.mjs's so the two go in one table.
//
// usage: node hero.mjs <worker-concurrent|end-to-end> --url redis://127.0.0.1:PORT [--jobs N]
//        [--batch N] [--producers N] [--concurrency N]
import { performance } from "node:perf_hooks";

import { Client, Worker } from "../../node/dist/esm/index.js";

const scenario = process.argv[2];
const opt = { jobs: 100000, batch: 50, producers: 4, concurrency: 100 };
for (let i = 3; i < process.argv.length; i += 2) {
  const name = process.argv[i].replace(/^--/, "");
  opt[name] = name === "url" ? process.argv[i + 1] : Number(process.argv[i + 1]);
}
const progress = (msg) => process.stderr.write(`  hero ${scenario}: ${msg}\n`);

function info(text, field) {
  const m = text.match(new RegExp(`^${field}:([0-9.]+)`, "m"));
  return m ? Number(m[1]) : NaN;
}
async function redisCpu(probe) {
  const text = await probe.info("cpu");
  return info(text, "used_cpu_sys") + info(text, "used_cpu_user");
}
async function cpuMark(probe) {
  const own = process.cpuUsage();
  return { redis: await redisCpu(probe), own: (own.user + own.system) / 1e6 };
}
async function cpuRecord(mark, probe, jobs, out) {
  const own = process.cpuUsage();
  out.client_us_per_job = (((own.user + own.system) / 1e6 - mark.own) * 1e6) / jobs;
  out.redis_us_per_job = (((await redisCpu(probe)) - mark.redis) * 1e6) / jobs;
}

async function submitBulk(client, n) {
  let next = 0;
  const producer = async () => {
    while (next < n) {
      const size = Math.min(opt.batch, n - next);
      next += size;
      await client.submitMany(Array.from({ length: size }, () => ({ type: "bench", script: "noop" })));
    }
  };
  await Promise.all(Array.from({ length: opt.producers }, producer));
}

function startWorker(n) {
  let done = 0;
  let resolve;
  const all = new Promise((r) => (resolve = r));
  const worker = new Worker(
    "bench",
    async () => {
      done += 1;
      if (done % 20000 === 0) progress(`${done} done`);
      if (done >= n) resolve();
    },
    { url: opt.url, concurrency: opt.concurrency },
  );
  worker.on("error", (e) => progress(`worker error: ${e}`));
  const ready = new Promise((r) => worker.once("ready", r));
  return { worker, all, ready };
}

async function main() {
  const client = await Client.connect(opt.url);
  // a connection of its own for INFO, so the probe never waits behind the queue's traffic
  const probe = client.redis.duplicate();
  const out = {};
  if (scenario === "worker-concurrent") {
    await submitBulk(client, opt.jobs);
    progress(`${opt.jobs} queued`);
    const cpu = await cpuMark(probe);
    const t0 = performance.now();
    const w = startWorker(opt.jobs);
    await w.all;
    out.jobs_per_s = opt.jobs / ((performance.now() - t0) / 1000);
    await cpuRecord(cpu, probe, opt.jobs, out);
    await w.worker.close();
  } else if (scenario === "end-to-end") {
    const w = startWorker(opt.jobs);
    await w.ready;
    const cpu = await cpuMark(probe);
    const t0 = performance.now();
    await submitBulk(client, opt.jobs);
    await w.all;
    out.jobs_per_s = opt.jobs / ((performance.now() - t0) / 1000);
    await cpuRecord(cpu, probe, opt.jobs, out);
    await w.worker.close();
  } else {
    throw new Error(`unknown scenario ${scenario}: worker-concurrent or end-to-end`);
  }
  await client.close();
  probe.disconnect();
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((e) => {
  process.stderr.write(`${e.stack ?? e}\n`);
  process.exit(1);
});
