// Fair share within a queue (issue 52) on the operator's side: the policy fields a `Queue` sets
// (`fair`, `fairWeights`, `keyConcurrency`, checked here as hero-admin checks them), and the
// limit keys with jobs waiting in a fair queue's gates through `hero_keys` on each shard, the
// reading hero-admin's `Inspector::fair_keys` and hero-py share: counted by the rings' lengths,
// read for a page of 1,000 keys at most, so no view reads every key.
import type { Redis } from "ioredis";

import { InvalidInput, OlderProcesses } from "./errors.js";
import { whole } from "./options.js";
import { Keys } from "./keys.js";
import type { Protocol } from "./protocol.js";

/** The keys whose waiting jobs one `getKeys` reads at most (hero-admin's `KEY_PAGE`). */
export const KEY_PAGE = 1000;

/** One limit key and its jobs waiting in the gates of the queue asked about (`""` for the jobs
 * without a key). */
export interface KeyWaiting {
  key: string;
  waiting: number;
}

/** The limit keys of one queue, summed over its work streams (every priority, group and
 * instance under the name) and shards. */
export interface FairKeys {
  /** Limit keys with jobs waiting in a gate, paused ones included: exact when one page read
   * them all; past that, the rings' lengths. */
  keys: number;
  /** The keys with the most jobs waiting among those read, most first (ties by key). */
  top: KeyWaiting[];
  /** How many keys were read (at most 1,000), and where `getKeys({ from })` goes on (null: it
   * read to the last). */
  read: number;
  next: number | null;
  /** The keys paused (`pauseKey`, `hero pause <queue> --key`) under or over this queue, as
   * `<queue name>|<key>`. */
  held: string[];
}

/** The fair-share fields of `setPolicy`, as the policy stores them (snake_case). */
export function fairFields(p: { fair?: unknown; fairWeights?: unknown; keyConcurrency?: unknown }): Record<string, unknown> {
  const given: Record<string, unknown> = {};
  if (p.fair !== undefined) {
    if (p.fair === false) {
      throw new InvalidInput("fair is set with true; to serve the queue first in, first out again, clear its policy (clearPolicy()) and set the rest again");
    }
    if (p.fair !== true) throw new InvalidInput(`fair ${JSON.stringify(p.fair)} is not true (to turn it off, clear the policy)`);
    given.fair = true;
  }
  if (p.fairWeights !== undefined) {
    const w = p.fairWeights;
    if (typeof w !== "object" || w === null || Array.isArray(w)) {
      throw new InvalidInput(`fairWeights ${JSON.stringify(w)}: give an object of limit key -> turns, e.g. { gold: 3 }`);
    }
    const weights: Record<string, number> = {};
    for (const [key, n] of Object.entries(w)) {
      if (key.trim() === "" || /\s/.test(key)) throw new InvalidInput(`fairWeights key ${JSON.stringify(key)}: name the limit key (no spaces)`);
      weights[key] = whole(`fairWeights[${JSON.stringify(key)}] (turns per round)`, n, 1);
      if (n > 0xffff_ffff) throw new InvalidInput(`fairWeights[${JSON.stringify(key)}] ${n} is more turns than a round takes (at most 4294967295)`);
    }
    given.fair_weights = weights;
  }
  if (p.keyConcurrency !== undefined) {
    given.key_concurrency = whole("keyConcurrency (to run none of a key, pauseKey it)", p.keyConcurrency, 1);
  }
  return given;
}

/** A limit key as `pauseKey` takes it: a string of at most 200 bytes (`""`: the jobs without a
 * key). */
export function limitKey(key: unknown): string {
  if (typeof key !== "string" || Buffer.byteLength(key) > 200) {
    throw new InvalidInput(`limit key ${JSON.stringify(key)}: give a string of at most 200 bytes (the jobs' limitKey)`);
  }
  return key;
}

/** Refuses `what` when the brokers' `fleet_lacks` summary names fair share: a live process of a
 * protocol before 30 would not serve a fair queue's gate (hero-admin's `Fleet::require`). */
export async function requireFair(redis: Redis, keys: Keys, what: string): Promise<void> {
  const raw = await redis.hget(keys.config(), "fleet_lacks");
  let lack: { what?: string; since?: number; processes?: string[] } | undefined;
  try {
    lack = raw ? JSON.parse(raw)?.fair : undefined;
  } catch {
    lack = undefined;
  }
  if (lack && typeof lack === "object") {
    throw new OlderProcesses(
      `${what} uses ${lack.what ?? "fair share within a queue"} (protocol ${lack.since ?? 30} and later), which these live processes do not serve: ${(lack.processes ?? []).join(", ")}. Upgrade them (or wait until they are gone); \`hero actors\` shows each process's protocol`,
    );
  }
}

/** How an operator names the queue of work stream key `stream` (`Keyspace::queue_name`):
 * `<type>[/<group>[/<instance>]]`, with ` prio <n>` at another level than the default; any
 * other key comes back as it is. */
export function queueNameOf(keys: Keys, stream: string): string {
  const head = `${keys.prefix}:q:work:type:`;
  if (!stream.startsWith(head)) return stream;
  let path = stream.slice(head.length);
  let prio: string | null = null;
  const at = path.indexOf(":prio:");
  if (at >= 0) {
    prio = path.slice(at + ":prio:".length);
    path = path.slice(0, at);
  }
  // the first of each, as Rust's replacen(.., 1)
  let name = path.replace(":group:", "/").replace(":inst:", "/");
  if (prio !== null) name += ` prio ${prio}`;
  return name;
}

/** Whether the work stream of queue name `streamName` (`queueNameOf`) is under `queue`
 * (`<type>[/<group>[/<instance>]]`). */
export function under(streamName: string, queue: string): boolean {
  const path = streamName.split(" prio ")[0];
  return path === queue || (path.startsWith(queue) && path.slice(queue.length).startsWith("/"));
}

/** Strings in Rust's order (by UTF-8 bytes, which is by code point): JavaScript's own compares
 * UTF-16 units, which put a surrogate (U+10000 and above) before U+E000..U+FFFF. */
export function byCodePoint(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    if (x >= 0xd800) x += x >= 0xe000 ? -0x800 : 0x2000;
    if (y >= 0xd800) y += y >= 0xe000 ? -0x800 : 0x2000;
    return x - y;
  }
  return a.length - b.length;
}

/** The limit keys of `queue` with jobs waiting in its fair gates on the shards `shards` (each
 * shard's keys, on `redis`), and the `top` with the most. */
export async function fairKeys(shards: Protocol[], queue: string, top: number, from = 0): Promise<FairKeys> {
  const byKey = new Map<string, number>();
  let held: string[] = [];
  let total = 0;
  let at = 0;
  let read = 0;
  for (const p of shards) {
    const page = await p.keysPage(queue, Math.max(from - at, 0), Math.max(KEY_PAGE - read, 0));
    total += page.total;
    at += page.total;
    read += page.read;
    held.push(...page.held);
    for (const [key, n] of page.waiting) byKey.set(key, (byKey.get(key) ?? 0) + n);
  }
  held.sort(byCodePoint);
  held = held.filter((m, i) => i === 0 || m !== held[i - 1]);
  const keys = [...byKey].map(([key, waiting]) => ({ key, waiting }));
  keys.sort((a, b) => b.waiting - a.waiting || byCodePoint(a.key, b.key));
  const end = from + read;
  return {
    // read whole, counted exactly (a key in two streams or shards once); past a page, by the
    // rings' lengths
    keys: from === 0 && end >= total ? keys.length : total,
    top: keys.slice(0, top),
    read,
    next: end < total ? end : null,
    held,
  };
}
