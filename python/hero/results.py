"""A sent task's result, as Celery's `AsyncResult` reads it: `app.AsyncResult(id)` (or what
`delay` answers) with `.state` in Celery's words, `.result`, `.traceback`, `.successful()`,
`.failed()`, `.get(timeout=)`, `.revoke()`; `AioResult`, the same awaited on asyncio (what
`delay_async` answers). A job's record holds all of it: nothing is kept beside it.

Celery's states from hero's statuses (docs/from-celery.md):

    no record, `waiting` (a countdown, an eta, prerequisites), `dispatched`  -> PENDING
    `waiting` after a failed attempt (its error kept, a retry due)           -> RETRY
    `started`                                                                -> STARTED
    `finished`                                                               -> SUCCESS
    `error` by a stop (`revoke()`, `hero stop`)                              -> REVOKED
    any other `error` (an exception, `timeout`, a failed prerequisite)       -> FAILURE

An id no job has is PENDING, as Celery answers for an id it never saw (a deleted job's too:
hero keeps ended jobs 24 h, or the task's `keep` / `keep_failed`)."""
from __future__ import annotations

import asyncio
import json
from typing import Any

from .errors import HeroError, JobNotFound
from .job import Job
from .payload import value_of  # noqa: F401 (hero.results.value_of as before: now the reading rule)

# tasks.py's App, typed loosely: this module sits below tasks.py and does not import it

PENDING, STARTED, RETRY, SUCCESS, FAILURE, REVOKED = "PENDING", "STARTED", "RETRY", "SUCCESS", "FAILURE", "REVOKED"
READY_STATES = frozenset((SUCCESS, FAILURE, REVOKED))
# what `get(timeout=None)` waits, Celery's "forever", within what a lock's wait accepts
FOREVER_S = 10 * 365 * 86400.0


class TaskError(HeroError):
    """The task ended `error`: `.reason` is what its job says (the exception's type and message)."""

    def __init__(self, job_id: str, reason: str):
        super().__init__(f"task {job_id} failed: {reason}")
        self.job_id = job_id
        self.reason = reason


def state_of(job: Job | None) -> str:
    """Celery's state of a task's job (see the module)."""
    if job is None:
        return PENDING
    if job.status == "started":
        return STARTED
    if job.status == "finished":
        return SUCCESS
    if job.status == "error":
        return REVOKED if job.error == "stopped" else FAILURE
    if job.status == "waiting" and job.error and job.attempts >= 1:
        return RETRY
    return PENDING


def task_value(output: Any, text: Any) -> Any:
    """A task's result by the reading rule, and a record of text alone (`output` is its `text`:
    written by hero-py before 1.1, which wrote every task result as JSON) read as that JSON."""
    if isinstance(output, str) and output == text:
        try:
            return json.loads(output)
        except ValueError:
            return output
    return output


def _ended(job_id: str, status: str, output: Any, error: str, propagate: bool, text: Any = None) -> Any:
    """A task's end: its return value (`output`, already read by the reading rule: the record's
    `value` unpacked, else its text), or the TaskError. A task's record with text alone (`output`
    is its `text`) was written by hero-py before 1.1, which wrote every task result as JSON:
    read as that JSON, so a rolling upgrade reads old results as their values too."""
    if status == "finished":
        return task_value(output, text)
    e = TaskError(job_id, error)
    if propagate:
        raise e
    return e


class AsyncResult:
    """A sent task (Celery's `AsyncResult`; also `app.AsyncResult(id)`). `.get(timeout)` waits
    for it and answers its return value, or raises `TaskError` with the reason it failed."""

    def __init__(self, app: Any, job_id: str):
        self.app = app
        self.id = job_id

    @property
    def task_id(self) -> str:
        return self.id

    def job(self) -> Job | None:
        """The job's record (hero's status, attempts, output, trace, ...), None when it has none."""
        try:
            return self.app.client.get(self.id)
        except JobNotFound:
            return None

    def get(self, timeout: float | None = 30.0, propagate: bool = True) -> Any:
        """Waits up to `timeout` seconds (None: for as long as it takes, as Celery's) for the
        task to end: its return value, or `TaskError` (answered instead of raised with
        `propagate=False`); `TimeoutError` when it did not end in time."""
        r = self.app.client.wait(self.id, FOREVER_S if timeout is None else timeout)
        return _ended(self.id, r.status, r.output, r.error, propagate, r.output_text)

    @property
    def state(self) -> str:
        """Celery's word for where the task is: PENDING, STARTED, RETRY, SUCCESS, FAILURE or
        REVOKED (see the module)."""
        return state_of(self.job())

    # Celery's alias of `state`; hero's own status word is `.job().status`
    status = state

    @property
    def result(self) -> Any:
        """The return value once it succeeded, the `TaskError` once it failed or was revoked,
        else None (as Celery's `result` / `info`)."""
        job = self.job()
        if job is None or not job.ended:
            return None
        return _ended(self.id, job.status, job.output, job.error or "", False, job.output_text)

    info = result

    @property
    def traceback(self) -> str | None:
        """The failed task's traceback as Python printed it (its last 16 KiB), None unless it
        failed."""
        job = self.job()
        return job.trace if state_of(job) == FAILURE else None

    def ready(self) -> bool:
        return self.state in READY_STATES

    def successful(self) -> bool:
        return self.state == SUCCESS

    def failed(self) -> bool:
        return self.state == FAILURE

    def revoke(self) -> str:
        """Stops it: a queued one never starts, a running one is interrupted (its context's
        `cancelled` set; in a process pool its child killed). Answers hero's word for what
        happened: `cancelled`, `interrupted` or `already_completed`."""
        return self.app.client.stop(self.id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AsyncResult) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<AsyncResult {self.id}>"


class GroupResult:
    """The results of a group's members, in order."""

    def __init__(self, results: list[AsyncResult]):
        self.results = results

    def get(self, timeout: float | None = 30.0, propagate: bool = True) -> list[Any]:
        return [r.get(timeout, propagate) for r in self.results]

    @property
    def ids(self) -> list[str]:
        return [r.id for r in self.results]

    def ready(self) -> bool:
        return all(r.ready() for r in self.results)


class AioResult:
    """A task sent from asyncio (what `delay_async` answers): the same reads as `AsyncResult`,
    awaited on the caller's loop through the app's `hero.aio.Client` (no thread a wait):
    `await r.get(timeout)` is the return value, `await r.state()` Celery's state."""

    def __init__(self, app: Any, job_id: str):
        self.app = app
        self.id = job_id

    @property
    def task_id(self) -> str:
        return self.id

    async def job(self) -> Job | None:
        try:
            return await self.app.aio_client().get(self.id)
        except JobNotFound:
            return None

    async def get(self, timeout: float | None = 30.0, propagate: bool = True) -> Any:
        r = await self.app.aio_client().wait(self.id, FOREVER_S if timeout is None else timeout)
        return _ended(self.id, r.status, r.output, r.error, propagate, r.output_text)

    async def state(self) -> str:
        return state_of(await self.job())

    async def ready(self) -> bool:
        return await self.state() in READY_STATES

    async def successful(self) -> bool:
        return await self.state() == SUCCESS

    async def failed(self) -> bool:
        return await self.state() == FAILURE

    async def revoke(self) -> str:
        return await self.app.aio_client().stop(self.id)

    def sync(self) -> AsyncResult:
        """The same result read from threads (`AsyncResult`)."""
        return AsyncResult(self.app, self.id)

    def __repr__(self) -> str:
        return f"<AioResult {self.id}>"


class AioGroupResult:
    """A group's results sent from asyncio: `await g.get(timeout)` is the list, in order."""

    def __init__(self, results: list[AioResult]):
        self.results = results

    @property
    def ids(self) -> list[str]:
        return [r.id for r in self.results]

    async def get(self, timeout: float | None = 30.0, propagate: bool = True) -> list[Any]:
        return list(await asyncio.gather(*(r.get(timeout, propagate) for r in self.results)))
