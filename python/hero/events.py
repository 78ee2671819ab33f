"""Job events for producers and the waits they wake, read from the event log (`<ns>:meta:events`,
written by the server functions in the call that changes a job).

`Client.events(...)` answers an `EventStream`: iterate it for `Event`s (a finished job's `output`
read beside its event), one blocking read per shard on a thread of its own, merged by time. A
subscriber that stops reading past the log's cap (`events_max`) gets an `Event` with `event ==
"gap"` and `missed` the count of entries trimmed before it read them: Redis counts every entry
ever added (`XINFO STREAM` `entries-added`), so the first kept entry's number is `added - length +
1`, and the reader counts what it read. The check rides in a MULTI with a read, and only a read
that came back full can span a trim, so keeping up costs one XREAD BLOCK a batch.

`Waiter` is the one follower of the log a client's `wait` calls share: it wakes the waits of the
jobs whose events it reads, and each then reads its record. With the log off (`events_max 0`) it
wakes every wait each `POLL` seconds instead: the bound on a wait's delay there.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

import redis

from .errors import HeroError, InvalidInput
from .keys import Keys

COUNT = 1000
BLOCK_MS = 1000
BUFFER = 256
POLL = 0.25
#: Kinds that never end a job: they do not wake a wait.
NOT_ENDS = {"submitted", "dispatched", "started", "progress", "logged", "paused", "resumed",
            "bridged_in", "bridged_out"}


class EventLogOff(HeroError):
    """The namespace's event log is off (`events_max 0`): there are no events to subscribe to."""


@dataclass(frozen=True)
class Event:
    """One change of a job's state (`event` its kind: `submitted`, `started`, `finished`,
    `error`, `retried`, `recovered`, `stopped`, `dead`, …), or a `gap` (`missed` entries trimmed
    before this subscriber read them; None when not known). `id` is the log entry's id: pass it
    as `since` to resume after it."""
    event: str
    job_id: str
    id: str = ""
    queue: str | None = None
    worker: str | None = None
    attempt: int | None = None
    reason: str | None = None
    due_ms: int | None = None
    # a finished job's output, read from its record by the reading rule: the value it returned
    # (protocol 33), else its text
    output: Any = None
    missed: int | None = None
    shard: int = 0

    @property
    def at_ms(self) -> int:
        return int(self.id.split("-")[0]) if self.id else 0


def _output(text: bytes | None, value: bytes | None) -> Any:
    """A record's output by the reading rule (`Job.output`), None without one."""
    if text is None and value is None:
        return None
    from .job import _read
    return _read(None if text is None else _text(text), value)


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _sid(i: str) -> tuple[int, int]:
    ms, _, seq = i.partition("-")
    return int(ms), int(seq or 0)


def decode(entry_id: str, fields: dict, shard: int = 0) -> list[Event]:
    """The events one log entry holds: jobs of one call share an entry (ids and attempts joined
    by single spaces)."""
    f = {_text(k): _text(v) for k, v in fields.items()}
    if not f.get("e") or not f.get("j"):
        return []
    ids, attempts = f["j"], f.get("a", "")
    common = dict(id=entry_id, queue=f.get("q"), worker=f.get("w"), reason=f.get("r"),
                  due_ms=int(f["d"]) if f.get("d", "").isdigit() else None, shard=shard)
    if " " not in ids:
        return [Event(f["e"], ids, attempt=int(attempts) if attempts.isdigit() else None, **common)]
    a = attempts.split(" ")
    return [Event(f["e"], j, attempt=int(a[k]) if k < len(a) and a[k].isdigit() else None, **common)
            for k, j in enumerate(ids.split(" "))]


def events_max(r: redis.Redis, keys: Keys) -> int:
    v = r.hget(keys.config(), "events_max")
    try:
        return int(v) if v is not None else 10000
    except ValueError:
        return 10000


def _info(r: redis.Redis, key: str) -> dict:
    if not r.exists(key):
        return {"entries-added": 0, "length": 0, "first-entry": None, "last-generated-id": b"0-0"}
    return r.xinfo_stream(key)


class Filter:
    """Which events pass: a script type, a queue (`type`, `type/group`, `type/group/instance`),
    a job, a kind; every one given must match."""

    def __init__(self, type: str | None = None, queue: str | None = None, job: str | None = None,
                 event: str | None = None):
        self.type, self.queue, self.job, self.event = type, queue, job, event
        if queue is not None and not 1 <= len(queue.split("/")) <= 3:
            raise InvalidInput(f"queue {queue!r}: write type, type/group or type/group/instance")

    def matches(self, keys: Keys, e: Event) -> bool:
        if self.job is not None and e.job_id != self.job:
            return False
        if self.event is not None and e.event != self.event:
            return False
        q = e.queue or ""
        if self.type is not None:
            base = keys.work(self.type)
            if not (q == base or q.startswith(base + ":")):
                return False
        if self.queue is not None:
            parts = self.queue.split("/")
            base = keys.work(parts[0], parts[1] if len(parts) > 1 else None,
                             parts[2] if len(parts) > 2 else None)
            if not (q == base or q.startswith(base + ":prio:")):
                return False
        return True


class _Reader:
    """One shard's reader of a subscription, on a thread of its own."""

    def __init__(self, r: redis.Redis, keys: Keys, shard: int, flt: Filter, since: str | None,
                 out: "queue.Queue", stop: threading.Event, atomic: bool):
        self.r, self.keys, self.shard, self.flt, self.out, self.stop = r, keys, shard, flt, out, stop
        self.key, self.atomic = keys.events(), atomic
        cap = events_max(r, keys)
        if cap == 0:
            raise EventLogOff(f"the event log is off in namespace {keys.prefix} (events_max 0), so there "
                              "are no job events to subscribe to: turn it on with `hero broker --events-max "
                              "10000` (the default), or wait on single jobs with `wait`")
        self.count = max(1, min(COUNT, cap))
        info = _info(r, self.key)
        added, length = int(info["entries-added"]), int(info["length"])
        if since in (None, "", "$"):
            self.cursor, self.ordinal, self.check = _text(info["last-generated-id"]), added, False
        elif since in ("0", "0-0"):
            self.cursor, self.ordinal, self.check = "0-0", added - length, True
        else:
            try:
                _sid(since)
            except ValueError:
                raise InvalidInput(f"since {since!r}: give an event's id (<ms>-<seq>), \"0\" for the oldest "
                                   "kept, or None for now") from None
            self.cursor, self.ordinal, self.check = since, None, True

    def run(self) -> None:
        failing = False
        while not self.stop.is_set():
            try:
                items = self.read()
                failing = False
            except redis.RedisError as e:
                if not failing:
                    self._put(e)
                failing = True
                self.stop.wait(1.0)
                continue
            for item in items:
                if not self._put(item):
                    return

    def _put(self, item) -> bool:
        while not self.stop.is_set():
            try:
                self.out.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def read(self) -> list[Event]:
        if self.check:
            return self.checked()
        got = self.r.xread({self.key: self.cursor}, count=self.count, block=BLOCK_MS)
        entries = got[0][1] if got else []
        if len(entries) >= self.count:
            self.check = True
            return self.checked()
        out = self.deliver(entries, None)
        if self.ordinal is not None:
            self.ordinal += len(entries)
        return out

    def checked(self) -> list[Event]:
        if not self.r.exists(self.key):
            self.check = False
            return []
        p = self.r.pipeline(transaction=self.atomic)
        p.xinfo_stream(self.key)
        p.xread({self.key: self.cursor}, count=self.count)
        info, got = p.execute()
        entries = got[0][1] if got else []
        added, length = int(info["entries-added"]), int(info["length"])
        first = info.get("first-entry")
        kept = _text(first[0]) if first else None
        gap = None
        if entries and kept is not None and _text(entries[0][0]) == kept and _sid(self.cursor) < _sid(kept):
            first_no = added - length + 1
            if self.ordinal is not None and first_no > self.ordinal + 1:
                gap = Event("gap", "", id=kept, missed=first_no - self.ordinal - 1, shard=self.shard)
            elif self.ordinal is None and added > length:
                gap = Event("gap", "", id=kept, missed=None, shard=self.shard)
            self.ordinal = first_no - 1
        if self.ordinal is not None:
            self.ordinal += len(entries)
        if len(entries) < self.count:
            self.ordinal, self.check = added, False
        return self.deliver(entries, gap)

    def deliver(self, entries, gap: Event | None) -> list[Event]:
        events: list[Event] = []
        for entry_id, fields in entries:
            self.cursor = _text(entry_id)
            events.extend(e for e in decode(self.cursor, fields, self.shard) if self.flt.matches(self.keys, e))
        finished = [e for e in events if e.event == "finished"]
        outputs = {}
        if finished:
            p = self.r.pipeline(transaction=False)
            for e in finished:
                p.hmget(self.keys.job(e.job_id), ["output", "value"])
            # the value the job returned, by the reading rule (its `value`, else its text)
            outputs = {e.job_id: _output(text, value) for e, (text, value) in zip(finished, p.execute())}
        out = [gap] if gap else []
        for e in events:
            if e.event == "finished":
                e = Event(**{**e.__dict__, "output": outputs.get(e.job_id)})
            out.append(e)
        return out


class EventStream:
    """A live subscription: iterate it for `Event`s; `close()` (or leaving a `with` block)
    stops its readers."""

    def __init__(self, r: redis.Redis, shards: list[tuple[int, Keys]], flt: Filter, since: str | None,
                 atomic: bool = True):
        self._out: queue.Queue = queue.Queue(maxsize=BUFFER)
        self._stop = threading.Event()
        self._ready: list[Event] = []
        readers = [_Reader(r, keys, n, flt, since, self._out, self._stop, atomic) for n, keys in shards]
        self._threads = [threading.Thread(target=rd.run, name=f"hero-events-{rd.shard}", daemon=True)
                         for rd in readers]
        for t in self._threads:
            t.start()

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        return self.next()

    def next(self, timeout: float | None = None) -> Event:
        """The next event; `queue.Empty` after `timeout` seconds without one (None: no limit)."""
        if not self._ready:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                left = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
                try:
                    first = self._out.get(timeout=left)
                    break
                except queue.Empty:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise
            batch = [first]
            while True:
                try:
                    batch.append(self._out.get_nowait())
                except queue.Empty:
                    break
            # the shards' events merged by time (stable: a shard's own order holds)
            batch.sort(key=lambda e: e.at_ms if isinstance(e, Event) else 0)
            self._ready = batch
        item = self._ready.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=3)

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Waiter:
    """The follower of one shard's log that every `wait` of a client shares (see the module)."""

    def __init__(self, r: redis.Redis, keys: Keys):
        self.r, self.keys, self.key = r, keys, keys.events()
        self._lock = threading.Lock()
        self._waits: dict[str, list[threading.Event]] = {}
        self._thread: threading.Thread | None = None
        self._cursor = "0-0"
        self._on = True

    def register(self, job_id: str) -> threading.Event:
        """A wake-up for `job_id`: read the record only after this returns."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._on = events_max(self.r, self.keys) > 0
                self._cursor = _text(_info(self.r, self.key)["last-generated-id"])
                self._thread = threading.Thread(target=self._run, name="hero-waiter", daemon=True)
                self._thread.start()
            ev = threading.Event()
            self._waits.setdefault(job_id, []).append(ev)
            return ev

    def unregister(self, job_id: str, ev: threading.Event) -> None:
        with self._lock:
            lst = self._waits.get(job_id, [])
            if ev in lst:
                lst.remove(ev)
            if not lst:
                self._waits.pop(job_id, None)

    def _wake(self, job_id: str | None = None) -> None:
        with self._lock:
            for jid, lst in self._waits.items():
                if job_id is None or jid == job_id:
                    for ev in lst:
                        ev.set()

    def _run(self) -> None:
        idle = 0
        while True:
            with self._lock:
                if not self._waits:
                    # nobody waits: the thread ends, the next wait starts it again
                    self._thread = None
                    return
            if not self._on:
                time.sleep(POLL)
                self._wake()
                idle += 1
            else:
                try:
                    got = self.r.xread({self.key: self._cursor}, count=COUNT, block=BLOCK_MS)
                except redis.RedisError:
                    time.sleep(1.0)
                    self._wake()
                    continue
                entries = got[0][1] if got else []
                for entry_id, fields in entries:
                    self._cursor = _text(entry_id)
                    for e in decode(self._cursor, fields):
                        if e.event not in NOT_ENDS:
                            self._wake(e.job_id)
                if len(entries) >= COUNT:
                    self._wake()  # a full read may span a trim of the log
                idle = 0 if entries else idle + 1
            if idle >= 5:
                idle = 0
                try:
                    on = events_max(self.r, self.keys) > 0
                    if on and not self._on:
                        self._cursor = _text(_info(self.r, self.key)["last-generated-id"])
                        self._wake()
                    self._on = on
                except redis.RedisError:
                    pass
