"""Sharded namespaces (docs/sharding.md), as the Rust `hero_protocol::shard` reads them: the
shard map `<ns>:meta:shards`, each shard's keys, where a job goes and which shard an id names.
The hashing (FNV-1a 64, jump consistent hash) is the Rust one, bit for bit."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .keys import Keys

_SHARD_ID = re.compile(r"\.s(\d{1,2})$")
_MASK = (1 << 64) - 1


def fnv1a(key: str) -> int:
    h = 0xCBF29CE484222325
    for b in key.encode():
        h ^= b
        h = (h * 0x100000001B3) & _MASK
    return h


def jump(key: int, buckets: int) -> int:
    """Jump consistent hash (Lamping and Veach): a bucket in 0..buckets."""
    b, j = -1, 0
    while j < buckets:
        b = j
        key = (key * 2862933555777941757 + 1) & _MASK
        j = int((b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return max(b, 0)


def shard_of_id(job_id: str) -> int | None:
    """The shard an id names (`<uuid>.s<n>`), if it has that form."""
    m = _SHARD_ID.search(job_id)
    if m is None:
        return None
    n = int(m.group(1))
    return n if n < 64 else None


@dataclass
class ShardMap:
    k: int = 1
    epoch: int = 0
    tags: dict[int, str] = field(default_factory=dict)
    draining: dict[int, int] = field(default_factory=dict)
    history: list[int] = field(default_factory=list)

    @classmethod
    def read(cls, r, base: Keys) -> "ShardMap":
        raw = {k.decode(): v.decode() for k, v in r.hgetall(base.shard_map()).items()}
        m = cls()
        for f, v in raw.items():
            if f == "k":
                m.k = max(1, min(64, int(v)))
            elif f == "epoch":
                m.epoch = int(v)
            elif f == "history":
                # `<k>@<ms it ended>`, oldest first
                m.history = [int(x.split("@")[0]) for x in v.split(",") if x]
            elif f.startswith("tag:") and f[4:].isdigit():
                m.tags[int(f[4:])] = v
            elif f.startswith("drain:") and f[6:].isdigit():
                m.draining[int(f[6:])] = int(v)
            # a field a newer version wrote is ignored
        m.draining = {n: s for n, s in m.draining.items() if n in m.tags}
        return m

    @property
    def sharded(self) -> bool:
        return self.k > 1 or bool(self.draining)

    def served(self) -> list[int]:
        return list(range(self.k)) + sorted(self.draining)

    def keys(self, base: Keys, n: int) -> Keys:
        if n == 0:
            return base
        tag = self.tags[n]
        return Keys("{" + tag + "}" if base.prefix.startswith("{") else tag)

    def home(self, key: str) -> int:
        return jump(fnv1a(key), self.k)

    def older_homes(self, key: str) -> list[int]:
        now, served, out = self.home(key), self.served(), []
        for k in reversed(self.history):
            h = jump(fnv1a(key), k)
            if h != now and h not in out and h in served:
                out.append(h)
        return out
