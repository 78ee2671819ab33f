"""The operator's side of one queue on asyncio (`hero.aio.Queue`): the jobs listed by state
(`get_jobs`, `get_failed`, `get_completed`, `get_delayed`, `get_waiting`, `get_active`,
`get_job`) and the cleanup of the threaded `Queue` (`retry`, `clean`, `drain`, `obliterate`,
`is_paused`, with `pause`/`resume`), awaited on the caller's loop over `redis.asyncio`, through
the same server functions with the same keys and arguments (protocol.py's `*_args`). Like
`hero.aio.Client`, whose connection it uses, it serves an unsharded namespace.

    async with hero.aio.Queue("email", url) as q:
        for job in await q.get_failed(50):
            await q.retry(job.id)
        await q.clean(older_than="1h", status="finished")
"""
from __future__ import annotations

from typing import Any, Sequence

import redis

from .cleanup import STEP
from .client import _name, _whole
from .errors import HeroError, InvalidInput, JobNotFound
from .job import Job
from .listing import MAX_LIMIT, PAGE, covers, jobs_of, states_of
from .options import duration_ms
from .protocol import (clean_args, counts_args, drain_args, list_args, parse_counts, parse_drain, parse_list,
                       pause_args, policy_args, requeue_args)


class QueueBase:
    """Queue `type` (or `type/group` with `group=`) on asyncio, over `client`, an
    `hero.aio.Client`; `own` when closing the queue closes it. `hero.aio.Queue` (aio.py) makes
    the client when none is given: this module sits below aio.py and names none of it."""

    def __init__(self, type: str, client: Any, own: bool, *, group: str | None = None):
        self.type = _name("script type", type)
        self.name = type if group is None else f"{type}/{_name('group', group)}"
        self._own = own
        self.client = client
        self.r = self.client.r
        self.keys = self.client.keys

    async def __aenter__(self) -> "QueueBase":
        await self.client.connect()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own:
            await self.client.close()

    async def _fcall(self, fn: str, args: list[Any], ro: bool = False) -> Any:
        await self.client.connect()
        try:
            call = self.r.fcall_ro if ro else self.r.fcall
            return await call(self.client.fn(fn), *args)
        except redis.ResponseError as e:
            raise HeroError.from_server(e) from None

    # -- listing ------------------------------------------------------------------------------
    async def get_jobs(self, state: str | Sequence[str], limit: int = 100) -> list[Job]:
        """As `hero.Queue.get_jobs`: up to `limit` of the queue's jobs in `state` (finished,
        error, delayed, waiting, running; or a list), each state in its order."""
        _whole("limit", limit, 1, MAX_LIMIT)
        out: list[Job] = []
        for s in states_of(state):
            if len(out) >= limit:
                break
            ids: list[str] = []
            cursor = ""
            while len(out) + len(ids) < limit:
                cursor, got = parse_list(await self._fcall(
                    "list", list_args(self.keys, s, self.name, cursor, min(PAGE, limit - len(out) - len(ids))), True))
                ids.extend(got)
                if not cursor:
                    break
            if ids:
                pipe = self.r.pipeline(transaction=False)
                for i in ids:
                    pipe.hgetall(self.keys.job(i))
                out.extend(jobs_of(ids, await pipe.execute()))
        return out[:limit]

    async def get_failed(self, limit: int = 100) -> list[Job]:
        return await self.get_jobs("error", limit)

    async def get_completed(self, limit: int = 100) -> list[Job]:
        return await self.get_jobs("finished", limit)

    async def get_delayed(self, limit: int = 100) -> list[Job]:
        return await self.get_jobs("delayed", limit)

    async def get_waiting(self, limit: int = 100) -> list[Job]:
        return await self.get_jobs("waiting", limit)

    async def get_active(self, limit: int = 100) -> list[Job]:
        return await self.get_jobs("running", limit)

    async def get_job(self, job_id: str) -> Job | None:
        """Job `job_id` of this queue, None when there is none (or it is another queue's)."""
        try:
            job = await self.client.get(job_id)
        except JobNotFound:
            return None
        return job if covers(self.name, job) else None

    # -- pause --------------------------------------------------------------------------------
    async def pause(self) -> int:
        return int(await self._fcall("pause", pause_args(self.keys, self.name, True)))

    async def resume(self) -> int:
        return int(await self._fcall("pause", pause_args(self.keys, self.name, False)))

    async def is_paused(self) -> bool:
        """Whether the queue is paused, by its name itself (as `hero.Queue.is_paused`)."""
        return bool(await self.r.sismember(self.keys.paused_names(), self.name))

    async def running(self) -> int:
        """How many of the queue's jobs run now (hero_counts)."""
        counts = parse_counts(await self._fcall("counts", counts_args(self.keys, self.name), True))
        return sum(s[2] for s in counts)

    # -- cleanup ------------------------------------------------------------------------------
    async def retry(self, job_id: str) -> None:
        """As `hero.Queue.retry`: a failed (`error`) job runs again with a fresh budget; any
        other status is InvalidInput naming it; JobNotFound when there is none."""
        status = await self.r.hget(self.keys.job(job_id), "status")
        if status is None:
            raise JobNotFound(job_id)
        s = status.decode()
        if s != "error":
            raise InvalidInput(f"job {job_id} is {s}, not failed: only a failed job is retried "
                               "(requeue moves any job)")
        await self.requeue(job_id)

    async def requeue(self, job_id: str) -> str:
        """As `hero.Queue.requeue`: the job in its own queue again wherever it is; answers its stream."""
        k = self.keys
        cursor = "0-0"
        for _ in range(10_000):
            rec = await self.r.hmget(k.job(job_id), ["script_type", "group", "instance", "priority", "worker_id"])
            if all(x is None for x in rec):
                raise JobNotFound(job_id)
            t, g, i, pr, worker = (x.decode() if x else "" for x in rec)
            if not t:
                raise InvalidInput(f"job {job_id} names no script type, so it is in no queue of ours")
            prio = int(pr) if pr.isdigit() else 5
            stream = k.work(t, g or None, i or None, prio)
            parts = worker.split(":")
            ctl = k.ctl_instance(t, parts[0], parts[1]) if len(parts) == 3 else None
            r = await self._fcall("requeue", requeue_args(k, job_id, stream, stream, ctl, worker, cursor,
                                                          (t, g, i, prio), await self.client._xackdel_flag()))
            word, nxt = r[0].decode(), r[1].decode()
            if word == "requeued":
                return stream
            if word == "missing":
                raise JobNotFound(job_id)
            cursor = nxt if word == "searching" else "0-0"
        raise HeroError(f"job {job_id} kept changing hands while it was being requeued; try again")

    async def clean(self, older_than: Any = 0, status: str | None = None, limit: int = 1000) -> list[str]:
        """As `hero.Queue.clean`: deletes up to `limit` of the queue's jobs that ended with
        `status` ('finished', 'error', None either) at least `older_than` ago, oldest first;
        answers their ids."""
        grace = duration_ms("older_than", older_than)
        if status is not None and status not in ("finished", "error"):
            raise InvalidInput(f"clean takes finished or error jobs, not {status}: drain deletes waiting ones")
        _whole("limit", limit, 0)
        out: list[str] = []
        cursor = ""
        while len(out) < limit:
            cursor, ids = parse_list(await self._fcall("clean", clean_args(
                self.keys, grace, status or "", self.name, min(limit - len(out), STEP), cursor)))
            out.extend(ids)
            if not cursor:
                break
        return out

    async def drain(self, delayed: bool = False) -> int:
        """As `hero.Queue.drain`: deletes the queue's waiting jobs (and delayed ones with
        `delayed`); answers how many."""
        return (await self._drain_steps(delayed, False))[0]

    async def obliterate(self) -> int:
        """As `hero.Queue.obliterate`: the queue removed whole (paused, its waiting, delayed
        and ended jobs deleted, its streams, names and policy); InvalidInput while its jobs run,
        nothing deleted then. Answers how many jobs it deleted."""
        running = await self.running()
        if running > 0:
            raise InvalidInput(f"{running} jobs of {self.name} are running: stop them (hero stop <id>) or wait "
                               "for their end, then obliterate")
        await self.pause()
        deleted = (await self._drain_steps(True, False))[0]
        while True:
            ids = await self.clean(0, None, 10 * STEP)
            deleted += len(ids)
            if len(ids) < 10 * STEP:
                break
        n, running = await self._drain_steps(True, True)
        deleted += n
        if running > 0:
            raise InvalidInput(f"{running} jobs of {self.name} started meanwhile: obliterate again once they end")
        await self.r.hdel(self.keys.whole_policies(), self.name)
        await self._fcall("policy", policy_args(self.keys, self.name, ""))
        return deleted

    async def _drain_steps(self, delayed: bool, remove: bool) -> tuple[int, int]:
        cursor, deleted = "0", 0
        while True:
            n, more, running, cursor = parse_drain(await self._fcall(
                "drain", drain_args(self.keys, self.name, delayed, STEP, remove, cursor)))
            deleted += n
            if not more:
                return deleted, running
