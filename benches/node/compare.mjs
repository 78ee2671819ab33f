// `benches/node-compare`: hero's Node worker and producer beside BullMQ's, both in Node, the
// same no-op handler and concurrency, on one throwaway redis-server (pinned to core 0 and the
// load to core 1 when taskset exists), scenarios worker-concurrent and end-to-end, rounds
// interleaved (FLUSHALL between), medians. Prints a table with the ratios and writes the
// figures as JSON.
//
// usage: node compare.mjs [--jobs N] [--rounds N] [--concurrency N] [--out FILE] [--base DIR]
// --base DIR: a third side, "base", interleaved with the others: another build of the package
// (DIR holds its node/ with dist/ built and benches/node/hero.mjs, e.g. `git archive HEAD node
// benches/node | tar -x -C DIR`, node_modules linked, `node scripts/build.mjs` in DIR/node).
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const opt = { jobs: 50000, rounds: 3, concurrency: 100, out: join(here, "..", "node-results.json") };
for (let i = 2; i < process.argv.length; i += 2) {
  const name = process.argv[i].replace(/^--/, "");
  opt[name] = name === "out" || name === "base" ? process.argv[i + 1] : Number(process.argv[i + 1]);
}

const freePort = () =>
  new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
const pin = spawnSync("taskset", ["--version"]).status === 0;
const pinned = (core, cmd, args) => (pin ? ["taskset", ["-c", String(core), cmd, ...args]] : [cmd, args]);

const port = await freePort();
const dir = mkdtempSync(join(tmpdir(), "hero-node-bench-"));
const [rcmd, rargs] = pinned(0, "redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir]);
const redis = spawn(rcmd, rargs, { stdio: "ignore" });
const url = `redis://127.0.0.1:${port}`;
const cli = (...args) => spawnSync("redis-cli", ["-p", String(port), ...args], { encoding: "utf8" });
for (let i = 0; cli("PING").stdout?.trim() !== "PONG"; i++) {
  if (i > 200) throw new Error("redis-server did not start");
  await new Promise((r) => setTimeout(r, 50));
}

function run(side, scenario) {
  const script = side === "hero" ? join(here, "hero.mjs") : side === "base" ? join(opt.base, "benches", "node", "hero.mjs") : join(here, "..", "peer", "bullmq.mjs");
  const args = [script, scenario, "--url", url, "--jobs", String(opt.jobs), "--concurrency", String(opt.concurrency)];
  const [cmd, cargs] = pinned(1, process.execPath, args);
  const cwd = side === "hero" ? here : side === "base" ? join(opt.base, "benches", "node") : join(here, "..", "peer");
  const out = execFileSync(cmd, cargs, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], timeout: 600_000 });
  return JSON.parse(out.trim().split("\n").pop());
}

const scenarios = ["worker-concurrent", "end-to-end"];
const sides = opt.base ? ["base", "hero", "bullmq"] : ["hero", "bullmq"];
const figures = { hero: {}, bullmq: {}, base: {} };
try {
  for (let round = 1; round <= opt.rounds; round++) {
    for (const scenario of scenarios) {
      for (const side of sides) {
        cli("FLUSHALL");
        process.stderr.write(`[round ${round}/${opt.rounds}] ${scenario} ${side}\n`);
        const f = run(side, scenario);
        process.stderr.write(`    ${JSON.stringify(f)}\n`);
        (figures[side][scenario] ??= []).push(f);
      }
    }
  }
} finally {
  redis.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};
const rows = [];
const based = Boolean(opt.base);
console.log(`| scenario | metric |${based ? " base (Node) |" : ""} hero (Node) | BullMQ (Node) | ratio |${based ? " base ratio |" : ""}`);
console.log(`| --- | --- |${based ? " ---: |" : ""} ---: | ---: | ---: |${based ? " ---: |" : ""}`);
for (const scenario of scenarios) {
  for (const [metric, label, higherBetter] of [
    ["jobs_per_s", "jobs/s", true],
    ["redis_us_per_job", "Redis CPU µs/job", false],
    ["client_us_per_job", "Node CPU µs/job", false],
  ]) {
    const h = median(figures.hero[scenario].map((f) => f[metric]));
    const b = median(figures.bullmq[scenario].map((f) => f[metric]));
    const ratio = h / b;
    const row = { scenario, metric, hero: h, bullmq: b, ratio };
    const x = higherBetter ? "×" : "";
    if (based) {
      row.base = median(figures.base[scenario].map((f) => f[metric]));
      console.log(`| ${scenario} | ${label} | ${row.base.toFixed(1)} | ${h.toFixed(1)} | ${b.toFixed(1)} | ${ratio.toFixed(2)}${x} | ${(row.base / b).toFixed(2)}${x} |`);
    } else console.log(`| ${scenario} | ${label} | ${h.toFixed(1)} | ${b.toFixed(1)} | ${ratio.toFixed(2)}${x} |`);
    rows.push(row);
  }
}
writeFileSync(opt.out, JSON.stringify({ jobs: opt.jobs, rounds: opt.rounds, concurrency: opt.concurrency, pinned: pin, rows }, null, 2) + "\n");
console.log(`wrote ${opt.out}`);
