"""The producer: submit jobs with every option the CLI has, run one and wait, read a job's
status and record, stop it, and batches."""
from __future__ import annotations

import inspect
import json
import os
import random
import re
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Sequence

import redis

from .errors import HeroError, InvalidInput, JobNotFound, OlderProcesses
from .events import EventStream, Filter, Waiter
from .job import BatchInfo, ChildResult, Job, Result, Submitted
from .keys import Keys
from .options import Backoff, duration_ms
from .protocol import LIBRARY, VERSION, Protocol, iso, now_ms
from .shards import ShardMap, shard_of_id
from .upkeep import Upkeep

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_JOB_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
MAX_SCRIPT_BYTES = 1 << 20


def _name(what: str, v: str) -> str:
    if not isinstance(v, str) or not _NAME.match(v):
        raise InvalidInput(f"{what} {v!r}: use 1-64 characters of A-Z a-z 0-9 _ -")
    return v


def resolve_url(url: str | None = None) -> str:
    """`url`, else HERO_REDIS_URL, else the local Redis of `hero up` (its URL in
    ./.hero/redis.url), else redis://127.0.0.1:6379."""
    if url is None:
        url = os.environ.get("HERO_REDIS_URL")
    if url is None and os.path.exists(os.path.join(".hero", "redis.url")):
        with open(os.path.join(".hero", "redis.url"), encoding="utf-8") as f:
            url = f.read().strip()
    return url or "redis://127.0.0.1:6379"


def connect(url: str | None = None) -> redis.Redis:
    """A connection to `url` as `resolve_url` finds it."""
    return redis.Redis.from_url(resolve_url(url), decode_responses=False)


class JobSpec(tuple):
    """What `Client.job` answers: (id, work stream, run-at ms, record fields), and where it
    goes in a sharded namespace: its route key, and whether its id was generated."""
    route: str | None = None
    generated: bool = False


# a keyword another queue's users reach for, and what hero calls it
_HINTS = {"countdown": "delay (seconds)", "eta": "at", "max_retries": "retries", "queue": "type",
          "task_id": "id", "job_id": "id", "attempts": "retries (attempts after the first)",
          "depends_on": "after", "kwargs": "payload", "args": "payload", "time_limit": "timeout",
          "soft_time_limit": "timeout", "expires": "(none: stop it with stop(id))", "data": "payload",
          "removeOnComplete": "keep", "removeOnFail": "keep_failed", "jobId": "id"}


def _text_opt(what: str, v: Any, limit: int = 200) -> str:
    if not isinstance(v, str):
        raise InvalidInput(f"{what} is {v.__class__.__name__}: give text")
    if not 1 <= len(v.encode()) <= limit:
        raise InvalidInput(f"{what} {v!r} is not 1 to {limit} bytes")
    return v


def _whole(what: str, v: Any, least: int, most: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < least or (most is not None and v > most):
        span = f"{least} to {most}" if most is not None else f"at least {least}"
        raise InvalidInput(f"{what} {v!r} is not a whole number {span}")
    return v


def _list_of_text(what: str, v: Any) -> list[str]:
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
        raise InvalidInput(f"{what} is {v.__class__.__name__}: give a list of text (a single one in [...])")
    out = list(v)
    for x in out:
        if not isinstance(x, str) or not x:
            raise InvalidInput(f"{what} holds {x!r}: each is non-empty text")
    return out


def _when_ms(at: Any) -> int:
    """A run-at time: an aware datetime, or a naive one read as UTC (Celery's rule)."""
    if not isinstance(at, datetime):
        raise InvalidInput(f"at is {at.__class__.__name__}: give a datetime (a naive one is read as UTC)")
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    return int(at.timestamp() * 1000)


def job_spec(keys: Keys, script: str, type: str = "rhai", *, id: str | None = None, group: str | None = None,
             instance: str | None = None, priority: int = 5, timeout: Any = None, retries: int = 0,
             delay: Any = None, at: datetime | None = None, after: Iterable[str] = (),
             unique: str | None = None, unique_ttl: Any = None, tags: Iterable[str] = (),
             limit_key: str | None = None, env: Mapping[str, str] | None = None, batch: str | None = None,
             caller_id: str = "", context_id: str = "", payload: bytes | None = None,
             backoff: Backoff | str | dict | None = None, keep: Any = None, keep_failed: Any = None,
             wait: bool = False, route: str | None = None) -> JobSpec:
    """The submit of one job, checked: (id, work stream, run-at ms, record fields). Every
    option of `hero submit`. Durations (`timeout`, `delay`, `unique_ttl`, `keep`,
    `keep_failed`) take seconds, a timedelta or text as the CLI writes it (`"5m"`, `"1h30m"`);
    `at` a datetime (a naive one is read as UTC); `after` the ids of prerequisites; `route` a
    route key (docs/sharding.md); `backoff` its own back-off (a `hero.Backoff` or
    `"exponential:1s:1m"`), combined with its queue policy's as docs/operations.md says."""
    if not isinstance(script, str):
        raise InvalidInput(f"script is {script.__class__.__name__}: give text (a value for the handler goes in "
                           "payload, as MessagePack bytes)")
    if id is not None and not isinstance(id, str):
        raise InvalidInput(f"id is {id.__class__.__name__}: give text")
    job_id = id or str(uuid.uuid4())
    if route is not None:
        _text_opt("route key", route)
    if not _JOB_ID.match(job_id):
        raise InvalidInput(f"job id {job_id!r}: use 1-128 characters of A-Z a-z 0-9 _ - .")
    _name("script type", type)
    if instance and not group:
        raise InvalidInput("an instance needs a group: give group= as well")
    if group is not None:
        _name("group", group)
    if instance is not None:
        _name("instance", instance)
    _whole("priority", priority, 0, 9)
    if len(script.encode()) > MAX_SCRIPT_BYTES:
        raise InvalidInput(f"the script is {len(script.encode())} bytes; the limit is {MAX_SCRIPT_BYTES}")
    now = iso()
    fields: dict[str, Any] = {"script": script, "script_type": type, "created_at": now}
    if group:
        fields["group"] = group
    if instance:
        fields["instance"] = instance
    if priority != 5:
        fields["priority"] = str(priority)
    if timeout is not None:
        ms = duration_ms("timeout", timeout)
        if ms < 1000:
            raise InvalidInput(f"timeout {timeout!r} is under a second: give at least 1 (seconds) or '1s'")
        fields["timeout"] = str(-(-ms // 1000))
    if _whole("retries", retries, 0):
        fields["retries"] = str(retries)
    for what, v in (("caller_id", caller_id), ("context_id", context_id)):
        if not isinstance(v, str):
            raise InvalidInput(f"{what} is {v.__class__.__name__}: give text")
        if v:
            fields[what] = v
    if env:
        if not isinstance(env, Mapping):
            raise InvalidInput(f"env is {env.__class__.__name__}: give a dict of text to text")
        for k, v in env.items():
            if not isinstance(k, str) or not k or "=" in k or not isinstance(v, str):
                raise InvalidInput(f"env {k!r}: {v!r}: names and values are text (a name without '=')")
        fields["env_vars"] = json.dumps(dict(env))
    after = _list_of_text("after", after)
    if after:
        fields["prerequisites"] = json.dumps(after)
    tags = _list_of_text("tags", tags)
    if tags:
        fields["tags"] = json.dumps(tags)
    if unique is not None:
        fields["unique"] = _text_opt("uniqueness key", unique)
        if unique_ttl is not None:
            fields["unique_ttl"] = str(max(1, duration_ms("unique_ttl", unique_ttl)))
    elif unique_ttl is not None:
        raise InvalidInput("unique_ttl needs a unique key")
    if limit_key is not None:
        fields["limit_key"] = _text_opt("limit key", limit_key)
    if batch is not None:
        fields["batch"] = _name("batch name", batch)
    if payload is not None:
        if not isinstance(payload, (bytes, bytearray)):
            raise InvalidInput(f"payload is {payload.__class__.__name__}: give MessagePack bytes "
                               "(msgpack.packb(value)), which handlers in every language read")
        fields["payload"] = bytes(payload)
    if backoff is not None:
        fields["backoff"] = json.dumps(Backoff.of(backoff).to_json())
    if keep is not None:
        fields["keep"] = str(duration_ms("keep", keep))
    if keep_failed is not None:
        fields["keep_failed"] = str(duration_ms("keep_failed", keep_failed))
    if wait:
        fields["reply"] = "1"
    run_at = 0
    if at is not None and delay is not None:
        raise InvalidInput("give delay or at, not both")
    if at is not None:
        run_at = _when_ms(at)
    elif delay is not None:
        run_at = now_ms() + duration_ms("delay", delay)
    if after and run_at:
        raise InvalidInput("a job with prerequisites (after) cannot also be delayed: it starts when they finish")
    spec = JobSpec((job_id, keys.work(type, group, instance, priority), run_at, fields))
    spec.route, spec.generated = route, id is None
    return spec


_OPTIONS = frozenset(inspect.signature(job_spec).parameters) - {"keys", "script", "type"}


def check_options(what: str, options: Mapping[str, Any]) -> None:
    """Refuses an option `job_spec` does not take, naming it and hero's word for it."""
    for k in options:
        if k not in _OPTIONS:
            hint = f"; use {_HINTS[k]}" if k in _HINTS else ""
            raise InvalidInput(f"{what} has no option {k!r}{hint}: the options are {', '.join(sorted(_OPTIONS))}")


# the features a live process older than their protocol would refuse (docs/protocol.md §8)
_GATED = (("unique", "unique"), ("tags", "tags"), ("limit_key", "limit_key"), ("batch", "batch"),
          ("backoff", "job_policy"), ("keep", "job_policy"), ("keep_failed", "job_policy"))


def gated(jobs: Sequence[tuple[str, str, int, dict[str, Any]]]) -> list[tuple[str, str]]:
    """(job id, feature) for each gated feature the jobs use: a plain job uses none."""
    return [(job_id, key) for job_id, _, _, fields in jobs for field_name, key in _GATED
            if fields.get(field_name) not in (None, "", "[]")]


def read_lacks(raw: Any) -> dict:
    """The brokers' `fleet_lacks` summary as read from the config hash."""
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        return {}


def refuse_lacking(jobs: Sequence[tuple[str, str, int, dict[str, Any]]], lacks: dict) -> None:
    """Raises `OlderProcesses` for the first job using a feature `lacks` names."""
    for job_id, key in gated(jobs):
        lack = lacks.get(key)
        if lack:
            raise OlderProcesses(
                f"job {job_id} uses {lack.get('what', key)} (protocol {lack.get('since', '?')} and later), which "
                f"these live processes do not serve: {', '.join(lack.get('processes', []))}. Upgrade them "
                "(or wait until they are gone) and send it again; `hero actors` shows each process's protocol")


class Client:
    """A producer of one namespace. `url` as for `connect`; `namespace` the key prefix. In a
    sharded namespace (docs/sharding.md) jobs go to the shards as the Rust client sends them:
    route key, batch, prerequisites, uniqueness key, limit key, chosen id, else in turn."""

    def __init__(self, url: str | None = None, namespace: str = "hero", *, r: redis.Redis | None = None,
                 cluster: bool = False, protocol: str = VERSION, library: str = LIBRARY):
        """`protocol` and `library` pin the calls to another protocol version's functions (as a
        producer of that release would make them: the compatibility tests)."""
        self.r = r if r is not None else connect(url)
        self.keys = Keys.cluster(namespace) if cluster else Keys(_name("namespace", namespace))
        self._versions = (protocol, library)
        self.proto = Protocol(self.r, self.keys, protocol, library)
        self.proto.ensure_library()
        self._map = ShardMap.read(self.r, self.keys)
        self._map_at = time.monotonic()
        self._protos: dict[str, Protocol] = {self.keys.prefix: self.proto}
        # a random start: a process that submits one job and ends would otherwise put every
        # unkeyed job on shard 0
        self._turn = random.randrange(1 << 30)
        self._waiters: dict[str, Waiter] = {}
        # whether anyone does the queue's upkeep, looked at once (`hero.upkeep`)
        self._upkeep = Upkeep()

    # -- shards -----------------------------------------------------------------------------
    def shard_map(self) -> ShardMap:
        """The shard map, read again when older than 2 s."""
        if time.monotonic() - self._map_at >= 2.0:
            self._map = ShardMap.read(self.r, self.keys)
            self._map_at = time.monotonic()
        return self._map

    def _shard(self, n: int) -> tuple[Keys, Protocol]:
        keys = self._map.keys(self.keys, n)
        proto = self._protos.get(keys.prefix)
        if proto is None:
            proto = self._protos[keys.prefix] = Protocol(self.r, keys, *self._versions)
        return keys, proto

    def _keyed(self, key: str, state) -> int:
        """`key`'s home, or an older home that still holds its state (`state(keys)`)."""
        for n in self._map.older_homes(key):
            if self.r.exists(state(self._shard(n)[0])):
                return n
        return self._map.home(key)

    def _holder(self, job_id: str) -> Keys:
        """The keys of the shard that holds job `job_id` (its id's shard, its home, the rest)."""
        m = self.shard_map()
        if not m.sharded:
            return self.keys
        order = [n for n in [shard_of_id(job_id), m.home(job_id), *m.older_homes(job_id), *sorted(m.tags), 0]
                 if n is not None]
        for n in dict.fromkeys(order):
            if n == 0 or n in m.tags:
                keys = self._shard(n)[0]
                if self.r.exists(keys.job(job_id)):
                    return keys
        return self._shard(m.home(job_id))[0]

    def _place(self, spec: JobSpec, here: dict[str, int], follow: int | None) -> int:
        job_id, _, _, fields = spec
        m = self._map
        if spec.route is not None:
            return m.home(spec.route)
        if "batch" in fields:
            return self._keyed(fields["batch"], lambda k: k.batch(fields["batch"]))
        after = json.loads(fields.get("prerequisites", "[]"))
        if after:
            at = None
            for p in after:
                n = here.get(p)
                if n is None:
                    holder = self._holder(p)
                    n = next((i for i in [0, *m.tags] if self._shard(i)[0] == holder), 0)
                if at is not None and at[0] != n:
                    raise InvalidInput(f"job {job_id} waits on {at[1]} (shard {at[0]}) and {p} (shard {n}): "
                                       "prerequisites must share a shard; submit them with one route key "
                                       "(route=) or in one submit_many")
                at = at or (n, p)
            return at[0]
        if "unique" in fields:
            return self._keyed(fields["unique"], lambda k: k.unique(fields["unique"]))
        if "limit_key" in fields:
            return m.home(fields["limit_key"])
        if not spec.generated:
            return self._keyed(job_id, lambda k: k.job(job_id))
        if follow is not None:
            return follow
        self._turn += 1
        return (self._turn - 1) % m.k

    def _submit_sharded(self, jobs: Sequence[JobSpec]) -> list[Submitted]:
        jobs = [j if isinstance(j, JobSpec) else JobSpec(j) for j in jobs]
        ids = {j[0] for j in jobs}
        flow = any(p in ids for j in jobs for p in json.loads(j[3].get("prerequisites", "[]")))
        here: dict[str, int] = {}
        first = None
        placed: list[tuple[int, tuple]] = []
        renamed: dict[str, str] = {}
        for spec in jobs:
            job_id, stream, run_at, fields = spec
            if renamed and "prerequisites" in fields:
                fields = dict(fields)
                fields["prerequisites"] = json.dumps([renamed.get(p, p) for p in json.loads(fields["prerequisites"])])
                spec2 = JobSpec((job_id, stream, run_at, fields))
                spec2.route, spec2.generated = spec.route, spec.generated
                spec = spec2
            n = self._place(spec, here, first if flow else None)
            if first is None:
                first = n
            if spec.generated and n > 0:
                new_id = f"{job_id}.s{n}"
                renamed[job_id] = new_id
                job_id = new_id
            keys = self._shard(n)[0]
            stream = keys.prefix + stream[len(self.keys.prefix):]
            here[job_id] = n
            placed.append((n, (job_id, stream, run_at, fields)))
        out: list[Submitted | None] = [None] * len(placed)
        for n in dict.fromkeys(p[0] for p in placed):
            idx = [i for i, p in enumerate(placed) if p[0] == n]
            for i, s in zip(idx, self._submit_on(self._shard(n)[1], [placed[i][1] for i in idx])):
                out[i] = s
        return [s for s in out if s is not None]

    # -- submit -----------------------------------------------------------------------------
    def job(self, script: str, type: str = "rhai", **options: Any) -> JobSpec:
        """The submit of one job, checked (see `job_spec` for the options)."""
        check_options("submit", options)
        return job_spec(self.keys, script, type, **options)

    def submit(self, script: str, type: str = "rhai", **options: Any) -> Submitted:
        """Submits one job (see `job` for the options) and answers its id and status. An id that
        exists already changes nothing (`created` False); a held uniqueness key answers the
        holder (`duplicate_of`)."""
        return self.submit_many([self.job(script, type, **options)])[0]

    def submit_many(self, jobs: Sequence[tuple[str, str, int, dict[str, Any]]]) -> list[Submitted]:
        """Submits jobs built with `job`, in one call (one per shard in a sharded namespace). The
        first that needs the queue's upkeep (a delay, retries) looks once whether a live process
        does it here, and says so (a WARNING) when none does."""
        self._upkeep.note(self.r, self.keys, jobs)
        self._check_fleet(jobs)
        if self.shard_map().sharded:
            return self._submit_sharded(jobs)
        return self._submit_on(self.proto, jobs)

    def _check_fleet(self, jobs: Sequence[tuple[str, str, int, dict[str, Any]]]) -> None:
        """Refuses a job using a feature the brokers say a live older process lacks (their
        `fleet_lacks` summary, read at most every 2 s and only when a job uses such a feature)."""
        if not gated(jobs):
            return
        if time.monotonic() - getattr(self, "_lacks_at", -10.0) >= 2.0:
            self._lacks = read_lacks(self.r.hget(self.keys.config(), "fleet_lacks"))
            self._lacks_at = time.monotonic()
        refuse_lacking(jobs, self._lacks)

    def _submit_on(self, proto: Protocol, jobs: Sequence[tuple[str, str, int, dict[str, Any]]]) -> list[Submitted]:
        try:
            answers = proto.submit(jobs)
        except redis.ResponseError as e:
            raise HeroError.from_server(e) from None
        out = []
        for (job_id, _, _, _), (kind, status) in zip(jobs, answers):
            if kind.startswith("duplicate:"):
                out.append(Submitted(kind.split(":", 1)[1], False, status, duplicate_of=kind.split(":", 1)[1]))
            else:
                out.append(Submitted(job_id, kind == "created", status))
        return out

    def run(self, script: str, type: str = "rhai", wait: float = 30.0, **options: Any) -> Result:
        """Submits a job and waits up to `wait` seconds for it to end."""
        options.pop("wait", None)
        s = self.submit(script, type, **options)
        return self.wait(s.id, wait)

    def wait(self, job_id: str, wait: float = 30.0) -> Result:
        """Waits up to `wait` seconds for a job to end, whoever runs it, and answers how it
        ended. It wakes on the job's end in the event log, read by one thread all this client's
        waits share, then reads the record: no poll per job (with the log off, a read of the
        record every 0.25 s)."""
        deadline = time.monotonic() + wait
        keys = self._holder(job_id)
        waiter = self._waiters.get(keys.prefix)
        if waiter is None:
            waiter = self._waiters.setdefault(keys.prefix, Waiter(self.r, keys))
        woke = waiter.register(job_id)
        try:
            while True:
                woke.clear()
                job = self.get(job_id)
                if job.ended:
                    return Result(job_id, job.status, job.output, job.error or "", job.output_text or "")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"job {job_id} did not end within {wait} s (it is {job.status})")
                woke.wait(left)
        finally:
            waiter.unregister(job_id, woke)

    # -- events -----------------------------------------------------------------------------
    def events(self, type: str | None = None, queue: str | None = None, job: str | None = None,
               since: str | None = None, event: str | None = None) -> EventStream:
        """Subscribes to job events: an iterator of `Event`s (`event`, `job_id`, a finished job's
        `output`, `id` to resume after), filtered by script type, queue (`type/group`), job or
        kind; from `since` (an event id to resume after, "0" for the oldest kept, None for now).
        One blocking read per shard; a subscriber that fell behind the log's cap gets an event
        `gap` with `missed`. Refused (`EventLogOff`) with the log off. `close()` it when done."""
        m = self.shard_map()
        shards = [(n, self._shard(n)[0]) for n in m.served()] if m.sharded else [(0, self.keys)]
        return EventStream(self.r, shards, Filter(type, queue, job, event), since,
                           atomic=not isinstance(self.r, redis.RedisCluster))

    # -- read -------------------------------------------------------------------------------
    def get(self, job_id: str) -> Job:
        rec = self.r.hgetall(self._holder(job_id).job(job_id))
        if not rec:
            raise JobNotFound(job_id)
        return Job.from_record(job_id, rec)

    def children(self, job_id: str) -> dict[str, ChildResult]:
        """A parent's prerequisites (its flow's children, or the jobs it was submitted
        `after`) and what each gave, by id (BullMQ's `getChildrenValues`): an ended child's
        result as its end wrote it into the parent's record (so it outlives the child's
        retention), a child not yet ended with its status only."""
        parent = self.get(job_id)
        out = dict(parent.results)
        for child in parent.prerequisites:
            if child not in out:
                try:
                    c = self.get(child)
                except JobNotFound:
                    continue
                out[child] = ChildResult(c.status, c.output, c.error, c.output_text)
        return out

    def status(self, job_id: str) -> str:
        s = self.r.hget(self._holder(job_id).job(job_id), "status")
        if s is None:
            raise JobNotFound(job_id)
        return s.decode()

    # -- stop -------------------------------------------------------------------------------
    def stop(self, job_id: str) -> str:
        """Stops a job wherever it is: 'cancelled' (it never starts), 'interrupted' (its worker
        is told), 'already_completed'."""
        keys = self._holder(job_id)
        proto = self._protos.get(keys.prefix) or Protocol(self.r, keys, *self._versions)
        for _ in range(5):
            rec = self.r.hmget(keys.job(job_id), ["script_type", "group", "instance", "priority",
                                                "worker_id"])
            t, g, i, p, worker = (x.decode() if x else "" for x in rec)
            stream = keys.work(t, g or None, i or None, int(p) if p.isdigit() else 5) if t else \
                keys.job(job_id)
            ctl = None
            parts = worker.split(":")
            if t and len(parts) == 3:
                ctl = keys.ctl_instance(t, parts[0], parts[1])
            try:
                answer = proto.stop(job_id, stream, ctl, worker)
            except redis.ResponseError as e:
                err = HeroError.from_server(e)
                raise (JobNotFound(job_id) if isinstance(err, JobNotFound) else err) from None
            if answer != "changed":
                return answer
        raise HeroError(f"job {job_id} kept changing hands while it was being stopped; try again")

    # -- batches ----------------------------------------------------------------------------
    def close_batch(self, name: str, on_complete: tuple[str, str] | None = None,
                    on_success: tuple[str, str] | None = None, **options: Any) -> BatchInfo:
        """Closes batch `name`: the callback job on_complete = (script, type) is submitted once
        every member ended, on_success once every member finished. Members join with
        submit(..., batch=name)."""
        if on_complete is None and on_success is None:
            raise InvalidInput("close a batch with on_complete or on_success")
        keys, proto = self._shard(self._keyed(name, lambda k: k.batch(name))) if self.shard_map().sharded \
            else (self.keys, self.proto)

        def spec(cb: tuple[str, str] | None, which: str) -> dict | None:
            if cb is None:
                return None
            job_id, stream, _, fields = self.job(cb[0], cb[1], id=f"batch-{name}-{which}", **options)
            stream = keys.prefix + stream[len(self.keys.prefix):]
            flat = [str(x) for kv in fields.items() if kv[0] != "created_at" for x in kv]
            return {"id": job_id, "key": keys.job(job_id), "stream": stream,
                    "registry": keys.queues(), "group": "workers", "fields": flat}

        r = proto.close_batch(_name("batch name", name), spec(on_complete, "complete"),
                                   spec(on_success, "success"))
        state = {"done": "done", "already_done": "done"}.get(r[0], "closed")
        return BatchInfo(name, r[1], r[2], r[3], r[4], state, r[5] or None, r[6] or None)

    def batch(self, name: str) -> BatchInfo | None:
        """Batch `name` as it stands (None when there is none, or it expired)."""
        _name("batch name", name)
        keys = self._shard(self._keyed(name, lambda k: k.batch(name)))[0] if self.shard_map().sharded else self.keys
        h = {k.decode(): v.decode() for k, v in self.r.hgetall(keys.batch(name)).items()}
        if not h:
            return None
        n = lambda k: max(0, int(h.get(k, "0") or 0))  # noqa: E731
        state = "done" if "done_at" in h else "closed" if h.get("closed") == "1" else "open"
        return BatchInfo(name, n("total"), n("pending"), n("finished"), n("failed"), state,
                         h.get("complete_id"), h.get("success_id"))
