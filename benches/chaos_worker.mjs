// The chaos soak's worker in Node (the npm package in node/), the twin of `hero-bench worker
// --ledger` and benches/chaos_worker.py: each job waits `--run-ms`, writes `ran <id> <token>` to
// its ledger and returns the token; each completion the server accepted writes `accepted <id>
// <token>`. Prints `ready`, `started <id> <ms>` and `done <id>`. The package is imported from
// `--dist` (its dist/esm/index.js), so the upgrade phase runs an earlier release's build as well
// as this one's; it uses only what the package has had since 0.28.
//
// usage: node chaos_worker.mjs --dist <index.js> --redis-url <url> --ledger <file>
//        [--concurrency 16] [--presence-ms 1000] [--lease-ms 2000] [--run-ms 20]
import { closeSync, openSync, writeSync } from "node:fs";
import { pathToFileURL } from "node:url";

const opt = { concurrency: 16, "presence-ms": 1000, "lease-ms": 2000, "run-ms": 20 };
for (let i = 2; i < process.argv.length; i += 2) opt[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
const { Worker } = await import(pathToFileURL(opt.dist).href);

const fd = openSync(opt.ledger, "a");
// one write per line: a SIGKILL cuts between lines, never inside one
const line = (text) => writeSync(fd, text);
const say = (text) => process.stdout.write(text + "\n");
const tokens = new Map();
let runs = 0;

const worker = new Worker(
  "bench",
  async (job) => {
    await new Promise((r) => setTimeout(r, Number(opt["run-ms"])));
    runs += 1;
    const token = `${process.pid}-${runs}`;
    tokens.set(job.id, token);
    line(`ran ${job.id} ${token}\n`);
    return token;
  },
  {
    url: opt["redis-url"],
    concurrency: Number(opt.concurrency),
    leaseMs: Number(opt["lease-ms"]),
    presenceTtlMs: Number(opt["presence-ms"]),
    instance: `node-${process.pid}`,
    autorun: false,
  },
);
worker.on("ready", () => say("ready"));
worker.on("active", (job) => say(`started ${job.id} ${Date.now()}`));
worker.on("completed", (job) => {
  if (!job) return;
  line(`accepted ${job.id} ${tokens.get(job.id) ?? ""}\n`);
  tokens.delete(job.id);
  say(`done ${job.id}`);
});
worker.on("error", () => {});
await worker.runUntilSignal();
closeSync(fd);
