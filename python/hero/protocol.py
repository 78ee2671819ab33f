"""The protocol's server functions (docs/protocol.md §4), one builder each, all in this file:
what every other module calls. The package carries the Lua library of its protocol version
(`hero-library.lua`, packed from the repository's docs/hero-library.lua) and loads it when the
server lacks it, so a worker of this version runs whatever version the brokers run (§8)."""
from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

import redis

from .completion import by_stream, complete_args, in_order
from .errors import HeroError
from .keys import GROUP, Keys

log = logging.getLogger("hero")

VERSION = "35"
# this package's release (pyproject.toml says the same: a test holds them equal)
RELEASE = "1.1.0"
_HERE = os.path.dirname(os.path.abspath(__file__))
# an installed package carries the library; a checkout used in place reads the repository's
LIBRARY = next((p for p in (os.path.join(_HERE, "hero-library.lua"),
                            os.path.join(_HERE, "..", "..", "docs", "hero-library.lua")) if os.path.exists(p)),
               os.path.join(_HERE, "hero-library.lua"))


class Protocol:
    """The calls of one protocol version on one connection: `version` names the functions
    (`hero_v<version>_<name>`), `library` is the Lua source loaded when they are missing."""

    def __init__(self, r: redis.Redis, keys: Keys, version: str = VERSION, library: str = LIBRARY):
        self.r = r
        self.keys = keys
        self.version = version
        self.library = library
        self._xackdel: str | None = None
        # hero_fetch's keys for a list of streams (the same list every fetch of a worker)
        self._fetch_keys: dict[tuple[str, ...], list[str]] = {}

    def fn(self, name: str) -> str:
        return f"hero_v{self.version}_{name}"

    def ensure_library(self) -> None:
        """Loads this version's library unless the server has it (never replaces another)."""
        try:
            if _text(self.r.fcall(self.fn("version"), 0)) == self.version:
                return
        except redis.ResponseError as e:
            if "Function not found" not in str(e):
                raise
        with open(self.library, encoding="utf-8") as f:
            self.r.function_load(f.read(), replace=True)

    def xackdel(self) -> str:
        """'1' when the server has XACKDEL (asked once), else '0'."""
        if self._xackdel is None:
            # a command the server lacks is "unknown"; one it has refuses the missing arguments
            try:
                self.r.execute_command("XACKDEL")
                self._xackdel = "1"
            except redis.ResponseError as e:
                self._xackdel = "0" if "unknown command" in str(e).lower() else "1"
        return self._xackdel

    # -- producer ---------------------------------------------------------------------------
    def submit(self, jobs: Sequence[tuple[str, str, int, dict[str, str]]]) -> list[tuple[str, str]]:
        """hero_submit of (job id, work stream, run-at ms or 0, record fields) each; answers
        (kind, status) per job: kind 'created', 'exists' or 'duplicate:<id>'."""
        keys, argv = submit_args(self.keys, int(self.version), jobs)
        answer = self.r.fcall(self.fn("submit"), len(keys), *keys, *argv)
        out = [_text(x) for x in answer]
        return [(out[i], out[i + 1]) for i in range(0, len(out), 2)]

    def stop(self, job_id: str, stream: str, ctl: str | None, worker: str, why: str = "stopped") -> str:
        k = self.keys
        keys = [k.job(job_id), stream, k.delayed(), k.reply(job_id), k.config(), ctl or k.config(),
                k.retention(), k.events(), k.stats()]
        argv = [GROUP, worker if ctl else "", iso(), self.xackdel(), job_id, why]
        return _text(self.r.fcall(self.fn("stop"), len(keys), *keys, *argv))

    def close_batch(self, name: str, on_complete: dict | None, on_success: dict | None) -> list[Any]:
        k = self.keys
        keys = [k.batch(name), k.config(), k.batches(), k.events()]
        argv = [name, iso(), json.dumps(on_complete) if on_complete else "",
                json.dumps(on_success) if on_success else ""]
        return [_text(x) if isinstance(x, bytes) else x
                for x in self.r.fcall(self.fn("batch"), len(keys), *keys, *argv)]

    # -- operator ---------------------------------------------------------------------------
    def pause(self, name: str, pause: bool) -> int:
        """hero_pause: pauses or resumes queue `name`; answers the streams it moved."""
        return int(self.r.fcall(self.fn("pause"), *pause_args(self.keys, name, pause)))

    def pause_key(self, name: str, key: str, pause: bool) -> int:
        """hero_pause with a limit key (protocol 30): holds or releases that key of fair queue
        `name` only; answers in how many streams it was held or put back in turn."""
        k = self.keys
        keys = [k.queues(), k.paused_queues(), k.paused_names(), k.config(), k.events()]
        return int(self.r.fcall(self.fn("pause"), len(keys), *keys, "pause" if pause else "resume", name, key))

    def counts(self, name: str) -> list[list[Any]]:
        """hero_counts (read-only): per work stream of queue `name`, [stream, waiting, running,
        delayed, finished, failed, dead, paused, oldest waiting ms or -1]."""
        return parse_counts(self.r.fcall_ro(self.fn("counts"), *counts_args(self.keys, name)))

    def set_policy(self, name: str, policy_json: str) -> str:
        """hero_policy: stores the whole policy of queue `name` on this shard ('' clears it)."""
        return _text(self.r.fcall(self.fn("policy"), *policy_args(self.keys, name, policy_json)))

    def remove(self, job_id: str) -> str:
        """hero_remove: 'removed', 'running', 'queued' or 'missing'."""
        return _text(self.r.fcall(self.fn("remove"), 1, self.keys.job(job_id), job_id))

    def requeue(self, job_id: str, old: str, new: str, ctl: str | None, worker: str, cursor: str,
                target: tuple[str, str, str, int]) -> tuple[str, str]:
        """hero_requeue: moves a job to the stream `new` of target (type, group, instance,
        priority), from `old`; answers (requeued | searching | changed | missing, cursor)."""
        r = self.r.fcall(self.fn("requeue"), *requeue_args(self.keys, job_id, old, new, ctl, worker, cursor, target,
                                                           self.xackdel()))
        return _text(r[0]), _text(r[1])

    def clean(self, grace_ms: int, status: str, name: str, limit: int, cursor: str) -> tuple[str, list[str]]:
        """hero_clean: deletes up to `limit` ended jobs of queue `name` ('' every queue) with
        `status` ('finished', 'error', '' either) that ended at least `grace_ms` ago, going on
        after retention entry `cursor` ('' from the oldest); answers (next cursor, '' when done;
        the deleted ids)."""
        return parse_list(self.r.fcall(self.fn("clean"), *clean_args(self.keys, grace_ms, status, name, limit, cursor)))

    def list_page(self, state: str, name: str, cursor: str, limit: int) -> tuple[str, list[str]]:
        """hero_list (read-only, protocol 33): one bounded page of up to `limit` (1-1000) ids of
        queue `name`'s jobs ('' every queue) in `state` ('finished', 'error': newest end first;
        'delayed': soonest first; 'waiting': queued, not taken; 'running'), going on from
        `cursor` ('' from the start); answers (next cursor, '' at the end; the ids). A call
        reads at most 1,000 candidates: a page may be short, even empty, with a cursor."""
        return parse_list(self.r.fcall_ro(self.fn("list"), *list_args(self.keys, state, name, cursor, limit)))

    def keys_page(self, name: str, start: int, page: int) -> tuple[int, int, list[str], list[tuple[str, int]]]:
        """hero_keys (read-only, protocol 33): one page of fair queue `name`'s limit keys on this
        shard, read from index `start`, at most `page` (0-1000; 0 counts only): (the keys in its
        rings, how many were read, the paused keys under or over it, the keys read with jobs
        waiting)."""
        r = self.r.fcall_ro(self.fn("keys"), 2, self.keys.queues(), self.keys.held(), name, start, page)
        flat = list(r[3])
        waiting = [(_text(flat[i]), int(flat[i + 1])) for i in range(0, len(flat) - 1, 2)]
        return int(r[0]), int(r[1]), [_text(m) for m in r[2]], waiting

    def drain(self, name: str, delayed: bool, budget: int, remove: bool, cursor: str) -> tuple[int, bool, int, str]:
        """hero_drain: deletes up to `budget` waiting jobs of queue `name` (and its delayed ones
        when `delayed`; `remove` deletes its emptied streams and names); answers (deleted, more,
        running, the delayed set's cursor for the next call)."""
        return parse_drain(self.r.fcall(self.fn("drain"), *drain_args(self.keys, name, delayed, budget, remove,
                                                                      cursor)))

    def dead(self, action: str, letters: Sequence[tuple[str, str, str]]) -> list[str]:
        """hero_dead of (entry id, job id, its work stream) each: 'retry' or 'purge'."""
        k = self.keys
        keys = [k.dead_letter(), k.queues(), k.config(), k.events(), k.stats()]
        argv: list[Any] = [GROUP, iso(), action]
        for entry, job_id, stream in letters:
            keys += [k.job(job_id), stream]
            argv += [entry, job_id]
        return [_text(x) for x in self.r.fcall(self.fn("dead"), len(keys), *keys, *argv)]

    def cron(self, name: str, spec_json: str) -> tuple[str, int]:
        """hero_cron (protocol 32): stores recurring job `name`'s spec (JSON), checked by the
        cron engine that fires it, answering ('stored', its next tick in ms, -1 when it has
        none); with '' removes it and its state, answering ('removed', 1 or 0). A spec the
        engine refuses is the error HERO_INVALID_CRON <why>. The spec hashes are the
        namespace's own (shard 0's keys in a sharded one): the duties there fire them."""
        k = self.keys
        r = self.r.fcall(self.fn("cron"), 2, k.cron(), k.cron_next(), name, spec_json)
        return _text(r[0]), int(r[1])

    def cron_next(self, schedule: str, tz: str, after_ms: int, n: int) -> list[int]:
        """hero_cron_next (read-only, protocol 32): the next `n` (1-100) ticks (ms) of
        `schedule` in zone `tz` strictly after `after_ms`, by the engine the duties fire by;
        HERO_INVALID_CRON <why> for a schedule or zone it does not take."""
        return [int(x) for x in self.r.fcall_ro(self.fn("cron_next"), 0, schedule, tz, int(after_ms), int(n))]

    # -- worker -----------------------------------------------------------------------------
    def fetch(self, streams: Sequence[str], consumer: str, count: int, since: str = "") -> "Fetched":
        """hero_fetch over `streams` in precedence order, asking for the records of the jobs it
        leases; `since` the registry cursor (ARGV[9]: '' none, '*' to learn which streams are
        registered, or the signal id such an answer gave, with `streams` the registered ones)."""
        return read_fetch(self.r.fcall(*self.fetch_call(streams, consumer, count, since)))

    def fetch_call(self, streams: Sequence[str], consumer: str, count: int, since: str = "") -> list[Any]:
        """hero_fetch's FCALL arguments. Every fetch hands back the records of the jobs it
        leased (ARGV[8] = 2, protocol 29 on): a round trip and a command a job fewer for a client
        whose own cost a command is high, as Python's is (before 29, a short fetch only)."""
        named = tuple(streams)
        keys = self._fetch_keys.get(named)
        if keys is None:
            k = self.keys
            keys = self._fetch_keys[named] = [k.queues(), k.config(), k.events(), k.stats(), *named]
        call = [self.fn("fetch"), len(keys), *keys, GROUP, consumer, count, self.keys.job_prefix(), iso(),
                self.xackdel(), "", "2" if int(self.version) >= 29 else "1"]
        if since:
            call.append(since)
        return call

    def complete_and_fetch(self, consumer: str, done: Sequence[dict[str, Any]], streams: Sequence[str],
                           count: int, since: str = "") -> tuple[list[str] | Exception, "Fetched | Exception"]:
        """A batch of outcomes recorded and `count` jobs fetched (the slots the batch freed) in
        one round trip: the fetch pipelined right after the hero_complete on one connection, so
        Redis records the ends before it leases anew (docs/protocol.md §5.4, step 4). Answers each call's
        answer (as `complete` and `fetch` do) or the error it answered; raises when the round
        trip itself failed (nothing is known of either)."""
        done, order = by_stream(done)
        pipe = self.r.pipeline(transaction=False)
        pipe.fcall(*self.complete_call(consumer, done))
        pipe.fcall(*self.fetch_call(streams, consumer, count, since))
        completed, fetched = pipe.execute(raise_on_error=False)
        return (completed if isinstance(completed, Exception) else [_text(x) for x in in_order(completed, order)],
                fetched if isinstance(fetched, Exception) else read_fetch(fetched))

    def renew(self, job_id: str, stream: str, lease: str, consumer: str,
              progress: tuple[float, str] | None = None, lines: Iterable[str] = ()) -> str:
        """hero_renew: 'ok', 'stopped' or 'lost'; with a report, records it in the same call."""
        k = self.keys
        lines = list(lines)
        if progress is None and not lines:
            return _text(self.r.fcall(self.fn("renew"), 2, k.job(job_id), stream, lease, GROUP, consumer))
        p = ""
        if progress is not None:
            percent = 0.0 if progress[0] != progress[0] else max(0.0, min(100.0, float(progress[0])))
            p = json.dumps({"percent": percent, "message": _clip(progress[1], 200)})
        return _text(self.r.fcall(self.fn("renew"), 4, k.job(job_id), stream, k.events(), k.config(),
                                  lease, GROUP, consumer, job_id, p, *[_clip(x, 1000) for x in lines]))

    def complete(self, consumer: str, done: Sequence[dict[str, Any]]) -> list[str]:
        """hero_complete of a batch of outcomes, each a dict: id, stream, lease, outcome ('done',
        'fail', 'retry', 'abort'), text, retry_at (ms), reply (the record's field), ran_ms,
        trace (a failure's traceback, or None) and value (a success's MessagePack value, or None:
        sent from protocol 33 on).
        Answers per job: completed, retrying, already_completed or lease_lost."""
        done, order = by_stream(done)
        return [_text(x) for x in in_order(self.r.fcall(*self.complete_call(consumer, done)), order)]

    def complete_call(self, consumer: str, done: Sequence[dict[str, Any]]) -> list[Any]:
        """hero_complete's FCALL arguments for the batch `done` (see `complete`), whose jobs come
        grouped by stream (`by_stream`)."""
        return [self.fn("complete"), *complete_args(self.keys, int(self.version), self.xackdel(), iso(), consumer, done)]

    def hand_back(self, stream: str, consumer: str) -> int:
        """Puts every delivery `consumer` holds on `stream` back, without counting an attempt
        (hero_recover's hand-back); answers how many went back."""
        k = self.keys
        keys = [stream, k.dead_letter(), k.config(), k.retention(), k.events(), k.stats()]
        total, cursor = 0, "0-0"
        while True:
            r = self.r.fcall(self.fn("recover"), len(keys), *keys, GROUP, "consumer", consumer, 0, 1000,
                             k.job_prefix(), k.reply_prefix(), 1_000_000, cursor, "1", iso(), self.xackdel())
            total += int(r[0])
            cursor = _text(r[3])
            if cursor == "0-0":
                return total

    def recover_consumer(self, stream: str, consumer: str, max_attempts: int) -> tuple[int, int]:
        """hero_recover of every delivery `consumer` holds on `stream`, as a dead worker's: each
        attempt counts, a job whose attempts reached `max_attempts` (or its retries + 1, the
        larger) is dead-lettered, the others go back to the stream; answers (requeued, dead)."""
        k = self.keys
        keys = [stream, k.dead_letter(), k.config(), k.retention(), k.events(), k.stats()]
        requeued = dead = 0
        cursor = "0-0"
        while True:
            r = self.r.fcall(self.fn("recover"), len(keys), *keys, GROUP, "consumer", consumer, 0, 1000,
                             k.job_prefix(), k.reply_prefix(), int(max_attempts), cursor, "0", iso(), self.xackdel())
            requeued, dead = requeued + int(r[0]), dead + int(r[1])
            cursor = _text(r[3])
            if cursor == "0-0":
                return requeued, dead

    def beat(self, name: str, ttl_ms: int, entry: dict[str, Any], presence_keys: Sequence[str] = (),
             presence: str = "", policies: bool = False) -> tuple["Beat", dict | None]:
        """hero_beat (protocol 31): the fleet entry `entry` (without `expires_ms`: the function
        adds it on Redis's clock), and for a worker its presence JSON on each of `presence_keys`
        and its liveness deadline, all with `ttl_ms`; allowed past maxmemory. With `policies`,
        the queue policies hash is read in the same round trip. Measures this process's clock
        against Redis's (`observe`) and notes the maxmemory policy (`note_policy`)."""
        k = self.keys
        keys = [k.consumers(), k.fleet(), k.config(), k.memory(), *presence_keys]
        pipe = self.r.pipeline(transaction=False)
        pipe.fcall(self.fn("beat"), len(keys), *keys, name, int(ttl_ms), json.dumps(entry), presence)
        if policies:
            pipe.hgetall(k.policy())
        sent = local_ms()
        out = pipe.execute()
        got = local_ms()
        now, lease, lacks, policy = (list(out[0]) + [None] * 4)[:4]
        beat = Beat(int(now), int(lease) if lease not in (None, b"", "") else None,
                    _text(lacks) if lacks else None, _text(policy))
        beat.offset_ms = observe(beat.now_ms, sent, got)
        note_policy(beat.memory_policy)
        return beat, (out[1] if policies else None)

    def duties(self, holder: str, lease_ms: int, budget: int, recover: bool) -> "Duties":
        """hero_duties (protocol 31): one bounded step of the queue's upkeep (due delayed jobs
        and retries promoted, recurring jobs' due ticks fired (protocol 32), dead workers' jobs
        and idle deliveries recovered, time limits, retention, the dead letters' trim) by
        `holder` when it holds the duty lease (taken or renewed for `lease_ms`; 0 hands it back
        when `holder` holds it), looking at no more than `budget` jobs; any other caller gets
        the holder's name after one HGET. `recover` False holds recovery back (this process saw
        Redis out of reach or refusing writes lately)."""
        k = self.keys
        keys = [k.duties(), k.delayed(), k.consumers(), k.queues(), k.config(), k.events(), k.stats(),
                k.retention(), k.dead_letter()]
        argv = [holder, int(lease_ms), int(budget), GROUP, k.job_prefix(), "1" if recover else "0", self.xackdel()]
        return Duties.parse(self.r.fcall(self.fn("duties"), len(keys), *keys, *argv))


@dataclass(frozen=True)
class Duties:
    """hero_duties's answer: whether the caller holds the duties (it did the step), who holds
    them ('' when nobody: the caller handed them back), the jobs the step moved of each kind,
    `more` when its budget ran out before it was done (call again at once), and the recurring
    jobs' ticks it fired (their job submitted) and skipped (missed under the skip policy)."""

    held: bool
    holder: str
    promoted: int = 0
    recovered: int = 0
    dead: int = 0
    timed_out: int = 0
    expired: int = 0
    more: bool = False
    fired: int = 0
    skipped: int = 0

    @classmethod
    def parse(cls, reply: Any) -> "Duties":
        items = list(reply) if isinstance(reply, (list, tuple)) else None
        if items is None or len(items) < 8:
            # a library that answers otherwise is not the one this package speaks: said, not guessed
            raise HeroError(f"hero_duties answered {reply!r}: expected 8 items (held, holder, promoted, "
                            "recovered, dead, timed_out, expired, more)")
        n = [max(0, int(items[i])) for i in (0, 2, 3, 4, 5, 6, 7)]
        # the ticks came with protocol 32 (items 9 and 10); a library of 31 answers 8 items
        ticks = [max(0, int(x)) for x in items[8:10]] + [0, 0]
        return cls(held=n[0] == 1, holder=_text(items[1]), promoted=n[1], recovered=n[2], dead=n[3],
                   timed_out=n[4], expired=n[5], more=n[6] == 1, fired=ticks[0], skipped=ticks[1])

    @property
    def moved(self) -> int:
        """Jobs this step moved, of every kind."""
        return self.promoted + self.recovered + self.dead + self.timed_out + self.expired


class Beat:
    """hero_beat's answer: Redis's clock (ms), the brokers' lease and fleet summary (None when
    absent), the maxmemory policy; and the clock offset measured from it."""

    def __init__(self, now_ms: int, lease_ms: int | None, fleet_lacks: str | None, memory_policy: str):
        self.now_ms, self.lease_ms, self.fleet_lacks, self.memory_policy = now_ms, lease_ms, fleet_lacks, memory_policy
        self.offset_ms = 0


# -- the keys and arguments of the operator's calls (after the function's name), shared by the
# threaded `Protocol` and hero.aio's Queue, so the two never send them differently
def pause_args(k: Keys, name: str, pause: bool) -> list[Any]:
    return [5, k.queues(), k.paused_queues(), k.paused_names(), k.config(), k.events(),
            "pause" if pause else "resume", name]


def counts_args(k: Keys, name: str) -> list[Any]:
    return [3, k.queues(), k.paused_queues(), k.stats(), GROUP, name]


def parse_counts(flat: Any) -> list[list[Any]]:
    return [[_text(flat[i]), *[int(x) for x in flat[i + 1:i + 9]]] for i in range(0, len(flat), 9)]


def policy_args(k: Keys, name: str, policy_json: str) -> list[Any]:
    return [2, k.policy(), k.config(), name, policy_json]


def requeue_args(k: Keys, job_id: str, old: str, new: str, ctl: str | None, worker: str, cursor: str,
                 target: tuple[str, str, str, int], xackdel: str) -> list[Any]:
    keys = [k.job(job_id), old, new, k.delayed(), k.queues(), k.config(), k.events(), k.stats(), ctl or k.config()]
    t, g, i, p = target
    return [len(keys), *keys, GROUP, iso(), xackdel, job_id, worker if ctl else "", cursor, t, g, i,
            "" if p == 5 else str(p)]


def clean_args(k: Keys, grace_ms: int, status: str, name: str, limit: int, cursor: str) -> list[Any]:
    return [1, k.retention(), k.job_prefix(), int(grace_ms), status, name, int(limit), cursor]


def drain_args(k: Keys, name: str, delayed: bool, budget: int, remove: bool, cursor: str) -> list[Any]:
    return [4, k.queues(), k.delayed(), k.config(), k.stats(), GROUP, k.job_prefix(), name, "1" if delayed else "0",
            int(budget), "1" if remove else "0", cursor]


def parse_drain(r: Any) -> tuple[int, bool, int, str]:
    return max(0, int(r[0])), int(r[1]) == 1, max(0, int(r[2])), _text(r[3])


def list_args(k: Keys, state: str, name: str, cursor: str, limit: int) -> list[Any]:
    """hero_list's keys and arguments (after the function's name), for the threaded and the
    asyncio callers alike."""
    return [3, k.retention(), k.delayed(), k.queues(), k.job_prefix(), state, name, cursor, int(limit)]


def parse_list(reply: Any) -> tuple[str, list[str]]:
    return _text(reply[0]), [_text(x) for x in reply[1:]]


def retry_at_ms(attempt: int) -> int:
    """1 s x 2^(attempt-1), +-20 %, capped at an hour: the SDKs' back-off (§6)."""
    delay = min(3_600_000, 1000 * 2 ** max(0, attempt - 1))
    return now_ms() + int(delay * random.uniform(0.8, 1.2))


# -- the clock: Redis's, as this process last measured it ------------------------------------
# Every deadline the functions compare is on Redis's clock: a retry's run-at, a delayed job's,
# the timestamps of a record. The process corrects its own clock by the offset a worker's
# heartbeat measures (`observe`), and says once when the two are more than SKEW_WARN_MS apart.
SKEW_WARN_MS = 2000
_offset_ms = 0
_skew_said = False
_clock_lock = threading.Lock()


# the record's fields hero_submit writes itself since protocol 35 (Redis's clock, the stream's
# type): left out of the call
_WRITTEN_BY_SUBMIT = ("created_at", "script_type")


def submit_args(k: Keys, version: int, jobs: Sequence[tuple[str, str, int, dict[str, Any]]]) -> tuple[list[str], list[Any]]:
    """hero_submit's keys and arguments for (job id, work stream, run-at ms or 0, record fields)
    each. Since protocol 35 each stream once, and a job as its id, a code `<stream>.<values>`
    (`@<run-at>` when it has one) and its pairs; before, two keys and three counts a job."""
    keys: list[str] = [k.delayed(), k.queues(), k.bridge_registry(), k.config(), k.events(), k.stats()]
    if version >= 35:
        streams: dict[str, int] = {}
        argv: list[Any] = [GROUP, k.job_prefix(), now_ms()]
        for job_id, stream, run_at, fields in jobs:
            s = streams.setdefault(stream, len(streams) + 1)
            pairs = [x for kv in fields.items() if kv[0] not in _WRITTEN_BY_SUBMIT for x in kv]
            code = f"{s}.{len(pairs)}@{run_at}" if run_at else f"{s}.{len(pairs)}"
            argv += [job_id, code, *pairs]
        return keys + list(streams), argv
    argv = [GROUP]
    for job_id, stream, run_at, fields in jobs:
        keys += [k.job(job_id), stream]
        pairs = [x for kv in fields.items() for x in kv]
        argv += [job_id, run_at, len(pairs), *pairs]
    return keys, argv


def local_ms() -> int:
    """This machine's clock, uncorrected: for measuring the offset only."""
    return int(time.time() * 1000)


def now_ms() -> int:
    """Redis's clock as this process knows it: the local clock plus the offset last measured."""
    return local_ms() + _offset_ms


def offset_ms() -> int:
    """Redis's clock minus this machine's, as last measured (0 until then)."""
    return _offset_ms


def observe(redis_ms: int, sent_ms: int, got_ms: int) -> int:
    """Records Redis's time `redis_ms`, read by a call sent at local `sent_ms` and answered at
    local `got_ms` (the server's reading taken as the round trip's middle). Says once, as a
    WARNING, when the clocks differ by more than SKEW_WARN_MS, and once (INFO) when they agree
    again. Answers the offset (Redis's minus local) in ms."""
    global _offset_ms, _skew_said
    offset = int(redis_ms) - (sent_ms + got_ms) // 2
    with _clock_lock:
        _offset_ms = offset
        off = abs(offset) > SKEW_WARN_MS
        say = off != _skew_said
        _skew_said = off
    if say and off:
        log.warning("this machine's clock is %.1f s %s Redis's: hero goes by Redis's clock (deadlines, retries, "
                    "delays, liveness), but fix the clock (NTP)", abs(offset) / 1000,
                    "ahead of" if offset < 0 else "behind")
    elif say:
        log.info("this machine's clock agrees with Redis's again")
    return offset


# -- Redis's maxmemory policy, as this process last read it --------------------------------
_policy = ""
_policy_lock = threading.Lock()


def evicting(policy: str) -> bool:
    """True for a maxmemory policy that may evict keys (anything but noeviction)."""
    return bool(policy) and policy != "noeviction"


def note_policy(policy: str) -> None:
    """Notes the policy a read found: an ERROR when it turned evicting (once per change), an
    INFO when it is noeviction again, nothing when it did not change."""
    global _policy
    if not policy:
        return
    with _policy_lock:
        was, _policy = _policy, policy
    if was == policy:
        return
    if evicting(policy):
        log.error("Redis's maxmemory-policy is %s: Redis may evict any key, a job's record included, and lose the "
                  "job without a trace. Submits are refused until it is noeviction (CONFIG SET maxmemory-policy "
                  "noeviction), unless accepted with `hero broker --accept-eviction %s`", policy, policy)
    elif evicting(was):
        log.info("Redis's maxmemory-policy is %s again: submits are accepted", policy)


# the text of the second iso() last wrote: a worker stamps every call, many a second
_iso_second: tuple[int, str] = (-1, "")


def iso(ms: int | None = None) -> str:
    global _iso_second
    ms = now_ms() if ms is None else ms
    second, milli = divmod(ms, 1000)
    last = _iso_second
    if last[0] != second:
        last = _iso_second = (second, datetime.fromtimestamp(second, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S."))
    return f"{last[1]}{milli:03d}Z"


class Fetched:
    """hero_fetch's answer: `jobs` as (stream index from 0 among the streams named, entry, job
    id), `dropped`, `cursors` (empty when the fetch claimed all it asked), `records` by job id,
    and with a registry cursor `signal` and `registered` (0-based indexes among the streams
    named, or None when the cursor was stale: nothing was claimed)."""

    __slots__ = ("jobs", "dropped", "cursors", "records", "signal", "registered")

    def __init__(self, jobs: list, dropped: list, cursors: list, records: dict, signal: str | None,
                 registered: list[int] | None):
        self.jobs, self.dropped, self.cursors, self.records = jobs, dropped, cursors, records
        self.signal, self.registered = signal, registered

    def __iter__(self):  # jobs, dropped, cursors, records: as `fetch` answered before
        return iter((self.jobs, self.dropped, self.cursors, self.records))


def read_fetch(reply: Any) -> Fetched:
    """hero_fetch's answer (see `Fetched`)."""
    flat = reply[0]
    jobs = [(int(flat[i]) - 1, _text(flat[i + 1]), _text(flat[i + 2])) for i in range(0, len(flat), 3)]
    cursors = [_text(c) for c in reply[2]]
    records: dict[str, dict] = {}
    if len(reply) > 4:
        for (_, _, job_id), rec in zip(jobs, reply[4]):
            records[job_id] = {rec[i]: rec[i + 1] for i in range(0, len(rec), 2)}
    signal = registered = None
    if len(reply) > 6:
        signal = _text(reply[5])
        named = reply[6]
        registered = None if isinstance(named, bytes | str) else [int(i) - 1 for i in named]
    return Fetched(jobs, reply[1], cursors, records, signal, registered)


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return "" if v is None else str(v)


def _clip(s: str, limit: int) -> str:
    b = s.encode("utf-8")
    if len(b) <= limit:
        return s
    return b[:limit].decode("utf-8", "ignore")
