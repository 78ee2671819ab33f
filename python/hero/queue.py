"""The operator's side of one queue (hero-admin's `Admin` for a script type, as BullMQ's
`Queue`): pause and resume (the whole queue, or one limit key of a fair queue), job counts, the
keys with work of a fair queue, the queue policy, dead letters, a job requeued, promoted or
removed, and recurring jobs; a failed job retried, and the queue cleaned, drained or obliterated
(mixed in from `cleanup`); its jobs listed by state (`get_jobs`, `get_failed`, ..., `get_job`,
mixed in from `listing`). Thin wrappers over the server functions hero-admin
calls (hero_pause, hero_counts, hero_policy, hero_dead, hero_requeue, hero_remove, hero_cron,
hero_cron_next), on every shard of a sharded namespace (recurring jobs: the namespace's).

    q = hero.Queue("email")
    q.pause(); q.resume()
    q.job_counts().waiting
    q.set_policy(retries=5, backoff="exponential:1s:1m", rate="100/s")
    q.set_policy(fair=True, fair_weights={"gold": 3}, key_concurrency=2)
    q.keys().top; q.pause_key("acme"); q.resume_key("acme")
    q.cron_add("nightly", "0 3 * * *", "send_digest", payload=b"...")
"""
from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any

import redis

from .cleanup import Cleanup
from .client import Client, _name, _whole, read_lacks
from .errors import HeroError, InvalidInput, JobNotFound, OlderProcesses
from .fair import FairKeys, fair_keys
from .listing import Listing
from .options import Backoff, duration_ms
from .options import rate as parse_rate  # set_policy takes an argument named rate


@dataclass(frozen=True)
class StreamCounts:
    """One work stream of the queue: `waiting`, `running`, `delayed` sizes now; `finished`,
    `failed`, `dead` counters since the namespace began."""

    stream: str
    waiting: int
    running: int
    delayed: int
    finished: int
    failed: int
    dead: int
    paused: bool
    oldest_waiting_ms: int | None
    shard: int = 0


@dataclass(frozen=True)
class JobCounts:
    """A queue's counts summed over its work streams (every priority, group and instance, every
    shard): `waiting`, `delayed`, `running` are sizes now; `finished`, `failed`, `dead` the
    counters `hero queues` shows. `streams` holds each stream's own."""

    waiting: int = 0
    delayed: int = 0
    running: int = 0
    finished: int = 0
    failed: int = 0
    dead: int = 0
    streams: list[StreamCounts] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("waiting", "delayed", "running", "finished", "failed", "dead")}


@dataclass(frozen=True)
class DeadLetter:
    entry: str
    job_id: str
    reason: str
    queue: str
    shard: int = 0


class Queue(Cleanup, Listing):
    """The operator's handle on queue `type` (or `type/group` with `group=`)."""

    def __init__(self, type: str, url: str | None = None, namespace: str = "hero", *, group: str | None = None,
                 client: Client | None = None, cluster: bool = False):
        self.type = _name("script type", type)
        self.name = type if group is None else f"{type}/{_name('group', group)}"
        self.client = client if client is not None else Client(url, namespace, cluster=cluster)
        self.r = self.client.r

    # -- shards -------------------------------------------------------------------------------
    def _shards(self):
        """(n, keys, protocol) of every shard served, shard 0 first."""
        m = self.client.shard_map()
        ns = m.served() if m.sharded else [0]
        return [(n, *self.client._shard(n)) for n in ns]

    def _call(self, f):
        try:
            return f()
        except redis.ResponseError as e:
            raise HeroError.from_server(e) from None

    # -- pause --------------------------------------------------------------------------------
    def pause(self) -> int:
        """No worker takes a new job of the queue (running ones finish; submits still queue);
        lasts until resume(). Answers how many work streams it covers now."""
        return sum(self._call(lambda p=p: p.pause(self.name, True)) for _, _, p in self._shards())

    def resume(self) -> int:
        return sum(self._call(lambda p=p: p.pause(self.name, False)) for _, _, p in self._shards())

    def pause_key(self, key: str) -> int:
        """Holds one limit key of a fair queue: its jobs wait in the gate while the queue's
        other keys flow (running ones finish; submits still queue); lasts until resume_key(),
        across restarts. '' names the jobs without a key. Refused (InvalidInput) for a queue
        that is not fair: only the gate can hold a key's jobs back. Answers in how many work
        streams the key had jobs."""
        return self._key_call(key, True)

    def resume_key(self, key: str) -> int:
        """Releases a limit key held by pause_key(): it gets its turns again where it has jobs;
        answers in how many work streams it was put back in turn."""
        return self._key_call(key, False)

    def _key_call(self, key: str, pause: bool) -> int:
        if not isinstance(key, str) or len(key.encode()) > 200:
            raise InvalidInput(f"limit key {key!r}: give text of at most 200 bytes ('' for the jobs without one)")
        # as hero-admin: a worker before protocol 30 would not honour the hold
        lack = read_lacks(self.r.hget(self.client.keys.config(), "fleet_lacks")).get("fair")
        if lack:
            raise OlderProcesses(
                f"pausing a key of queue {self.name} uses fair share (protocol 30 and later), which these live "
                f"processes do not serve: {', '.join(lack.get('processes', []))}. Upgrade them (or wait until "
                "they are gone); `hero actors` shows each process's protocol")
        return sum(self._call(lambda p=p: p.pause_key(self.name, key, pause)) for _, _, p in self._shards())

    def keys(self, top: int = 10, start: int = 0) -> FairKeys:
        """The limit keys of a fair queue with jobs waiting in its gates (every priority, group
        and instance under the name, every shard): how many, the `top` with the most (most
        first, ties by key) among a page of 1,000 keys read from `start` (0; then the page's
        `next`), and the keys held by pause_key(), as `hero queues --keys` shows them."""
        _whole("top", top, 0)
        _whole("start", start, 0)
        return self._call(lambda: fair_keys([p for _, _, p in self._shards()], self.name, top, start))

    # -- counts -------------------------------------------------------------------------------
    def job_counts(self) -> JobCounts:
        streams = []
        for n, _, p in self._shards():
            for s in self._call(lambda p=p: p.counts(self.name)):
                streams.append(StreamCounts(s[0], *s[1:7], bool(s[7]), None if s[8] < 0 else s[8], shard=n))
        total = {k: sum(getattr(s, k) for s in streams)
                 for k in ("waiting", "delayed", "running", "finished", "failed", "dead")}
        return JobCounts(**total, streams=streams)

    # -- policy -------------------------------------------------------------------------------
    def policy(self) -> dict[str, Any]:
        """The policy set for the queue itself, as stored (ms, `{max, per_ms}` rates, the
        back-off's JSON form); {} when none."""
        keys = self.client.keys
        raw = None
        if self.client.shard_map().sharded:
            raw = self.r.hget(keys.whole_policies(), self.name)
        if raw is None:
            raw = self.r.hget(keys.policy(), self.name)
        if not raw:
            return {}
        try:
            p = json.loads(raw)
        except ValueError:
            raise HeroError(f"the policy of queue {self.name} is not JSON; set it again with set_policy") from None
        return p if isinstance(p, dict) else {}

    def set_policy(self, *, retries: int | None = None, backoff: Any = None, timeout: Any = None,
                   lease: Any = None, concurrency: int | None = None, rate: Any = None, key_rate: Any = None,
                   retention: Any = None, aging: Any = None, fair: bool | None = None,
                   fair_weights: dict[str, int] | None = None, key_concurrency: int | None = None) -> dict[str, Any]:
        """Sets the fields given, keeping the others; answers the whole policy. Durations in
        seconds (or a timedelta, or '30s'), rates as '100/s', back-off as for submit.

        Fair share: `fair=True` serves the queue's jobs by their limit key in turns within each
        priority level (jobs without a key are one key of their own), so one busy customer
        cannot starve the others; to serve it first in, first out again, clear the policy.
        `fair_weights` gives a key more turns per round ({"gold": 3}; {} drops the weights);
        `key_concurrency` caps the running jobs of one key across every worker (fair queues
        only: the server refuses it unless this policy or its type's sets fair)."""
        if "/" in self.name and self.name.count("/") > 1:
            raise InvalidInput("a policy is per type or type/group, not per instance")
        given: dict[str, Any] = {}
        if retries is not None:
            given["retries"] = _whole("retries", retries, 0)
        if backoff is not None:
            given["backoff"] = Backoff.of(backoff).to_json()
        if timeout is not None:
            given["timeout_ms"] = duration_ms("timeout", timeout)
        if lease is not None:
            given["lease_ms"] = duration_ms("lease", lease)
        if concurrency is not None:
            given["concurrency"] = _whole("concurrency (to run nothing, pause the queue)", concurrency, 1)
        if rate is not None:
            given["rate"] = parse_rate("rate", rate)
        if key_rate is not None:
            given["key_rate"] = parse_rate("key_rate", key_rate)
        if retention is not None:
            given["retention_ms"] = duration_ms("retention", retention)
        if aging is not None:
            given["aging_ms"] = duration_ms("aging", aging)
            if given["aging_ms"] < 1:
                raise InvalidInput("aging of 0 would serve every job at the highest level: give a period, e.g. 30s")
        if fair is not None:
            if fair is not True:
                raise InvalidInput(f"fair {fair!r}: fair is set with True; to serve the queue first in, first out "
                                   "again, clear its policy (clear_policy) and set the rest again")
            given["fair"] = True
        if fair_weights is not None:
            given["fair_weights"] = _weights(fair_weights)
        if key_concurrency is not None:
            given["key_concurrency"] = _whole("key_concurrency (to run none of a key, pause the key)",
                                              key_concurrency, 1)
        merged = {**self.policy(), **given}
        if merged.get("fair_weights") == {}:
            merged.pop("fair_weights")
        self._store(merged)
        return merged

    def clear_policy(self) -> bool:
        """Removes the queue's policy: its jobs get the defaults again."""
        had = self.r.hexists(self.client.keys.policy(), self.name)
        self.r.hdel(self.client.keys.whole_policies(), self.name)
        for _, _, p in self._shards():
            self._call(lambda p=p: p.set_policy(self.name, ""))
        return bool(had)

    def _store(self, policy: dict[str, Any]) -> None:
        shards = self._shards()
        if len(shards) == 1:
            self._call(lambda: shards[0][2].set_policy(self.name, json.dumps(policy)))
            return
        # each shard enforces its share of a concurrency limit or a rate (hero-admin's `split`);
        # the whole is written once shard 0 took its share, so a policy the server refuses
        # (checked the same on every shard) leaves nothing written
        k = max(1, self.client.shard_map().k)
        for i, (n, _, p) in enumerate(shards):
            self._call(lambda p=p, n=n: p.set_policy(self.name, json.dumps(_split(policy, n, k))))
            if i == 0:
                self.r.hset(self.client.keys.whole_policies(), self.name, json.dumps(policy))

    # -- dead letters -------------------------------------------------------------------------
    def dead_letters(self, limit: int = 1000) -> list[DeadLetter]:
        """The queue's dead letters, oldest first (every shard's)."""
        out = []
        for n, keys, _ in self._shards():
            cursor = "-"
            while len(out) < limit:
                page = self.r.xrange(keys.dead_letter(), cursor, "+", count=1000)
                for entry, f in page:
                    d = {k.decode(): v.decode("utf-8", "replace") for k, v in f.items()}
                    letter = DeadLetter(entry.decode(), d.get("j", ""), d.get("reason", ""), d.get("queue", ""), n)
                    if self._covers(letter.queue):
                        out.append(letter)
                if len(page) < 1000:
                    break
                cursor = "(" + page[-1][0].decode()
        return out[:limit]

    def retry_dead(self, job_ids: list[str] | None = None) -> dict[str, str]:
        """Queues the jobs of the queue's dead letters (all, or those of `job_ids`) again with
        a fresh attempt budget; answers per job: requeued, not_dead, gone, missing."""
        return self._dead("retry", job_ids)

    def purge_dead(self, job_ids: list[str] | None = None) -> dict[str, str]:
        """Deletes the queue's dead letters (all, or those of `job_ids`) and their jobs."""
        return self._dead("purge", job_ids)

    def _dead(self, action: str, job_ids: list[str] | None) -> dict[str, str]:
        letters = self.dead_letters(limit=1 << 30)
        if job_ids is not None:
            wanted = set(job_ids)
            letters = [d for d in letters if d.job_id in wanted]
            missing = wanted - {d.job_id for d in letters}
            if missing:
                raise InvalidInput(f"job {sorted(missing)[0]} has no dead letter in queue {self.name}")
        out: dict[str, str] = {}
        for n, keys, p in self._shards():
            mine = [d for d in letters if d.shard == n]
            for i in range(0, len(mine), 100):
                chunk = mine[i:i + 100]
                args = [(d.entry, d.job_id, self._stream_of(keys, d.job_id) or keys.job(d.job_id)) for d in chunk]
                for d, answer in zip(chunk, self._call(lambda p=p, args=args: p.dead(action, args))):
                    out[d.job_id] = answer
        return out

    # -- one job ------------------------------------------------------------------------------
    def requeue(self, job_id: str) -> str:
        """Moves a job to its own queue again wherever it is (queued, running: its lease is
        revoked, delayed, ended: a fresh attempt budget); answers the stream it is in now."""
        keys = self.client._holder(job_id)
        proto = self._proto_of(keys)
        cursor = "0-0"
        for _ in range(10_000):
            rec = self.r.hmget(keys.job(job_id), ["script_type", "group", "instance", "priority", "worker_id"])
            if all(x is None for x in rec):
                raise JobNotFound(job_id)
            t, g, i, pr, worker = (x.decode() if x else "" for x in rec)
            if not t:
                raise InvalidInput(f"job {job_id} names no script type, so it is in no queue of ours")
            prio = int(pr) if pr.isdigit() else 5
            stream = keys.work(t, g or None, i or None, prio)
            parts = worker.split(":")
            ctl = keys.ctl_instance(t, parts[0], parts[1]) if len(parts) == 3 else None
            word, nxt = self._call(lambda: proto.requeue(job_id, stream, stream, ctl, worker, cursor,
                                                         (t, g, i, prio)))
            if word == "requeued":
                return stream
            if word == "missing":
                raise JobNotFound(job_id)
            cursor = nxt if word == "searching" else "0-0"
        raise HeroError(f"job {job_id} kept changing hands while it was being requeued; try again")

    def promote(self, job_id: str) -> None:
        """Queues a delayed job now (a delayed submit, or a retry waiting out its back-off)."""
        keys = self.client._holder(job_id)
        status = self.r.hget(keys.job(job_id), "status")
        if status is None:
            raise JobNotFound(job_id)
        if status != b"waiting" or self.r.zscore(keys.delayed(), job_id) is None:
            raise InvalidInput(f"job {job_id} is not delayed (it is {status.decode()}): only a delayed job or a "
                               "retry waiting out its back-off can be promoted")
        self.requeue(job_id)

    def remove(self, job_id: str) -> None:
        """Deletes a job (BullMQ's `job.remove()`): a queued or delayed one is stopped first; a
        running one is refused (stop it first, or wait for its end)."""
        keys = self.client._holder(job_id)
        proto = self._proto_of(keys)
        for _ in range(3):
            word = self._call(lambda: proto.remove(job_id))
            if word == "removed":
                return
            if word == "missing":
                raise JobNotFound(job_id)
            if word == "running":
                raise InvalidInput(f"job {job_id} is running: stop it first (client.stop), or wait for its end")
            self.client.stop(job_id)
        raise HeroError(f"job {job_id} kept changing state while it was being removed; try again")

    # -- recurring jobs -----------------------------------------------------------------------
    # A namespace's recurring jobs are its own, not a shard's: stored with the namespace's keys
    # (shard 0's), whose duties fire them.
    def cron_add(self, name: str, schedule: str, script: str, *, tz: str = "UTC", missed: str = "skip",
                 payload: bytes | None = None, group: str | None = None, instance: str | None = None,
                 priority: int | None = None, timeout: int | None = None, retries: int = 0,
                 tags: list[str] | tuple[str, ...] = (), backoff: Any = None, keep: Any = None,
                 keep_failed: Any = None) -> int | None:
        """Adds (or replaces) recurring job `name` of this queue: `schedule` a cron expression
        (5 fields, or 6 with seconds first; @hourly ...) read in `tz` (an IANA zone), or
        'every <duration>'; each tick submits `script` with the options given, `payload`
        included, as job `cron-<name>-<tick ms>`. The spec is checked by the cron engine that
        fires it (hero_cron, in Redis): a schedule, zone or policy it does not take is
        InvalidInput saying why, and nothing is stored. Answers the next tick (ms since the
        epoch; None when the schedule has none). A replaced one with the same schedule and zone
        keeps its next tick. The ticks are fired by the queue's upkeep, which any worker does
        (duties on, the default) or a `hero broker`, each tick once however many run: with no
        live process doing it in the namespace this says so once per client (a WARNING)."""
        _name("recurring job name", name)
        # cheap checks that need no Redis, with the verdicts of the engine's own; the schedule
        # and zone are the engine's alone (a Python reading of them would differ at the edges)
        if not isinstance(schedule, str):
            raise InvalidInput(f"schedule is {schedule.__class__.__name__}: give a cron expression or "
                               "'every <duration>' as text")
        if not isinstance(tz, str):
            raise InvalidInput(f"time zone is {tz.__class__.__name__}: give an IANA zone name (e.g. UTC, "
                               "Europe/Amsterdam)")
        if missed not in ("skip", "catch-up"):
            raise InvalidInput(f"missed-tick policy {missed!r}: give 'catch-up' or 'skip'")
        # the submit's own checks, on the job a tick would submit
        self.client.job(script, self.type, group=group, instance=instance, priority=5 if priority is None else priority,
                        timeout=timeout, retries=retries, tags=tags, payload=payload, backoff=backoff,
                        keep=keep, keep_failed=keep_failed)
        job: dict[str, Any] = {"script_type": self.type, "script": script, "retries": int(retries)}
        for k, v in (("group", group), ("instance", instance), ("priority", priority), ("timeout_secs", timeout)):
            if v is not None:
                job[k] = v
        if tags:
            job["tags"] = list(tags)
        if payload is not None:
            job["payload"] = base64.b64encode(payload).decode()
        if backoff is not None:
            job["backoff"] = Backoff.of(backoff).to_json()
        if keep is not None:
            job["keep_ms"] = duration_ms("keep", keep)
        if keep_failed is not None:
            job["keep_failed_ms"] = duration_ms("keep_failed", keep_failed)
        spec = {"name": name, "schedule": schedule, "tz": tz, "missed": missed, "paused": False, "job": job}
        _, nxt = self._call(lambda: self.client.proto.cron(name, json.dumps(spec)))
        self.client._upkeep.needed(self.r, self.client.keys)
        return nxt if nxt >= 0 else None

    def cron_next(self, schedule: str, tz: str = "UTC", n: int = 5, after_ms: int | None = None) -> list[int]:
        """The next `n` (1-100) ticks of `schedule` in zone `tz` strictly after `after_ms` (ms
        since the epoch; None: now, on Redis's clock), as ms since the epoch: by the cron
        engine the queue's upkeep fires by (hero_cron_next), so what it shows is what fires.
        Fewer when the schedule has no more; InvalidInput saying why for a schedule or zone
        the engine does not take."""
        if not isinstance(schedule, str) or not isinstance(tz, str):
            raise InvalidInput("the schedule and the time zone are text: a cron expression or 'every <duration>', "
                               "an IANA zone name")
        _whole("n (how many ticks)", n, 1, 100)
        if after_ms is None:
            secs, micros = self.r.time()
            after_ms = int(secs) * 1000 + int(micros) // 1000
        else:
            _whole("after_ms (ms since the epoch)", after_ms, 0)
        return self._call(lambda: self.client.proto.cron_next(schedule, tz, after_ms, n))

    def cron_list(self) -> list[dict[str, Any]]:
        """The queue's recurring jobs, by name: each as stored (its job's `payload` as bytes),
        with `next_ms`, `fires` and `last_ms` (None until the queue's upkeep first looked at it
        or fired it)."""
        keys = self.client.keys
        state = {k.decode(): v.decode() for k, v in self.r.hgetall(keys.cron_next()).items()}
        out = []
        for name, raw in sorted(self.r.hgetall(keys.cron()).items()):
            try:
                spec = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(spec, dict) or spec.get("job", {}).get("script_type") != self.type:
                continue
            n = name.decode()
            num = lambda k: int(state[k]) if state.get(k, "").isdigit() else None  # noqa: E731
            if isinstance(spec["job"].get("payload"), str):
                # stored as base64 (every language writes it so): the bytes, as submit takes them
                spec["job"]["payload"] = base64.b64decode(spec["job"]["payload"])
            spec.update(next_ms=num(n), fires=num(f"{n}|fires") or 0, last_ms=num(f"{n}|last"))
            out.append(spec)
        return out

    def cron_remove(self, name: str) -> bool:
        """Removes recurring job `name` and its state (the jobs it fired stay); False when there
        was none."""
        _, removed = self._call(lambda: self.client.proto.cron(name, ""))
        return removed > 0

    # -- helpers ------------------------------------------------------------------------------
    def _proto_of(self, keys):
        for _, k, p in self._shards():
            if k.prefix == keys.prefix:
                return p
        return self.client.proto

    def _covers(self, stream: str) -> bool:
        """Whether work stream `stream` is under this queue's name."""
        m = re.search(r":q:work:type:([^:]+)(?::group:([^:]+))?", stream)
        if not m or m.group(1) != self.type:
            return False
        return "/" not in self.name or m.group(2) == self.name.split("/", 1)[1]

    def _stream_of(self, keys, job_id: str) -> str | None:
        rec = self.r.hmget(keys.job(job_id), ["script_type", "group", "instance", "priority"])
        t, g, i, p = (x.decode() if x else "" for x in rec)
        return keys.work(t, g or None, i or None, int(p) if p.isdigit() else 5) if t else None


def _weights(weights: Any) -> dict[str, int]:
    """fair_weights checked as the server checks it: each limit key (text, no blanks) with a
    whole number of turns of at least 1; the error names the key, for a dict of many."""
    if not isinstance(weights, dict):
        raise InvalidInput(f"fair_weights is {weights.__class__.__name__}: give a dict of limit key -> turns")
    for key, turns in weights.items():
        if not isinstance(key, str) or not key or any(c.isspace() for c in key):
            raise InvalidInput(f"fair_weights key {key!r}: name a limit key (text without blanks)")
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
            raise InvalidInput(f"fair_weights gives limit key {key!r} {turns!r} turns: each limit key needs a "
                               "whole number of turns of at least 1")
    return dict(weights)


def _split(policy: dict[str, Any], n: int, k: int) -> dict[str, Any]:
    """Shard n's share of a policy over k active shards (hero-admin's `split`). Fair share's
    fields are whole on every shard: the jobs of one limit key share a shard (their key's
    home), so its key_concurrency and weights hold there."""
    def share(total: int) -> int:
        if n >= k:
            return 1
        return max(1, total // k + (1 if n < total % k else 0))
    p = dict(policy)
    if "concurrency" in p:
        p["concurrency"] = share(p["concurrency"])
    if "rate" in p:
        p["rate"] = {**p["rate"], "max": share(p["rate"]["max"])}
    return p
