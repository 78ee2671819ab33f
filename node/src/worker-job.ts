// The job a handler is given (`WorkerJob`: BullMQ's `job.data`, `job.updateProgress`, `job.log`,
// an AbortSignal that fires on stop, time limit, lost lease or shutdown) and the outcomes a
// handler throws (`Retry`, `Abort`, BullMQ's `UnrecoverableError`).
import { attemptsOf, Job, jobFromText, recordText, resultsOf } from "./job.js";
import { decode } from "./msgpack.js";
import { text } from "./protocol.js";

const LOG_LINES = 100;

/** Throw from a handler: try the job again after `delayMs` (within its budget). */
export class Retry extends Error {
  constructor(reason = "retry", readonly delayMs = 1000) {
    super(reason);
    this.name = "Retry";
  }
}

/** Throw from a handler: the job ends `error` now, whatever its retry budget. */
export class Abort extends Error {
  constructor(reason = "aborted") {
    super(reason);
    this.name = "Abort";
  }
}

/** BullMQ's name for [`Abort`]. */
export const UnrecoverableError = Abort;

/** The job a handler is given; `Data` is its payload's type (`job.data`). */
export class WorkerJob<Data = any> {
  /** Why `signal` fired (`stopped`, `timeout`, `lost`, `shutdown`), once it has. */
  cancelReason: string | null = null;
  /** Made when a handler first asks for `signal`: an AbortController per job was a twentieth
   * of the worker's time, and most handlers never look. */
  private abort: AbortController | null = null;
  private progress: [number, string] | null = null;
  /** Log lines since the last take (made when a handler first logs). */
  private lines: string[] | null = null;
  /** @internal when the job's time limit ends it (ms since the epoch). */
  deadline = 0;

  private parsed: Job | null = null;
  private decoded: { data: Data } | null = null;
  /** The record's fields as text, its payload and binary values: read from `pairs` when first
   * asked for (a no-op handler's job never is: a worker reads its few fields with `pick`). */
  private read: [Record<string, string>, Buffer | null, Record<string, Buffer>] | null = null;

  /** @internal from the record as a fetch hands it back (HGETALL's flat pairs, as Buffers):
   * parsed when asked for, since a handler that reads only `data` should not pay for the whole
   * record. */
  constructor(
    readonly id: string,
    private readonly pairs: readonly unknown[],
  ) {}

  private get fields(): Record<string, string> {
    return (this.read ??= recordText(this.pairs))[0];
  }
  private get payload(): Buffer | null {
    return (this.read ??= recordText(this.pairs))[1];
  }
  private get values(): Record<string, Buffer> {
    return (this.read ??= recordText(this.pairs))[2];
  }

  /** The job record (every field the protocol defines). */
  get record(): Job {
    return (this.parsed ??= jobFromText(this.id, this.fields, this.payload, this.values));
  }

  /** BullMQ's `getChildrenValues`: what each finished prerequisite returned, by job id (its
   * children in a flow, or the jobs it was submitted `after`): a value of its own type (an
   * object, null, a Date …) when the child returned one, else its text. Read from this job's
   * own record, where each child's end wrote it (`result:<id>`, `value:<id>`): no round trip,
   * and it outlives the children's retention. */
  async getChildrenValues(): Promise<Record<string, unknown>> {
    const out: Record<string, unknown> = {};
    for (const [id, r] of Object.entries(resultsOf(this.fields, this.values))) if (r.status === "finished") out[id] = r.output;
    return out;
  }

  /** The payload, each value of its own type (a Date, a Buffer, a Map, a BigInt beyond 2^53:
   * see msgpack.ts), or null when the job has none. A payload that is not MessagePack throws
   * `Abort` (the job ends error, naming why: no retry can change its bytes). */
  get data(): Data {
    if (this.decoded === null) {
      let data: unknown = null;
      if (this.payload) {
        try {
          data = decode(this.payload);
        } catch (e) {
          throw new Abort(`the payload of job ${this.id} is not MessagePack: ${e instanceof Error ? e.message : e}`);
        }
      }
      this.decoded = { data: data as Data };
    }
    return this.decoded.data;
  }

  /** @internal a field of the record as text ('' when absent). */
  field(name: string): string {
    return this.read ? (this.read[0][name] ?? "") : text(pick(this.pairs, name));
  }

  /** Aborted once the job must stop: stopped, timed out, its lease lost, or shutting down. */
  get signal(): AbortSignal {
    if (this.abort === null) {
      this.abort = new AbortController();
      if (this.cancelReason !== null) this.abort.abort(new Error(this.cancelReason));
    }
    return this.abort.signal;
  }

  /** The job's script: what it asks its handler to do. */
  get script(): string {
    return this.fields.script ?? "";
  }
  /** BullMQ's `job.name`, the first argument of its `queue.add(name, data)`: in hero the job's
   * `script` (a BullMQ app switches on it). Its queue is `queueName`. */
  get name(): string {
    return this.fields.script ?? "";
  }
  /** BullMQ's `job.queueName`: the script type the job was submitted to (`type`). */
  get queueName(): string {
    return this.fields.script_type ?? "";
  }
  /** hero's word for `queueName`: the job's script type. */
  get type(): string {
    return this.fields.script_type ?? "";
  }
  /** The last failed attempt's stack, as BullMQ's `job.stacktrace` (empty on a first run). */
  get stacktrace(): string[] {
    return this.fields.trace ? [this.fields.trace] : [];
  }
  /** 1 for the first run. */
  get attempt(): number {
    return Math.max(1, attemptsOf(this.fields));
  }

  /** How far the job is (0-100, and a short message); the latest is sent within half a second. */
  async updateProgress(percent: number, message = ""): Promise<void> {
    this.progress = [Number(percent), String(message)];
  }

  /** Appends a line to the job's log (it keeps its last 100). */
  async log(line: string): Promise<void> {
    const lines = (this.lines ??= []);
    lines.push(String(line));
    if (lines.length > LOG_LINES) lines.shift();
  }

  /** @internal what was reported since the last take. */
  take(): [[number, string] | null, string[]] | null {
    if (this.progress === null && (this.lines === null || this.lines.length === 0)) return null;
    const out: [[number, string] | null, string[]] = [this.progress, this.lines ?? []];
    this.progress = null;
    this.lines = null;
    return out;
  }

  /** @internal a report taken but not sent (Redis refused it, or was out of reach): it goes
   * with the next one, ahead of the lines logged since (a newer progress wins). */
  putBack(taken: [[number, string] | null, string[]]): void {
    const [progress, lines] = taken;
    if (this.progress === null) this.progress = progress;
    this.lines = [...lines, ...(this.lines ?? [])].slice(-LOG_LINES);
  }

  /** @internal */
  cancel(reason: string): void {
    if (this.cancelReason === null) this.cancelReason = reason;
    this.abort?.abort(new Error(reason));
  }
}

/** A handler: given the job, it answers the output (`Result`: a string is recorded as text;
 * anything else as a value, its MessagePack beside its JSON text, read back of its own type by
 * `returnvalue`, `client.get(id).output`, `getChildrenValues`) or throws. */
export type Handler<Data = any, Result = unknown> = (job: WorkerJob<Data>) => Promise<Result> | Result;

/** True when `v` (a reply item: Buffer or string) is the text `s` (ASCII), compared byte by
 * byte: no string is made of it. */
export function isText(v: unknown, s: string): boolean {
  if (typeof v === "string") return v === s;
  if (!Buffer.isBuffer(v) || v.length !== s.length) return false;
  for (let i = 0; i < s.length; i++) if (v[i] !== s.charCodeAt(i)) return false;
  return true;
}

/** The fields a worker reads of every job before its handler runs, as read (Buffers),
 * undefined when absent: filled by `pickRun`. */
export interface RunFields {
  status: unknown;
  lease: unknown;
  timeout: unknown;
  reply: unknown;
}

/** Fills `out` from a record's flat pairs in one pass, no string made (`pick` a field each
 * took a pass each). */
export function pickRun(pairs: readonly unknown[], out: RunFields): void {
  out.status = out.lease = out.timeout = out.reply = undefined;
  for (let i = 0; i + 1 < pairs.length; i += 2) {
    const k = pairs[i];
    const n = Buffer.isBuffer(k) || typeof k === "string" ? k.length : -1;
    if (n === 6) {
      if (isText(k, "status")) out.status = pairs[i + 1];
    } else if (n === 5) {
      if (isText(k, "lease")) out.lease = pairs[i + 1];
      else if (isText(k, "reply")) out.reply = pairs[i + 1];
    } else if (n === 7) {
      if (isText(k, "timeout")) out.timeout = pairs[i + 1];
    }
  }
}

/** Field `name`'s value in a record's flat pairs (as read: a Buffer), undefined when absent:
 * what a worker reads of every job (status, lease, timeout, reply) without decoding the rest. */
export function pick(pairs: readonly unknown[], name: string): unknown {
  for (let i = 0; i + 1 < pairs.length; i += 2) if (isText(pairs[i], name)) return pairs[i + 1];
  return undefined;
}
