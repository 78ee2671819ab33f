// The BullMQ side of `hero bench --peer bullmq`: runs one scenario against the Redis it is
// given and prints its figures as one JSON object on stdout (progress goes to stderr).
// The figures and their definitions match hero's own scenarios (broker/src/bench), so the
// harness can put both in one table: the timed section, Redis CPU from INFO before and after
// it, and latencies from a submit timestamp carried in the job's data.
//
// BullMQ runs with removeOnComplete/removeOnFail on, its cheapest setting (nothing kept after a
// job ends), while hero keeps every job hash for its retention: the comparison favours the peer.
//
// usage: node bullmq.mjs <scenario> --url redis://127.0.0.1:PORT [--jobs N] [--batch N]
//        [--producers N] [--concurrency N] [--rate N] [--secs N]
import { performance } from 'node:perf_hooks';
import { Queue, Worker } from 'bullmq';
import IORedis from 'ioredis';

const scenario = process.argv[2];
const opt = { jobs: 100000, batch: 50, producers: 4, concurrency: 100, rate: 5000, secs: 10 };
for (let i = 3; i < process.argv.length; i += 2) {
  const name = process.argv[i].replace(/^--/, '');
  opt[name] = name === 'url' ? process.argv[i + 1] : Number(process.argv[i + 1]);
}
const url = new URL(opt.url);
const connection = { host: url.hostname, port: Number(url.port) };
const QUEUE = 'bench';
const jobOpts = { removeOnComplete: true, removeOnFail: true };

const nowUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);
const progress = (msg) => process.stderr.write(`  bullmq ${scenario}: ${msg}\n`);

function info(text, field) {
  const m = text.match(new RegExp(`^${field}:([0-9.]+)`, 'm'));
  return m ? Number(m[1]) : NaN;
}
async function redisCpu(client) {
  const text = await client.info('cpu');
  return info(text, 'used_cpu_sys') + info(text, 'used_cpu_user');
}
// Redis's and this process's CPU seconds, to turn into µs per job after the timed section.
async function cpuMark(client) {
  const own = process.cpuUsage();
  return { redis: await redisCpu(client), own: (own.user + own.system) / 1e6 };
}
async function cpuRecord(mark, client, jobs, out) {
  const own = process.cpuUsage();
  out.client_us_per_job = (((own.user + own.system) / 1e6) - mark.own) * 1e6 / jobs;
  out.redis_us_per_job = ((await redisCpu(client)) - mark.redis) * 1e6 / jobs;
}
async function usedMemory(client) {
  return info(await client.info('memory'), 'used_memory');
}
function pcts(us) {
  if (us.length === 0) return { p50: NaN, p99: NaN, max: NaN };
  us.sort((a, b) => a - b);
  const at = (q) => us[Math.min(us.length - 1, Math.ceil(q * us.length) - 1)] / 1000;
  return { p50: at(0.5), p99: at(0.99), max: us[us.length - 1] / 1000 };
}

// A plain job, or one of the features scenario: 3 attempts, a deduplication id and a small
// payload (the same fields hero's side sends; BullMQ has no tags, which hero's side also pays
// for). BullMQ's `deduplication: { id }` is hero's uniqueness key one for one: a second add is
// ignored while the first is queued or running, and allowed once it ended; a `jobId` would be
// hero's job id instead (idempotent for ever), which hero's side gives besides.
let seq = 0;
function job(features) {
  if (!features) return { name: 'noop', data: { t: nowUs() }, opts: jobOpts };
  const n = seq++;
  return {
    name: 'noop',
    data: { t: nowUs(), order: n, customer: 'c-20417', amount_cents: 1999 + (n % 100), currency: 'EUR' },
    opts: { ...jobOpts, attempts: 3, deduplication: { id: `order-${n}` } },
  };
}

// Submits `n` jobs in batches, `producers` batches in flight at once.
async function submitBulk(queue, n, features = false) {
  let next = 0;
  const producer = async () => {
    while (next < n) {
      const size = Math.min(opt.batch, n - next);
      next += size;
      const batch = [];
      for (let i = 0; i < size; i++) batch.push(job(features));
      await queue.addBulk(batch);
    }
  };
  await Promise.all(Array.from({ length: opt.producers }, producer));
}

// A worker that records submit-to-start and submit-to-result, and resolves `all` after `n`.
function startWorker(n) {
  const start = [];
  const result = [];
  let done = 0;
  let resolve;
  const all = new Promise((r) => (resolve = r));
  const worker = new Worker(
    QUEUE,
    async (job) => {
      start.push(nowUs() - job.data.t);
    },
    { connection, concurrency: opt.concurrency },
  );
  worker.on('completed', (job) => {
    result.push(nowUs() - job.data.t);
    done += 1;
    if (done % 20000 === 0) progress(`${done} done`);
    if (done >= n) resolve();
  });
  worker.on('error', (e) => progress(`worker error: ${e}`));
  return { worker, all, start, result };
}

async function main() {
  const queue = new Queue(QUEUE, { connection });
  await queue.waitUntilReady();
  // a connection of its own for INFO, so the probe never waits behind the queue's traffic
  const client = new IORedis(opt.url);
  const out = {};
  if (scenario === 'submit-bulk') {
    const cpu = await cpuMark(client);
    const t0 = performance.now();
    await submitBulk(queue, opt.jobs);
    const secs = (performance.now() - t0) / 1000;
    out.jobs_per_s = opt.jobs / secs;
    await cpuRecord(cpu, client, opt.jobs, out);
  } else if (scenario === 'worker-concurrent') {
    await submitBulk(queue, opt.jobs);
    progress(`${opt.jobs} queued`);
    const cpu = await cpuMark(client);
    const t0 = performance.now();
    const w = startWorker(opt.jobs);
    await w.all;
    const secs = (performance.now() - t0) / 1000;
    out.jobs_per_s = opt.jobs / secs;
    await cpuRecord(cpu, client, opt.jobs, out);
    await w.worker.close();
  } else if (scenario === 'end-to-end' || scenario === 'end-to-end-features') {
    const w = startWorker(opt.jobs);
    await w.worker.waitUntilReady();
    const cpu = await cpuMark(client);
    const t0 = performance.now();
    await submitBulk(queue, opt.jobs, scenario === 'end-to-end-features');
    await w.all;
    const secs = (performance.now() - t0) / 1000;
    out.jobs_per_s = opt.jobs / secs;
    await cpuRecord(cpu, client, opt.jobs, out);
    const s = pcts(w.start);
    Object.assign(out, { start_p50_ms: s.p50, start_p99_ms: s.p99, start_max_ms: s.max });
    await w.worker.close();
  } else if (scenario === 'latency') {
    const total = Math.round(opt.rate * opt.secs);
    const w = startWorker(total);
    await w.worker.waitUntilReady();
    const cpu = await cpuMark(client);
    const t0 = performance.now();
    let sent = 0;
    const adds = [];
    await new Promise((resolve) => {
      const tick = setInterval(() => {
        const due = Math.min(total, Math.floor(((performance.now() - t0) / 1000) * opt.rate));
        for (; sent < due; sent++) adds.push(queue.add('noop', { t: nowUs() }, jobOpts));
        if (sent >= total) {
          clearInterval(tick);
          resolve();
        }
      }, 1);
    });
    await Promise.all(adds);
    await w.all;
    const secs = (performance.now() - t0) / 1000;
    out.offered_per_s = total / secs;
    await cpuRecord(cpu, client, total, out);
    const s = pcts(w.start);
    const r = pcts(w.result);
    Object.assign(out, {
      start_p50_ms: s.p50, start_p99_ms: s.p99, start_max_ms: s.max,
      result_p50_ms: r.p50, result_p99_ms: r.p99, result_max_ms: r.max,
    });
    await w.worker.close();
  } else if (scenario === 'memory') {
    // warm up: scripts loaded, keys and connections of an idle queue in place
    const warm = startWorker(1000);
    await submitBulk(queue, 1000);
    await warm.all;
    await warm.worker.close();
    await new Promise((r) => setTimeout(r, 1000));
    const base = await usedMemory(client);
    await submitBulk(queue, opt.jobs);
    const full = await usedMemory(client);
    progress(`${opt.jobs} queued`);
    const w = startWorker(opt.jobs);
    await w.all;
    await w.worker.close();
    await new Promise((r) => setTimeout(r, 1000));
    const after = await usedMemory(client);
    out.bytes_per_waiting_job = (full - base) / opt.jobs;
    out.after_drain_pct = ((after - base) * 100) / base;
  } else {
    throw new Error(`unknown scenario ${scenario}`);
  }
  await queue.close();
  client.disconnect();
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`bullmq peer failed: ${e.stack || e}\n`);
    process.exit(1);
  },
);
