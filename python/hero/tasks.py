"""Tasks, as a Celery user writes them: `app = hero.App(url)`, `@app.task` registers a function
under a name, `add.delay(2, 3)` sends it with its arguments, `.get(timeout)` is its return
value, and chains, groups and chords pass results along. A layer over the client and the
worker, not a second protocol:

- a task's job is a job of script type `queue` (the app's, `"tasks"` by default, or the task's
  own `queue=`), its `script` the task's name (any text: `proj.tasks.add` as Celery names it),
  its payload the arguments as MessagePack `{"args": [...], "kwargs": {...}}` (what Rust and
  Node handlers read as any payload);
- its output is the return value as a value (protocol 33): MessagePack, as the arguments travel,
  in the record's `value`, so `.get()` gives back a dict, a list, None, a datetime, bytes as they
  were returned, with its JSON text in `output` for older readers (`hero status`, the
  dashboard); a `str` is stored as text and comes back as that str; a value MessagePack cannot
  carry (a set, an object) fails the attempt naming its type, never a silent `str()`;
- a task's declared policy (retries, back-off, time limit, priority) travels with each job it
  sends (the job's own policy, issue 48), so deploys that declare it differently never flap a
  shared queue policy; the queue's policy, when an operator sets one, is the floor;
- a task's `rate` (`"10/m"`, Celery's `rate_limit`) spaces the starts of its jobs on each
  worker process (Celery's is per worker instance too): a job that comes early waits in its slot,
  its lease renewed, and the wait counts toward its time limit; a limit over the whole queue is
  its policy's `rate` (`Queue.set_policy(rate=...)`), kept by the functions;
- `autoretry_for` exceptions fail the attempt and are retried within `retries` on the task's
  back-off; any other exception ends the job at once (Celery's rule), and so does `hero.Abort`;
  `retries` is Celery's 3 when a task names none and retries (`autoretry_for`, `hero.Retry`);
- a chain's next task runs after the one before (its prerequisite) and gets that result as its
  first argument, read from its own record (`job.results`); a chord's callback gets its
  members' results as a list, in order.

    app = hero.App("redis://127.0.0.1:6379")

    @app.task(retries=3, backoff="exponential:1s:1m", autoretry_for=(IOError,))
    def add(x, y):
        return x + y

    assert add.delay(2, 3).get(10) == 5
    app.worker(concurrency=8).run()    # in the worker process
"""
from __future__ import annotations

import asyncio
import importlib
import inspect
import pickle
import sys
import threading
import time
import weakref
from typing import Any, Callable, Sequence

import msgpack

from . import aio
from .canvas import Chain, Group, Signature, chain, chord, chord_async, group  # noqa: F401 (hero.tasks.* as before)
from .client import Client, _name, check_options, job_spec
from .errors import InvalidInput
from .job import Job
from .keys import Keys
from .options import Backoff, duration_ms, rate as parse_rate
from .outcomes import Abort, Retry
from .payload import AsValue, pack, unpack
from .request import Request, SoftTimeLimitExceeded, Terminated, TimeLimitExceeded, _current, _Guard, request_of
from .results import AioResult, AsyncResult, GroupResult, TaskError, task_value, value_of  # noqa: F401 (hero.tasks.* as before)
from .worker import JobContext, Worker

DEFAULT_QUEUE = "tasks"
# the retries a task gets when it names none, for `autoretry_for` and `hero.Retry` (Celery's
# `max_retries` default); a task naming none and neither retrying gets 0, so a time limit or a
# dead worker's job is not retried more than before
CELERY_MAX_RETRIES = 3
# in a payload: the task before in a chain (its result is the first argument), or a chord's
# members (the list of their results is)
_CHAIN, _CHORD = "chain", "chord"


# Celery's task options and hero's word for each (or why there is none)
_CELERY_TASK_OPTIONS = {
    "max_retries": "retries",
    "rate_limit": "rate (per worker process, as Celery's)",
    "retry_backoff": "backoff (e.g. 'exponential:1s:10m')",
    "retry_backoff_max": "backoff (its cap: 'exponential:1s:10m')",
    "retry_jitter": "backoff (hero.Backoff(..., jitter=0.2))",
    "default_retry_delay": "backoff ('fixed:30s')",
    "acks_late": "(none needed: a job is acknowledged only once it ended, and recovered if its worker dies)",
    "ignore_result": "keep=0 (the result is deleted 10 s after the end)",
    "expires": "(none: stop it with AsyncResult.revoke())",
    "serializer": "(none: arguments are MessagePack)",
}


class _Spacing:
    """A task's `rate` on one worker process: starts at least `per_ms / max` apart (Celery's
    token bucket of one token)."""

    def __init__(self, r: dict[str, int]):
        self.interval = r["per_ms"] / r["max"] / 1000
        self.next = 0.0
        self.lock = threading.Lock()

    def take(self) -> float:
        """Seconds until this start's turn (0 when now), its turn taken."""
        with self.lock:
            now = time.monotonic()
            at = max(now, self.next)
            self.next = at + self.interval
            return at - now


def _payload(args: Sequence[Any], kwargs: dict[str, Any], chained: str | None = None,
             chord_of: Sequence[str] = ()) -> bytes:
    body: dict[str, Any] = {"args": list(args), "kwargs": dict(kwargs)}
    if chained:
        body[_CHAIN] = chained
    if chord_of:
        body[_CHORD] = list(chord_of)
    try:
        return pack(body)
    except (TypeError, ValueError) as e:
        raise InvalidInput(f"a task's arguments must be MessagePack values (dict, list, str, bytes, "
                           f"int, float, bool, None): {e}") from None


class Task:
    """A function registered with `@app.task`; calling it runs it here, `delay` / `submit` send
    it."""

    def __init__(self, app: "App", fn: Callable, name: str, queue: str, retries: int | None, backoff: Any,
                 autoretry_for: tuple[type[BaseException], ...], time_limit: Any, priority: int | None,
                 keep: Any, keep_failed: Any, rate: Any = None, bind: bool = False, soft_time_limit: Any = None):
        self.app, self.fn, self.name, self.queue = app, fn, name, _name("task queue", queue)
        if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int) or retries < 0):
            raise InvalidInput(f"task {name}: retries {retries!r} is not a whole number of at least 0")
        # Celery's max_retries is 3 unless a task says otherwise: a literal port's autoretry_for
        # and self.retry() would fail at once on hero's budget of 0 (issue 60)
        self.retries_declared = retries is not None
        self.retries = retries if retries is not None else (CELERY_MAX_RETRIES if autoretry_for else 0)
        self.backoff = Backoff.of(backoff) if backoff is not None else None
        if not all(isinstance(t, type) and issubclass(t, BaseException) for t in autoretry_for):
            raise InvalidInput(f"task {name}: autoretry_for takes exception classes, got {autoretry_for!r}")
        self.autoretry_for = tuple(autoretry_for)
        self.time_limit = None if time_limit is None else max(1, -(-duration_ms("time_limit", time_limit) // 1000))
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9):
            raise InvalidInput(f"task {name}: priority {priority!r} is not 0 (highest) to 9 (lowest)")
        self.priority = priority
        self.keep, self.keep_failed = keep, keep_failed
        self.rate = None if rate is None else parse_rate(f"task {name}: rate", rate)
        if not isinstance(bind, bool):
            raise InvalidInput(f"task {name}: bind {bind!r} is True (the task gets itself first: self.request) "
                               "or False")
        self.bind = bind
        self.soft_time_limit = None if soft_time_limit is None else \
            duration_ms("soft_time_limit", soft_time_limit) / 1000
        if self.soft_time_limit is not None and self.time_limit is not None and self.soft_time_limit >= self.time_limit:
            raise InvalidInput(f"task {name}: soft_time_limit {soft_time_limit!r} is not shorter than its "
                               f"time_limit ({self.time_limit} s): it would never be raised")
        self._spacing = _Spacing(self.rate) if self.rate else None
        self.__doc__, self.__name__ = fn.__doc__, getattr(fn, "__name__", name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(self, *args, **kwargs) if self.bind else self.fn(*args, **kwargs)

    @property
    def request(self) -> Request:
        """This task's run in the calling thread (`bind=True`: `self.request`): its id, attempt,
        `retries`, cancel flag, ...; empty outside a run of it (request.py)."""
        return request_of(self)

    def retry(self, exc: BaseException | None = None, countdown: float | None = None,
              max_retries: int | None = None) -> Retry:
        """Raises `hero.Retry` (Celery's `raise self.retry(exc=e, countdown=5)`): again after
        `countdown` seconds (1 by default), within `max_retries`, else the task's `retries`, else
        Celery's 3."""
        reason = f"{type(exc).__name__}: {exc}" if exc is not None else "retry"
        raise Retry(reason, 1.0 if countdown is None else float(countdown), max_retries) from exc

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        return Signature(self, args, kwargs)

    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return self.submit(args=args, kwargs=kwargs)

    def apply_async(self, args: Sequence[Any] = (), kwargs: dict | None = None, **options: Any) -> AsyncResult:
        """Celery's spelling of `submit`: `countdown` (seconds) is `delay`, `eta` is `at`,
        `queue` the queue it goes to (its script type) instead of the task's, `task_id` its id."""
        return self.submit(args=args, kwargs=kwargs or {}, **self._celery(options))

    async def delay_async(self, *args: Any, **kwargs: Any) -> AioResult:
        """`delay` from asyncio: sent on the caller's loop with every option the task declares
        (retries, back-off, time limit, priority, ...); `await r.get(timeout)` is its value."""
        return await self.apply_async_async(args, kwargs)

    async def apply_async_async(self, args: Sequence[Any] = (), kwargs: dict | None = None,
                                **options: Any) -> AioResult:
        """`apply_async` from asyncio: the same options (`countdown`, `eta`, `queue`, `priority`, ...)."""
        spec = self._job(args, kwargs or {}, **self._celery(options))
        s = (await self.app.aio_client().submit_many([spec]))[0]
        return AioResult(self.app, s.id)

    def submit(self, args: Sequence[Any] = (), kwargs: dict | None = None, **options: Any) -> AsyncResult:
        """Sends it with `args` and `kwargs`; `options` are the submit's (`delay`, `at`, `id`,
        `priority`, `unique`, `tags`, ..., and `queue`), over the task's declared ones."""
        spec = self._job(args, kwargs or {}, **options)
        s = self.app.client.submit_many([spec])[0]
        return AsyncResult(self.app, s.id)

    def _celery(self, options: dict[str, Any]) -> dict[str, Any]:
        """`apply_async`'s options (and a signature's) with Celery's names read as hero's."""
        out = dict(options)
        for celery, hero_word in (("countdown", "delay"), ("eta", "at"), ("task_id", "id")):
            if celery in out:
                v = out.pop(celery)
                if hero_word in out:
                    raise InvalidInput(f"task {self.name}: {celery} and {hero_word} say the same; give one")
                if v is not None:
                    out[hero_word] = v
        return out

    def _job(self, args: Sequence[Any], kwargs: dict, chained: str | None = None, chord_of: Sequence[str] = (),
             **options: Any):
        """The job of one call: the task's declared policy, then `options` over it (Celery's
        names read as hero's), checked before anything is sent."""
        if not isinstance(args, (list, tuple)):
            raise InvalidInput(f"task {self.name}: args is a list or tuple, got {type(args).__name__}")
        if not isinstance(kwargs, dict):
            raise InvalidInput(f"task {self.name}: kwargs is a dict, got {type(kwargs).__name__}")
        for k in ("payload", "after"):
            if k in options:
                raise InvalidInput(f"task {self.name}: {k} is the task's own (its arguments, its chain)")
        if "type" in options:
            # a task's queue is its jobs' script type: one name for it, Celery's
            raise InvalidInput(f"task {self.name}: give the queue as queue= (a task's queue is its jobs' script "
                               "type), not type=")
        queue = _name("task queue", options.pop("queue", None) or self.queue)
        declared: dict[str, Any] = {"retries": self.retries}
        for k, v in (("backoff", self.backoff), ("timeout", self.time_limit), ("priority", self.priority),
                     ("keep", self.keep), ("keep_failed", self.keep_failed)):
            if v is not None:
                declared[k] = v
        declared.update(options)
        check_options(f"task {self.name}", declared)
        after = [chained] if chained else list(chord_of)
        return job_spec(self.app.keys, self.name, queue, payload=_payload(args, kwargs, chained, chord_of),
                        after=after, **declared)

    def __repr__(self) -> str:
        return f"<Task {self.name} on {self.queue}>"


class App:
    """A registry of tasks and the client that sends them (Celery's `Celery(...)`)."""

    def __init__(self, url: str | None = None, namespace: str = "hero", *, queue: str = DEFAULT_QUEUE,
                 client: Client | None = None):
        self.queue = _name("task queue", queue)
        self.namespace = namespace
        self.url = url
        self._client = client
        self._aio: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.tasks: dict[str, Task] = {}

    def __reduce__(self):
        """Sent by reference, as a process pool's children need it (each imports the module
        that defines the app, and with it its tasks): the app must be at a module's top level."""
        for mod_name, mod in list(sys.modules.items()):
            for attr, v in list(vars(mod).items()) if mod is not None else []:
                if v is self:
                    if mod_name == "__mp_main__":
                        mod_name = "__main__"
                    return (_app_at, (mod_name, attr))
        raise pickle.PicklingError("this App is at no module's top level, so a child process cannot import "
                                   "it: define `app = hero.App(...)` at a module's top level for pool='process'")

    @property
    def keys(self) -> Keys:
        """The namespace's keys (its client's when one was given), without connecting."""
        return self._client.keys if self._client is not None else Keys(_name("namespace", self.namespace))

    def aio_client(self) -> "aio.Client":
        """The `hero.aio.Client` of the running event loop, made on first use (one a loop: a
        client's connections belong to the loop that made them). Tasks sent from asyncio and
        their results go through it; `await app.aclose()` closes it."""
        loop = asyncio.get_running_loop()
        c = self._aio.get(loop)
        if c is None:
            c = self._aio[loop] = aio.Client(self.url, self.namespace)
        return c

    async def aclose(self) -> None:
        """Closes the running loop's client (`aio_client`), if it made one."""
        c = self._aio.pop(asyncio.get_running_loop(), None)
        if c is not None:
            await c.close()

    def AsyncResult(self, task_id: str) -> AsyncResult:  # noqa: N802 (Celery's name)
        """The result of a task sent before, by its id (Celery's `app.AsyncResult(id)`)."""
        return AsyncResult(self, task_id)

    @property
    def client(self) -> Client:
        """Connected on first use, so defining tasks needs no Redis."""
        if self._client is None:
            self._client = Client(self.url, self.namespace)
        return self._client

    def task(self, fn: Callable | None = None, *, name: str | None = None, queue: str | None = None,
             retries: int | None = None, backoff: Any = None, autoretry_for: Sequence[type[BaseException]] = (),
             time_limit: Any = None, priority: int | None = None, keep: Any = None,
             keep_failed: Any = None, rate: Any = None, bind: bool = False, soft_time_limit: Any = None,
             **celery: Any) -> Any:
        """Registers `fn` as a task (`@app.task` or `@app.task(retries=3, ...)`). Its name is
        `name`, else `<module>.<function>` as Celery names it. Celery's option names are refused
        naming hero's (`max_retries` → `retries`)."""
        for k in celery:
            hint = _CELERY_TASK_OPTIONS.get(k)
            raise InvalidInput(f"@app.task has no option {k!r}" + (f"; use {hint}" if hint else "") +
                               ": the options are name, queue, retries, backoff, autoretry_for, time_limit, "
                               "priority, keep, keep_failed, rate, bind, soft_time_limit")
        if isinstance(autoretry_for, type):
            autoretry_for = (autoretry_for,)
        def register(f: Callable) -> Task:
            n = name or f"{f.__module__}.{f.__qualname__}"
            if not n or len(n.encode()) > 200:
                raise InvalidInput(f"task name {n!r} is not 1 to 200 bytes")
            if n in self.tasks:
                raise InvalidInput(f"task {n} is registered twice: give one of them name=")
            t = Task(self, f, n, queue or self.queue, retries, backoff, tuple(autoretry_for), time_limit,
                     priority, keep, keep_failed, rate, bind, soft_time_limit)
            self.tasks[n] = t
            return t
        return register(fn) if fn is not None else register

    def beat(self, name: str, schedule: str, task: "Task", args: Sequence[Any] = (), kwargs: dict | None = None,
             *, tz: str = "UTC", missed: str = "skip") -> int | None:
        """A recurring task (Celery's `beat_schedule` entry): each tick of `schedule` (a cron
        expression read in `tz`, or `every 30s`) sends `task` with `args` and `kwargs` and its
        declared options, fired by the queue's upkeep (the duties of any worker, or a broker)
        once however many run: no separate beat process. Answers the next tick (ms; None when
        the schedule has none); a schedule or zone the cron engine refuses is InvalidInput."""
        from .queue import Queue
        if not isinstance(task, Task):
            raise InvalidInput(f"beat {name}: task is {task.__class__.__name__}: give a task (@app.task)")
        if not isinstance(args, (list, tuple)):
            raise InvalidInput(f"beat {name}: args is a list or tuple, got {args.__class__.__name__}")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise InvalidInput(f"beat {name}: kwargs is a dict, got {kwargs.__class__.__name__}")
        opts: dict[str, Any] = {"retries": task.retries}
        for k, v in (("backoff", task.backoff), ("timeout", task.time_limit), ("priority", task.priority),
                     ("keep", task.keep), ("keep_failed", task.keep_failed)):
            if v is not None:
                opts[k] = v
        return Queue(task.queue, client=self.client).cron_add(name, schedule, task.name, tz=tz, missed=missed,
                                                              payload=_payload(args, kwargs or {}), **opts)

    def handler(self, job: Job, ctx: JobContext) -> Any:
        """Runs one task's job: its function by the job's script, its arguments from the
        payload (and the results of the tasks it follows in a chain or chord)."""
        t = self.tasks.get(job.script)
        if t is None:
            raise Abort(f"no task named {job.script!r} is registered in this worker "
                        f"(it has {', '.join(sorted(self.tasks)) or 'none'})")
        try:
            body = unpack(job.payload) if job.payload else {}
        except (ValueError, msgpack.ExtraData, msgpack.FormatError) as e:
            raise Abort(f"the arguments of task {t.name} are not MessagePack: {e}") from None
        if not isinstance(body, dict):
            raise Abort(f"the arguments of task {t.name} are not a map of args and kwargs")
        args, kwargs = list(body.get("args") or []), dict(body.get("kwargs") or {})
        def result_of(pid: str) -> Any:
            r = job.results.get(pid)
            if r is None or r.status != "finished":
                raise Abort(f"task {t.name}: the result of {pid} is missing from its record")
            return task_value(r.output, r.output_text)  # the value it returned
        if body.get(_CHAIN):
            args.insert(0, result_of(body[_CHAIN]))
        elif body.get(_CHORD):
            args.insert(0, [result_of(pid) for pid in body[_CHORD]])
        try:
            value = self._call(t, job, ctx, args, kwargs)
        except Retry as e:
            out = _bounded(t, e, ctx.attempt)
            if out is e:
                raise
            raise out from e
        except Abort:
            raise
        except t.autoretry_for:
            raise  # the worker fails the attempt: retried within the job's budget on its back-off
        except Exception as e:
            raise Abort(f"{type(e).__name__}: {e}") from e
        except (TimeLimitExceeded, Terminated) as e:
            # raised in it after its outcome was decided (request.py): nothing more to record
            raise Abort(f"{type(e).__name__}: {ctx.cancel_reason or 'cancelled'}") from e
        # the value itself: the worker records it as a value (MessagePack, its JSON text beside it
        # for older readers), a str too (AsValue: a 0.29 producer json.loads a task's output);
        # one MessagePack cannot carry fails naming its type
        return AsValue(value)

    @staticmethod
    def _call(t: Task, job: Job, ctx: JobContext, args: list, kwargs: dict) -> Any:
        """The task's function in its run's context (`self.request`, `current_task()`), its soft
        time limit timed and a cancel's exception sent only while it runs (request.py)."""
        guard = _Guard()
        token = _current.set((t, Request(t, job, ctx, tuple(args), kwargs)))
        timer = None
        if t.soft_time_limit is not None:
            timer = threading.Timer(t.soft_time_limit, guard.send, (SoftTimeLimitExceeded,))
            timer.daemon = True
            timer.start()
        if isinstance(ctx, JobContext):
            # on the thread pool: the keeper sends it a second after a cancel (the parent of a
            # process pool's child kills it instead)
            ctx._interrupt = lambda reason: guard.send(TimeLimitExceeded if reason == "timeout" else Terminated)
        try:
            try:
                value = t.fn(t, *args, **kwargs) if t.bind else t.fn(*args, **kwargs)
                if inspect.isawaitable(value):
                    # an async task runs on this job thread's own event loop, as an async handler does
                    value = asyncio.run(guard.run(value))
            finally:
                guard.leave()
        except BaseException:  # noqa: B036 - a send may have landed before the first leave
            guard.leave()
            raise
        finally:
            if timer is not None:
                timer.cancel()
            _current.reset(token)
        return value

    def worker(self, queues: Sequence[str] | None = None, **options: Any) -> Worker:
        """A `Worker` serving every registered task's queue (or `queues`); `options` are the
        Worker's (`concurrency`, `group`, ...)."""
        qs = list(queues) if queues else sorted({t.queue for t in self.tasks.values()} or {self.queue})
        w = Worker(self.handler, qs, self.url, namespace=self.namespace, **options)
        if any(t._spacing for t in self.tasks.values()):
            # in the worker process, before the job goes to a thread or a child: one pace for all
            w._throttle = self._pace
        return w

    def _pace(self, job: Job, ctx: JobContext) -> None:
        """Holds a job of a task with a `rate` until its turn on this worker process."""
        t = self.tasks.get(job.script)
        if t is not None and t._spacing is not None:
            wait = t._spacing.take()
            if wait > 0:
                ctx.wait(wait)


def _bounded(t: Task, e: Retry, attempt: int) -> Exception:
    """A task's `Retry` within its budget: a budget the task declared is the job's own (the
    server's, with its queue policy's); else Celery's 3 (or `self.retry(max_retries=)`),
    counted here and retried whatever the job's budget ('again')."""
    if e.budget is None and t.retries_declared:
        return e
    budget = e.budget if e.budget is not None else CELERY_MAX_RETRIES
    if attempt - 1 < budget:
        e.again = True
        return e
    return Abort(f"max retries ({budget}) exceeded: {e}")


def _app_at(module: str, attr: str) -> "App":
    return getattr(importlib.import_module(module), attr)
