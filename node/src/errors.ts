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
      // a schedule, zone or job template the cron engine refuses (hero_cron, hero_cron_next)
      ["HERO_INVALID_CRON", InvalidInput],
    ];
    for (const [code, Kind] of codes) {
      const at = text.indexOf(code);
      if (at >= 0) return new Kind(text.slice(at + code.length).trim());
    }
    const evicting = text.indexOf("HERO_EVICTING");
    if (evicting >= 0) return new Evicting(text.slice(evicting + "HERO_EVICTING".length).trim().split(/\s/)[0] || "unknown");
    if (errorCode(e) === "OOM") return new OutOfMemory(text);
    return new HeroError(text);
  }
}

/** Redis reached its maxmemory (policy noeviction) and refused the write: nothing of the call
 * was written; send it again once there is room. */
export class OutOfMemory extends HeroError {
  constructor(readonly detail = "OOM") {
    super(
      `Redis is full: it reached its maxmemory and refuses writes that add data (policy noeviction), so nothing was written and the job was not accepted (${detail || "OOM"}). Free memory (a shorter --retention-secs, fewer waiting jobs, \`hero dead purge\`) or raise maxmemory, then send it again`,
    );
  }
}

/** Redis's maxmemory-policy may evict keys, a job's record among them: hero accepts no job until
 * it is noeviction, or the brokers accept that policy by name (`hero broker --accept-eviction`). */
export class Evicting extends HeroError {
  constructor(readonly policy: string) {
    super(
      `Redis's maxmemory-policy is ${policy}: under it Redis may evict any key, a job's record included, losing the job without a trace, so hero accepts no job (nothing was written). Set \`maxmemory-policy noeviction\` (CONFIG SET or redis.conf; on a managed Redis, its parameter group), or accept the loss with \`hero broker --accept-eviction ${policy}\``,
    );
  }
}

/** A worker could not go on (one of its loops failed for good): it stopped taking jobs, let its
 * running ones finish, handed the rest back and removed its presence. Its `error` event and
 * `run()`'s rejection carry it, naming why. */
export class WorkerFailed extends HeroError {}

/** The codes of a write Redis refuses for a while, not for good: full (`OOM`), a failing disk
 * (`MISCONF`), turned replica (`READONLY`: the connection finds the master again), too few
 * replicas (`NOREPLICAS`), loading, a busy script, a replica cut from its master, a cluster
 * between states (the Rust client's `refused_write`, hero-py's `REFUSED_WRITE`). */
export const REFUSED_WRITE: ReadonlySet<string> = new Set(["OOM", "MISCONF", "READONLY", "NOREPLICAS", "LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"]);

/** A Redis error's code (the first word of its message: `OOM`, `NOREPLICAS`, `ERR`), or ''. */
export function errorCode(e: unknown): string {
  const text = e instanceof Error ? e.message : typeof e === "string" ? e : "";
  return /^[A-Z][A-Z_]*(?=\s|$)/.exec(text)?.[0] ?? "";
}

/** The code when `e` is a write Redis refuses for a while ({@link REFUSED_WRITE}), else ''. */
export function refusedWrite(e: unknown): string {
  const code = errorCode(e);
  return REFUSED_WRITE.has(code) ? code : "";
}

/** How ioredis and the socket say a connection failed (no answer came from Redis). */
const CONNECTION = /Connection is closed|Stream isn't writeable|ECONNRESET|ECONNREFUSED|EPIPE|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ENOTFOUND|EAI_AGAIN|socket hang up|Command timed out|max retries per request/i;

/** True for an outage, not a verdict: Redis out of reach (a broken connection, a timeout), or
 * refusing writes for a while ({@link REFUSED_WRITE}), or between roles (`UNBLOCKED`). What was being written is kept and sent
 * again. A missing function library (a Redis restarted empty) counts too: it is loaded again. */
export function transient(e: unknown): boolean {
  // UNBLOCKED: a blocking read cut short as the server turned replica (a failover under way)
  if (refusedWrite(e) || errorCode(e) === "UNBLOCKED" || libraryMissing(e)) return true;
  if (!(e instanceof Error)) return false;
  if (e.name === "ReplyError") return false;
  return e.name === "MaxRetriesPerRequestError" || CONNECTION.test(e.message) || CONNECTION.test(String((e as { code?: unknown }).code ?? ""));
}

/** True when Redis lacks the function library (restarted empty, or flushed): load it again. */
export function libraryMissing(e: unknown): boolean {
  return (e instanceof Error ? e.message : String(e)).includes("Function not found");
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
