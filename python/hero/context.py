"""What a handler holds while its job runs: the job, the cancel it must heed, and its progress
and log lines, gathered here between the handler's thread and the worker's keeper so a handler
reporting in a tight loop costs a lock, not a round trip (the keeper sends the latest with the
lease's next renewal, every job's at once). Apart from `worker` so the keeper's module
(`presence`) and the worker's share one definition without importing each other."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .job import Job

LOG_LINES = 100


class JobContext:
    """Handed to the handler with each job."""

    def __init__(self, job: Job):
        self.job = job
        self.attempt = max(1, job.attempts)
        self._cancel = threading.Event()
        self.cancel_reason: str | None = None
        self.cancelled_at: float | None = None  # monotonic
        # what raises in the handler's thread a second after a cancel (a task's, request.py)
        self._interrupt: Callable[[str], None] | None = None
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

    def _give_back(self, report) -> None:
        """Puts a report that could not be sent back, before what came since."""
        if report is None:
            return
        progress, lines = report
        with self._lock:
            if self._progress is None:
                self._progress = progress
            self._lines = (list(lines) + self._lines)[-LOG_LINES:]

    def _cancel_with(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
            self.cancelled_at = time.monotonic()
        self._cancel.set()


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
    # after a cancel, on the thread pool: the handler told (its _interrupt), its slot freed
    interrupted: bool = False
    freed: bool = False
    # its slot given to the next job while its handler ran on (thread pool, past its cancel)
    abandoned: bool = False
