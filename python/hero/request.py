"""What a task knows of its own run, as Celery gives it: `self.request` in a task registered with
`bind=True` (`self` is the task), or `hero.current_task().request` anywhere in its call: the
job's id, the attempt (`retries` counts the ones before, as Celery's), the arguments, and a
cancel flag that its time limit, a revoke (`hero stop`), a lost lease and the worker's shutdown
set. Kept in a context variable, so each job thread (and an async task's loop) sees its own.

Time limits on the thread pool. Python cannot kill a thread, so a task is asked, then told:

- `soft_time_limit`: `hero.SoftTimeLimitExceeded` is raised in the task at the limit, with
  `ctypes.pythonapi.PyThreadState_SetAsyncExc` (the same in a process pool's child, where the
  task runs in the child's main thread). It lands at the task's next Python bytecode: a call
  blocked in C (`time.sleep`, a socket read, a C extension's loop) sees it once that call
  returns. An `async def` task has its asyncio task cancelled instead (`CancelledError` at its
  `await`), and fails with `SoftTimeLimitExceeded` unless it returns.
- the hard limit (`time_limit`), a revoke, a lost lease, the shutdown: the job's outcome is
  decided at once (`timeout`, `stopped`, ...) and `request.cancelled` set (a task that looks now
  and then returns cleanly); 1 s later, a task still running gets `hero.TimeLimitExceeded` (the
  hard limit) or `hero.Terminated` (the others) raised in it the same way, both BaseException so
  an `except Exception` does not swallow them; 2 s after the cancel, a thread still running (in
  C) is abandoned: its slot goes to the next job, it runs on unwatched and its result is dropped
  (the worker counts these, `Worker.abandoned`, and says each in the log). `pool="process"`
  kills the child at once instead.
"""
from __future__ import annotations

import asyncio
import contextvars
import ctypes
import threading
from typing import Any

from .job import Job

# tasks.py's Task, typed loosely: this module sits below tasks.py and does not import it


class SoftTimeLimitExceeded(Exception):
    """Raised in a task at its `soft_time_limit`: catch it to clean up and return (Celery's)."""

    def __init__(self, *args: Any):
        # raised by class from another thread (PyThreadState_SetAsyncExc), so without arguments
        super().__init__(*(args or ("the task ran past its soft_time_limit",)))


class TimeLimitExceeded(BaseException):
    """Raised in a thread-pool task still running 1 s after its hard time limit (the job already
    ended `timeout`): not an Exception, so a broad `except Exception` lets it through."""

    def __init__(self, *args: Any):
        super().__init__(*(args or ("the task ran past its time_limit: its job ended timeout",)))


class Terminated(BaseException):
    """Raised in a thread-pool task still running 1 s after a revoke, a lost lease or the
    worker's shutdown (the job's outcome is decided already)."""

    def __init__(self, *args: Any):
        super().__init__(*(args or ("the task was revoked, its lease lost or its worker stopped",)))


class Request:
    """A task's run (Celery's `self.request`): `id`, `task` (its name), `args`, `kwargs`,
    `attempt` (1 on the first run), `retries` (the attempts before this one), `queue`, `job`
    (the hero record), and `cancelled` / `cancel_reason` / `wait(seconds)`, `progress()`,
    `log()` of the job's context. Outside a task every field is empty."""

    def __init__(self, task: Any = None, job: Job | None = None, ctx: Any = None,
                 args: tuple = (), kwargs: dict | None = None):
        self.task = task.name if task is not None else None
        self.job, self._ctx = job, ctx
        self.id = job.id if job is not None else None
        self.args, self.kwargs = tuple(args), dict(kwargs or {})
        self.attempt = ctx.attempt if ctx is not None else 0
        self.retries = max(0, self.attempt - 1)
        self.queue = job.script_type if job is not None else None

    @property
    def called_directly(self) -> bool:
        return self._ctx is None

    @property
    def cancelled(self) -> bool:
        """True once the job must stop: its hard time limit, a revoke, a lost lease, the
        shutdown (always False in a process pool's child, which is killed instead)."""
        return self._ctx is not None and self._ctx.cancelled

    @property
    def cancel_reason(self) -> str | None:
        return self._ctx.cancel_reason if self._ctx is not None else None

    def wait(self, seconds: float) -> bool:
        """Sleeps up to `seconds`, woken by a cancel: True when cancelled."""
        return self._ctx.wait(seconds) if self._ctx is not None else False

    def progress(self, percent: float, message: str = "") -> None:
        if self._ctx is not None:
            self._ctx.progress(percent, message)

    def log(self, line: str) -> None:
        if self._ctx is not None:
            self._ctx.log(line)


_EMPTY = Request()
_current: contextvars.ContextVar[tuple[Any, Request] | None] = contextvars.ContextVar("hero_task", default=None)


def current_task() -> Any:
    """The task running in this thread (or async task), its run in `.request`; None outside one
    (Celery's `current_task`)."""
    cur = _current.get()
    return cur[0] if cur is not None else None


def request_of(task: Any) -> Request:
    cur = _current.get()
    return cur[1] if cur is not None and cur[0] is task else _EMPTY


def _async_exc(tid: int, exc: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(exc) if exc else None)


class _Guard:
    """Raises an exception in the task's thread, or cancels its asyncio task, only while the
    task's function runs: once it left (`leave`), nothing more is sent, and what was sent and
    not raised yet is withdrawn, so no exception lands in the worker's own code."""

    def __init__(self) -> None:
        self.tid = threading.get_ident()
        self.lock = threading.Lock()
        self.inside = True
        self.sent: type[BaseException] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.atask: asyncio.Task | None = None

    def send(self, exc: type[BaseException]) -> None:
        with self.lock:
            if not self.inside:
                return
            self.sent = exc
            if self.atask is not None and self.loop is not None:
                self.loop.call_soon_threadsafe(self.atask.cancel)
            else:
                _async_exc(self.tid, exc)

    def leave(self) -> None:
        while True:
            try:
                with self.lock:
                    if self.inside:
                        self.inside = False
                        if self.sent is not None and self.atask is None:
                            _async_exc(self.tid, None)
                return
            except BaseException:  # noqa: B036 - what was sent landed here: done with it, leave again
                continue

    async def run(self, awaitable: Any) -> Any:
        """An async task's coroutine as an asyncio task this guard can cancel."""
        with self.lock:
            self.loop, self.atask = asyncio.get_running_loop(), asyncio.ensure_future(awaitable)
        try:
            return await self.atask
        except asyncio.CancelledError:
            if self.sent is not None:
                raise self.sent(f"the task was cancelled at its {_WHAT.get(self.sent, 'limit')}") from None
            raise


_WHAT = {SoftTimeLimitExceeded: "soft time limit", TimeLimitExceeded: "time limit", Terminated: "stop"}
