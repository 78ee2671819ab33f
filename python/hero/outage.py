"""Why a worker outlives Redis failing: an outage is not a verdict. A write Redis refuses for a
while (full, read-only, too few replicas, loading, ...) or a lost connection keeps what was being
written (an outcome, a renewal, the heartbeat) and sends it again with back-off, 100 ms doubling
to 5 s, so nothing is dropped for a failure that passes; and the log says so once, not once a
try. No thread of the worker dies silently: an unexpected exception is logged with its traceback
(logger `hero`) and the loop goes on with back-off; one that cannot go on stops the worker, which
hands its jobs back, removes its presence, and `run` raises `WorkerFailed`. This module owns
that policy in one place (`_Outage`, one per loop, and `_Guards`, the worker's side of it), so
every loop of `worker` and `presence` fails alike."""
from __future__ import annotations

import logging
import threading
import time
import traceback
from typing import TYPE_CHECKING, Callable

import redis

from .errors import error_code, transient

if TYPE_CHECKING:
    from .protocol import Protocol

BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.1, 5.0  # a failing loop's pause: 100 ms doubling to 5 s
SAY_EVERY_S = 30.0  # a loop that keeps failing says so at most this often
GIVE_UP_S = 300.0  # a loop failing unexpectedly (not an outage) this long stops the worker

log = logging.getLogger("hero")

# When a call of this process last found Redis out of reach or refusing writes (monotonic s),
# for every loop of every worker of the process: the queue's upkeep holds recovery back a while
# after one (`duties`), since every worker's heartbeat and renewals failed through it too.
_last_outage: float | None = None
_last_outage_lock = threading.Lock()


def note_outage() -> None:
    """Notes that a call of this process found Redis out of reach or refusing writes."""
    global _last_outage
    with _last_outage_lock:
        _last_outage = time.monotonic()


def since_last_outage() -> float | None:
    """Seconds since a call of this process last found Redis out of reach or refusing writes
    (None: never)."""
    with _last_outage_lock:
        at = _last_outage
    return None if at is None else time.monotonic() - at


class _Outage:
    """The failures of one loop of the worker: the pause before the next try (100 ms doubling
    to 5 s, reset on success) and what the log says (the first failure at once, then at most
    one line every 30 s, an INFO line when it works again). A refused write or a lost
    connection is an outage (WARNING); anything else is unexpected (ERROR, with its traceback),
    and when it lasts GIVE_UP_S the worker cannot go on (`Worker._fatal`)."""

    def __init__(self, worker: "_Guards", what: str, fatal: bool = True):
        # `fatal` False: a loop the worker serves on without (the queue's upkeep, which another
        # process may do) never stops it, however long it fails; it keeps saying so
        self.w, self.what, self.fatal = worker, what, fatal
        self.delay = BACKOFF_FIRST_S
        self.failures = 0
        self.since: float | None = None
        self.unexpected_since: float | None = None
        self.said_at: float | None = None
        self.traced_at: float | None = None

    def ok(self) -> None:
        if self.failures:
            log.info("%s works again (%d failures in %.1f s)", self.what, self.failures,
                     time.monotonic() - (self.since or time.monotonic()))
        self.delay, self.failures = BACKOFF_FIRST_S, 0
        self.since = self.unexpected_since = self.said_at = self.traced_at = None

    def failed(self, e: BaseException) -> float:
        """Notes failure `e` and answers how long to wait before the next try."""
        now = time.monotonic()
        self.failures += 1
        if self.since is None:
            self.since = now
        if transient(e):
            note_outage()
            if self.said_at is None or now - self.said_at >= SAY_EVERY_S:
                log.warning("%s failed (%s: %s); Redis refuses or cannot be reached: kept, retrying with back-off "
                            "(%d failures in %.1f s)", self.what, type(e).__name__, e, self.failures, now - self.since)
                self.said_at = now
        else:
            if self.unexpected_since is None:
                self.unexpected_since = now
            if self.traced_at is None or now - self.traced_at >= SAY_EVERY_S:
                log.error("%s failed unexpectedly; retrying with back-off (%d failures in %.1f s)\n%s", self.what,
                          self.failures, now - self.since, "".join(traceback.format_exception(type(e), e, e.__traceback__)))
                self.traced_at = now
            if self.fatal and now - self.unexpected_since >= self.w._give_up_s:
                self.w._fatal(f"{self.what} failed for {now - self.unexpected_since:.0f} s: {type(e).__name__}: {e}")
        self.w._repair(e)
        d = self.delay
        self.delay = min(self.delay * 2, BACKOFF_MAX_S)
        return d


class _Guards:
    """The worker's side of its failures (a mixin of `Worker`, on the attributes it sets): the
    stop when it cannot go on, the repair a failure asks for, and threads that never die
    silently."""

    consumer: str
    r: redis.Redis
    proto: Protocol
    _stopping: threading.Event
    _failure: list[str | None]
    _give_up_s: float

    def _fatal(self, why: str) -> None:
        """This worker cannot go on: it stops taking jobs, and `run` finishes what runs, hands
        the rest back, removes its presence and raises `WorkerFailed(why)`."""
        if self._failure[0] is None:
            self._failure[0] = why
            log.error("the worker %s cannot go on: %s. It stops taking jobs, hands its jobs back, removes its "
                      "presence and exits", self.consumer, why)
        self._stopping.set()

    def _repair(self, e: BaseException) -> None:
        """What a failure asks for before the next try: a missing library is loaded again (a
        Redis restarted without it, a FUNCTION FLUSH); a READONLY node (a master turned replica)
        has the idle connections dropped, so the next call connects anew (a Sentinel-managed
        pool asks the Sentinels where the master is now)."""
        try:
            if isinstance(e, redis.ResponseError) and "function not found" in str(e).lower():
                self.proto.ensure_library()
            elif error_code(e) == "READONLY":
                self.r.connection_pool.disconnect(inuse_connections=False)
        except Exception:  # the next try says what is wrong
            pass

    def _guarded(self, name: str, body: Callable[[], None]) -> Callable[[], None]:
        """`body` as a thread's target that never dies silently: should it end by an exception
        (its loop retries every failure it knows, so this is a bug or the process failing), the
        worker cannot go on."""
        def target() -> None:
            try:
                body()
            except BaseException as e:  # noqa: B036 - logged, and the worker stops
                log.error("the worker's thread %s ended by an exception\n%s", name,
                          "".join(traceback.format_exception(type(e), e, e.__traceback__)))
                self._fatal(f"its thread {name} failed: {type(e).__name__}: {e}")
        return target
