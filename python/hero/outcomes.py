"""What a handler raises to say how its job ends other than by returning: `Retry` (again after
a delay, within its budget) and `Abort` (error now). Raised on a worker's threads, in a process
pool's children and in tasks alike."""
from __future__ import annotations

import os


class Retry(Exception):
    """Raise from a handler: try the job again after `delay` seconds (within its budget). In a
    task, `max_retries` bounds this retry (Celery's `self.retry(max_retries=)`); a task that
    declares no `retries` gets Celery's 3."""

    def __init__(self, reason: str = "retry", delay: float = 1.0, max_retries: int | None = None):
        super().__init__(reason)
        self.delay = delay
        self.budget = max_retries
        # set by the task layer: retried whatever the job's own budget, which it counted
        self.again = False


class Abort(Exception):
    """Raise from a handler: the job ends error now, whatever its retry budget."""


# The most of a trace a worker sends (hero_complete keeps as much): a failure's traceback is cut
# to its last TRACE_MAX bytes, where Python names the exception and the line that raised it.
TRACE_MAX = 16 * 1024


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _ours(filename: str) -> bool:
    return filename.startswith(_PACKAGE)


def trace_of(e: BaseException) -> str:
    """The traceback of a failed attempt as Python prints it, bounded. An `Abort` raised from
    another exception (a task's failure) shows that exception's traceback: where it failed."""
    import traceback
    shown, tb = e, e.__traceback__
    if isinstance(e, Abort) and e.__cause__ is not None:
        # the task's exception, from the task's own frame on (not the layers that called it)
        shown = e.__cause__
        tb = shown.__traceback__
        while tb is not None and tb.tb_next is not None and _ours(tb.tb_frame.f_code.co_filename):
            tb = tb.tb_next
    text = "".join(traceback.format_exception(type(shown), shown, tb))
    raw = text.encode("utf-8", "replace")
    if len(raw) <= TRACE_MAX:
        return text
    return "...(cut)\n" + raw[-(TRACE_MAX - 16):].decode("utf-8", "ignore")
