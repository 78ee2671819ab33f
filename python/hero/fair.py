"""A fair queue's limit keys (gate.lua): how many keys have jobs waiting in its gates, the keys
with the most, and the keys an operator paused, for `Queue.keys()` as for `hero queues --keys`:
`hero_keys` on each shard, the reading the Rust `Inspector::fair_keys` and Node's `getKeys`
share, counted by the rings' lengths and read for a page of 1,000 keys at most, so no view reads
every key."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from .keys import Keys

# the keys whose waiting jobs one call reads at most (hero-admin's KEY_PAGE)
KEY_PAGE = 1000


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
    # how many keys were read (at most 1,000), and where `keys(start=)` goes on (None: the last)
    read: int = 0
    next: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON form `hero queues --keys --json` and the API answer."""
        return {"keys": self.keys, "top": [{"key": k.key, "waiting": k.waiting} for k in self.top],
                "read": self.read, "next": self.next, "held": list(self.held)}


def under(stream_name: str, queue: str) -> bool:
    """Whether the work stream of queue name `stream_name` (`Keys.queue_name`, with its
    ` prio <n>`) is under `queue` (`<type>[/<group>[/<instance>]]`): a name covers the names
    below it, never a longer name that merely starts the same ('osis2' is not under 'osis')."""
    path = stream_name.split(" prio ", 1)[0]
    return path == queue or (path.startswith(queue) and path[len(queue):].startswith("/"))


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def fair_keys(shards: Iterable[Any], queue: str, top: int, start: int = 0) -> FairKeys:
    """The limit keys of `queue` with jobs waiting in its fair gates on every shard (`shards`,
    each shard's Protocol): counted, and the `top` with the most among the KEY_PAGE keys read
    from index `start` (0; then a page's `next`)."""
    by_key: dict[str, int] = {}
    held: set[str] = set()
    total = at = read = 0
    for p in shards:
        n, got, here, waiting = p.keys_page(queue, max(start - at, 0), max(KEY_PAGE - read, 0))
        total += n
        at += n
        read += got
        held.update(here)
        for key, w in waiting:
            by_key[key] = by_key.get(key, 0) + w
    ranked = sorted((KeyWaiting(k, n) for k, n in by_key.items()), key=lambda k: (-k.waiting, k.key))
    end = start + read
    # read whole, counted exactly (a key in two streams or shards once); past a page, the rings'
    # lengths
    keys = len(ranked) if start == 0 and end >= total else total
    return FairKeys(keys=keys, top=ranked[:top], held=sorted(held), read=read, next=end if end < total else None)
