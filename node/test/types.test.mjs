// The type declarations as a TypeScript user compiles against them (tsc --noEmit, strict): an
// `interface` payload type-checks through `submit<Data>`, `Worker<Data, Result>` and
// `job.data`; the worker's and QueueEvents' events are typed, and so are a queue's fair-share
// policy and its keys, and recurring jobs' ticks; a wrong payload, an unknown option and a
// wrong listener are compile errors (each line marked @ts-expect-error, which tsc refuses when
// the line compiles). getJobCounts keeps ends apart from jobs now; priority and level read back.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { ROOT } from "./helpers.mjs";

const SOURCE = `
import { Client, FairKeys, Queue, QueueEvents, Worker, WorkerJob } from "hero-broker";

interface Email {
  to: string;
  subject: string;
  sentAt: Date;
  attachments?: Buffer[];
}

interface Sent {
  messageId: string;
}

export async function app(url: string): Promise<void> {
  const client = await Client.connect(url);
  const id: string = await client.submit<Email>({ type: "emails", payload: { to: "a@b.c", subject: "hi", sentAt: new Date() }, delay: 5000, retries: 2 });
  // @ts-expect-error the payload is not an Email
  await client.submit<Email>({ type: "emails", payload: { to: 1 } });
  // @ts-expect-error BullMQ's attempts is not an option
  await client.submit({ type: "emails", attempts: 3 });

  const worker = new Worker<Email, Sent>("emails", async (job: WorkerJob<Email>) => {
    const to: string = job.data.to;
    const when: Date = job.data.sentAt;
    // BullMQ's job.name is the job's script; its queue is queueName
    const named: string = job.name + job.queueName;
    void named;
    return { messageId: to + when.getTime() };
  }, { url, concurrency: 4 });
  // @ts-expect-error the handler must return a Sent
  new Worker<Email, Sent>("emails", async () => 42, { url });
  // @ts-expect-error limiter is no Worker option
  new Worker("emails", async () => 1, { limiter: { max: 1, duration: 1000 } });
  worker.on("completed", (job, result) => {
    const s: string = result.messageId;
    const subject: string = job.data.subject;
    void s;
    void subject;
  });
  worker.on("failed", (_job, error) => {
    const m: string = error.message;
    void m;
  });
  // @ts-expect-error a completed result is a Sent, not a number
  worker.on("completed", (_job, result: number) => void result);

  const events = new QueueEvents("emails", { url });
  events.on("completed", ({ jobId, returnvalue }) => {
    const j: string = jobId;
    // a value of its own type (protocol 33): unknown until the app says what it is
    const r: unknown = returnvalue;
    void j;
    void r;
  });
  // @ts-expect-error failed carries failedReason, not returnvalue
  events.on("failed", ({ returnvalue }) => void returnvalue);
  void id;

  const queue = new Queue("emails", { url });
  const policy = await queue.setPolicy({ fair: true, fairWeights: { gold: 3 }, keyConcurrency: 2 });
  const cap: number | undefined = policy.key_concurrency;
  const weights: Record<string, number> | undefined = (await queue.getPolicy()).fair_weights;
  // @ts-expect-error fair is a boolean
  await queue.setPolicy({ fair: "yes" });
  // @ts-expect-error key_concurrency is the stored name: the option is keyConcurrency
  await queue.setPolicy({ key_concurrency: 2 });
  const keys: FairKeys = await queue.getKeys({ top: 5 });
  const first: { key: string; waiting: number } | undefined = keys.top[0];
  const held: string[] = keys.held;
  const n: number = (await queue.pauseKey("acme")) + (await queue.resumeKey("acme"));
  // @ts-expect-error getKeys takes { top }
  await queue.getKeys({ limit: 5 });
  // recurring jobs: the first tick (null when the schedule has none) and the engine's ticks
  const next: number | null = await queue.upsertJobScheduler("nightly", { pattern: "0 3 * * *", tz: "Europe/Amsterdam" }, { name: "report", data: { n: 1 } });
  const ticks: number[] = await queue.cronNext("0 3 * * *", { tz: "Europe/Amsterdam", after: new Date(), count: 3 });
  // @ts-expect-error the count is count, not n
  await queue.cronNext("@hourly", { n: 3 });
  // @ts-expect-error after is ms since the epoch or a Date
  await queue.cronNext("@hourly", { after: "now" });
  // @ts-expect-error missed is skip or catch-up
  await queue.upsertJobScheduler("x", { every: 1000, missed: "later" });
  // the jobs now in their counts; ends since the namespace began apart
  const counts = await queue.getJobCounts();
  const now: number = counts.waiting + counts.delayed + counts.running;
  const ended: number = counts.totals.finished + counts.totals.failed + counts.streams[0].totals.dead;
  // @ts-expect-error an end counter is no job count: it is totals.finished
  void counts.finished;
  // BullMQ's priority (1-4 here) or hero's level; a job read back has both
  await client.submit({ type: "emails", priority: 1 });
  await client.submit({ type: "emails", level: 0 });
  const job = await client.get(id);
  const level: number = job.level;
  const priority: number | null = job.priority;
  // failed jobs and cleanup: BullMQ's waiting types and obliterate's force are compile errors
  const cleaned: string[] = await queue.clean(0, 100, "failed");
  // @ts-expect-error clean takes completed or failed: drain deletes waiting jobs
  await queue.clean(0, 100, "wait");
  // @ts-expect-error hero has no force: it refuses while jobs of the queue run
  await queue.obliterate({ force: true });
  const drained: number = (await queue.drain(true)) + (await queue.obliterate());
  const paused: boolean = await queue.isPaused();
  await (await queue.getJob(id))?.retry();
  void [cap, weights, first, held, n, next, ticks, now, ended, level, priority, cleaned, drained, paused];
}
`;

test("an interface payload type-checks through submit, Worker and job.data; events are typed", () => {
  const dir = mkdtempSync(join(tmpdir(), "hero-node-types-"));
  try {
    writeFileSync(join(dir, "app.ts"), SOURCE);
    writeFileSync(
      join(dir, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          noEmit: true,
          target: "ES2022",
          module: "ES2022",
          moduleResolution: "bundler",
          types: ["node"],
          typeRoots: [join(ROOT, "node", "node_modules", "@types")],
          baseUrl: dir,
          paths: { "hero-broker": [join(ROOT, "node", "dist", "types", "index.d.ts")] },
        },
        files: ["app.ts"],
      }),
    );
    const tsc = join(ROOT, "node", "node_modules", "typescript", "bin", "tsc");
    const r = spawnSync(process.execPath, [tsc, "-p", dir], { encoding: "utf8", timeout: 120_000 });
    assert.equal(r.status, 0, r.stdout + r.stderr);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
