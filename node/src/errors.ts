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
      throw new InvalidInput(`${what} option ${JSON.stringify(k)} is not one hero knows${hints[k] ? `; use ${hints[k]}` : ""}: the options are ${[...known].join(", ")}`);
    }
  }
}
