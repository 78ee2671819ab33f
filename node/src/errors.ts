// The package's errors: what went wrong, from the caller's side, each saying what to do.

/** A call failed; the message says what was wrong and what to do. */
export class HeroError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }

  /** The error a server function's refusal stands for (`HERO_<CODE> message`). */
  static fromServer(e: unknown): HeroError {
    const text = e instanceof Error ? e.message : String(e);
    const codes: [string, new (m: string) => HeroError][] = [
      ["HERO_INVALID_JOB", InvalidJob],
      ["HERO_JOB_NOT_FOUND", JobNotFound],
      ["HERO_BAD_ARG", InvalidInput],
    ];
    for (const [code, Kind] of codes) {
      const at = text.indexOf(code);
      if (at >= 0) return new Kind(text.slice(at + code.length).trim());
    }
    if (text.startsWith("OOM")) {
      return new HeroError(
        "Redis is full (maxmemory with noeviction): the job was not accepted; free memory or raise maxmemory",
      );
    }
    return new HeroError(text);
  }
}

/** An argument is not of the form the call takes. */
export class InvalidInput extends HeroError {}

/** The server refused a job a worker would refuse (nothing of the call was written). */
export class InvalidJob extends HeroError {}

/** A job uses a feature that live processes of an older protocol would refuse or not serve (the
 * brokers' `fleet_lacks`, docs/protocol.md §8): upgrade them, or wait until they are gone. */
export class OlderProcesses extends HeroError {}

/** No such job (never submitted, or deleted after its retention time). */
export class JobNotFound extends HeroError {
  constructor(readonly jobId: string) {
    super(`no job ${jobId} (never submitted, or deleted after its retention time)`);
  }
}

/** A wait ran out before the job ended. */
export class WaitTimedOut extends HeroError {}

/** Refuses an option `what` does not know, naming it and what hero calls it (`hints`): a port
 * from another queue fails at its first wrong line rather than dropping the option. */
export function strictOptions(what: string, opts: object, known: ReadonlySet<string>, hints: Record<string, string> = {}): void {
  for (const k of Object.keys(opts ?? {})) {
    if (!known.has(k)) {
      const near = hints[k] ?? nearest(k, known);
      throw new InvalidInput(`${what} option ${JSON.stringify(k)} is not one hero knows${near ? `; use ${near}` : ""}: the options are ${[...known].join(", ")}`);
    }
  }
}

/** The known name a typo most likely meant (at most two edits away, ignoring case), if any. */
function nearest(k: string, known: ReadonlySet<string>): string | undefined {
  let best: [number, string] | undefined;
  for (const name of known) {
    const d = distance(k.toLowerCase(), name.toLowerCase());
    if (d <= 2 && d < k.length && (!best || d < best[0])) best = [d, name];
  }
  return best?.[1];
}

/** Levenshtein distance, with a swap of neighbours as one edit (`dealy` is one from `delay`). */
function distance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.length][b.length];
}
