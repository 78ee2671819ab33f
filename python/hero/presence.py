"""Why Redis and the fleet believe a worker is alive, and its jobs still its own: registration
(the library loaded and the first heartbeat before any job is taken), the heartbeat (presence,
liveness and the fleet entry, which also reads the queue policies, the brokers' lease and what
an older live process lacks), and the keeper, which renews each held job's lease (carrying its
progress and log lines) and enforces time limits, so that recovery never hands out a job this
worker still runs. Apart from the fetch, run and completion of jobs in `worker`; a mixin of
`Worker`, on the attributes it sets."""
from __future__ import annotations

import json
import logging
import os
import socket
import time

import redis

from .context import _Running
from .errors import refused_write, transient
from .outage import _Outage
from .protocol import RELEASE, iso, now_ms, offset_ms, retry_at_ms

REPORT_EVERY_S = 0.5  # reports gather this long: one call per flush for every job at once
# after a cancel, a thread-pool handler that did not return is told (a task gets an exception
# raised in it) and then, still running, loses its slot
INTERRUPT_AFTER_S = 1.0
ABANDON_AFTER_S = 2.0

log = logging.getLogger("hero")


class _Presence:
    """The worker's registration, heartbeat, leases and time limits (see the module)."""

    def _register(self) -> bool:
        """Loads the library when missing and sends the first heartbeat before any job is taken.
        A write Redis refuses for a while (too few replicas, read-only, loading, ...) is waited
        out with back-off (a full Redis refuses no heartbeat: it is allowed past maxmemory);
        anything else (Redis out of reach, a bad URL) raises: the worker does not start (a
        shard's, started later beside a running worker, waits out any outage). False when
        stopped before it registered."""
        outage = _Outage(self, "registering the worker")
        while True:
            try:
                self.proto.ensure_library()
                self._heartbeat()
                outage.ok()
                return True
            except redis.RedisError as e:
                shard = self.keys.prefix != self._base_prefix
                if not (refused_write(e) or (shard and transient(e))):
                    raise
                if self._stopping.wait(outage.failed(e)):
                    return False

    def _keeper(self) -> None:
        """Every 0.1 s: the heartbeat when due, the time limits, and the leases and reports of
        the jobs held (a settled one's too, until its outcome is recorded), each retried with
        back-off of its own while Redis fails."""
        beat, renewals = _Outage(self, "the heartbeat"), _Outage(self, "renewing leases")
        last_renew = last_report = time.monotonic()
        next_beat = last_renew + self.presence_ttl_ms / 3000
        renew_again = 0.0
        while not self._finished.is_set():
            self._finished.wait(0.1)
            now = time.monotonic()
            if now >= next_beat:
                try:
                    self._heartbeat()
                    beat.ok()
                    next_beat = now + self.presence_ttl_ms / 3000
                except Exception as e:
                    self._emit("error", "", f"keeper: {e}")
                    next_beat = now + min(beat.failed(e), self.presence_ttl_ms / 3000)
            with self._lock:
                running = list(self._running.values())
            for run in running:
                if not run.settled and now >= run.deadline:
                    run.ctx._cancel_with("timeout")
                    self._settle(run, "fail", "timeout", retry_at_ms(run.ctx.attempt))
            self._past_cancel(now)
            renew = now - last_renew >= self._renew_within_ms / 3000
            report = now - last_report >= REPORT_EVERY_S
            if (renew or report) and now >= renew_again:
                failed: Exception | None = None
                for run in running:
                    taken = run.ctx._take()
                    if renew or taken is not None:
                        try:
                            self._send_report(run, taken)
                        except Exception as e:
                            failed = e
                            if transient(e):
                                break  # Redis refuses or is away: the others would fail alike
                if failed is None:
                    renewals.ok()
                    if renew:
                        last_renew = now
                    last_report = now
                else:
                    self._emit("error", "", f"keeper: {failed}")
                    renew_again = now + renewals.failed(failed)

    def _past_cancel(self, now: float) -> None:
        """A thread-pool handler still running after its cancel (time limit, stop, lost lease,
        shutdown): told after INTERRUPT_AFTER_S (a task gets an exception raised in it,
        request.py), and its slot given to the next job after ABANDON_AFTER_S, since Python
        cannot kill a thread: it runs on unwatched, its result dropped."""
        with self._lock:
            live = [r for r in self._live.values() if r.ctx.cancelled_at is not None]
        for run in live:
            since = now - run.ctx.cancelled_at
            if not run.interrupted and since >= INTERRUPT_AFTER_S:
                run.interrupted = True
                if run.ctx._interrupt is not None:
                    try:
                        run.ctx._interrupt(run.ctx.cancel_reason or "")
                    except Exception as e:
                        log.warning("job %s: interrupting its handler failed (%s: %s)", run.job.id, type(e).__name__, e)
            if not run.freed and since >= ABANDON_AFTER_S and self._abandon(run):
                self.abandoned += 1
                log.warning("job %s: its handler still runs %.0f s after it was cancelled (%s): its slot goes to the "
                            "next job and its thread runs on, abandoned (a thread cannot be killed: check "
                            "ctx.cancelled / self.request.cancelled, or use pool='process')", run.job.id, since,
                            run.ctx.cancel_reason)

    def _send_report(self, run: _Running, report) -> None:
        """Renews the run's lease with its report; a report that could not be sent is kept."""
        progress, lines = report if report is not None else (None, [])
        if self._hold_reports:
            # a live older worker would end a job carrying them in error (docs/protocol.md §8)
            progress, lines = None, []
        try:
            answer = self.proto.renew(run.job.id, self.streams[run.stream_index], run.entry, self.consumer,
                                      progress, lines)
        except BaseException:
            run.ctx._give_back(report)
            raise
        if answer in ("stopped", "lost"):
            run.ctx._cancel_with(answer)

    def _presence_body(self) -> str:
        with self._lock:
            running = len(self._running)
        return json.dumps({
            "pid": os.getpid(), "hostname": socket.gethostname(), "started_at": self._started_at,
            "version": f"hero-py {RELEASE}", "protocol": self.proto.version, "capabilities": self.types,
            "consumer": self.consumer, "concurrency": self.concurrency, "running": running,
            "last_heartbeat": iso(),
            # this machine's clock minus Redis's, as last measured (`hero actors` shows it)
            "skew_ms": -offset_ms(),
        })

    def _heartbeat(self) -> None:
        """Presence, liveness and the fleet entry through hero_beat (protocol 31: on Redis's
        clock, allowed past maxmemory, answering Redis's time and its maxmemory policy), with
        the queue policies read in the same round trip."""
        body = self._presence_body()
        # the fleet entry says which protocol this process speaks (docs/protocol.md §8)
        entry = {"role": "worker", "protocol": int(self.proto.version), "version": f"hero-py {RELEASE}",
                 "shards": True}
        presence = [self.keys.presence(t, self.group, self.instance) for t in self.types]
        if int(self.proto.version) >= 31:
            beat, policies = self.proto.beat(self.consumer, self.presence_ttl_ms, entry, presence, body,
                                             policies=True)
            brokers, lacks = beat.lease_ms, beat.fleet_lacks
        else:
            # a library before 31 has no hero_beat: the writes of its release
            expires = now_ms() + self.presence_ttl_ms
            entry["expires_ms"] = expires
            pipe = self.r.pipeline(transaction=False)
            for key in presence:
                pipe.set(key, body, px=self.presence_ttl_ms)
            pipe.zadd(self.keys.consumers(), {self.consumer: expires})
            pipe.hset(self.keys.fleet(), self.consumer, json.dumps(entry))
            # the lease to renew within, read with the heartbeat (docs/protocol.md §5.4)
            pipe.hmget(self.keys.config(), "lease_ms", "fleet_lacks")
            pipe.hgetall(self.keys.policy())
            *_, (brokers, lacks), policies = pipe.execute()
        self._renew_within_ms = self._lease_of(brokers, policies)
        self._policies = {(k.decode() if isinstance(k, bytes) else k): v for k, v in (policies or {}).items()}
        # progress and log lines are held back while the brokers say a live worker lacks them
        lacks = (lacks if isinstance(lacks, bytes) else lacks.encode()) if lacks else b""
        self._hold_reports = b'"progress"' in lacks
        # a failure's trace, likewise, while a live reader before protocol 29 would refuse it
        self._hold_traces = b'"trace"' in lacks

    def _lease_of(self, brokers, policies) -> int:
        """The shortest of this worker's lease, the brokers' (`lease_ms` in the config hash: what
        recovery waits for) and any policy's of a queue of its types."""
        lease = self.lease_ms
        try:
            if brokers is not None and int(brokers) > 0:
                lease = min(lease, int(brokers))
        except ValueError:
            pass
        for q, raw in (policies or {}).items():
            q = q.decode() if isinstance(q, bytes) else q
            try:
                ms = int(json.loads(raw).get("lease_ms") or 0)
            except (ValueError, AttributeError, TypeError):
                continue
            if ms > 0 and q.split("/")[0] in self.types:
                lease = min(lease, ms)
        return lease

    def _remove_presence(self) -> None:
        """Removes this worker's presence, its liveness and its fleet entry (at its stop)."""
        try:
            pipe = self.r.pipeline(transaction=False)
            for t in self.types:
                pipe.delete(self.keys.presence(t, self.group, self.instance))
            pipe.zrem(self.keys.consumers(), self.consumer)
            pipe.hdel(self.keys.fleet(), self.consumer)
            pipe.execute()
        except Exception as e:
            log.warning("removing the presence of %s failed (%s: %s): it expires within %d ms", self.consumer,
                        type(e).__name__, e, self.presence_ttl_ms)
