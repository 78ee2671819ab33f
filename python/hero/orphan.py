"""A process pool's job whose child died under it (a kill -9, the OOM killer, a crash in C
code), recovered as a dead worker's job is: by hero_recover itself, so it ends exactly as the
Rust worker's and the duties' recovery leave such a job. The delivery is claimed, alone, by a
consumer named for it (`<worker's consumer>:died:<job id>`), whose jobs hero_recover then
recovers: the attempt counts, the job goes back to its stream while its attempts stay under
the broker's max attempts (`hero broker --max-attempts`, 5 by default) or its retries + 1,
the larger (its queue policy's retries too); past that it is dead-lettered, `error`
`abandoned after <n> attempts`, its dependents failed with it. A job that kills every child
it runs in so ends, instead of taking a child each time forever. Before that, why the child
died goes to the job's log lines (`hero status` shows them). A mixin of `Worker`."""
from __future__ import annotations

import logging

from .keys import GROUP

log = logging.getLogger("hero")

MAX_ATTEMPTS = 5  # hero_recover's when the config hash names none (`hero broker --max-attempts`)


class _Orphans:
    """The dead child's job, on the attributes `Worker` sets."""

    def _child_died(self, run, why: str) -> None:
        """Recovers `run`'s job after its child died (see the module); a job the worker no longer
        holds (stopped, lost, shutting down) records nothing, as any interrupted run."""
        with run.lock:
            if run.settled:
                return
            run.settled = True
        job_id = run.job.id
        if run.ctx.cancel_reason in ("stopped", "lost", "shutdown"):
            with self._lock:
                self._running.pop(job_id, None)
            self._emit("interrupted", job_id, run.ctx.cancel_reason or "")
            return
        stream = self.streams[run.stream_index]
        limit = self._max_attempts()
        log.warning("job %s: %s (attempt %d): it is recovered as a dead worker's job is (dead-lettered once its "
                    "attempts reach %d, or its retries + 1)", job_id, why, run.ctx.attempt, limit)
        if not self._hold_reports:
            try:
                self.proto.renew(job_id, stream, run.entry, self.consumer, None, [f"attempt {run.ctx.attempt}: {why}"])
            except Exception as e:  # the line is a courtesy; the recovery below is what counts
                log.warning("job %s: its log line on the dead child was not recorded (%s: %s)", job_id,
                            type(e).__name__, e)
        # no longer renewed from here: the delivery goes to a consumer of its own
        with self._lock:
            self._running.pop(job_id, None)
        orphan = f"{self.consumer}:died:{job_id}"
        try:
            claimed = self.r.xclaim(stream, GROUP, orphan, 0, [run.entry], justid=True)
            if not claimed:
                self._emit("lost", job_id, why)
                return
            requeued, dead = self.proto.recover_consumer(stream, orphan, limit)
        except Exception as e:
            # its delivery stays pending, unrenewed: the duties' recovery hands it out after its
            # lease (or at once, its consumer having no presence)
            log.warning("job %s: recovering it after its child died failed (%s: %s): the queue's recovery hands "
                        "it out again after its lease", job_id, type(e).__name__, e)
            self._emit("error", job_id, f"recovering it failed: {e}")
            return
        self.completed += 1
        if dead:
            self._emit("failed", job_id, f"dead-lettered: {why}, on attempt {run.ctx.attempt}")
        elif requeued:
            self._emit("retrying", job_id, why)
        else:
            self._emit("lost", job_id, why)

    def _max_attempts(self) -> int:
        """The attempts recovery gives a dead worker's job: the broker's `--max-attempts` as the
        config hash holds it, else the functions' default."""
        try:
            return int(self.r.hget(self.keys.config(), "max_attempts") or MAX_ATTEMPTS)
        except Exception:
            return MAX_ATTEMPTS
