// Outcomes on their way to hero_complete: what a worker records of a run (`Done`), the code the
// call takes for its outcome, a batch grouped by stream as protocol 34 takes it, and a failure's
// trace bounded as the call keeps it.

/** An outcome's letter in a hero_complete code (protocol 34). */
export const LETTERS: Record<Done["outcome"], string> = { done: "d", fail: "f", retry: "r", abort: "a" };

/** One outcome on its way to hero_complete. */
export interface Done {
  id: string;
  stream: string;
  lease: string;
  outcome: "done" | "fail" | "retry" | "abort";
  text: string;
  retryAt: number;
  reply: string;
  ranMs: number;
  /** A failure's stack, bounded ({@link boundedTrace}); stored as the record's `trace`. */
  trace?: string;
  /** A success's value, MessagePack (protocol 33): stored as the record's `value`. */
  value?: Buffer;
}

/** The most of a trace a worker sends (hero_complete keeps as much). */
export const TRACE_MAX = 16 * 1024;

/** An error's stack (its message when it has none), cut to its first TRACE_MAX bytes: a stack
 * names the failure and the frame that threw it first. */
export function boundedTrace(e: unknown): string {
  const t = e instanceof Error ? (e.stack ?? `${e.name}: ${e.message}`) : String(e);
  const b = Buffer.from(t, "utf8");
  return b.length <= TRACE_MAX ? t : b.subarray(0, TRACE_MAX).toString("utf8").replace(/\uFFFD$/, "");
}

/** A batch grouped by stream, as hero_complete takes it since protocol 34: the streams in the
 * order they first come, each one's count of jobs, the jobs in that order, and `order`, each
 * grouped job's place in the batch given (null when it came grouped, as one stream's does). */
export function byStream(given: Done[]): { done: Done[]; streams: string[]; counts: number[]; order: number[] | null } {
  const streams: string[] = [];
  const counts: number[] = [];
  const of: number[] = new Array(given.length);
  let order: number[] | null = null;
  for (let i = 0; i < given.length; i++) {
    let s = streams.indexOf(given[i].stream);
    if (s < 0) {
      s = streams.push(given[i].stream) - 1;
      counts.push(0);
    }
    counts[s]++;
    of[i] = s;
    // a stream met again after another: the batch is not grouped
    if (i > 0 && s < of[i - 1]) order = [];
  }
  if (!order) return { done: given, streams, counts, order };
  for (let s = 0; s < streams.length; s++) for (let i = 0; i < given.length; i++) if (of[i] === s) order.push(i);
  return { done: order.map((i) => given[i]), streams, counts, order };
}
