// BullMQ's `queue.add(name, data, opts)` and `queue.addBulk([...])` on hero's `Queue`: the job's
// name is its `script` (what `job.name` reads back), its data its payload (`job.data`), its
// queue the Queue's type (and group). `opts` are hero's submit options (options.ts) but for the
// three the call's own arguments and the Queue give: an option hero does not know, BullMQ's
// included (`attempts`, `jobId`, `lifo`, `repeat` …), is refused naming hero's word, never
// ignored.
import { InvalidInput } from "./errors.js";
import type { JobOptions } from "./options.js";

/** `queue.add`'s options: a submit's, less what `add` itself says (its queue, name and data). */
export type AddOptions = Omit<JobOptions, "type" | "script" | "payload">;

/** One job of `addBulk`, as BullMQ writes it. */
export interface BulkJob<Data = unknown> {
  name: string;
  data?: Data;
  opts?: AddOptions;
}

const GIVEN: Record<string, string> = {
  type: "the queue's name (new Queue(type)) is its type: add to that Queue",
  script: "the name argument (queue.add(name, data, opts)) is the job's script",
  payload: "the data argument (queue.add(name, data, opts)) is the job's payload",
};

/** The submit of `add(name, data, opts)` on queue `type` (`group`: the Queue's). */
export function addJob<Data>(type: string, group: string | undefined, name: unknown, data: Data, opts: unknown): JobOptions<Data> {
  if (typeof name !== "string") throw new InvalidInput(`queue.add(name, data, opts): the name is ${name === undefined ? "missing" : `a ${typeof name}`}; give the job's name as a string (job.name reads it back)`);
  const o: object = opts === undefined || opts === null ? {} : (opts as object);
  if (typeof o !== "object" || Array.isArray(o)) throw new InvalidInput("queue.add(name, data, opts): opts is an object of options");
  for (const k of Object.keys(o)) if (k in GIVEN) throw new InvalidInput(`queue.add option ${k}: ${GIVEN[k]}`);
  if ("group" in o && group !== undefined) throw new InvalidInput(`queue.add option group: this Queue is of group ${group} already`);
  const job = { ...(o as AddOptions), type, script: name } as JobOptions<Data>;
  if (group !== undefined) job.group = group;
  if (data !== undefined) job.payload = data;
  return job;
}

/** The submits of `addBulk(jobs)`. */
export function addJobs(type: string, group: string | undefined, jobs: unknown): JobOptions[] {
  if (!Array.isArray(jobs)) throw new InvalidInput("queue.addBulk takes an array of { name, data, opts }");
  return jobs.map((j, i) => {
    if (!j || typeof j !== "object") throw new InvalidInput(`queue.addBulk job #${i} is not an object { name, data, opts }`);
    for (const k of Object.keys(j)) if (!["name", "data", "opts"].includes(k)) throw new InvalidInput(`queue.addBulk job #${i}: ${JSON.stringify(k)} is not one of name, data, opts`);
    const b = j as BulkJob;
    return addJob(type, group, b.name, b.data, b.opts);
  });
}
