// Sharded namespaces (docs/sharding.md), as `hero_protocol::shard` and hero-py read them: the
// shard map `<ns>:meta:shards`, each shard's keys, a key's home and the shard an id names. The
// hashing (FNV-1a 64, jump consistent hash) is the Rust one, bit for bit.
import { Keys } from "./keys.js";

const MASK = (1n << 64n) - 1n;

export function fnv1a(key: string): bigint {
  let h = 0xcbf29ce484222325n;
  for (const b of Buffer.from(key, "utf8")) {
    h ^= BigInt(b);
    h = (h * 0x100000001b3n) & MASK;
  }
  return h;
}

/** Jump consistent hash (Lamping and Veach): a bucket in 0..buckets. */
export function jump(key: bigint, buckets: number): number {
  let b = -1;
  let j = 0;
  while (j < buckets) {
    b = j;
    key = (key * 2862933555777941757n + 1n) & MASK;
    j = Math.floor((b + 1) * (Number(1n << 31n) / Number((key >> 33n) + 1n)));
  }
  return Math.max(b, 0);
}

/** The shard an id names (`<uuid>.s<n>`), if it has that form. */
export function shardOfId(id: string): number | null {
  const m = /\.s(\d{1,2})$/.exec(id);
  if (!m) return null;
  const n = Number(m[1]);
  return n < 64 ? n : null;
}

export class ShardMap {
  k = 1;
  epoch = 0;
  tags = new Map<number, string>();
  draining = new Map<number, number>();
  history: number[] = [];

  static parse(raw: Record<string, string>): ShardMap {
    const m = new ShardMap();
    for (const [f, v] of Object.entries(raw)) {
      if (f === "k") m.k = Math.max(1, Math.min(64, Number(v) || 1));
      else if (f === "epoch") m.epoch = Number(v) || 0;
      // `<k>@<ms it ended>`, oldest first
      else if (f === "history") m.history = v.split(",").filter(Boolean).map((x) => Number(x.split("@")[0]));
      else if (/^tag:\d+$/.test(f)) m.tags.set(Number(f.slice(4)), v);
      else if (/^drain:\d+$/.test(f)) m.draining.set(Number(f.slice(6)), Number(v));
      // a field a newer version wrote is ignored
    }
    for (const n of [...m.draining.keys()]) if (!m.tags.has(n)) m.draining.delete(n);
    return m;
  }

  get sharded(): boolean {
    return this.k > 1 || this.draining.size > 0;
  }

  served(): number[] {
    return [...Array(this.k).keys(), ...[...this.draining.keys()].sort((a, b) => a - b)];
  }

  keys(base: Keys, n: number): Keys {
    if (n === 0) return base;
    const tag = this.tags.get(n);
    if (tag === undefined) throw new Error(`shard ${n} has no tag in the shard map`);
    return base.withTag(tag);
  }

  home(key: string): number {
    return jump(fnv1a(key), this.k);
  }

  olderHomes(key: string): number[] {
    const now = this.home(key);
    const served = this.served();
    const out: number[] = [];
    for (const k of [...this.history].reverse()) {
      const h = jump(fnv1a(key), k);
      if (h !== now && !out.includes(h) && served.includes(h)) out.push(h);
    }
    return out;
  }
}
