"""Nothing lost when Redis itself fails (hero-py's part): a worker whose Redis refuses writes for
a while (too few replicas, turned read-only) keeps every outcome and records it once Redis takes
writes again, each handler run once; a worker started while Redis is full registers and runs
what was submitted before; a submit under an evicting maxmemory policy or into a full Redis is
refused with hero's words; the completer outlives an error it did not expect. Each test on its
own redis-server, no broker (nothing recovers a lease: a handler run twice is the worker's)."""
from __future__ import annotations

import collections
import json
import logging
import signal
import threading

import pytest
import redis

import hero
from hero import protocol
from conftest import free_port, python_proc, wait_until

TYPE = "flt"


class Running:
    """A worker on a thread, counting its handler's runs per job and recording its events."""

    def __init__(self, url: str, handler=None, types=(TYPE,), **options):
        self.runs: collections.Counter = collections.Counter()
        self.events: list[tuple[str, str, str]] = []
        self.gate = threading.Event()
        self._lock = threading.Lock()

        def count(job, ctx):
            with self._lock:
                self.runs[job.id] += 1
            if handler is not None:
                return handler(job, ctx)
            assert self.gate.wait(20), "the test opened the gate"
            return f"ok {job.id}"

        self.w = hero.Worker(count, list(types), url, on_event=lambda k, j, d: self.events.append((k, j, d)),
                             **options)
        self.failure: list[BaseException] = []
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()
        wait_until("the worker to be ready", lambda: any(k == "ready" for k, _, _ in self.events) or self.failure
                   or not self.t.is_alive(), limit=15)
        assert not self.failure and self.t.is_alive(), f"the worker started: {self.failure}"

    def _run(self):
        try:
            self.w.run(install_signals=False)
        except BaseException as e:  # noqa: B036 - the test reads it
            self.failure.append(e)

    def count(self, kind: str, detail: str = "") -> int:
        return sum(1 for k, _, d in list(self.events) if k == kind and detail in d)

    def stop(self):
        self.w.stop()
        self.t.join(timeout=30)
        assert not self.t.is_alive(), "the worker stopped"
        assert not self.failure, self.failure


def threads_alive() -> set[str]:
    return {t.name for t in threading.enumerate() if t.is_alive()}


def finished(c: hero.Client, ids) -> bool:
    return all(c.status(i) == "finished" for i in ids)


def fill(r: redis.Redis) -> None:
    """Makes Redis full: maxmemory just above what it uses (policy noeviction), then one big
    key grown until Redis refuses it."""
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", r.info("memory")["used_memory"] + 2 * 1024 * 1024)
    chunk = b"x" * (256 * 1024)
    for _ in range(100):
        try:
            r.append("filler", chunk)
        except redis.exceptions.OutOfMemoryError:
            return
    raise AssertionError("Redis never refused a write")


# each a fault that makes Redis refuse writes for a while, and its healing
FAULTS = {
    # min-replicas-to-write with no replica: every write refused with NOREPLICAS
    "noreplicas": (lambda r, dead: r.config_set("min-replicas-to-write", 1),
                   lambda r, dead: r.config_set("min-replicas-to-write", 0)),
    # a master turned replica (of a master that is not there): every write refused with READONLY
    "readonly": (lambda r, dead: r.replicaof("127.0.0.1", dead),
                 lambda r, dead: r.replicaof("NO", "ONE")),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_worker_keeps_its_outcomes_through_refused_writes_and_records_each_once(redis_url, fault):
    r = redis.Redis.from_url(redis_url)
    c = hero.Client(redis_url)
    ids = [f"j{n}" for n in range(12)]
    c.submit_many([c.job("x", TYPE, id=i) for i in ids])
    w = Running(redis_url, concurrency=4)
    wait_until("four handlers running", lambda: sum(w.runs.values()) == 4)

    refuse, heal = FAULTS[fault]
    dead = free_port()
    refuse(r, dead)
    try:
        # the four end while Redis refuses writes: their outcomes are refused too
        w.gate.set()
        # about 3 s of refusals: 6 tries of the completion, 100 ms doubling (0.1+0.2+0.4+0.8+1.6)
        wait_until("six refused completions", lambda: w.count("error", "completion failed") >= 6, limit=20)
        assert not any(c.status(i) == "finished" for i in ids), "nothing was recorded while Redis refused writes"
    finally:
        heal(r, dead)

    wait_until("every job finished once Redis takes writes again", lambda: finished(c, ids), limit=40)
    assert dict(w.runs) == {i: 1 for i in ids}, "each handler ran exactly once"
    assert [c.get(i).output for i in ids] == [f"ok {i}" for i in ids]
    assert {"hero-completer", "hero-keeper", "hero-control"} <= threads_alive(), "every thread of the worker lives"
    assert w.t.is_alive()
    # and it serves on
    after = c.run("x", TYPE, id="after", wait=20)
    assert after.status == "finished" and after.output == "ok after"
    assert w.runs["after"] == 1
    w.stop()


def test_a_worker_started_while_redis_is_full_registers_and_runs_what_was_submitted(redis_url):
    r = redis.Redis.from_url(redis_url)
    c = hero.Client(redis_url)
    c.submit("x", TYPE, id="early")
    fill(r)
    w = Running(redis_url, handler=lambda job, ctx: f"ran {job.id}")
    # registered: its presence, its liveness deadline and its fleet entry, on Redis's clock
    keys = hero.Keys()
    presence = json.loads(r.get(keys.presence(TYPE, w.w.group, w.w.instance)))
    assert presence["consumer"] == w.w.consumer and isinstance(presence["skew_ms"], int)
    assert abs(presence["skew_ms"]) < 2000
    assert r.zscore(keys.consumers(), w.w.consumer) is not None
    entry = json.loads(r.hget(keys.fleet(), w.w.consumer))
    assert entry["protocol"] == int(hero.protocol.VERSION) and entry["role"] == "worker" and entry["expires_ms"] > 0
    wait_until("the early job finished", lambda: c.status("early") == "finished", limit=20)
    assert c.get("early").output == "ran early"
    assert dict(w.runs) == {"early": 1}
    # Redis is still full: the worker ran through it
    with pytest.raises(hero.OutOfMemory):
        c.submit("x", TYPE, id="refused")
    w.stop()


def test_a_submit_into_a_full_redis_says_redis_is_full(redis_url):
    r = redis.Redis.from_url(redis_url)
    c = hero.Client(redis_url)
    fill(r)
    with pytest.raises(hero.OutOfMemory) as e:
        c.submit("x", TYPE, id="full-1")
    msg = str(e.value)
    assert msg.startswith("Redis is full: it reached its maxmemory"), msg
    assert "the job was not accepted" in msg and "raise maxmemory" in msg, msg
    assert not r.exists(hero.Keys().job("full-1")), "nothing of a refused submit is written"
    # room again: taken
    r.config_set("maxmemory", 0)
    assert c.submit("x", TYPE, id="full-2").created


def test_a_submit_under_an_evicting_policy_is_refused_naming_it(redis_url, caplog):
    r = redis.Redis.from_url(redis_url)
    c = hero.Client(redis_url)
    protocol.note_policy("noeviction")  # this process's last reading, whatever a test before left
    r.config_set("maxmemory-policy", "allkeys-lru")
    with pytest.raises(hero.Evicting) as e:
        c.submit("x", TYPE, id="ev-1")
    assert e.value.policy == "allkeys-lru"
    msg = str(e.value)
    assert msg.startswith("Redis's maxmemory-policy is allkeys-lru: under it Redis may evict any key"), msg
    assert "Set `maxmemory-policy noeviction`" in msg, msg
    assert "`hero broker --accept-eviction allkeys-lru`" in msg, msg
    assert not r.exists(hero.Keys().job("ev-1"))

    # a worker's heartbeat reads the policy: an ERROR once, not once a beat
    with caplog.at_level(logging.INFO, logger="hero"):
        w = Running(redis_url, handler=lambda job, ctx: "ok", presence_ttl_ms=600)
        fleet = hero.Keys().fleet()
        beats = set()
        wait_until("three more heartbeats", lambda: beats.add(r.hget(fleet, w.w.consumer)) or len(beats) >= 4,
                   every=0.05)
        said = [x for x in caplog.records if x.name == "hero" and "maxmemory-policy is allkeys-lru" in x.getMessage()]
        assert len(said) == 1 and said[0].levelno == logging.ERROR, said
        w.stop()

    # accepted by name (the brokers' --accept-eviction): taken
    r.hset(hero.Keys().config(), "accept_eviction", "allkeys-lru")
    assert c.submit("x", TYPE, id="ev-2").created


def test_the_completer_outlives_an_error_it_did_not_expect(redis_url, caplog):
    r = redis.Redis.from_url(redis_url)
    c = hero.Client(redis_url)
    c.submit("x", TYPE, id="a")
    with caplog.at_level(logging.INFO, logger="hero"):
        w = Running(redis_url)
        wait_until("a's handler running", lambda: w.runs["a"] == 1)
        # the config hash made a string: every function reading it fails with WRONGTYPE, an
        # error the completer has no rule for
        config = hero.Keys().config()
        saved = r.hgetall(config)
        r.delete(config)
        r.set(config, "not a hash")
        try:
            w.gate.set()
            wait_until("two failed completions", lambda: w.count("error", "completion failed") >= 2)
            assert c.status("a") == "started"
        finally:
            r.delete(config)
            if saved:
                r.hset(config, mapping=saved)
        wait_until("a finished", lambda: c.status("a") == "finished", limit=20)
        traced = [x for x in caplog.records if "recording outcomes failed unexpectedly" in x.getMessage()]
        assert traced and traced[0].levelno == logging.ERROR and "Traceback" in traced[0].getMessage()
        assert "WRONGTYPE" in traced[0].getMessage()
    assert "hero-completer" in threads_alive()
    # it records on
    b = c.run("x", TYPE, id="b", wait=20)
    assert b.status == "finished" and b.output == "ok b"
    assert dict(w.runs) == {"a": 1, "b": 1}
    w.stop()


class Proc:
    """A worker process of type TYPE, logging (logger `hero`) to stderr and printing its events
    on stdout, both read by threads into lists; ready once constructed; killed by `close`."""

    def __init__(self, url: str, extra: str = ""):
        code = (
            "import logging, hero\n"
            "logging.basicConfig(level=logging.INFO)\n"
            "w = hero.Worker(lambda job, ctx: 'ok', ['" + TYPE + "'], shutdown_s=2, presence_ttl_ms=1500,\n"
            "                on_event=lambda k, j, d: print(k, j, d, flush=True))\n"
            + extra +
            "w.run()\n"
            "print('exited', flush=True)\n"
        )
        self.p = python_proc(code, url)
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [threading.Thread(target=self._read, args=(f, into), daemon=True)
                        for f, into in ((self.p.stdout, self.out), (self.p.stderr, self.err))]
        for t in self.readers:
            t.start()
        ready = wait_until("the worker process to be ready", lambda: next(
            (x for x in list(self.out) if x.startswith("ready")), None) or self.p.poll() is not None, limit=20)
        assert isinstance(ready, str), "".join(self.err)
        self.consumer = ready.split()[1]

    @staticmethod
    def _read(f, into: list[str]) -> None:
        for line in f:
            into.append(line)

    def said(self, text: str) -> bool:
        """True once its log (stderr) has a line with `text`."""
        return any(text in x for x in list(self.err))

    def wait(self, limit: float) -> int:
        code = self.p.wait(timeout=limit)
        for t in self.readers:
            t.join(timeout=5)
        return code

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


def test_a_worker_that_cannot_go_on_says_why_removes_its_presence_and_exits_non_zero(redis_url):
    r = redis.Redis.from_url(redis_url)
    keys = hero.Keys()
    # its loops give up after 1 s of failures they have no rule for (300 s by default)
    p = Proc(redis_url, "w._give_up_s = 1.0\n")
    try:
        assert r.hget(keys.fleet(), p.consumer) is not None
        r.delete(keys.config())
        r.set(keys.config(), "not a hash")  # every function reading it fails with WRONGTYPE
        code = p.wait(20)
    finally:
        p.close()
    err = "".join(p.err)
    assert code != 0, err
    assert "cannot go on" in err and "WRONGTYPE" in err and "WorkerFailed" in err, err
    assert not any("exited" in x for x in p.out)
    assert not r.exists(keys.presence(TYPE, "default", p.consumer.split(":")[1]))
    assert r.hget(keys.fleet(), p.consumer) is None and r.zscore(keys.consumers(), p.consumer) is None


def test_sigterm_stops_a_worker_while_redis_refuses_writes(redis_url):
    r = redis.Redis.from_url(redis_url)
    p = Proc(redis_url)
    r.config_set("min-replicas-to-write", 1)
    try:
        # it sees the refusals (its next heartbeat, within half a second), as an `error` event
        wait_until("the worker to see writes refused", lambda: any("NOREPLICAS" in x for x in list(p.out)), limit=10)
        p.p.send_signal(signal.SIGTERM)
        code = p.wait(20)
    finally:
        r.config_set("min-replicas-to-write", 0)
        p.close()
    assert code == 0, "".join(p.err)
    assert any("exited" in x for x in p.out)
    assert p.said("NOREPLICAS") and p.said("WARNING"), "".join(p.err)


def test_the_clock_offset_is_measured_and_a_skew_said_once(caplog):
    local = protocol.local_ms()
    try:
        with caplog.at_level(logging.INFO, logger="hero"):
            # Redis's clock 5 s ahead of this machine's
            assert protocol.observe(local + 5000, local, local) == 5000
            assert protocol.observe(local + 5000, local, local) == 5000
            assert abs(protocol.now_ms() - (protocol.local_ms() + 5000)) < 1000
            assert abs(protocol.retry_at_ms(1) - protocol.now_ms() - 1000) <= 250
            protocol.observe(local, local, local)
        said = [(x.levelno, x.getMessage()) for x in caplog.records if x.name == "hero"]
        assert [lvl for lvl, _ in said] == [logging.WARNING, logging.INFO], said
        assert "5.0 s behind Redis's" in said[0][1]
    finally:
        protocol.observe(protocol.local_ms(), protocol.local_ms(), protocol.local_ms())
