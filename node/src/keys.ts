// Every key of the protocol (docs/protocol.md §2), built here and only here, the way the Rust
// keys module and hero-py build them: a namespace `hero` by default, `{ns}` (a hash tag) in a
// Redis Cluster, and a shard's tag in place of the namespace for the shards of a sharded one.

export const GROUP = "workers";
export const DEFAULT_PRIORITY = 5;

export class Keys {
  constructor(readonly prefix: string = "hero") {}

  static cluster(namespace = "hero"): Keys {
    return new Keys(`{${namespace}}`);
  }

  /** Another shard's keys (its tag), in the same form (plain or braced). */
  withTag(tag: string): Keys {
    return new Keys(this.prefix.startsWith("{") ? `{${tag}}` : tag);
  }

  job(id: string): string {
    return `${this.prefix}:job:${id}`;
  }
  jobPrefix(): string {
    return `${this.prefix}:job:`;
  }
  work(type: string, group?: string | null, instance?: string | null, priority = DEFAULT_PRIORITY): string {
    let key = `${this.prefix}:q:work:type:${type}`;
    if (group) {
      key += `:group:${group}`;
      if (instance) key += `:inst:${instance}`;
    }
    if (priority !== DEFAULT_PRIORITY) key += `:prio:${priority}`;
    return key;
  }
  /** The streams a worker reads, in order: instance → group → type, priority 0 first within
   * each, types varying fastest. */
  precedence(types: string[], group: string, instance: string, priorities: number[] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]): string[] {
    const out: string[] = [];
    for (const [g, i] of [[group, instance], [group, null], [null, null]] as [string | null, string | null][]) {
      for (const p of priorities) for (const t of types) out.push(this.work(t, g, i, p));
    }
    return out;
  }
  reply(id: string): string {
    return `${this.prefix}:q:reply:${id}`;
  }
  replyPrefix(): string {
    return `${this.prefix}:q:reply:`;
  }
  ctlInstance(type: string, group: string, instance: string): string {
    return `${this.prefix}:q:ctl:type:${type}:group:${group}:inst:${instance}`;
  }
  presence(type: string, group: string, instance: string): string {
    return `${this.prefix}:meta:actor:inst:${type}:${group}:${instance}`;
  }
  /** Hash: the live processes of protocol 29 and later, name → JSON (docs/protocol.md §2). */
  fleet(): string {
    return `${this.prefix}:meta:fleet`;
  }

  /** List: a fair stream's ring, the limit keys with jobs in its gate, in turn (gate.lua). */
  fairRing(stream: string): string {
    return `${stream}:fair`;
  }
  /** List: a fair stream's lane of one limit key ('' for jobs without one): its gated jobs. */
  fairLane(stream: string, limitKey: string): string {
    return `${stream}:fair:${limitKey}`;
  }
  /** Set: the limit keys paused in fair queues, members `<queue name>|<limit key>`. */
  held(): string {
    return `${this.prefix}:meta:held`;
  }

  consumers(): string {
    return `${this.prefix}:meta:consumers`;
  }
  queues(): string {
    return `${this.prefix}:meta:queues`;
  }
  pausedQueues(): string {
    return `${this.prefix}:meta:queues:paused`;
  }
  pausedNames(): string {
    return `${this.prefix}:meta:queues:paused:names`;
  }
  /** A sharded namespace's policies as set, whole, on shard 0 (each shard holds its share). */
  wholePolicies(): string {
    return `${this.prefix}:meta:policy:whole`;
  }
  cron(): string {
    return `${this.prefix}:meta:cron`;
  }
  cronNext(): string {
    return `${this.prefix}:meta:cron:next`;
  }
  queueSignal(): string {
    return `${this.prefix}:meta:queues:new`;
  }
  bridgeRegistry(): string {
    return `${this.prefix}:meta:bridge`;
  }
  policy(): string {
    return `${this.prefix}:meta:policy`;
  }
  delayed(): string {
    return `${this.prefix}:meta:delayed`;
  }
  deadLetter(): string {
    return `${this.prefix}:meta:dead`;
  }
  retention(): string {
    return `${this.prefix}:meta:retention`;
  }
  events(): string {
    return `${this.prefix}:meta:events`;
  }
  stats(): string {
    return `${this.prefix}:meta:stats`;
  }
  config(): string {
    return `${this.prefix}:meta:config`;
  }
  /** String: the maxmemory policy as hero_beat or hero_submit last read it from INFO, kept a
   * second (`memory_policy` in the library). */
  memory(): string {
    return `${this.prefix}:meta:memory`;
  }
  batch(name: string): string {
    return `${this.prefix}:batch:${name}`;
  }
  batches(): string {
    return `${this.prefix}:meta:batches`;
  }
  unique(key: string): string {
    return `${this.prefix}:unique:${key}`;
  }
  shardMap(): string {
    return `${this.prefix}:meta:shards`;
  }
  /** Hash: the duty lease (`holder`, and when the paced duties are next due), expiring with
   * the lease: whoever holds it does the queue's upkeep (hero_duties). */
  duties(): string {
    return `${this.prefix}:meta:duties`;
  }
}
