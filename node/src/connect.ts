// Connections to Redis: the URL checked by its form before any connection (the schemes the CLI
// takes; `http://…` refused, where ioredis took it for a unix socket path), a first connection
// that fails once, within its timeout, with a `HeroError` naming the URL (its password hidden)
// and the cause, and then lets the process exit (no reconnect attempts, so no endless
// `[ioredis] Unhandled error event` lines); once connected, a lost connection is retried with
// back-off, its errors handed to `onError` (the worker's `error` event) rather than printed by
// ioredis.
import { Redis, RedisOptions } from "ioredis";

import { HeroError, InvalidInput } from "./errors.js";
import { noteOutage } from "./outage.js";

/** How long a first connection may take before it fails. */
export const CONNECT_TIMEOUT_MS = 5000;

/** The URL: the given one, else HERO_REDIS_URL, else the local Redis of `hero up`. */
export function redisUrl(url?: string): string {
  return url ?? process.env.HERO_REDIS_URL ?? "redis://127.0.0.1:6379";
}

/** `url` with its password (and a user's) replaced by `***`, for messages and logs. */
export function shownUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return url.replace(/\/\/[^@/]*@/, "//***@");
  }
}

/** Refuses a URL that is no Redis URL, naming the forms it takes. */
export function checkUrl(url: unknown): string {
  if (typeof url !== "string" || url === "") throw new InvalidInput(`the Redis URL ${JSON.stringify(url)} is not a URL: give redis://host:port`);
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new InvalidInput(`the Redis URL ${JSON.stringify(shownUrl(url))} does not parse: give redis://[user:password@]host:port[/db], rediss:// for TLS, or unix:///path/to/redis.sock`);
  }
  const scheme = u.protocol.replace(/:$/, "");
  if (scheme !== "redis" && scheme !== "rediss" && scheme !== "unix") {
    throw new InvalidInput(`\`${scheme}://\` is not a Redis URL scheme (${shownUrl(url)}): the accepted ones are redis, rediss (TLS) and unix; Sentinel and Cluster URLs are the Rust client's for now`);
  }
  if (scheme !== "unix" && !u.hostname) throw new InvalidInput(`the Redis URL ${shownUrl(url)} names no host: give redis://host:port`);
  if (u.port && !(Number(u.port) > 0 && Number(u.port) < 65536)) throw new InvalidInput(`the Redis URL ${shownUrl(url)} has port ${u.port}, not 1 to 65535`);
  return url;
}

/** A connection to `url`, connected: rejects with a `HeroError` naming the URL and why when the
 * first connection fails (refused, unknown host, timeout, a wrong password), having closed it.
 * `blocking`: its commands may block (no per-request retry limit). `onError`: what a lost
 * connection's errors go to once connected (default: nothing printed; calls reject). */
export async function openRedis(url: string, opts: { blocking?: boolean; onError?: (e: Error) => void } = {}): Promise<Redis> {
  checkUrl(url);
  let connected = false;
  let last: Error | null = null;
  const options: RedisOptions = {
    lazyConnect: true,
    connectTimeout: CONNECT_TIMEOUT_MS,
    maxRetriesPerRequest: opts.blocking ? null : 3,
    // no second try before the first connection: a wrong URL fails once; after it, back off
    retryStrategy: (times) => (connected ? Math.min(times * 200, 2000) : null),
    reconnectOnError: readonlyReconnect(),
  };
  const redis = new Redis(url, options);
  redis.on("error", (e: Error) => {
    last = e;
    if (connected) {
      noteOutage();
      opts.onError?.(e);
    }
  });
  // a connection lost once connected: Redis went away (a restart, a failover) and every
  // worker's heartbeat may have missed it too, so this process's upkeep holds recovery back
  // (outage.ts); ioredis says so only for a loss it reconnects after, never for disconnect()
  redis.on("reconnecting", noteOutage);
  try {
    await redis.connect();
  } catch (e) {
    redis.disconnect();
    const cause = last ?? e;
    const why = cause instanceof Error ? cause.message : String(cause);
    throw new HeroError(`cannot connect to Redis at ${shownUrl(url)}: ${why}${hint(why)}`);
  }
  connected = true;
  return redis;
}

/** ioredis's `reconnectOnError`: a `READONLY` answer means the server this connection reached
 * turned replica (a failover): connect again, so a name that follows the master (Sentinel's, a
 * managed Redis's endpoint) reaches the new one, and send the command again there (2). When
 * READONLY comes back more than 3 times within 10 s the URL names a replica: the command then
 * fails (1, still reconnecting), so its caller says so and retries with back-off rather than
 * the connection trying again in silence. */
export function readonlyReconnect(): (e: Error) => boolean | 1 | 2 {
  let recent: number[] = [];
  return (e) => {
    if (!String(e?.message ?? "").startsWith("READONLY")) return false;
    const now = Date.now();
    recent = recent.filter((t) => now - t < 10_000);
    recent.push(now);
    return recent.length > 3 ? 1 : 2;
  };
}

function hint(why: string): string {
  if (/ECONNREFUSED/.test(why)) return " (nothing listens there: is redis-server running, and is the port right? `hero up` starts one)";
  if (/ENOTFOUND|EAI_AGAIN/.test(why)) return " (no such host: check the host name in the URL, or HERO_REDIS_URL)";
  if (/ETIMEDOUT|timed? ?out/i.test(why)) return ` (no answer within ${CONNECT_TIMEOUT_MS / 1000} s: a firewall, or the wrong host)`;
  if (/WRONGPASS|NOAUTH|invalid password|invalid username/i.test(why)) return " (check the user and password in the URL)";
  return "";
}

/** Another connection like `redis` (its URL and options), its errors handed to `onError` rather
 * than printed by ioredis as unhandled. */
export function duplicate(redis: Redis, onError: (e: Error) => void = () => undefined): Redis {
  const d = redis.duplicate();
  d.on("error", onError);
  d.on("reconnecting", noteOutage);
  return d;
}
