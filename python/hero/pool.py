"""Handlers in child processes (`Worker(..., pool="process")`): CPU-bound work uses every core
(no GIL between jobs), and a time limit or a stop ends a stuck handler for real: its child is
killed (SIGKILL) and replaced by a fresh one for the next job. The parent keeps what the worker
owns, the lease, the presence, the completion; a child only runs handlers, one job at a time,
and sends back the outcome and what the handler reported (progress, log lines).

Children are started with `spawn` (safe beside threads, the same on every OS), so the handler
is sent by reference: a function at a module's top level (or an `App`'s tasks, its app found at
a module's top level), which each child imports. A handler that cannot be sent so is refused
when the worker is made, naming why.
"""
from __future__ import annotations

import asyncio
import inspect
import multiprocessing as mp
import pickle
import signal
import threading
from typing import Any, Callable

from .errors import InvalidInput
from .outcomes import Abort, Retry, trace_of
from .payload import output_of

_SPAWN = mp.get_context("spawn")
POLL_S = 0.05


def dumps_handler(handler: Callable) -> bytes:
    try:
        return pickle.dumps(handler)
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        raise InvalidInput(f"pool='process' sends the handler to its child processes by reference, and "
                           f"{handler!r} cannot be ({e}): define it at a module's top level") from None


class _ChildContext:
    """A JobContext in the child: reports go to the parent, which sends them with the lease."""

    def __init__(self, conn, job):
        self.conn, self.job = conn, job
        self.attempt = max(1, job.attempts)
        self.cancel_reason = None

    @property
    def cancelled(self) -> bool:
        return False  # the parent kills this process instead

    def wait(self, seconds: float) -> bool:
        import time
        time.sleep(seconds)
        return False

    def progress(self, percent: float, message: str = "") -> None:
        self.conn.send(("progress", float(percent), str(message)))

    def log(self, line: str) -> None:
        self.conn.send(("log", str(line)))


async def _awaited(value: Any) -> Any:
    return await value


def _child(conn, handler_bytes: bytes) -> None:
    handler = pickle.loads(handler_bytes)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        ctx = _ChildContext(conn, job)
        try:
            value = handler(job, ctx)
            if inspect.isawaitable(value):
                value = asyncio.run(_awaited(value))
            try:
                text, packed = output_of(value)
                msg = ("done", text, packed)
            except InvalidInput as e:  # a value MessagePack cannot carry: named, never dropped
                msg = ("abort", str(e), None)
        except Retry as e:
            msg = ("retry", str(e), e.delay, e.again)
        except Abort as e:
            msg = ("abort", str(e), trace_of(e))
        except Exception as e:  # the attempt failed, retried within its budget
            msg = ("fail", f"{type(e).__name__}: {e}", trace_of(e))
        conn.send(msg)


class _Child:
    def __init__(self, handler_bytes: bytes):
        self.conn, theirs = _SPAWN.Pipe()
        self.proc = _SPAWN.Process(target=_child, args=(theirs, handler_bytes), daemon=True,
                                   name="hero-handler")
        self.proc.start()
        theirs.close()

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()


class ProcessPool:
    """Up to `size` children, each running one job at a time."""

    def __init__(self, handler: Callable, size: int):
        self.handler_bytes = dumps_handler(handler)
        self.size = size
        self._idle: list[_Child] = []
        self._lock = threading.Lock()
        self.replaced = 0

    def warm(self) -> None:
        """Starts every child now, side by side (a spawned child imports the handler's module,
        a fraction of a second each), so the first jobs do not wait for them."""
        fresh = [_Child(self.handler_bytes) for _ in range(self.size)]
        with self._lock:
            self._idle.extend(fresh)

    def _take(self) -> _Child:
        with self._lock:
            while self._idle:
                c = self._idle.pop()
                if c.proc.is_alive():
                    return c
                c.kill()
        return _Child(self.handler_bytes)

    def run(self, job, ctx) -> tuple:
        """Runs `job` in a child: ('done', text, value bytes or None), ('retry', reason, delay, again), ('abort', reason,
        trace), ('fail', text, trace), ('died', why) when the child died under it (a kill -9, the OOM
        killer, a crash in C code: the worker runs the job again, as recovery does a dead worker's),
        or ('cancelled', reason) once `ctx` was cancelled (the child killed)."""
        child = self._take()
        try:
            child.conn.send(job)
        except (BrokenPipeError, OSError):
            child.kill()
            child = _Child(self.handler_bytes)
            child.conn.send(job)
        while True:
            if ctx.cancelled:
                child.kill()
                self.replaced += 1
                return ("cancelled", ctx.cancel_reason or "cancelled")
            try:
                ready = child.conn.poll(POLL_S)
                msg = child.conn.recv() if ready else None
            except (EOFError, OSError):
                return self._died(child)
            if msg is None:
                if not child.proc.is_alive():
                    return self._died(child)
                continue
            if msg[0] == "progress":
                ctx.progress(msg[1], msg[2])
            elif msg[0] == "log":
                ctx.log(msg[1])
            else:
                with self._lock:
                    self._idle.append(child)
                return msg

    def _died(self, child: _Child) -> tuple:
        child.kill()  # reaped, so its exit code is known
        self.replaced += 1
        code = child.proc.exitcode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = "unknown"
            how = f"was killed by signal {-code} ({name}"
            how += ": the OOM killer, or a kill -9)" if -code == signal.SIGKILL else ")"
        else:
            how = f"exited with code {code} in the middle of the job"
        return ("died", f"the handler's process {how}")

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            try:
                c.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            c.proc.join(timeout=5)
            c.kill()
