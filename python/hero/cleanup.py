"""Failed-job tooling and a queue's cleanup, what BullMQ users reach for (`job.retry()`,
`queue.clean`, `queue.drain`, `queue.obliterate`, `queue.isPaused`), mixed into `Queue`: each
through the server functions every language calls (hero_requeue, hero_clean, hero_drain), a
bounded step a call, over every shard of the namespace, as hero-admin's `cleanup` does them.

    q = hero.Queue("email")
    q.retry("job-1")                        # a failed job runs again, with a fresh budget
    q.clean(older_than="1h", status="error")  # ids of the ended jobs deleted
    q.drain(delayed=True)                   # how many waiting (and delayed) jobs were deleted
    q.obliterate()                          # the queue whole; refused while its jobs run
    q.is_paused()
"""
from __future__ import annotations

from typing import Any

from .client import _whole
from .errors import InvalidInput, JobNotFound
from .options import duration_ms

# The jobs one hero_clean or hero_drain call deletes at most: a call stays a few milliseconds of
# Redis (hero-admin's STEP).
STEP = 500


class Cleanup:
    """The cleanup methods of `Queue` (which supplies `name`, `client`, `r`, `_shards`, `_call`,
    `requeue`, `pause`, `job_counts` and `clear_policy`)."""

    name: str

    def retry(self, job_id: str) -> None:
        """Runs a failed job (`error`: its attempts spent, timed out, or dead-lettered) again
        with a fresh retry budget, in its own queue (BullMQ's `job.retry()`), through requeue();
        any other status is refused (InvalidInput), naming it; JobNotFound when there is none."""
        keys = self.client._holder(job_id)  # type: ignore[attr-defined]
        status = self.r.hget(keys.job(job_id), "status")  # type: ignore[attr-defined]
        if status is None:
            raise JobNotFound(job_id)
        s = status.decode()
        if s != "error":
            raise InvalidInput(f"job {job_id} is {s}, not failed: only a failed job is retried "
                               "(requeue moves any job)")
        self.requeue(job_id)  # type: ignore[attr-defined]

    def clean(self, older_than: Any = 0, status: str | None = None, limit: int = 1000) -> list[str]:
        """Deletes up to `limit` jobs of the queue that ended with `status` ('finished',
        'error'; None: either) at least `older_than` ago (seconds, a timedelta or text such as
        '1h'), oldest first (BullMQ's `queue.clean(grace, limit, 'completed' | 'failed')`);
        answers their ids. Waiting jobs are drain()'s."""
        grace = duration_ms("older_than", older_than)
        # hero's words, Celery's (SUCCESS, FAILURE) and BullMQ's (completed, failed)
        words = {"finished": "finished", "error": "error", "SUCCESS": "finished", "FAILURE": "error",
                 "completed": "finished", "failed": "error"}
        if status is None:
            st = ""
        elif status in words:
            st = words[status]
        else:
            raise InvalidInput(f"clean takes ended jobs: finished (SUCCESS) or error (FAILURE), not {status!r}; "
                               "drain() deletes waiting ones")
        _whole("limit", limit, 0)
        out: list[str] = []
        for _, _, p in self._shards():  # type: ignore[attr-defined]
            cursor = ""
            while len(out) < limit:
                nxt, ids = self._call(lambda p=p, c=cursor: p.clean(  # type: ignore[attr-defined]
                    grace, st, self.name, min(limit - len(out), STEP), c))
                out.extend(ids)
                if not nxt:
                    break
                cursor = nxt
        return out

    def drain(self, delayed: bool = False) -> int:
        """Deletes every waiting job of the queue (and its delayed ones when `delayed`), leaving
        the running ones (BullMQ's `queue.drain(delayed)`); answers how many it deleted."""
        return sum(self._drain_steps(p, delayed, False)[0] for _, _, p in self._shards())  # type: ignore[attr-defined]

    def obliterate(self) -> int:
        """Removes the queue whole (BullMQ's `queue.obliterate()`): paused first so no worker
        takes more, its waiting and delayed jobs deleted, its ended jobs deleted, then its
        streams, its names and its policy. Refused (InvalidInput) while jobs of it run, and
        nothing is deleted then: stop them (client.stop) or wait for their end. Answers how many
        jobs it deleted."""
        name = self.name
        running = self.job_counts().running  # type: ignore[attr-defined]
        if running > 0:
            raise InvalidInput(f"{running} jobs of {name} are running: stop them (hero stop <id>) or wait for "
                               "their end, then obliterate")
        self.pause()  # type: ignore[attr-defined]
        shards = self._shards()  # type: ignore[attr-defined]
        deleted = sum(self._drain_steps(p, True, False)[0] for _, _, p in shards)
        while True:
            ids = self.clean(0, None, 10 * STEP)
            deleted += len(ids)
            if len(ids) < 10 * STEP:
                break
        for _, _, p in shards:
            n, running = self._drain_steps(p, True, True)
            deleted += n
            if running > 0:
                raise InvalidInput(f"{running} jobs of {name} started meanwhile: obliterate again once they end")
        self.clear_policy()  # type: ignore[attr-defined]
        return deleted

    def is_paused(self) -> bool:
        """Whether the queue is paused (BullMQ's `queue.isPaused()`): by its name itself, as
        pause() paused it."""
        return bool(self.r.sismember(self.client.keys.paused_names(), self.name))  # type: ignore[attr-defined]

    def _drain_steps(self, proto, delayed: bool, remove: bool) -> tuple[int, int]:
        """hero_drain steps on one shard until it says there is no more: (deleted, running)."""
        cursor, deleted = "0", 0
        while True:
            n, more, running, cursor = self._call(  # type: ignore[attr-defined]
                lambda c=cursor: proto.drain(self.name, delayed, STEP, remove, c))
            deleted += n
            if not more:
                return deleted, running
