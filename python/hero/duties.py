"""The queue's upkeep, done by the workers themselves (issue 59), so a deployment of workers
alone is whole, as Celery's and RQ's are: no `hero broker` to run beside them. Due delayed jobs
and retries are promoted, the jobs of dead workers and idle deliveries recovered, running jobs
past their time limit ended, ended jobs past their retention deleted, the dead letters
trimmed and recurring jobs' due ticks fired (protocol 32: `Queue.cron_add`, `App.beat`; the
one cron engine in the function library computes them), all by one server function,
`hero_duties` (docs/hero-library.lua), which every language drives alike (the Rust
`hero_protocol::duties` is the reference).

One process at a time holds the duty lease (`<ns>:meta:duties`, a hash with a TTL, on Redis's
clock) and does the work, in bounded steps; every other gets the holder's name back after one
HGET. So a hundred workers do the work of one broker, each move is made once, a holder that
dies is replaced once its lease ran out, and one that stops hands the lease back so the next
caller takes it at once. A worker of the pool mode does it in its own (parent) process: the
children only run handlers. A mixin of `Worker`, on the attributes it sets; `Worker(...,
duties=False)` leaves the upkeep to other processes (another worker or a broker)."""
from __future__ import annotations

import logging

import redis

from .outage import _Outage, since_last_outage
from .protocol import Duties

# the pace of the Rust driver (`hero_protocol::duties::Pace`): every language alike, so which
# process holds the lease changes nothing for the queue
HOLDER_EVERY_S = 0.1  # the holder's pause between two calls: how late a due delayed job may run
CONTENDER_EVERY_S = 1.0  # everyone else's: how soon after a lease ran out another takes it
LEASE_MS = 3000  # how long the duties stay the holder's without a call (a dead holder's go then)
BUDGET = 100  # the jobs one call looks at, at most: a call stays within a millisecond or two of Redis
# How long after this process last saw Redis out of reach or refusing writes recovery is held
# back: every worker's heartbeat and renewals failed through the outage too, and back off up to
# 5 s; a live worker must get its next one in before it is judged dead or its deliveries idle,
# or its jobs would run twice.
RECOVERY_HOLD_S = 10.0

log = logging.getLogger("hero")


def may_recover() -> bool:
    """Whether recovery may run now: not within RECOVERY_HOLD_S of an outage this process saw."""
    since = since_last_outage()
    return since is None or since >= RECOVERY_HOLD_S


class _Duties:
    """The worker's turn at the queue's upkeep (see the module)."""

    def _duties_loop(self) -> None:
        """Calls hero_duties every HOLDER_EVERY_S while this worker holds the duties (at once
        again when a step ran out of budget), every CONTENDER_EVERY_S otherwise, until the
        worker finished; then hands the lease back when it holds it. Failures back off and are
        said once (`_Outage`); they never stop the worker: it serves its jobs on, and another
        process may hold the duties meanwhile."""
        failing = _Outage(self, "the queue's upkeep (hero_duties)", fatal=False)
        held = False
        said_missing = False
        while True:
            try:
                d = self.proto.duties(self.consumer, LEASE_MS, BUDGET, may_recover())
            except Exception as e:
                self._emit("error", "", f"the queue's upkeep failed: {e}")
                if not said_missing and _missing_duties(e):
                    # the library's version stayed 31 when hero_duties joined it: a Redis that
                    # loaded it before then answers every other call, and this one never
                    said_missing = True
                    log.error("Redis holds a hero_v%s library without hero_duties (loaded by an earlier build of "
                              "protocol %s): this worker cannot do the queue's upkeep until it is loaded again "
                              "(FUNCTION DELETE hero_v%s: the next call of any process loads this release's)",
                              self.proto.version, self.proto.version, self.proto.version)
                wait = max(failing.failed(e), HOLDER_EVERY_S)
            else:
                failing.ok()
                if d.held != held:
                    if d.held:
                        log.info("%s does the queue's upkeep now (promotion, recovery, time limits, retention, "
                                 "recurring jobs' ticks)", self.consumer)
                    else:
                        log.debug("%s no longer does the queue's upkeep: %s does", self.consumer, d.holder or "nobody")
                    held = d.held
                if d.moved or d.fired or d.skipped:
                    self._said_moves(d)
                wait = 0.0 if d.more else HOLDER_EVERY_S if d.held else CONTENDER_EVERY_S
            if self._finished.wait(wait):
                break
        if held:
            self._hand_back_duties()

    def _hand_back_duties(self) -> None:
        """Hands the duty lease back (a zero lease), so the next caller takes it at once rather
        than when it runs out."""
        try:
            self.proto.duties(self.consumer, 0, BUDGET, may_recover())
        except Exception as e:
            log.warning("handing back the queue's upkeep of %s failed (%s: %s): another process takes it once its "
                        "lease runs out, within %d ms", self.consumer, type(e).__name__, e, LEASE_MS)

    def _said_moves(self, d: Duties) -> None:
        """What a step moved, in the log: recoveries and time limits (a worker died or hangs)
        as the broker says them; promotions and deletions, the everyday ones, at DEBUG."""
        if d.recovered or d.dead:
            log.info("recovered the jobs of dead workers or idle deliveries: %d requeued, %d dead-lettered",
                     d.recovered, d.dead)
        if d.timed_out:
            log.warning("ended %d jobs running past their time limit (their worker did not)", d.timed_out)
        if d.promoted or d.expired:
            log.debug("the queue's upkeep: %d delayed jobs or retries promoted, %d ended jobs deleted",
                      d.promoted, d.expired)
        if d.fired:
            log.debug("the queue's upkeep: fired %d ticks of recurring jobs", d.fired)
        if d.skipped:
            # ticks missed while no process did the upkeep (or Redis was full), policy skip
            log.info("skipped %d ticks of recurring jobs that came while nobody fired them (policy skip; "
                     "missed='catch-up' fires one on return)", d.skipped)


def _missing_duties(e: BaseException) -> bool:
    return isinstance(e, redis.ResponseError) and "function not found" in str(e).lower()
