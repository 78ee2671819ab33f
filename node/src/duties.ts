// The queue's upkeep, done by the workers themselves (issue 59), so a Node deployment needs no
// second daemon: due delayed jobs and retries promoted, the jobs of dead workers and idle
// deliveries recovered, running jobs past their time limit ended, ended jobs past their retention
// deleted, dead letters trimmed, and (protocol 32) recurring jobs' due ticks fired, each tick's
// job submitted in the call that claims it, so a tick fires once however many workers run. The
// duties live in one bounded server function, `hero_duties`, the same for every language; this
// loop only drives it, as the Rust `hero_protocol::duties::run` does. One process at a time holds
// the duty lease (a hash with a TTL, on Redis's clock) and calls every 100 ms (again at once while
// the budget ran out); every other process calls every second and gets the holder's name after one
// HGET, so a hundred workers cost Redis about what one broker does. A holder that dies is replaced
// once its lease runs out (3 s); one that closes hands the lease back, so the next caller takes it
// at once.
import { libraryMissing } from "./errors.js";
import { mayRecover, Outage, sleep, type Reporter } from "./outage.js";
import type { Duties, Protocol } from "./protocol.js";

/** How often the duties are looked at, and for how long a holder keeps them (the Rust
 * `duties::Pace::default()`). */
export interface Pace {
  /** The holder's pause between two calls: how late a due delayed job may be promoted. */
  holderMs: number;
  /** Everyone else's: how soon after a lease ran out another process takes it. */
  contenderMs: number;
  /** How long the lease lasts without a call (a dead holder is replaced after it). */
  leaseMs: number;
}

export const PACE: Readonly<Pace> = Object.freeze({ holderMs: 100, contenderMs: 1000, leaseMs: 3000 });

/** The jobs one call looks at, at most: a call stays within a millisecond or two of Redis. */
export const BUDGET = 100;

/** What the loop needs of its worker. */
export interface DutiesOwner extends Reporter {
  readonly isStopping: boolean;
}

/** One step of the upkeep as `holder` (a lease of 0 hands the duties back when it holds them). */
export function step(proto: Protocol, holder: string, leaseMs: number): Promise<Duties> {
  return proto.duties(holder, leaseMs, BUDGET, mayRecover());
}

/** Does the duties on `proto`'s shard as the worker's consumer until the worker stops, then
 * hands the lease back when it holds it. A failing call backs off (100 ms doubling to 5 s,
 * never faster than the holder's pace) and is said on the worker's `error` event at once, then
 * every 30 s, and once when it works again; it never stops the worker, which runs its jobs
 * whoever does the upkeep. Never throws. */
export async function runDuties(w: DutiesOwner, proto: Protocol, pace: Pace = PACE): Promise<void> {
  const failing = new Outage(w, "the queue's upkeep (hero_duties)", "another process may do it meanwhile");
  const stopping = () => w.isStopping;
  let held = false;
  // when the lease this process holds runs out by itself (performance.now())
  let heldUntil = 0;
  while (!w.isStopping) {
    let wait: number;
    const sent = performance.now();
    try {
      const d = await step(proto, w.consumer, pace.leaseMs);
      failing.ok();
      held = d.held;
      if (held) heldUntil = sent + pace.leaseMs;
      wait = d.more ? 0 : held ? pace.holderMs : pace.contenderMs;
    } catch (e) {
      wait = Math.max(failing.failed(e), pace.holderMs);
      if (libraryMissing(e)) await proto.ensureLibrary().catch(() => undefined);
    }
    // `more`: the budget ran out, go on at once, yet let this process's other work in first
    if (wait === 0) await new Promise((r) => setImmediate(r));
    else await sleep(wait, stopping);
  }
  if (held) await handBack(w, proto, heldUntil);
}

/** Hands the duties back (one call, lease 0), so the next caller takes them at once rather than
 * after the lease ran out. Bounded by that lease: past it the hand-back would change nothing,
 * so a Redis out of reach adds no wait to `close()`. A failure is no error: the lease runs out. */
async function handBack(w: DutiesOwner, proto: Protocol, heldUntil: number): Promise<void> {
  const left = heldUntil - performance.now();
  if (left <= 0) return;
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<void>((r) => {
    timer = setTimeout(r, left);
    timer.unref();
  });
  try {
    await Promise.race([step(proto, w.consumer, 0).catch(() => undefined), expired]);
  } finally {
    clearTimeout(timer);
  }
}
