"""The producer on asyncio (`hero.aio.Client`), for a web handler that awaits results: `submit`,
`submit_many`, `run`, `wait`, `get`, `status`, `stop` and `events` are awaited on the caller's
loop over `redis.asyncio`. A `wait` takes no thread: one task of the client follows the event
log (`XREAD BLOCK` on a connection of its own) and wakes the waits of the jobs whose ends it
reads, each of which then reads its record, as the threaded client's `Waiter` does; with the log
off a wait reads the record every 0.25 s. `events()` is an async iterator over the threaded
subscription (one reader thread a shard, not a thread a wait).

    async with hero.aio.Client(url) as c:
        s = await c.submit("x", "py")
        r = await c.wait(s.id, 30)

`hero.aio.Queue` is the operator's side of a queue on the same loop (aio_queue.py): its jobs
listed by state, a failed one retried, the queue cleaned, drained, obliterated.

A sharded namespace is served by `hero.Client` for now: this client refuses one at connect,
saying so, rather than put every job on shard 0.
"""
from __future__ import annotations

import asyncio
import queue
import time
from typing import Any, AsyncIterator, Sequence

import redis
import redis.asyncio as aredis

from .aio_queue import QueueBase
from .client import JobSpec, _name, check_options, gated, job_spec, read_lacks, refuse_lacking, resolve_url
from .errors import HeroError, InvalidInput, JobNotFound
from .events import BLOCK_MS, COUNT, NOT_ENDS, POLL, Event, EventStream, Filter, decode
from .job import Job, Result, Submitted
from .keys import GROUP, Keys
from .protocol import LIBRARY, VERSION, iso, submit_args
from .shards import ShardMap
from .upkeep import Upkeep


POOL = 32


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else ("" if v is None else str(v))


class Client:
    """A producer of one namespace on asyncio. `await Client(url).connect()`, or `async with`."""

    def __init__(self, url: str | None = None, namespace: str = "hero"):
        self.url = resolve_url(url)  # the threaded client's rules
        # a bounded pool that queues a call for a connection: a thousand waits at once share it
        self.r = aredis.Redis(connection_pool=aredis.BlockingConnectionPool.from_url(
            self.url, max_connections=POOL, timeout=None))
        self.keys = Keys(_name("namespace", namespace))
        self._follower: asyncio.Task | None = None
        self._started: asyncio.Future | None = None
        self._waits: dict[str, list[asyncio.Event]] = {}
        self._ready = False
        self._xackdel: str | None = None
        self._lacks: dict = {}
        self._lacks_at = -10.0
        self._upkeep = Upkeep()  # whether anyone does the queue's upkeep, looked at once

    def fn(self, name: str) -> str:
        return f"hero_v{VERSION}_{name}"

    async def connect(self) -> "Client":
        """Loads this version's library when the server lacks it; refuses a sharded namespace."""
        if self._ready:
            return self
        try:
            if _text(await self.r.fcall(self.fn("version"), 0)) != VERSION:
                raise HeroError("the library on the server is not the one its name says")
        except redis.ResponseError as e:
            if "Function not found" not in str(e):
                raise
            with open(LIBRARY, encoding="utf-8") as f:
                await self.r.function_load(f.read(), replace=True)
        raw = await self.r.hgetall(self.keys.shard_map())
        m = ShardMap()
        m.k = int(raw.get(b"k", b"1") or 1)
        if m.k > 1:
            raise HeroError(f"namespace {self.keys.prefix} is sharded ({m.k} shards): hero.aio serves an "
                            "unsharded namespace for now; use hero.Client (threaded) there")
        self._ready = True
        return self

    async def __aenter__(self) -> "Client":
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        f = self._follower
        if f is not None:
            f.cancel()
            try:
                await f
            except (asyncio.CancelledError, Exception):
                pass
        await self.r.aclose()

    # -- submit ---------------------------------------------------------------------------------
    def job(self, script: str, type: str = "rhai", **options: Any) -> JobSpec:
        """The submit of one job, checked, as `hero.Client.job` checks it."""
        check_options("submit", options)
        return job_spec(self.keys, script, type, **options)

    async def submit(self, script: str, type: str = "rhai", **options: Any) -> Submitted:
        return (await self.submit_many([self.job(script, type, **options)]))[0]

    async def submit_many(self, jobs: Sequence[tuple[str, str, int, dict[str, Any]]]) -> list[Submitted]:
        await self.connect()
        await self._upkeep.note_async(self.r, self.keys, jobs)
        if gated(jobs):
            # the brokers' summary of what live older processes lack, read at most every 2 s
            if time.monotonic() - self._lacks_at >= 2.0:
                self._lacks = read_lacks(await self.r.hget(self.keys.config(), "fleet_lacks"))
                self._lacks_at = time.monotonic()
            refuse_lacking(jobs, self._lacks)
        keys, argv = submit_args(self.keys, int(VERSION), jobs)
        try:
            answer = [_text(x) for x in await self.r.fcall(self.fn("submit"), len(keys), *keys, *argv)]
        except redis.ResponseError as e:
            raise HeroError.from_server(e) from None
        out = []
        for (job_id, _, _, _), i in zip(jobs, range(0, len(answer), 2)):
            kind, status = answer[i], answer[i + 1]
            if kind.startswith("duplicate:"):
                holder = kind.split(":", 1)[1]
                out.append(Submitted(holder, False, status, duplicate_of=holder))
            else:
                out.append(Submitted(job_id, kind == "created", status))
        return out

    async def run(self, script: str, type: str = "rhai", wait: float = 30.0, **options: Any) -> Result:
        s = await self.submit(script, type, **options)
        return await self.wait(s.id, wait)

    # -- read -----------------------------------------------------------------------------------
    async def get(self, job_id: str) -> Job:
        rec = await self.r.hgetall(self.keys.job(job_id))
        if not rec:
            raise JobNotFound(job_id)
        return Job.from_record(job_id, rec)

    async def status(self, job_id: str) -> str:
        s = await self.r.hget(self.keys.job(job_id), "status")
        if s is None:
            raise JobNotFound(job_id)
        return _text(s)

    async def stop(self, job_id: str) -> str:
        """Stops a job wherever it is: 'cancelled', 'interrupted' or 'already_completed'."""
        k = self.keys
        for _ in range(5):
            rec = await self.r.hmget(k.job(job_id), ["script_type", "group", "instance", "priority", "worker_id"])
            t, g, i, p, worker = (_text(x) for x in rec)
            stream = k.work(t, g or None, i or None, int(p) if p.isdigit() else 5) if t else k.job(job_id)
            parts = worker.split(":")
            ctl = k.ctl_instance(t, parts[0], parts[1]) if t and len(parts) == 3 else None
            keys = [k.job(job_id), stream, k.delayed(), k.reply(job_id), k.config(), ctl or k.config(),
                    k.retention(), k.events(), k.stats()]
            xackdel = await self._xackdel_flag()
            try:
                answer = _text(await self.r.fcall(self.fn("stop"), len(keys), *keys, GROUP, worker if ctl else "",
                                                  iso(), xackdel, job_id, "stopped"))
            except redis.ResponseError as e:
                raise HeroError.from_server(e) from None
            if answer != "changed":
                return answer
        raise HeroError(f"job {job_id} kept changing hands while it was being stopped; try again")

    async def _xackdel_flag(self) -> str:
        """'1' when the server has XACKDEL (asked once), as `Protocol.xackdel`."""
        if self._xackdel is None:
            try:
                await self.r.execute_command("XACKDEL")
                self._xackdel = "1"
            except redis.ResponseError as e:
                self._xackdel = "0" if "unknown command" in str(e).lower() else "1"
        return self._xackdel

    # -- wait -----------------------------------------------------------------------------------
    async def wait(self, job_id: str, wait: float = 30.0) -> Result:
        """Waits up to `wait` seconds for the job to end, whoever runs it (no thread, no poll
        per job): `Result` (`status`, `output`, `error`, `ok`), or `TimeoutError`."""
        if wait < 0:
            raise InvalidInput(f"wait {wait!r} is negative")
        deadline = time.monotonic() + wait
        ev = asyncio.Event()
        self._waits.setdefault(job_id, []).append(ev)
        try:
            await self._follow()
        except BaseException:
            self._waits.get(job_id, []).remove(ev)
            raise
        try:
            while True:
                ev.clear()
                job = await self.get(job_id)
                if job.ended:
                    return Result(job_id, job.status, job.output, job.error or "", job.output_text or "")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"job {job_id} did not end within {wait} s (it is {job.status})")
                try:
                    await asyncio.wait_for(ev.wait(), left)
                except asyncio.TimeoutError:
                    pass
        finally:
            lst = self._waits.get(job_id, [])
            if ev in lst:
                lst.remove(ev)
            if not lst:
                self._waits.pop(job_id, None)

    def _follow(self) -> "asyncio.Future[None]":
        """The follower of the log, started when none runs: resolves once it holds its cursor,
        so a wait reads the record only after anything that ends the job would be seen."""
        if self._follower is None:
            loop = asyncio.get_running_loop()
            self._started = loop.create_future()
            self._follower = loop.create_task(self._run(self._started))
        return self._started

    async def _log_on(self) -> bool:
        v = await self.r.hget(self.keys.config(), "events_max")
        try:
            return (int(v) if v is not None else 10000) > 0
        except ValueError:
            return True

    def _wake(self, job_id: str | None = None) -> None:
        for jid, lst in self._waits.items():
            if job_id is None or jid == job_id:
                for ev in lst:
                    ev.set()

    async def _run(self, started: "asyncio.Future[None]") -> None:
        """The client's one follower of the log: ends when no wait is left (decided in the same
        step that forgets it, so a wait that comes later starts another)."""
        # a connection of its own: a blocking read must not hold the pool's others
        follower = aredis.Redis.from_url(self.url)
        try:
            on = await self._log_on()
            cursor = "0-0"
            if on and await self.r.exists(self.keys.events()):
                cursor = _text((await self.r.xinfo_stream(self.keys.events()))["last-generated-id"])
            started.set_result(None)
            while True:
                if not self._waits:
                    self._follower = None
                    return
                if not on:
                    await asyncio.sleep(POLL)
                    self._wake()
                    on = await self._log_on()
                    continue
                try:
                    got = await follower.xread({self.keys.events(): cursor}, count=COUNT, block=BLOCK_MS)
                except redis.RedisError:
                    await asyncio.sleep(1.0)
                    self._wake()
                    continue
                entries = got[0][1] if got else []
                for entry_id, fields in entries:
                    cursor = _text(entry_id)
                    for e in decode(cursor, fields):
                        if e.event not in NOT_ENDS:
                            self._wake(e.job_id)
                if len(entries) >= COUNT:
                    self._wake()  # a full read may span a trim of the log
        except BaseException as e:
            if self._follower is asyncio.current_task():
                self._follower = None
            if not started.done():
                started.set_exception(e)
            raise
        finally:
            await follower.aclose()

    # -- events ---------------------------------------------------------------------------------
    async def events(self, type: str | None = None, queue: str | None = None, job: str | None = None,
                     since: str | None = None, event: str | None = None) -> AsyncIterator[Event]:
        """The job events that pass the filter, as `hero.Client.events` gives them (a `gap`
        event when behind the log's cap), awaited on this loop."""
        sync = redis.Redis.from_url(self.url)
        stream = EventStream(sync, [(0, self.keys)], Filter(type, queue, job, event), since)
        try:
            while True:
                try:
                    yield await asyncio.to_thread(stream.next, 1.0)
                except queue.Empty:
                    continue
        finally:
            stream.close()
            sync.close()


class Queue(QueueBase):
    """The operator's side of queue `type` (or `type/group` with `group=`) on asyncio: the jobs
    listed by state, retry, clean, drain, obliterate, is_paused (aio_queue.py); `client` an
    `hero.aio.Client` to share (else one of its own, closed by `close()` / `async with`)."""

    def __init__(self, type: str, url: str | None = None, namespace: str = "hero", *, group: str | None = None,
                 client: Client | None = None):
        own = client is None
        super().__init__(type, client if client is not None else Client(url, namespace), own, group=group)
