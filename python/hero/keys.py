"""Every key of the protocol (docs/protocol.md §2), built here and only here, the way the Rust
client's keys module builds them: a namespace `hero` by default, `{ns}` (a hash tag) in a
Redis Cluster."""
from __future__ import annotations

from dataclasses import dataclass

GROUP = "workers"  # the consumer group of every work stream
DEFAULT_PRIORITY = 5


@dataclass(frozen=True)
class Keys:
    prefix: str = "hero"

    @classmethod
    def cluster(cls, namespace: str = "hero") -> "Keys":
        return cls("{" + namespace + "}")

    def job(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}"

    def job_prefix(self) -> str:
        return f"{self.prefix}:job:"

    def work(self, script_type: str, group: str | None = None, instance: str | None = None,
             priority: int = DEFAULT_PRIORITY) -> str:
        key = f"{self.prefix}:q:work:type:{script_type}"
        if group:
            key += f":group:{group}"
            if instance:
                key += f":inst:{instance}"
        if priority != DEFAULT_PRIORITY:
            key += f":prio:{priority}"
        return key

    def precedence(self, types: list[str], group: str, instance: str,
                   priorities: range | list[int] = range(10)) -> list[str]:
        """The streams a worker reads, in order: instance -> group -> type, priority 0 first
        within each, types varying fastest."""
        out = []
        for g, i in ((group, instance), (group, None), (None, None)):
            for p in priorities:
                for t in types:
                    out.append(self.work(t, g, i, p))
        return out

    def shard_map(self) -> str:
        """The shard map of a sharded namespace (docs/sharding.md), on shard 0."""
        return f"{self.prefix}:meta:shards"

    def reply(self, job_id: str) -> str:
        return f"{self.prefix}:q:reply:{job_id}"

    def reply_prefix(self) -> str:
        return f"{self.prefix}:q:reply:"

    def ctl_instance(self, script_type: str, group: str, instance: str) -> str:
        return f"{self.prefix}:q:ctl:type:{script_type}:group:{group}:inst:{instance}"

    def presence(self, script_type: str, group: str, instance: str) -> str:
        return f"{self.prefix}:meta:actor:inst:{script_type}:{group}:{instance}"

    def consumers(self) -> str:
        return f"{self.prefix}:meta:consumers"

    def fleet(self) -> str:
        """Hash: the live processes of protocol 29 and later, name -> JSON (docs/protocol.md §2)."""
        return f"{self.prefix}:meta:fleet"

    def queue_name(self, stream: str) -> str:
        """How an operator names the queue of work stream `stream`: `<type>[/<group>[/<instance>]]`,
        with ` prio <n>` at another level than the default (the Rust `Keyspace::queue_name`);
        any other key comes back as it is."""
        head = f"{self.prefix}:q:work:type:"
        if not stream.startswith(head):
            return stream
        path, sep, prio = stream[len(head):].partition(":prio:")
        name = path.replace(":group:", "/", 1).replace(":inst:", "/", 1)
        return f"{name} prio {prio}" if sep else name

    def fair_ring(self, stream: str) -> str:
        """List: a fair stream's ring, the limit keys with jobs in its gate, in turn (gate.lua)."""
        return f"{stream}:fair"

    def fair_lane(self, stream: str, limit_key: str) -> str:
        """List: a fair stream's lane of one limit key ('' for the jobs without one): its gated
        jobs, first in, first out."""
        return f"{stream}:fair:{limit_key}"

    def held(self) -> str:
        """Set: the limit keys paused in fair queues, members `<queue name>|<limit key>`."""
        return f"{self.prefix}:meta:held"

    def queues(self) -> str:
        return f"{self.prefix}:meta:queues"

    def paused_queues(self) -> str:
        return f"{self.prefix}:meta:queues:paused"

    def paused_names(self) -> str:
        return f"{self.prefix}:meta:queues:paused:names"

    def whole_policies(self) -> str:
        """A sharded namespace's policies as set, whole, on shard 0 (each shard's own hash
        holds its share)."""
        return f"{self.prefix}:meta:policy:whole"

    def cron(self) -> str:
        return f"{self.prefix}:meta:cron"

    def cron_next(self) -> str:
        return f"{self.prefix}:meta:cron:next"

    def queue_signal(self) -> str:
        return f"{self.prefix}:meta:queues:new"

    def bridge_registry(self) -> str:
        return f"{self.prefix}:meta:bridge"

    def policy(self) -> str:
        return f"{self.prefix}:meta:policy"

    def delayed(self) -> str:
        return f"{self.prefix}:meta:delayed"

    def dead_letter(self) -> str:
        return f"{self.prefix}:meta:dead"

    def retention(self) -> str:
        return f"{self.prefix}:meta:retention"

    def events(self) -> str:
        return f"{self.prefix}:meta:events"

    def stats(self) -> str:
        return f"{self.prefix}:meta:stats"

    def config(self) -> str:
        return f"{self.prefix}:meta:config"

    def duties(self) -> str:
        """Hash with a TTL: the duty lease (`hero_duties`): `holder`, the process doing the
        queue's upkeep, and when its paced duties are next due; it expires with the lease."""
        return f"{self.prefix}:meta:duties"

    def memory(self) -> str:
        """String: Redis's maxmemory policy as a server function last read it from INFO, kept a
        short while (protocol 31)."""
        return f"{self.prefix}:meta:memory"

    def unique(self, key: str) -> str:
        return f"{self.prefix}:unique:{key}"

    def batch(self, name: str) -> str:
        return f"{self.prefix}:batch:{name}"

    def batches(self) -> str:
        return f"{self.prefix}:meta:batches"
