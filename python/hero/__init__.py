"""hero-py: a producer and a worker for hero-broker, the job broker on Redis Streams.

    import hero
    client = hero.Client()                      # HERO_REDIS_URL, or the Redis of `hero up`
    print(client.run("40 + 2", type="rhai").output)

    def handler(job, ctx):
        ctx.progress(50, "halfway")
        return job.script.upper()
    hero.Worker(handler, types=["py"]).run()    # until SIGTERM

Layout: `keys` (every key), `protocol` (every server function call, the library of this
protocol version and its loading), `job` (the record and answers as dataclasses), `client`
(the producer), `aio` (the producer on asyncio), `tasks` (`App` and `@app.task`, as Celery's),
`results` (`AsyncResult`), `canvas` (chains, groups, chords), `request` (a task's run, as
`self.request` shows it, and its time limits on threads), `pool` (handlers in child processes), `queue` (the operator's `Queue`), `cleanup` (its failed-job retry, clean, drain, obliterate), `fair` (a fair
queue's keys with work), `options` (durations, back-off, rates), `events` (job events for
producers, and the waits they wake), `worker` (the worker: fetch, run, completion, shutdown),
`presence` (its registration, heartbeat, leases and time limits), `duties` (its turn at the
queue's upkeep, so no `hero broker` is needed), `context` (`JobContext`, what a handler holds),
`outage` (how its loops outlive Redis failing), `errors`.
"""
from . import aio
from .client import Client, connect
from .events import Event, EventLogOff, EventStream
from .errors import Evicting, HeroError, InvalidInput, InvalidJob, JobNotFound, OlderProcesses, OutOfMemory, WorkerFailed
from .fair import FairKeys, KeyWaiting
from .job import BatchInfo, ChildResult, Job, Progress, Result, Submitted
from .keys import Keys
from .options import Backoff
from .payload import pack, unpack
from .queue import DeadLetter, JobCounts, Queue, StreamCounts
from .request import Request, SoftTimeLimitExceeded, Terminated, TimeLimitExceeded, current_task
from .results import AioResult
from .tasks import App, AsyncResult, Task, TaskError, chain, chord, chord_async, group
from .protocol import RELEASE
from .protocol import VERSION as PROTOCOL_VERSION
from .worker import Abort, JobContext, Retry, Worker

__all__ = [
    "pack", "unpack",
    "Abort", "App", "AsyncResult", "Backoff", "BatchInfo", "ChildResult", "Client", "DeadLetter", "Evicting", "FairKeys", "JobCounts", "Queue", "StreamCounts", "Event", "EventLogOff", "EventStream", "HeroError", "InvalidInput", "InvalidJob", "Job", "JobContext",
    "JobNotFound", "KeyWaiting", "Keys", "OlderProcesses", "OutOfMemory", "PROTOCOL_VERSION", "Progress", "Result", "Retry", "Submitted", "Task", "TaskError", "Worker", "WorkerFailed", "chain", "chord", "group",
    "aio", "connect", "AioResult", "chord_async", "Request", "SoftTimeLimitExceeded", "Terminated", "TimeLimitExceeded", "current_task",
]
__version__ = RELEASE
