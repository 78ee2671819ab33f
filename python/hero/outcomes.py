"""What a handler raises to say how its job ends other than by returning: `Retry` (again after
a delay, within its budget) and `Abort` (error now). Raised on a worker's threads, in a process
pool's children and in tasks alike."""
from __future__ import annotations


class Retry(Exception):
    """Raise from a handler: try the job again after `delay` seconds (within its budget)."""

    def __init__(self, reason: str = "retry", delay: float = 1.0):
        super().__init__(reason)
        self.delay = delay


class Abort(Exception):
    """Raise from a handler: the job ends error now, whatever its retry budget."""
