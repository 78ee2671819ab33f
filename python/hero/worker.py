"""The worker: precedence fetch (instance -> group -> type, priority 0 first, decided inside
Redis), fenced completion in batches, stop requests, graceful shutdown on SIGTERM, and handlers
run concurrently on threads (a coroutine function runs on its thread's own event loop) or in
child processes (`pool`). It owns a job's way from the fetch to its recorded outcome; what keeps
the worker and its leases alive in Redis (registration, heartbeat, renewals carrying the
handlers' progress and log lines, time limits) is `presence`'s, what a handler holds is
`context`'s, the queue's upkeep it takes its turn at (promotion, recovery, time limits,
retention) is `duties`', and how every loop outlives Redis failing (back-off, the log, the stop
when it cannot go on) is `outage`'s."""
from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import logging
import os
import queue
import signal
import threading
import time
import traceback
import uuid
from typing import Any, Callable

import redis

from .client import _name, connect
from .context import JobContext, _Running
from .duties import _Duties
from .flow import _Flow, _ended_as  # noqa: F401 (hero.worker._ended_as as before)
from .handlers import Handlers
from .errors import InvalidInput, WorkerFailed
from .outage import GIVE_UP_S, _Guards, _Outage
from .outcomes import Abort, Retry, trace_of
from .payload import output_of
from .pool import ProcessPool
from .job import Job
from .keys import Keys
from .presence import _Presence
from .shards import ShardMap
from .upkeep import shown_url
from .protocol import LIBRARY, VERSION, Protocol, iso, now_ms, retry_at_ms
# still importable from here, as before the split (`hero.worker.REPORT_EVERY_S`, ...)
from .context import LOG_LINES  # noqa: F401,E402
from .outage import BACKOFF_FIRST_S, BACKOFF_MAX_S, SAY_EVERY_S  # noqa: F401,E402
from .presence import REPORT_EVERY_S  # noqa: F401,E402

log = logging.getLogger("hero")

from .orphan import MAX_ATTEMPTS, _Orphans  # noqa: E402,F401 (hero.worker.MAX_ATTEMPTS as before)


class Worker(_Flow, _Guards, _Presence, _Duties, _Orphans):
    """Serves `types` with `handler(job, ctx)`, whose return value is the job's output: a
    `str` as text, any other value as a value (MessagePack in the record's `value`, its JSON text
    in `output` for older readers: `Job.output` gives it back as returned); a value MessagePack
    cannot carry (a set, an object) fails the job naming its type; an exception fails the attempt (retried with back-off while the job's budget or its
    queue policy's lasts), `Retry` retries after a delay, `Abort` ends it error at once.

    `run()` blocks until SIGTERM / SIGINT (or `stop()`), then finishes what runs within
    `shutdown_s` and hands the rest back to the queue without counting an attempt.

    The worker also takes its turn at the queue's upkeep (`duties`, on by default): delayed
    jobs and retries run when due, a dead worker's jobs run again, time limits and retention
    hold, with no `hero broker` running; one process at a time does it, however many workers.
    `duties=False` leaves it to other processes (another worker, or a broker)."""

    def __init__(self, handler: Callable[[Job, JobContext], Any], types: list[str] | str,
                 url: str | None = None, *, group: str = "default", instance: str | None = None,
                 concurrency: int = 4, lease_ms: int = 30_000, presence_ttl_ms: int = 15_000,
                 shutdown_s: float = 30.0, namespace: str = "hero", r: redis.Redis | None = None,
                 protocol: str = VERSION, library: str = LIBRARY,
                 on_event: Callable[[str, str, str], None] | None = None, pool: str = "thread",
                 duties: bool = True):
        self.types = [_name("script type", t) for t in ([types] if isinstance(types, str) else types)]
        self.handler = handler
        if pool not in ("thread", "process"):
            raise InvalidInput(f"pool {pool!r}: give 'thread' (handlers on threads) or 'process' (in child "
                               "processes, killed at a time limit or a stop)")
        # pool="process": each handler runs in a child process (see pool.py)
        self._pool = ProcessPool(handler, concurrency) if pool == "process" else None
        self.is_async = inspect.iscoroutinefunction(handler)
        self.r = r if r is not None else connect(url)
        self.keys = Keys(_name("namespace", namespace))
        self._versions = (protocol, library)
        self.proto = Protocol(self.r, self.keys, protocol, library)
        self._base_prefix = self.keys.prefix
        self.group = _name("group", group)
        self.instance = _name("instance", instance or f"py-{os.getpid()}")
        self.consumer = f"{self.group}:{self.instance}:{uuid.uuid4().hex[:8]}"
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self._renew_within_ms = lease_ms
        self._hold_reports = False
        self._hold_traces = False
        # called on the job's thread before its handler (an App's task rate limits), or None
        self._throttle: Callable[[Job, JobContext], None] | None = None
        self._policies: dict[str, Any] = {}
        self.presence_ttl_ms = presence_ttl_ms
        self.shutdown_s = shutdown_s
        self.on_event = on_event
        if not isinstance(duties, bool):
            raise InvalidInput(f"duties {duties!r}: give True (this worker takes its turn at the queue's upkeep) "
                               "or False (another process does it)")
        self.duties = duties
        self.streams = self.keys.precedence(self.types, self.group, self.instance)
        self._running: dict[str, _Running] = {}
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(concurrency)
        # the threads handlers run on (or wait on a process pool's child), reused job to job
        self._handlers = Handlers(concurrency)
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        # the last fetch came back full: the completer fetches the slots it frees (flow.py)
        self._backlog = False
        self._completing = False
        # the registry cursor's view, (signal id, indexes of the registered streams, those
        # streams), or None: the next fetch names every stream and asks (flow.py)
        self._registry: tuple[str, list[int], list[str]] | None = None
        self._stopping = threading.Event()
        self._finished = threading.Event()
        self.completed = 0
        # thread-pool runs whose thread has not ended, and how many were abandoned past a cancel
        self._live: dict[str, _Running] = {}
        self.abandoned = 0
        self._started_at = iso()
        # why the worker could not go on (shared with its shards' copies), or None
        self._failure: list[str | None] = [None]
        self._give_up_s = GIVE_UP_S

    # -- lifecycle --------------------------------------------------------------------------
    def stop(self) -> None:
        """Stops taking jobs; `run` then finishes what runs and returns."""
        self._stopping.set()

    def _for_shard(self, keys: Keys) -> "Worker":
        """This worker on another shard of its namespace: its own keys, streams, running jobs
        and completions; the handler, the slots and the stop shared."""
        w = copy.copy(self)
        w.keys = keys
        w.proto = Protocol(self.r, keys, *self._versions)
        w.streams = keys.precedence(self.types, self.group, self.instance)
        w._running = {}
        w._live = {}
        w._lock = threading.Lock()
        w._done = queue.SimpleQueue()
        w._backlog = False
        w._completing = False
        w._registry = None
        w._finished = threading.Event()
        w.completed = 0
        return w

    def _serve_shards(self) -> None:
        """Serves every shard of a sharded namespace (docs/sharding.md) beside shard 0, one
        `_for_shard` worker each, and the shards added later within 2 s; returns at the stop
        once they all stopped."""
        served: dict[int, tuple[Worker, threading.Thread]] = {}
        outage = _Outage(self, "reading the shard map")
        while True:
            wait = 2.0
            try:
                m = ShardMap.read(self.r, self.keys)
                for n in m.served():
                    if n > 0 and n not in served:
                        sub = self._for_shard(m.keys(self.keys, n))
                        body = functools.partial(sub.run, install_signals=False)
                        t = threading.Thread(target=self._guarded(f"hero-shard-{n}", body), daemon=True,
                                             name=f"hero-shard-{n}")
                        t.start()
                        served[n] = (sub, t)
                outage.ok()
            except Exception as e:
                self._emit("error", "", f"reading the shard map failed: {e}")
                wait = min(wait, outage.failed(e))
            if self._stopping.wait(wait):
                break
        for sub, t in served.values():
            t.join(timeout=self.shutdown_s + 10)

    def run(self, install_signals: bool = True) -> None:
        """Serves until SIGTERM / SIGINT or `stop()`. Raises `WorkerFailed` when the worker could
        not go on (after handing its jobs back and removing its presence)."""
        base = self.keys.prefix == self._base_prefix
        if install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
        if not self._register():
            return
        if base:
            # what this process serves, said once: a worker of an App serves every task's queue
            # unless told, which a deploy should see
            log.info("hero-py worker %s serving %s on %s (namespace %s, group %s): concurrency %d, pool %s, "
                     "upkeep %s", self.consumer, ", ".join(self.types), shown_url(self.r), self.keys.prefix,
                     self.group, self.concurrency, "process" if self._pool is not None else "thread",
                     "on" if self.duties else "off (duties=False)")
        shards = None
        if base:
            shards = threading.Thread(target=self._guarded("hero-shards", self._serve_shards), daemon=True,
                                      name="hero-shards")
            shards.start()
        if self._pool is not None and base:
            self._pool.warm()
        loops = [(self._keeper, "hero-keeper"), (self._control, "hero-control"), (self._completer, "hero-completer")]
        if self._does_duties(base):
            # in this (the parent) process, never in a pool's children: one turn a worker process
            # and shard, as the Rust worker takes it
            loops.append((self._duties_loop, "hero-duties"))
        threads = [threading.Thread(target=self._guarded(n, f), daemon=True, name=n) for f, n in loops]
        for t in threads:
            t.start()
        self._emit("ready", "", self.consumer)
        try:
            self._fetch_loop()
        except Exception as e:
            log.error("the worker's fetch loop ended by an exception\n%s",
                      "".join(traceback.format_exception(type(e), e, e.__traceback__)))
            self._fatal(f"its fetch loop failed: {type(e).__name__}: {e}")
        finally:
            try:
                self._shutdown()
            finally:
                if shards is not None:
                    shards.join(timeout=self.shutdown_s + 15)
                self._finished.set()
                for t in threads:
                    t.join(timeout=5)
                if self._pool is not None and base:
                    self._pool.close()
                if base:
                    self._handlers.close()
        if base and self._failure[0] is not None:
            raise WorkerFailed(f"the worker {self.consumer} stopped: {self._failure[0]}")

    def _does_duties(self, base: bool) -> bool:
        """Whether this worker takes its turn at the queue's upkeep: asked to (the default) and
        speaking a protocol that has hero_duties (31 on); one of an older protocol, serving
        beside newer processes, leaves it to them, and says so once."""
        if not self.duties:
            return False
        if int(self.proto.version) < 31:
            if base:
                log.info("the worker %s speaks protocol %s, which has no hero_duties: the queue's upkeep is left to "
                         "processes of protocol 31 or later", self.consumer, self.proto.version)
            return False
        return True

    def _emit(self, kind: str, job_id: str, detail: str = "") -> None:
        if self.on_event is not None:
            try:
                self.on_event(kind, job_id, detail)
            except Exception as e:  # the caller's callback: said, and the worker goes on
                log.error("on_event(%r, %r) raised\n%s", kind, job_id,
                          "".join(traceback.format_exception(type(e), e, e.__traceback__)))

    # -- run --------------------------------------------------------------------------------
    def _run_job(self, run: _Running) -> None:
        if self._pool is not None:
            self._run_in_child(run)
            return
        try:
            self._run_here(run)
        except BaseException as e:  # noqa: B036 - never silently: the attempt fails, said with its trace
            log.error("job %s: running its handler failed\n%s", run.job.id,
                      "".join(traceback.format_exception(type(e), e, e.__traceback__)))
            self._settle(run, "fail", f"{type(e).__name__}: {e}", retry_at_ms(run.ctx.attempt), trace_of(e))
        finally:
            with self._lock:
                self._live.pop(run.job.id, None)
            self._free(run)

    def _free(self, run: _Running) -> None:
        """Gives the run's slot back, once: when its handler returned (before its outcome is
        queued, so the completer finds the slot free with the outcome), or when its thread ends."""
        with run.lock:
            if run.freed:
                return
            run.freed = True
        self._slots.release()

    def _abandon(self, run: _Running) -> bool:
        """The keeper gives the slot of a thread-pool run that outlived its cancel to the next
        job (presence.py): its thread runs on unwatched and ends when its handler returns; a new
        thread serves meanwhile. False when the run has just ended (nothing to abandon)."""
        with run.lock:
            if run.freed:
                return False
            run.freed = run.abandoned = True
        self._handlers.abandoned()
        self._slots.release()
        return True

    def _run_here(self, run: _Running) -> None:
        ctx = run.ctx
        trace = None
        packed = None
        try:
            if self._throttle is not None:
                self._throttle(run.job, ctx)
            if self.is_async:
                value = asyncio.run(self.handler(run.job, ctx))
            else:
                value = self.handler(run.job, ctx)
            try:
                text, packed = output_of(value)
                outcome, retry_at = "done", 0
            except InvalidInput as e:
                # a value MessagePack cannot carry: the attempt fails naming its type, no retry
                # changes what the handler returns
                outcome, text, retry_at, trace = "abort", str(e), 0, None
        except Retry as e:
            outcome, text, retry_at = "again" if e.again else "retry", str(e), now_ms() + int(e.delay * 1000)
        except Abort as e:
            outcome, text, retry_at, trace = "abort", str(e), 0, trace_of(e)
        except Exception as e:  # the handler failed: the attempt fails, retried within budget
            outcome, text, retry_at = "fail", f"{type(e).__name__}: {e}", retry_at_ms(ctx.attempt)
            trace = trace_of(e)
        self._settle(run, outcome, text, retry_at, trace, packed, own=True)

    def _run_in_child(self, run: _Running) -> None:
        """The job in a child process of the pool; a cancelled one (time limit, stop, lost
        lease, shutdown) has its child killed, and settles as the keeper or the stop says."""
        try:
            if self._throttle is not None:
                self._throttle(run.job, run.ctx)
            r = self._pool.run(run.job, run.ctx)
            kind = r[0]
            if kind == "done":
                self._settle(run, "done", r[1], 0, None, r[2] if len(r) > 2 else None, own=True)
            elif kind == "retry":
                self._settle(run, "again" if r[3] else "retry", r[1], now_ms() + int(r[2] * 1000), own=True)
            elif kind == "abort":
                self._settle(run, "abort", r[1], 0, r[2], own=True)
            elif kind == "fail":
                self._settle(run, "fail", r[1], retry_at_ms(run.ctx.attempt), r[2], own=True)
            elif kind == "died":
                self._child_died(run, r[1])
            else:  # cancelled: the keeper settled a time limit; a stop records nothing
                self._settle(run, "fail", r[1], retry_at_ms(run.ctx.attempt), own=True)
        except Exception as e:  # the pool itself failed (a child could not start): the attempt fails
            self._settle(run, "fail", f"{type(e).__name__}: {e}", retry_at_ms(run.ctx.attempt), own=True)
        finally:
            self._free(run)

    def _settle(self, run: _Running, outcome: str, text: str, retry_at: int, trace: str | None = None,
                value: bytes | None = None, own: bool = False) -> None:
        """Queues the outcome for the completer, once per run; an interrupted run records none.
        A failure's `trace` goes with it, unless a live older process would refuse the field; a
        success's `value` (the MessagePack of what the handler returned, when not text) too.
        `own`: called by the run's own thread, its handler done: the slot is freed first."""
        with run.lock:
            if run.settled:
                return
            run.settled = True
        if run.ctx.cancel_reason in ("stopped", "lost", "shutdown"):
            with self._lock:
                self._running.pop(run.job.id, None)
            self._emit("interrupted", run.job.id, run.ctx.cancel_reason or "")
            return
        report = run.ctx._take()
        if report is not None:
            try:
                self._send_report(run, report)
            except Exception as e:
                # kept: the keeper sends it with the lease's next renewal, before the outcome
                # is recorded if it can
                log.warning("job %s: its last progress and log lines were not recorded yet (%s: %s)", run.job.id,
                            type(e).__name__, e)
        if own:
            self._free(run)
        outcome_of = {
            "id": run.job.id, "stream": self.streams[run.stream_index], "lease": run.entry,
            "outcome": outcome, "text": text, "retry_at": retry_at, "reply": run.job.reply,
            "ran_ms": int((time.monotonic() - run.began) * 1000),
            "trace": None if self._hold_traces else trace,
            "value": value if outcome == "done" else None,
        }
        if own and self._pool is not None and self._backlog and not self._stopping.is_set() and self._fused():
            self._complete_now(outcome_of)
        else:
            self._done.put(outcome_of)

    # -- stop requests ----------------------------------------------------------------------
    def _control(self) -> None:
        lists = [self.keys.ctl_instance(t, self.group, self.instance) for t in self.types]
        outage = _Outage(self, "reading stop requests")
        while not self._finished.is_set():
            try:
                got = self.r.blpop(lists, timeout=1)
                outage.ok()
            except Exception as e:
                self._finished.wait(outage.failed(e))
                continue
            if got is None:
                continue
            job_id = got[1].decode("utf-8", "replace")
            with self._lock:
                run = self._running.get(job_id)
            if run is not None:
                run.ctx._cancel_with("stopped")
                self._emit("stop", job_id, "")

    # -- shutdown ---------------------------------------------------------------------------
    def _shutdown(self) -> None:
        deadline = time.monotonic() + self.shutdown_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._running:
                    break
            time.sleep(0.05)
        with self._lock:
            left = list(self._running.values())
        for run in left:
            run.ctx._cancel_with("shutdown")
            self._settle(run, "fail", "shutdown", 0)
        # let the completer record what is queued, then give back what is still held
        settle_by = time.monotonic() + 10
        while time.monotonic() < settle_by:
            with self._lock:
                if not self._running:
                    break
            time.sleep(0.05)
        with self._lock:
            unrecorded = [r.job.id for r in self._running.values()]
        if unrecorded:
            log.warning("the worker stops with %d outcomes Redis did not take (%s): their jobs go back to the queue "
                        "and run again", len(unrecorded), ", ".join(unrecorded[:10]))
        handed = 0
        for stream in self.streams:
            try:
                handed += self.proto.hand_back(stream, self.consumer)
            except Exception as e:
                # what stays held goes back by recovery once the lease ends
                log.warning("handing back the jobs of %s held on %s failed (%s: %s): recovery hands them out "
                            "again after their lease", self.consumer, stream, type(e).__name__, e)
        self._remove_presence()
        self._emit("stopped", "", str(handed))
