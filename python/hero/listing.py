"""A queue's jobs by state, mixed into `Queue` (and `hero.aio.Queue`): `get_jobs(state, limit)`
and its short names (`get_failed`, `get_completed`, `get_delayed`, `get_waiting`, `get_active`),
and `get_job(id)`. Each reads the ids through hero_list (protocol 33: the same jobs in the same
order as Node's `getJobs` and Rust's `list`), on every shard, calling again until it holds its
limit or the listing ends (a call reads at most 1,000 candidates, so one page may be short or
empty while matches remain), then the records with one pipeline of HGETALL a shard.

    q = hero.Queue("email")
    [j.error for j in q.get_failed(50)]       # the newest failures first
    q.get_jobs(["waiting", "delayed"], limit=10)
    q.get_job("job-1")                          # the Job, or None

The states are hero's: `finished` and `error` (newest end first), `delayed` (soonest first: a
delay, an eta, a retry waiting out its back-off), `waiting` (queued, not taken) and `running`.
BullMQ's words that mean one of them are taken too (`completed`, `failed`, `active`, `wait`),
and Celery's (`SUCCESS`, `FAILURE`, `STARTED`); a word meaning two of them (Celery's `PENDING`
is waiting or delayed; `RETRY` is delayed or waiting) or none is refused (InvalidInput) naming
the states. Beware hero's record status `waiting`: it is a job waiting for its time, the state
`delayed` here; a queued job's record says `dispatched`, the state `waiting`.
"""
from __future__ import annotations

from typing import Any, Sequence

from .client import _whole
from .errors import InvalidInput, JobNotFound
from .job import Job

STATES = ("finished", "error", "delayed", "waiting", "running")
# the words other queues use, and hero's state for each: only words that mean one state
_ALIASES = {
    "completed": "finished", "success": "finished", "succeeded": "finished",
    "failed": "error", "failure": "error",
    "active": "running", "started": "running",
    "wait": "waiting", "dispatched": "waiting", "queued": "waiting",
    "scheduled": "delayed",
}
_AMBIGUOUS = {
    "pending": "Celery's PENDING is a queued job (waiting) or one waiting for its time (delayed)",
    "retry": "Celery's RETRY is a retry waiting out its back-off (delayed) or one queued again (waiting)",
    "timeout": "a timed-out job ended error (its error is 'timeout'): list error and look at job.error",
    "revoked": "a revoked job ended error (its error is 'stopped'): list error and look at job.error",
    "paused": "a paused queue's jobs are waiting (Queue.is_paused says whether it is)",
    "prioritized": "BullMQ's prioritized jobs are waiting jobs (hero orders every waiting job by priority)",
}
# the most jobs one get_jobs answers (each hero_list call answers at most 1,000)
MAX_LIMIT = 10_000
PAGE = 1000


def states_of(state: str | Sequence[str]) -> list[str]:
    """hero's states for `state` (one word or several), in the order given, each once."""
    words = [state] if isinstance(state, str) else list(state)
    if not words:
        raise InvalidInput(f"give a state: one of {', '.join(STATES)}")
    out: list[str] = []
    for w in words:
        if not isinstance(w, str):
            raise InvalidInput(f"state {w!r} is not text: give one of {', '.join(STATES)}")
        key = w.strip().lower()
        s = key if key in STATES else _ALIASES.get(key)
        if s is None:
            why = _AMBIGUOUS.get(key)
            raise InvalidInput(f"state {w!r} " + (f"is ambiguous ({why})" if why else "is not one") +
                               f": give one of {', '.join(STATES)}")
        if s not in out:
            out.append(s)
    return out


def newest_first(state: str, jobs: list[Job]) -> list[Job]:
    """Jobs gathered from several shards in the state's order: ended ones newest end first
    (each shard's page is already so; merged, the order holds across them)."""
    if state in ("finished", "error"):
        return sorted(jobs, key=lambda j: j.finished_at or "", reverse=True)
    return jobs


def jobs_of(ids: list[str], records: list[Any]) -> list[Job]:
    """The Jobs of `ids` from their HGETALL answers; a job deleted since it was listed is left out."""
    return [Job.from_record(i, rec) for i, rec in zip(ids, records) if rec]


def covers(name: str, job: Job) -> bool:
    """Whether `job` is in queue `name` (`type` or `type/group`)."""
    t, _, g = name.partition("/")
    return job.script_type == t and (not g or job.group == g)


class Listing:
    """The listing methods of `Queue` (which supplies `name`, `client`, `r`, `_shards`, `_call`)."""

    name: str

    def get_jobs(self, state: str | Sequence[str], limit: int = 100) -> list[Job]:
        """Up to `limit` (1-10,000) of the queue's jobs in `state` (one state or a list:
        `finished`, `error`, `delayed`, `waiting`, `running`; see the module), state after state
        in the order given, each state in its order (ended jobs newest end first, delayed ones
        soonest first, queued and running ones by stream)."""
        _whole("limit", limit, 1, MAX_LIMIT)
        out: list[Job] = []
        for s in states_of(state):
            if len(out) >= limit:
                break
            found: list[Job] = []
            for _, keys, p in self._shards():  # type: ignore[attr-defined]
                ids = self._ids(p, s, limit - len(out))
                pipe = self.r.pipeline(transaction=False)  # type: ignore[attr-defined]
                for i in ids:
                    pipe.hgetall(keys.job(i))
                found.extend(jobs_of(ids, pipe.execute() if ids else []))
            out.extend(newest_first(s, found)[:limit - len(out)])
        return out

    def _ids(self, proto, state: str, limit: int) -> list[str]:
        """Up to `limit` ids from one shard: hero_list called until it held them or ended."""
        ids: list[str] = []
        cursor = ""
        while len(ids) < limit:
            cursor, got = self._call(  # type: ignore[attr-defined]
                lambda c=cursor: proto.list_page(state, self.name, c, min(PAGE, limit - len(ids))))
            ids.extend(got)
            if not cursor:
                break
        return ids[:limit]

    def get_failed(self, limit: int = 100) -> list[Job]:
        """The queue's failed jobs (`error`: attempts spent, aborted, timed out, stopped,
        dead-lettered), newest first (BullMQ's `getFailed`); `retry(job.id)` runs one again."""
        return self.get_jobs("error", limit)

    def get_completed(self, limit: int = 100) -> list[Job]:
        """The queue's finished jobs, newest first (BullMQ's `getCompleted`)."""
        return self.get_jobs("finished", limit)

    def get_delayed(self, limit: int = 100) -> list[Job]:
        """The queue's jobs waiting for their time (a delay, an eta, a retry's back-off), soonest first."""
        return self.get_jobs("delayed", limit)

    def get_waiting(self, limit: int = 100) -> list[Job]:
        """The queue's queued jobs no worker took yet."""
        return self.get_jobs("waiting", limit)

    def get_active(self, limit: int = 100) -> list[Job]:
        """The queue's running jobs (BullMQ's `getActive`)."""
        return self.get_jobs("running", limit)

    def get_job(self, job_id: str) -> Job | None:
        """Job `job_id` of this queue, None when there is none (or it is another queue's)."""
        try:
            job = self.client.get(job_id)  # type: ignore[attr-defined]
        except JobNotFound:
            return None
        return job if covers(self.name, job) else None
