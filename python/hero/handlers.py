"""The worker's handler threads: a pool reused from job to job, as Celery's threads pool and
`concurrent.futures` are, instead of a thread started for each job (a thread's start and end
cost the process ~90 µs of CPU, more than the rest of a short job's way through the worker).
Threads are made as jobs need them, up to `size`; each job runs in a fresh `contextvars`
context (what a handler sets there never reaches the next job, as on a thread of its own).

A thread the keeper abandoned (a handler still running 2 s after its cancel, which Python cannot
kill: presence.py) no longer counts: the next job gets a new thread, and the abandoned one ends
once its handler returns."""
from __future__ import annotations

import contextvars
import itertools
import queue
import threading
from typing import Any, Callable

_names = itertools.count(1)


class Handlers:
    """Up to `size` threads running `fn(run)` for each `submit`, one at a time each."""

    def __init__(self, size: int):
        self.size = size
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._serving = 0  # threads made and not abandoned
        self._idle = 0  # of them, waiting for a job
        self._pending = 0  # jobs submitted and not taken yet

    def _more(self) -> bool:
        """Under the lock: whether a job waits that no idle thread will take, and a thread may be
        made for it (then counted)."""
        if self._pending > self._idle and self._serving < self.size:
            self._serving += 1
            return True
        return False

    def _spawn(self) -> None:
        threading.Thread(target=self._serve, daemon=True, name=f"hero-job-{next(_names)}").start()

    def submit(self, fn: Callable[[Any], None], run: Any) -> None:
        with self._lock:
            self._pending += 1
            more = self._more()
        self._jobs.put((fn, run))
        if more:
            self._spawn()

    def abandoned(self) -> None:
        """A thread's handler was abandoned (its slot given to the next job): the thread no longer
        counts, and ends when its handler returns; a job already waiting gets a new thread."""
        with self._lock:
            self._serving -= 1
            more = self._more()
        if more:
            self._spawn()

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            item = self._jobs.get()
            with self._lock:
                self._idle -= 1
                self._pending -= 1
            if item is None:
                return
            fn, run = item
            contextvars.Context().run(fn, run)
            if getattr(run, "abandoned", False):
                return  # a new thread took this one's place

    def close(self) -> None:
        """Ends every thread once it finished its job (the jobs queued before are run first)."""
        with self._lock:
            n = self._serving
            self._pending += n
        for _ in range(n):
            self._jobs.put(None)
