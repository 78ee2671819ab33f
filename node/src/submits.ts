// New jobs on their way to hero_submit as protocol 35 takes them: each work stream of the batch
// once, and a job as its id, a code and its field, value pairs, without the fields the function
// writes itself (`created_at`, Redis's clock; `script_type`, the stream's type).

import type { Arg } from "./resp.js";

/** A new job as the package hands it to hero_submit: id, work stream, run-at ms or 0, fields. */
export type NewJobArgs = [string, string, number, [string, Arg][]];

/** The fields hero_submit writes itself since protocol 35: left out of the call. */
const WRITTEN_BY_SUBMIT = new Set(["created_at", "script_type"]);

/** A batch as hero_submit takes it: the streams in order of first use, and per job its code
 * (`<stream>.<values>`, 1 the first stream, then `@<run-at>` when it has one) and its pairs. */
export function submitsByStream(jobs: NewJobArgs[]): { streams: string[]; codes: string[]; kept: [string, Arg][][] } {
  const at = new Map<string, number>();
  const codes: string[] = new Array(jobs.length);
  const kept: [string, Arg][][] = new Array(jobs.length);
  jobs.forEach(([, stream, runAt, fields], j) => {
    let s = at.get(stream);
    if (s === undefined) at.set(stream, (s = at.size + 1));
    const mine = fields.filter(([f]) => !WRITTEN_BY_SUBMIT.has(f));
    kept[j] = mine;
    codes[j] = runAt ? `${s}.${mine.length * 2}@${runAt}` : `${s}.${mine.length * 2}`;
  });
  return { streams: [...at.keys()], codes, kept };
}
