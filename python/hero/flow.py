"""A job's way into the worker and its outcome's way out: the precedence fetch (instance ->
group -> type, priority 0 first, decided inside Redis), the start of each fetched job on a
handler thread (or a process pool's child), and the fenced completion of outcomes in batches.
A mixin of `Worker`, on the attributes it sets.

What a job costs this process is mostly round trips (a Redis call costs redis-py ~70-100 µs of
CPU, a job's own handler aside), so they are shared:
- every fetch hands back the records of the jobs it leased (protocol 29 on): no `HGETALL` a job;
- the completer takes every outcome queued when it is free, never waiting for a slow job, and
  records them in one `hero_complete`;
- under a backlog (the last fetch came back full) the completer also fetches, in the same round
  trip, as many jobs as slots are free: the fetch is pipelined right after the completion, so
  Redis records the ends before it leases anew. A slot then goes from an ended job to the next in
  one round trip for the whole batch. The fetch loop steps aside meanwhile, fetching only slots
  freed without an outcome (a dropped, stopped or abandoned run), and takes over again when a
  fetch comes back short: then it blocks on the streams until a job lands."""
from __future__ import annotations

import json
import logging
import queue
import time
import traceback

from .context import JobContext, _Running
from .errors import transient
from .job import Job
from .outage import _Outage
from .protocol import Fetched

log = logging.getLogger("hero")

BATCH = 256  # outcomes one hero_complete records at most
BACKLOG_POLL_S = 0.02  # under a backlog, how often the fetch loop looks for slots freed without an outcome


def _ended_as(outcome: str, answer: str) -> str:
    """The event a recorded outcome is reported as (`on_event`): `finished` (done), `retrying`
    (failed, to run again), `failed` (ended error), or `lost` (the completion was refused: the
    job was taken away, e.g. stopped or recovered, and this run's result is not the job's)."""
    if answer == "retrying":
        return "retrying"
    if answer != "completed":
        return "lost"
    return "finished" if outcome == "done" else "failed"


class _Flow:
    """The fetch loop, the start of jobs and the completer (see the module)."""

    # -- fetch ------------------------------------------------------------------------------
    def _take_slots(self) -> int:
        free = 0
        while self._slots.acquire(blocking=False):
            free += 1
        return free

    def _give_slots(self, n: int) -> None:
        for _ in range(n):
            self._slots.release()

    def _fetch_plan(self) -> tuple[list[str], str, list[int] | None]:
        """What the next fetch names: its streams, the registry cursor, and the streams' indexes
        among the worker's (None: all of them). With the cursor (protocol 25 on) a worker names
        only the streams the registry holds, not the 30 a type it serves: fewer arguments to
        send, fewer keys for Redis (each costs it ~3 k instructions)."""
        if int(self.proto.version) < 25:
            return self.streams, "", None
        known = self._registry
        if known is None:
            return self.streams, "*", None
        signal, named, streams = known
        return streams, signal, named

    def _take_fetch(self, f: Fetched, named: list[int] | None) -> Fetched:
        """What a fetch answered, its stream indexes made the worker's; the registry view kept
        (a stale one dropped: the next fetch names every stream and asks again)."""
        if f.signal is not None:
            if f.registered is None:
                self._registry = None
            elif named is None:
                idx = [i for i in f.registered if 0 <= i < len(self.streams)]
                self._registry = (f.signal, idx, [self.streams[i] for i in idx])
        if named is not None:
            f.jobs = [(named[i], entry, job_id) for i, entry, job_id in f.jobs]
        return f

    def _fused(self) -> bool:
        """Whether the completer fetches under a backlog: with records handed back by every
        fetch (protocol 29 on), so a fetched job needs no read of its own."""
        return int(self.proto.version) >= 29

    def _fetch_loop(self) -> None:
        outage = _Outage(self, "fetching jobs")
        fused = self._fused()
        while not self._stopping.is_set():
            if self._backlog and fused:
                # the completer fetches the slots its batches free; this loop takes only those
                # freed without an outcome, while the completer has none in hand
                self._stopping.wait(BACKLOG_POLL_S)
                if not self._backlog or self._completing or not self._done.empty():
                    continue
                free = self._take_slots()
                if free == 0:
                    continue
            else:
                free = self._take_slots()
                if free == 0:
                    # every slot busy: wait for one (or the stop)
                    if self._slots.acquire(timeout=0.5):
                        free = 1 + self._take_slots()
                    else:
                        continue
            streams, since, named = self._fetch_plan()
            try:
                f = self._take_fetch(self.proto.fetch(streams, self.consumer, free, since), named)
            except Exception as e:
                # a lost answer leaves leased jobs: recovery hands them out again
                self._give_slots(free)
                self._emit("error", "", f"fetch failed: {e}")
                self._stopping.wait(outage.failed(e))
                continue
            outage.ok()
            self._give_slots(free - len(f.jobs))
            if f.signal is not None and f.registered is None:
                continue  # a stale registry cursor, nothing claimed: the next fetch names every stream
            # cursors come back only when the fetch claimed fewer than asked
            self._backlog = not f.cursors
            if f.jobs:
                self._start(f.jobs, f.records)
            elif f.cursors:
                self._wait_for_work(f.cursors, streams, outage)

    def _wait_for_work(self, cursors: list[str], streams: list[str], outage: "_Outage") -> None:
        watch = {s: c for s, c in zip(streams, cursors) if c}
        if len(cursors) > len(streams) and cursors[-1]:
            watch[self.keys.queue_signal()] = cursors[-1]
        try:
            # at most a second, so a stop or a free slot is seen promptly
            self.r.xread(watch, count=1, block=1000)
        except Exception as e:
            self._stopping.wait(outage.failed(e))

    def _read_records(self, job_ids: list[str], records: dict[str, dict]) -> bool:
        """Reads the records a fetch did not answer (a library before 29 answers those of a
        short fetch only), again with back-off while Redis fails; False when stopped first (the
        jobs, still leased to this worker, go back with the shutdown's hand-back)."""
        outage = _Outage(self, "reading fetched jobs")
        while True:
            try:
                pipe = self.r.pipeline(transaction=False)
                for job_id in job_ids:
                    pipe.hgetall(self.keys.job(job_id))
                for job_id, rec in zip(job_ids, pipe.execute()):
                    records[job_id] = rec
                outage.ok()
                return True
            except Exception as e:
                if self._stopping.wait(outage.failed(e)):
                    return False

    def _start(self, jobs: list[tuple[int, str, str]], records: dict[str, dict]) -> None:
        missing = [job_id for _, _, job_id in jobs if job_id not in records]
        if missing and not self._read_records(missing, records):
            self._give_slots(len(jobs))
            return
        thread_pool = self._pool is None
        for index, entry, job_id in jobs:
            try:
                job = Job.from_record(job_id, records.get(job_id) or {})
                if job.status != "started" or job.lease != entry:
                    # stopped or recovered between the fetch and the read: no longer ours
                    self._slots.release()
                    self._emit("dropped", job_id, "stale")
                    continue
                limit = job.time_limit if job.timeout is not None else self._policy_timeout(job)
                began = time.monotonic()
                run = _Running(job, index, entry, JobContext(job), began, began + limit)
                with self._lock:
                    self._running[job_id] = run
                    if thread_pool:
                        self._live[job_id] = run
                if self.on_event is not None:
                    self._emit("started", job_id, str(run.ctx.attempt))
                self._handlers.submit(self._run_job, run)
            except Exception as e:
                # not started (a record this worker cannot read, no thread to be had): its
                # delivery stays leased, unrenewed, and recovery hands it out again
                log.error("job %s could not be started; recovery hands it out again after its lease\n%s", job_id,
                          "".join(traceback.format_exception(type(e), e, e.__traceback__)))
                with self._lock:
                    self._running.pop(job_id, None)
                    self._live.pop(job_id, None)
                self._slots.release()

    def _policy_timeout(self, job: Job) -> int:
        """A job naming no time limit gets its queue policy's, else the default (the policies as
        the heartbeat last read them: no read a job)."""
        if not self._policies:
            return job.time_limit
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

    # -- complete ---------------------------------------------------------------------------
    def _completer(self) -> None:
        outage = _Outage(self, "recording outcomes")
        fused = self._fused()
        while not (self._finished.is_set() and self._done.empty()):
            try:
                first = self._done.get(timeout=0.2)
            except queue.Empty:
                continue
            self._completing = True
            try:
                batch = [first]
                while len(batch) < BATCH:
                    try:
                        batch.append(self._done.get_nowait())
                    except queue.Empty:
                        break
                free = self._take_slots() if fused and self._backlog and not self._stopping.is_set() else 0
                if free:
                    self._record_and_fetch(batch, free, outage)
                else:
                    self._record(batch, outage)
            finally:
                self._completing = False

    def _record_and_fetch(self, batch: list[dict], free: int, outage: _Outage) -> None:
        """Records `batch` and fetches `free` jobs in one round trip (see the module). A fetch
        that fails gives its slots back and the fetch to the fetch loop; a completion that fails
        is sent again as `_record` sends it."""
        streams, since, named = self._fetch_plan()
        try:
            answers, fetched = self.proto.complete_and_fetch(self.consumer, batch, streams, free, since)
            if not isinstance(fetched, Exception):
                fetched = self._take_fetch(fetched, named)
        except Exception as e:
            answers = fetched = e
        if isinstance(fetched, Exception):
            # a lost answer leaves leased jobs: recovery hands them out again
            self._give_slots(free)
            self._backlog = False
            if not isinstance(answers, Exception):
                self._emit("error", "", f"fetch failed: {fetched}")
        else:
            jobs, _dropped, cursors, records = fetched
            self._give_slots(free - len(jobs))
            if cursors:
                self._backlog = False  # the queues ran dry: the fetch loop waits for work
        if not isinstance(answers, Exception):
            outage.ok()
            self._recorded(batch, answers)
        if not isinstance(fetched, Exception) and jobs:
            self._start(jobs, records)
        if isinstance(answers, Exception):
            # sent again below with back-off: the fetch loop fetches meanwhile, as without a backlog
            self._backlog = False
            self._emit("error", "", f"completion failed: {answers}")
            delay = outage.failed(answers)
            if len(batch) > 1 and not transient(answers):
                for d in batch:
                    self._record([d], outage)
                return
            time.sleep(delay)
            self._record(batch, outage)

    def _complete_now(self, d: dict) -> None:
        """A process pool's outcome recorded by its run's own thread, with a fetch for the slots
        free (its own among them) in the same round trip, under a backlog: a pool's few slots
        make batches of one, and the hop to the completer thread was a fifth of a child's wait
        between two jobs. A failure hands the outcome to the completer, which sends it again
        with back-off."""
        free = self._take_slots()
        if free == 0:
            self._done.put(d)
            return
        streams, since, named = self._fetch_plan()
        try:
            answers, fetched = self.proto.complete_and_fetch(self.consumer, [d], streams, free, since)
            if not isinstance(fetched, Exception):
                fetched = self._take_fetch(fetched, named)
        except Exception as e:
            answers = fetched = e
        if isinstance(fetched, Exception):
            # a lost answer leaves leased jobs: recovery hands them out again
            self._give_slots(free)
            self._backlog = False
        else:
            self._give_slots(free - len(fetched.jobs))
            if fetched.cursors:
                self._backlog = False
        if isinstance(answers, Exception):
            self._emit("error", "", f"completion failed: {answers}")
            self._done.put(d)
        else:
            self._recorded([d], answers)
        if not isinstance(fetched, Exception) and fetched.jobs:
            self._start(fetched.jobs, fetched.records)

    def _record(self, batch: list[dict], outage: _Outage) -> None:
        """Records a batch of outcomes, sending it again with back-off until Redis takes it: a
        second answer is harmless (the completion is fenced by the lease), and the keeper renews
        the leases meanwhile, so no outcome is dropped while its lease may hold. A batch that
        fails unexpectedly (not an outage) is sent one outcome at a time, so that one the
        server refuses holds no other back."""
        while True:
            try:
                answers = self.proto.complete(self.consumer, batch)
                outage.ok()
                break
            except Exception as e:
                self._emit("error", "", f"completion failed: {e}")
                delay = outage.failed(e)
                if len(batch) > 1 and not transient(e):
                    for d in batch:
                        self._record([d], outage)
                    return
                time.sleep(delay)
        self._recorded(batch, answers)

    def _recorded(self, batch: list[dict], answers: list[str]) -> None:
        with self._lock:
            for d in batch:
                # by its lease: a run of the same job fetched since (in the round trip that
                # recorded this one, say) is another run, still this worker's to renew
                run = self._running.get(d["id"])
                if run is not None and run.entry == d["lease"]:
                    del self._running[d["id"]]
        self.completed += len(batch)
        if self.on_event is not None:
            for d, answer in zip(batch, answers):
                self._emit(_ended_as(d["outcome"], answer), d["id"], d["text"] if d["outcome"] != "done" else answer)
