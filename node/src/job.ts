// The job record (docs/protocol.md §3) as Node sees it, and what calls answer.
import { decode } from "./msgpack.js";
import { binaryField, readResult } from "./value.js";

export const DEFAULT_TIMEOUT_S = 300;

export interface Progress {
  percent: number;
  message: string;
}

/** A job record, read as the protocol describes it (absent fields at their defaults; fields a
 * newer version wrote are kept in `raw` and otherwise ignored). */
export interface Job {
  id: string;
  status: string;
  script: string;
  /** BullMQ's `job.name` (the first argument of `queue.add(name, data)`): the job's `script`. */
  name: string;
  /** BullMQ's `job.data`: the payload decoded from its MessagePack (null without one; the raw
   * bytes when they are not MessagePack, a foreign producer's). */
  data: unknown;
  /** BullMQ's `job.queueName`: the job's queue (its script type). */
  queueName: string | null;
  /** BullMQ's `failedReason`: `error`. */
  failedReason: string | null;
  /** BullMQ's `attemptsMade`: `attempts`. */
  attemptsMade: number;
  /** BullMQ's `timestamp`, `processedOn`, `finishedOn`: ms since the epoch (null when not yet). */
  timestamp: number;
  processedOn: number | null;
  finishedOn: number | null;
  scriptType: string | null;
  group: string | null;
  instance: string | null;
  /** hero's level it is queued at: 0 (served first) to 9, default 5 (the submit's `level`). */
  level: number;
  /** The level as BullMQ's priority (the submit's `priority`): 0 (no priority) for level 5, 1-4
   * for levels 6-9, null for levels 0-4 (served before jobs without a priority: BullMQ has no
   * such priority). */
  priority: number | null;
  /** The time limit it names, in ms (the record keeps whole seconds); null: its queue policy's, else 300 s. */
  timeout: number | null;
  retries: number;
  attempts: number;
  env: Record<string, string>;
  tags: string[];
  prerequisites: string[];
  /** What the handler returned (protocol 33's reading rule): the record's `value` decoded (an
   * object, an array, null, a Date, a Buffer, a number … of its own type) when it has one, else
   * its `output` text as a string (a string result, or a foreign or older worker's text); null
   * when it has neither. */
  output: unknown;
  /** BullMQ's name for `output`: the value the handler returned. */
  returnvalue: unknown;
  /** The record's `output` as text: the string a handler returned, or the JSON of its value
   * (what readers older than protocol 33 show); null when there is none. */
  outputText: string | null;
  error: string | null;
  /** The last failed attempt's stack (BullMQ's name; one entry, or none): a Node stack, a Python
   * traceback or a Rust error chain, as its worker recorded it, kept when a retry succeeds. */
  stacktrace: string[];
  workerId: string;
  lease: string | null;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  batch: string | null;
  unique: string | null;
  limitKey: string | null;
  progress: Progress | null;
  log: string[];
  payload: Buffer | null;
  /** The record's `value`: the MessagePack bytes of what the handler returned, when that was
   * not a string (null otherwise). */
  value: Buffer | null;
  /** Its own back-off (`{kind, base_ms, cap_ms, jitter}`), when it was given one. */
  backoff: { kind: string; base_ms: number; cap_ms: number; jitter: number } | null;
  /** Its own retention once finished / failed (ms), when it was given one. */
  keep: number | null;
  keepFailed: number | null;
  /** Its prerequisites' results by id, as each one's end wrote them into this record. */
  results: Record<string, ChildResult>;
  raw: Record<string, string>;
  /** Fields this version does not know, as read: a newer version wrote them. Not bad input
   * (a job carrying them runs), and nothing here removes them. */
  unknownFields: Record<string, string>;
}

/** The record's fields this version knows (docs/protocol.md §3), with the bridge's bookkeeping. */
export const KNOWN_FIELDS: ReadonlySet<string> = new Set([
  "id", "status", "script", "script_type", "group", "instance", "priority", "timeout",
  "retries", "attempts", "run_at", "concurrent", "reply", "created_at", "updated_at",
  "started_at", "finished_at", "env_vars", "prerequisites", "dependencies", "dependents",
  "tags", "caller_id", "context_id", "worker_id", "log_path", "traceparent", "unique",
  "unique_ttl", "limit_key", "output", "error", "trace", "lease", "entry", "payload", "deps_left",
  "batch", "progress", "log", "bridge", "bridge_stop", "bridge_taken", "dead", "backoff", "keep",
  "keep_failed", "value",
]);

/** A prerequisite's end as its dependent keeps it (`result:<id>` = `<status>:<text>`, and
 * `value:<id>` = its value's bytes when it returned one); read from a producer, a child not yet
 * ended has its status only. */
export interface ChildResult {
  status: string;
  /** What the child returned, by the reading rule (`Job.output`). */
  output: unknown;
  /** Its output as text (the JSON of a value). */
  outputText: string | null;
  error: string | null;
}

export const RESULT_PREFIX = "result:";
export const VALUE_PREFIX = "value:";

/** The results a record holds, by prerequisite id (`values`: the record's binary fields). */
export function resultsOf(text: Record<string, string>, values: Record<string, Buffer> = {}): Record<string, ChildResult> {
  const out: Record<string, ChildResult> = {};
  for (const [k, v] of Object.entries(text)) {
    if (!k.startsWith(RESULT_PREFIX)) continue;
    const id = k.slice(RESULT_PREFIX.length);
    const at = v.indexOf(":");
    const status = at < 0 ? "" : v.slice(0, at);
    if (status === "finished") {
      const t = v.slice(at + 1);
      out[id] = { status, output: readResult(values[VALUE_PREFIX + id], t), outputText: t, error: null };
    } else if (status === "error") out[id] = { status, output: null, outputText: null, error: v.slice(at + 1) };
  }
  return out;
}

/** A record as HGETALL answers it through `callBuffer`: field, value, … as Buffers (the flat
 * reply, not ioredis's object, whose reply transform cost the worker a tenth of its time). */
export function jobFromRecord(id: string, pairs: readonly unknown[]): Job {
  const [text, payload, values] = recordText(pairs);
  return jobFromText(id, text, payload, values);
}

/** The record's fields as text, and its binary ones apart (MessagePack bytes, never decoded as
 * UTF-8): the payload, and the `value` and prerequisites' `value:<id>` (protocol 33). What a
 * worker reads before it runs a job; the rest of [`Job`] is parsed when a handler asks for it. */
export function recordText(pairs: readonly unknown[]): [Record<string, string>, Buffer | null, Record<string, Buffer>] {
  const text: Record<string, string> = {};
  let payload: Buffer | null = null;
  const values: Record<string, Buffer> = {};
  for (let i = 0; i + 1 < pairs.length; i += 2) {
    const k = String(pairs[i]);
    const v = pairs[i + 1];
    if (binaryField(k)) {
      const b = Buffer.isBuffer(v) ? v : Buffer.from(String(v));
      if (k === "payload") payload = b;
      else values[k] = b;
    } else text[k] = String(v);
  }
  return [text, payload, values];
}

/** A whole number field, else `dflt`. */
export function numberField(text: Record<string, string>, name: string, dflt: number | null): number | null {
  const v = text[name] ?? "";
  return /^\d+$/.test(v) ? Number(v) : dflt;
}

/** How many runs the record says began (the protocol's rule: a started record without
 * `attempts` is on its first). */
export function attemptsOf(text: Record<string, string>): number {
  const n = numberField(text, "attempts", null);
  if (n !== null) return n;
  const status = text.status ?? "";
  return (status === "started" || status === "finished" || status === "error") && text.started_at ? 1 : 0;
}

export function jobFromText(id: string, text: Record<string, string>, payload: Buffer | null, values: Record<string, Buffer> = {}): Job {
  const num = (name: string, dflt: number | null): number | null => numberField(text, name, dflt);
  const list = (name: string): string[] => {
    const v = text[name];
    if (!v) return [];
    try {
      const out = JSON.parse(v);
      return Array.isArray(out) ? out.map(String) : [];
    } catch {
      return [];
    }
  };
  let progress: Progress | null = null;
  if (text.progress) {
    try {
      const p = JSON.parse(text.progress);
      progress = { percent: Number(p.percent ?? 0), message: String(p.message ?? "") };
    } catch {
      progress = null;
    }
  }
  let env: Record<string, string> = {};
  try {
    const e = text.env_vars ? JSON.parse(text.env_vars) : {};
    if (e && typeof e === "object" && !Array.isArray(e)) env = e;
  } catch {
    env = {};
  }
  const status = text.status ?? "";
  const attempts = attemptsOf(text);
  let backoff = null;
  try {
    const b = text.backoff ? JSON.parse(text.backoff) : null;
    if (b && typeof b === "object" && !Array.isArray(b)) backoff = b;
  } catch {
    backoff = null;
  }
  const results = resultsOf(text, values);
  const output = readResult(values.value, text.output);
  const level = num("priority", 5) ?? 5;
  const ms = (iso: string | undefined): number | null => {
    const t = iso ? Date.parse(iso) : NaN;
    return Number.isNaN(t) ? null : t;
  };
  let data: unknown = null;
  if (payload) {
    try {
      data = decode(payload);
    } catch {
      data = payload;
    }
  }
  return {
    id: text.id || id,
    status,
    script: text.script ?? "",
    name: text.script ?? "",
    data,
    queueName: text.script_type ?? null,
    failedReason: text.error ?? null,
    attemptsMade: attempts,
    timestamp: ms(text.created_at) ?? 0,
    processedOn: ms(text.started_at),
    finishedOn: ms(text.finished_at),
    scriptType: text.script_type ?? null,
    group: text.group || null,
    instance: text.instance || null,
    level,
    priority: level === 5 ? 0 : level > 5 ? level - 5 : null,
    timeout: ((t) => (t === null ? null : t * 1000))(num("timeout", null)),
    retries: num("retries", 0) ?? 0,
    attempts,
    env,
    tags: list("tags"),
    prerequisites: text.prerequisites ? list("prerequisites") : list("dependencies"),
    output,
    returnvalue: output,
    outputText: text.output ?? null,
    error: text.error ?? null,
    stacktrace: text.trace ? [text.trace] : [],
    workerId: text.worker_id ?? "",
    lease: text.lease || null,
    createdAt: text.created_at ?? "",
    startedAt: text.started_at ?? null,
    finishedAt: text.finished_at ?? null,
    batch: text.batch || null,
    unique: text.unique || null,
    limitKey: text.limit_key || null,
    progress,
    log: list("log"),
    payload,
    value: values.value ?? null,
    backoff,
    keep: num("keep", null),
    keepFailed: num("keep_failed", null),
    results,
    raw: text,
    unknownFields: Object.fromEntries(
      Object.entries(text).filter(([k]) => !KNOWN_FIELDS.has(k) && !(k.startsWith(RESULT_PREFIX) && k.slice(RESULT_PREFIX.length) in results)),
    ),
  };
}

/** What a submit answers. */
export interface Submitted {
  id: string;
  /** False when the id existed already (nothing changed) or a uniqueness key was held. */
  created: boolean;
  status: string;
  /** The job holding the uniqueness key, when this submit queued nothing. */
  duplicateOf: string | null;
}

/** How a job ended: `status` is `finished` or `error`. */
export interface Result {
  id: string;
  status: string;
  /** What the handler returned, by the reading rule (`Job.output`): a value of its own type, or
   * the text a string result (or a foreign worker) wrote; null for a failed job. */
  output: unknown;
  /** BullMQ's name for `output`. */
  returnvalue: unknown;
  /** The record's `output` text ('' when none): a string result, or the JSON of a value. */
  outputText: string;
  error: string;
  ok: boolean;
}

export interface BatchInfo {
  name: string;
  total: number;
  pending: number;
  finished: number;
  failed: number;
  state: "open" | "closed" | "done";
  completeId: string | null;
  successId: string | null;
}
