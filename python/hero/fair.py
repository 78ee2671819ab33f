"""A fair queue's limit keys (gate.lua): how many keys have jobs waiting in its gates, the keys
with the most, and the keys an operator paused, for `Queue.keys()` as for `hero queues --keys`
(a port of the Rust `Inspector::fair_keys`, admin/src/inspect/fair.rs, with the same answer).
An operator's question: each gate's ring is read whole with one LLEN per key, pipelined 1,000 at
a time, so it costs O(keys with work); nothing on a job's path reads it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from .keys import Keys

# keys read per round trip
PAGE = 1000


@dataclass(frozen=True)
class KeyWaiting:
    """One limit key and its jobs waiting in the gates of the queue asked about ('' for the
    jobs without a key)."""

    key: str
    waiting: int


@dataclass(frozen=True)
class FairKeys:
    """The keys of one queue, summed over its work streams (every priority, group and instance
    under the name) and shards: `keys` counts the distinct limit keys with jobs waiting in a
    gate (paused ones included), `top` the keys with the most (most first, ties by key), and
    `held` the keys paused under or over this queue, as `<queue name>|<key>`."""

    keys: int = 0
    top: list[KeyWaiting] = field(default_factory=list)
    held: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form `hero queues --keys --json` and the API answer."""
        return {"keys": self.keys, "top": [{"key": k.key, "waiting": k.waiting} for k in self.top],
                "held": list(self.held)}


def under(stream_name: str, queue: str) -> bool:
    """Whether the work stream of queue name `stream_name` (`Keys.queue_name`, with its
    ` prio <n>`) is under `queue` (`<type>[/<group>[/<instance>]]`): a name covers the names
    below it, never a longer name that merely starts the same ('osis2' is not under 'osis')."""
    path = stream_name.split(" prio ", 1)[0]
    return path == queue or (path.startswith(queue) and path[len(queue):].startswith("/"))


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def fair_keys(r: Any, shards: Iterable[Keys], queue: str, top: int) -> FairKeys:
    """The limit keys of `queue` with jobs waiting in its fair gates on every shard (`shards`,
    each shard's keys, on connection `r`), and the `top` with the most."""
    by_key: dict[str, int] = {}
    held: set[str] = set()
    for keys in shards:
        here = []
        for m in (_text(x) for x in r.smembers(keys.held())):
            q, sep, _ = m.partition("|")
            if sep and (under(q, queue) or under(queue, q)):
                here.append(m)
        _keys_here(r, keys, queue, [m.partition("|")[2] for m in here], by_key)
        held.update(here)
    ranked = sorted((KeyWaiting(k, n) for k, n in by_key.items()), key=lambda k: (-k.waiting, k.key))
    return FairKeys(keys=len(ranked), top=ranked[:top], held=sorted(held))


def _keys_here(r: Any, keys: Keys, queue: str, held: list[str], by_key: dict[str, int]) -> None:
    """Adds one shard's keys of `queue` with their waiting jobs to `by_key`: those in each
    gate's ring, and the `held` keys (out of the rings while paused)."""
    for stream in sorted(_text(s) for s in r.sunion(keys.queues(), keys.paused_queues())):
        if not under(keys.queue_name(stream), queue):
            continue
        ring = [_text(k) for k in r.lrange(keys.fair_ring(stream), 0, -1)] + held
        here: dict[str, int] = {}
        for i in range(0, len(ring), PAGE):
            page = ring[i:i + PAGE]
            pipe = r.pipeline(transaction=False)
            for key in page:
                pipe.llen(keys.fair_lane(stream, key))
            for key, n in zip(page, pipe.execute()):
                # a key twice in one ring is one lane, counted once; a held key's lane may be
                # empty here
                if int(n) > 0:
                    here[key] = int(n)
        for key, n in here.items():
            by_key[key] = by_key.get(key, 0) + n
