"""The worker: presence heartbeat, precedence fetch (instance -> group -> type, priority 0
first, decided inside Redis), lease renewal carrying the handlers' progress and log lines
(coalesced), fenced completion in batches, stop requests, time limits, graceful shutdown on
SIGTERM, and handlers run concurrently on threads (a coroutine function runs on its thread's
own event loop)."""
from __future__ import annotations

import asyncio
import copy
import inspect
import json
import os
import queue
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import redis

from .client import _name, connect
from .errors import InvalidInput
from .outcomes import Abort, Retry, trace_of
from .pool import ProcessPool
from .job import Job
from .keys import Keys
from .shards import ShardMap
from .protocol import LIBRARY, RELEASE, VERSION, Protocol, iso, now_ms, retry_at_ms

REPORT_EVERY_S = 0.5  # reports gather this long: one call per flush for every job at once
LOG_LINES = 100




class JobContext:
    """Handed to the handler with each job."""

    def __init__(self, job: Job):
        self.job = job
        self.attempt = max(1, job.attempts)
        self._cancel = threading.Event()
        self.cancel_reason: str | None = None
        self._lock = threading.Lock()
        self._progress: tuple[float, str] | None = None
        self._lines: list[str] = []

    @property
    def cancelled(self) -> bool:
        """True once the job must stop: stopped, timed out, lease lost, or shutting down. A
        handler that runs long should look now and then and return."""
        return self._cancel.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleeps up to `seconds`; True when woken because the job was cancelled."""
        return self._cancel.wait(seconds)

    def progress(self, percent: float, message: str = "") -> None:
        """Reports how far the job is (0-100 and a short message); cheap in a tight loop: the
        latest report is sent within half a second, with every other job's."""
        with self._lock:
            self._progress = (float(percent), str(message))

    def log(self, line: str) -> None:
        """Appends a line to the job's log (it keeps its last 100 lines)."""
        with self._lock:
            self._lines.append(str(line))
            if len(self._lines) > LOG_LINES:
                del self._lines[0]

    def _take(self) -> tuple[tuple[float, str] | None, list[str]] | None:
        with self._lock:
            if self._progress is None and not self._lines:
                return None
            out = (self._progress, self._lines)
            self._progress, self._lines = None, []
            return out

    def _cancel_with(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
        self._cancel.set()




def _ended_as(outcome: str, answer: str) -> str:
    """The event a recorded outcome is reported as (`on_event`): `finished` (done), `retrying`
    (failed, to run again), `failed` (ended error), or `lost` (the completion was refused: the
    job was taken away, e.g. stopped or recovered, and this run's result is not the job's)."""
    if answer == "retrying":
        return "retrying"
    if answer != "completed":
        return "lost"
    return "finished" if outcome == "done" else "failed"


@dataclass
class _Running:
    job: Job
    stream_index: int
    entry: str
    ctx: JobContext
    began: float
    deadline: float
    settled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class Worker:
    """Serves `types` with `handler(job, ctx)`, whose return value (made text) is the job's
    output; an exception fails the attempt (retried with back-off while the job's budget or its
    queue policy's lasts), `Retry` retries after a delay, `Abort` ends it error at once.

    `run()` blocks until SIGTERM / SIGINT (or `stop()`), then finishes what runs within
    `shutdown_s` and hands the rest back to the queue without counting an attempt."""

    def __init__(self, handler: Callable[[Job, JobContext], Any], types: list[str] | str,
                 url: str | None = None, *, group: str = "default", instance: str | None = None,
                 concurrency: int = 4, lease_ms: int = 30_000, presence_ttl_ms: int = 15_000,
                 shutdown_s: float = 30.0, namespace: str = "hero", r: redis.Redis | None = None,
                 protocol: str = VERSION, library: str = LIBRARY,
                 on_event: Callable[[str, str, str], None] | None = None, pool: str = "thread"):
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
        self.streams = self.keys.precedence(self.types, self.group, self.instance)
        self._running: dict[str, _Running] = {}
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(concurrency)
        self._done: queue.Queue = queue.Queue()
        self._stopping = threading.Event()
        self._finished = threading.Event()
        self.completed = 0
        self._started_at = iso()

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
        w._lock = threading.Lock()
        w._done = queue.Queue()
        w._finished = threading.Event()
        w.completed = 0
        return w

    def _serve_shards(self) -> None:
        """Serves every shard of a sharded namespace (docs/sharding.md) beside shard 0, one
        `_for_shard` worker each, and the shards added later within 2 s; returns at the stop
        once they all stopped."""
        served: dict[int, tuple[Worker, threading.Thread]] = {}
        while True:
            try:
                m = ShardMap.read(self.r, self.keys)
                for n in m.served():
                    if n > 0 and n not in served:
                        sub = self._for_shard(m.keys(self.keys, n))
                        t = threading.Thread(target=sub.run, kwargs={"install_signals": False}, daemon=True,
                                             name=f"hero-shard-{n}")
                        t.start()
                        served[n] = (sub, t)
            except redis.RedisError as e:
                self._emit("error", "", f"reading the shard map failed: {e}")
            if self._stopping.wait(2.0):
                break
        for sub, t in served.values():
            t.join(timeout=self.shutdown_s + 10)

    def run(self, install_signals: bool = True) -> None:
        self.proto.ensure_library()
        if install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
        shards = None
        if self.keys.prefix == self._base_prefix:
            shards = threading.Thread(target=self._serve_shards, daemon=True, name="hero-shards")
            shards.start()
        self._heartbeat()
        if self._pool is not None and self.keys.prefix == self._base_prefix:
            self._pool.warm()
        threads = [threading.Thread(target=f, daemon=True, name=n) for f, n in (
            (self._keeper, "hero-keeper"), (self._control, "hero-control"), (self._completer, "hero-completer"))]
        for t in threads:
            t.start()
        self._emit("ready", "", self.consumer)
        try:
            self._fetch_loop()
        finally:
            self._shutdown()
            if shards is not None:
                shards.join(timeout=self.shutdown_s + 15)
            self._finished.set()
            for t in threads:
                t.join(timeout=5)
            if self._pool is not None and self.keys.prefix == self._base_prefix:
                self._pool.close()

    def _emit(self, kind: str, job_id: str, detail: str = "") -> None:
        if self.on_event is not None:
            self.on_event(kind, job_id, detail)

    # -- fetch ------------------------------------------------------------------------------
    def _fetch_loop(self) -> None:
        while not self._stopping.is_set():
            free = 0
            while self._slots.acquire(blocking=False):
                free += 1
            if free == 0:
                # every slot busy: wait for one (or the stop)
                if self._slots.acquire(timeout=0.5):
                    free = 1
                else:
                    continue
            try:
                jobs, _dropped, cursors, records = self.proto.fetch(self.streams, self.consumer, free)
            except redis.RedisError as e:
                for _ in range(free):
                    self._slots.release()
                self._emit("error", "", f"fetch failed: {e}")
                self._stopping.wait(1.0)
                continue
            for _ in range(free - len(jobs)):
                self._slots.release()
            if jobs:
                self._start(jobs, records)
            elif cursors:
                self._wait_for_work(cursors)

    def _wait_for_work(self, cursors: list[str]) -> None:
        watch = {s: c for s, c in zip(self.streams, cursors) if c}
        if len(cursors) > len(self.streams) and cursors[-1]:
            watch[self.keys.queue_signal()] = cursors[-1]
        try:
            # at most a second, so a stop or a free slot is seen promptly
            self.r.xread(watch, count=1, block=1000)
        except redis.RedisError:
            self._stopping.wait(0.5)

    def _start(self, jobs: list[tuple[int, str, str]], records: dict[str, dict]) -> None:
        missing = [job_id for _, _, job_id in jobs if job_id not in records]
        if missing:
            pipe = self.r.pipeline(transaction=False)
            for job_id in missing:
                pipe.hgetall(self.keys.job(job_id))
            for job_id, rec in zip(missing, pipe.execute()):
                records[job_id] = rec
        for index, entry, job_id in jobs:
            job = Job.from_record(job_id, records.get(job_id) or {})
            if job.status != "started" or job.lease != entry:
                # stopped or recovered between the fetch and the read: no longer ours
                self._slots.release()
                self._emit("dropped", job_id, "stale")
                continue
            limit = job.time_limit if job.timeout is not None else self._policy_timeout(job)
            run = _Running(job, index, entry, JobContext(job), time.monotonic(), time.monotonic() + limit)
            with self._lock:
                self._running[job_id] = run
            self._emit("started", job_id, str(run.ctx.attempt))
            threading.Thread(target=self._run_job, args=(run,), daemon=True, name=f"hero-job-{job_id}").start()

    def _policy_timeout(self, job: Job) -> int:
        """A job naming no time limit gets its queue policy's, else the default (the policies as
        the heartbeat last read them: no read a job)."""
        for q in ([f"{job.script_type}/{job.group}"] if job.group else []) + [job.script_type or ""]:
            raw = self._policies.get(q)
            if raw:
                try:
                    ms = json.loads(raw).get("timeout_ms")
                except ValueError:
                    ms = None
                if ms:
                    return max(1, int(ms) // 1000)
        return job.time_limit

    # -- run --------------------------------------------------------------------------------
    def _run_job(self, run: _Running) -> None:
        if self._pool is not None:
            self._run_in_child(run)
            return
        ctx = run.ctx
        trace = None
        if self._throttle is not None:
            self._throttle(run.job, ctx)
        try:
            if self.is_async:
                value = asyncio.run(self.handler(run.job, ctx))
            else:
                value = self.handler(run.job, ctx)
            outcome, text, retry_at = "done", "" if value is None else str(value), 0
        except Retry as e:
            outcome, text, retry_at = "retry", str(e), now_ms() + int(e.delay * 1000)
        except Abort as e:
            outcome, text, retry_at, trace = "abort", str(e), 0, trace_of(e)
        except Exception as e:  # the handler failed: the attempt fails, retried within budget
            outcome, text, retry_at = "fail", f"{type(e).__name__}: {e}", retry_at_ms(ctx.attempt)
            trace = trace_of(e)
        self._settle(run, outcome, text, retry_at, trace)
        self._slots.release()

    def _run_in_child(self, run: _Running) -> None:
        """The job in a child process of the pool; a cancelled one (time limit, stop, lost
        lease, shutdown) has its child killed, and settles as the keeper or the stop says."""
        try:
            if self._throttle is not None:
                self._throttle(run.job, run.ctx)
            r = self._pool.run(run.job, run.ctx)
            kind = r[0]
            if kind == "done":
                self._settle(run, "done", r[1], 0)
            elif kind == "retry":
                self._settle(run, "retry", r[1], now_ms() + int(r[2] * 1000))
            elif kind == "abort":
                self._settle(run, "abort", r[1], 0, r[2])
            elif kind == "fail":
                self._settle(run, "fail", r[1], retry_at_ms(run.ctx.attempt), r[2])
            else:  # cancelled: the keeper settled a time limit; a stop records nothing
                self._settle(run, "fail", r[1], retry_at_ms(run.ctx.attempt))
        except Exception as e:  # the pool itself failed (a child could not start): the attempt fails
            self._settle(run, "fail", f"{type(e).__name__}: {e}", retry_at_ms(run.ctx.attempt))
        finally:
            self._slots.release()

    def _settle(self, run: _Running, outcome: str, text: str, retry_at: int, trace: str | None = None) -> None:
        """Queues the outcome for the completer, once per run; an interrupted run records none.
        A failure's `trace` goes with it, unless a live older process would refuse the field."""
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
            self._send_report(run, report)
        self._done.put({
            "id": run.job.id, "stream": self.streams[run.stream_index], "lease": run.entry,
            "outcome": outcome, "text": text, "retry_at": retry_at, "reply": run.job.reply,
            "ran_ms": int((time.monotonic() - run.began) * 1000),
            "trace": None if self._hold_traces else trace,
        })

    # -- complete ---------------------------------------------------------------------------
    def _completer(self) -> None:
        while not (self._finished.is_set() and self._done.empty()):
            try:
                first = self._done.get(timeout=0.2)
            except queue.Empty:
                continue
            batch = [first]
            while len(batch) < 100:
                try:
                    batch.append(self._done.get_nowait())
                except queue.Empty:
                    break
            delay = 0.1
            while True:
                try:
                    answers = self.proto.complete(self.consumer, batch)
                    break
                except redis.ConnectionError as e:
                    # keep the outcomes and send them again: a second answer is harmless
                    self._emit("error", "", f"completion failed: {e}")
                    time.sleep(delay)
                    delay = min(delay * 2, 5.0)
            for d, answer in zip(batch, answers):
                with self._lock:
                    self._running.pop(d["id"], None)
                self.completed += 1
                self._emit(_ended_as(d["outcome"], answer), d["id"], d["text"] if d["outcome"] != "done" else answer)

    # -- leases, reports, presence, time limits ---------------------------------------------
    def _keeper(self) -> None:
        last_beat = last_renew = last_report = time.monotonic()
        while not self._finished.is_set():
            self._finished.wait(0.1)
            now = time.monotonic()
            try:
                if now - last_beat >= self.presence_ttl_ms / 3000:
                    self._heartbeat()
                    last_beat = now
                with self._lock:
                    running = list(self._running.values())
                for run in running:
                    if not run.settled and now >= run.deadline:
                        run.ctx._cancel_with("timeout")
                        self._settle(run, "fail", "timeout", retry_at_ms(run.ctx.attempt))
                renew = now - last_renew >= self._renew_within_ms / 3000
                report = now - last_report >= REPORT_EVERY_S
                if renew or report:
                    for run in running:
                        if run.settled:
                            continue
                        taken = run.ctx._take() if (report or renew) else None
                        if renew or taken is not None:
                            self._send_report(run, taken)
                    if renew:
                        last_renew = now
                    last_report = now
            except redis.RedisError as e:
                self._emit("error", "", f"keeper: {e}")

    def _send_report(self, run: _Running, report) -> None:
        progress, lines = report if report is not None else (None, [])
        if self._hold_reports:
            # a live older worker would end a job carrying them in error (docs/protocol.md §8)
            progress, lines = None, []
        answer = self.proto.renew(run.job.id, self.streams[run.stream_index], run.entry, self.consumer,
                                  progress, lines)
        if answer in ("stopped", "lost"):
            run.ctx._cancel_with(answer)

    def _heartbeat(self) -> None:
        with self._lock:
            running = len(self._running)
        body = json.dumps({
            "pid": os.getpid(), "hostname": socket.gethostname(), "started_at": self._started_at,
            "version": f"hero-py {RELEASE}", "protocol": self.proto.version, "capabilities": self.types,
            "consumer": self.consumer, "concurrency": self.concurrency, "running": running,
            "last_heartbeat": iso(),
        })
        expires = now_ms() + self.presence_ttl_ms
        # the fleet entry says which protocol this process speaks (docs/protocol.md §8)
        entry = json.dumps({"role": "worker", "protocol": int(self.proto.version), "version": f"hero-py {RELEASE}",
                            "shards": True, "expires_ms": expires})
        pipe = self.r.pipeline(transaction=False)
        for t in self.types:
            pipe.set(self.keys.presence(t, self.group, self.instance), body, px=self.presence_ttl_ms)
        pipe.zadd(self.keys.consumers(), {self.consumer: expires})
        pipe.hset(self.keys.fleet(), self.consumer, entry)
        # the lease to renew within, read with the heartbeat (docs/protocol.md §5.4)
        pipe.hmget(self.keys.config(), "lease_ms", "fleet_lacks")
        pipe.hgetall(self.keys.policy())
        *_, (brokers, lacks), policies = pipe.execute()
        self._renew_within_ms = self._lease_of(brokers, policies)
        self._policies = {(k.decode() if isinstance(k, bytes) else k): v for k, v in (policies or {}).items()}
        # progress and log lines are held back while the brokers say a live worker lacks them
        lacks = (lacks if isinstance(lacks, bytes) else lacks.encode()) if lacks else b""
        self._hold_reports = b'"progress"' in lacks
        # a failure's trace, likewise, while a live reader before protocol 29 would refuse it
        self._hold_traces = b'"trace"' in lacks

    def _lease_of(self, brokers, policies) -> int:
        """The shortest of this worker's lease, the brokers' (`lease_ms` in the config hash: what
        recovery waits for) and any policy's of a queue of its types."""
        lease = self.lease_ms
        try:
            if brokers is not None and int(brokers) > 0:
                lease = min(lease, int(brokers))
        except ValueError:
            pass
        for q, raw in (policies or {}).items():
            q = q.decode() if isinstance(q, bytes) else q
            try:
                ms = int(json.loads(raw).get("lease_ms") or 0)
            except (ValueError, AttributeError, TypeError):
                continue
            if ms > 0 and q.split("/")[0] in self.types:
                lease = min(lease, ms)
        return lease

    # -- stop requests ----------------------------------------------------------------------
    def _control(self) -> None:
        lists = [self.keys.ctl_instance(t, self.group, self.instance) for t in self.types]
        while not self._finished.is_set():
            try:
                got = self.r.blpop(lists, timeout=1)
            except redis.RedisError:
                self._finished.wait(0.5)
                continue
            if got is None:
                continue
            job_id = got[1].decode()
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
        handed = 0
        for stream in self.streams:
            try:
                handed += self.proto.hand_back(stream, self.consumer)
            except redis.RedisError:
                pass
        pipe = self.r.pipeline(transaction=False)
        for t in self.types:
            pipe.delete(self.keys.presence(t, self.group, self.instance))
        pipe.zrem(self.keys.consumers(), self.consumer)
        pipe.hdel(self.keys.fleet(), self.consumer)
        pipe.execute()
        self._emit("stopped", "", str(handed))
