"""The queue's upkeep with no `hero broker` at all (issue 59): a deployment of hero-py workers
alone, each a process of its own on db 3 of a fresh redis-server, promotes delayed tasks and
retries, runs a SIGKILLed worker's job on another, ends jobs past their time limit (a hung
worker's too), deletes ended jobs past their retention, fires recurring jobs' ticks (each once,
on when their holder is killed), and writes nothing to db 0. Through
`hero_duties`, one holder of the duty lease at a time, handed back at a clean stop; in a process
pool's parent, not its children; `duties=False` leaves it to others. The Rust suite's
tests/tests/duties.rs holds the Rust worker to the same."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
import redis

import hero
from conftest import python_proc, wait_until
from hero.keys import Keys
from hero.protocol import Protocol

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
sys.path.insert(0, FIXTURES)
import duties_app  # noqa: E402

DB = 3
LIMIT = 30.0  # the longest any wait of these tests may take


class WorkerProc:
    """A hero-py worker in a process of its own (fixtures/duties_app.py), its stdout lines kept
    as they come (one per event), its stderr kept for a failure's message."""

    def __init__(self, url: str, **options):
        args = ", ".join(f"{k}={v!r}" for k, v in options.items())
        code = f"import sys; sys.path.insert(0, {FIXTURES!r}); import duties_app; duties_app.main({args})"
        self.p = python_proc(code, url)
        self.lines: list[str] = []
        self.errors: list[str] = []
        for stream, into in ((self.p.stdout, self.lines), (self.p.stderr, self.errors)):
            threading.Thread(target=self._drain, args=(stream, into), daemon=True).start()
        self.consumer = wait_until("the worker to be ready", self._ready, LIMIT)

    @staticmethod
    def _drain(stream, into: list[str]) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))

    def _ready(self) -> str | None:
        if self.p.poll() is not None:
            raise AssertionError(f"the worker exited ({self.p.returncode}):\n" + "\n".join(self.errors))
        return next((line.split(" ", 1)[1] for line in list(self.lines) if line.startswith("ready ")), None)

    def starts(self, job_id: str) -> int:
        return list(self.lines).count(f"started {job_id}")

    def kill9(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(timeout=10)

    def stop(self) -> int:
        """SIGTERM, as a deploy stops it: a clean stop; answers its exit code."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout=LIMIT)
        except subprocess.TimeoutExpired:
            self.p.kill()
            raise AssertionError("the worker did not stop on SIGTERM:\n" + "\n".join(self.errors))


@pytest.fixture
def deployment(redis_url):
    """db 3 of the test's own redis-server, and every worker process started through `start`,
    killed at the end whatever happened; afterwards db 0 holds nothing."""
    url = f"{redis_url}/{DB}"
    procs: list[WorkerProc] = []

    def start(**options) -> WorkerProc:
        w = WorkerProc(url, **options)
        procs.append(w)
        return w

    duties_app.app.url = url
    duties_app.app._client = None
    yield url, start
    for w in procs:
        if w.p.poll() is None:
            os.kill(w.p.pid, signal.SIGCONT)  # a hung one is stopped: a stopped process dies of SIGKILL too
            w.kill9()
    duties_app.app._client = None
    # every key in the db the URL names, none in db 0
    assert redis.Redis.from_url(redis_url).keys("*") == [], "db 0 untouched"


def raw(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


def ended(c: hero.Client, job_id: str, limit: float = LIMIT) -> hero.Job:
    """The job's record once it ended, read the moment it did (before any retention deletes it)."""
    def check():
        j = c.get(job_id)
        return j if j.ended else None
    return wait_until(f"job {job_id} to end", check, limit)


def runs(workers: list[WorkerProc], job_id: str, n: int) -> int:
    """How many times `workers` started the job, once at least `n` start lines were read (a
    worker's line may come through its pipe a moment after the job's end is seen)."""
    wait_until(f"{n} start lines of {job_id}", lambda: sum(w.starts(job_id) for w in workers) >= n, 5)
    return sum(w.starts(job_id) for w in workers)


def ms_of(iso: str) -> float:
    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp() * 1000


def test_one_caller_holds_the_duties_at_a_time_and_a_holder_hands_them_back(redis_url):
    r = redis.Redis.from_url(f"{redis_url}/{DB}")
    a, b = Protocol(r, Keys()), Protocol(r, Keys())
    a.ensure_library()
    first = a.duties("g:a:1", 3000, 100, True)
    assert (first.held, first.holder, first.moved, first.more) == (True, "g:a:1", 0, False)
    assert 0 < r.pttl("hero:meta:duties") <= 3000, "the lease runs out on Redis's clock"
    other = b.duties("g:b:1", 3000, 100, True)
    assert (other.held, other.holder) == (False, "g:a:1")
    # a due delayed job is promoted by the holder's next step, once
    c = hero.Client(f"{redis_url}/{DB}")
    c.submit("x", "due", id="due", delay=0.05)
    assert wait_until("the job to be promoted", lambda: a.duties("g:a:1", 3000, 100, True).promoted, 5) == 1
    assert c.status("due") == "dispatched"
    # handed back: the key is gone, and the next caller takes the duties at once
    back = a.duties("g:a:1", 0, 100, True)
    assert (back.held, back.holder) == (False, "") and not r.exists("hero:meta:duties")
    assert b.duties("g:b:1", 3000, 100, True).held
    # a caller that does not hold the duties hands back nothing
    assert a.duties("g:a:1", 0, 100, True).holder == "g:b:1"
    assert redis.Redis.from_url(redis_url).keys("*") == [], "db 0 untouched"


def test_a_delayed_task_runs_after_its_countdown_or_eta_and_not_before(deployment):
    url, start = deployment
    w = start()
    soon = duties_app.echo.apply_async(("soon",), countdown=1.5)
    at = duties_app.echo.apply_async(("at",), eta=datetime.now(timezone.utc) + timedelta(seconds=1.5))
    c = hero.Client(url)
    assert c.status(soon.id) == "waiting" and c.status(at.id) == "waiting"
    for res in (soon, at):
        j = ended(c, res.id)
        assert j.status == "finished", j
        # on Redis's clock, both stamps: it started no sooner than its delay (less the clock's ms)
        waited = ms_of(j.started_at) - ms_of(j.created_at)
        assert waited >= 1400, f"{res.id} started {waited} ms after it was sent"
        assert runs([w], res.id, 1) == 1
    assert soon.get(5) == "soon" and at.get(5) == "at"
    # the worker holds the duties: the only process that could
    assert raw(url).hget("hero:meta:duties", "holder") == w.consumer


def test_a_task_with_retries_is_retried_on_its_backoff_then_ends(deployment):
    url, start = deployment
    w = start()
    res = duties_app.flaky.delay()
    with pytest.raises(hero.TaskError, match="OSError: down"):
        res.get(LIMIT)
    c = hero.Client(url)
    j = c.get(res.id)
    assert (j.status, j.attempts) == ("error", 3), j
    assert runs([w], res.id, 3) == 3, "the first run and its two retries, each promoted when due"


def test_a_worker_killed_mid_job_has_its_job_run_on_another_worker(deployment):
    url, start = deployment
    # a short presence TTL: a dead worker is judged so within 1.5 s of its last heartbeat
    a, b = start(presence_ms=1500), start(presence_ms=1500)
    res = duties_app.sleepy.delay(2)
    runner, other = wait_until("the job to start", lambda: (a, b) if a.starts(res.id) else
                               (b, a) if b.starts(res.id) else None, LIMIT)
    runner.kill9()
    assert res.get(LIMIT) == "slept"
    c = hero.Client(url)
    j = c.get(res.id)
    assert j.attempts == 2 and j.worker_id == other.consumer, j
    assert runs([other], res.id, 1) == 1 and runner.starts(res.id) == 1, "run again on the live worker"
    # and the killed worker left the liveness set once its job was recovered
    assert raw(url).zscore("hero:meta:consumers", runner.consumer) is None


def test_a_job_past_its_time_limit_ends_and_so_does_a_hung_workers(deployment):
    url, start = deployment
    w = start()
    # the worker ends its own job at its time limit
    with pytest.raises(hero.TaskError, match="timeout"):
        duties_app.overrun.delay().get(LIMIT)
    # a worker that hangs whole (SIGSTOP) cannot: the upkeep of the other worker ends its job at
    # the limit and 2 s of grace, long before its liveness (60 s) or the lease (30 s) run out
    hung = start(types="hang", presence_ms=60_000)
    c = hero.Client(url)
    s = c.submit("x", "hang", timeout=1)
    began = time.monotonic()
    j = ended(c, s.id)
    assert (j.status, j.error) == ("error", "timeout"), j
    assert time.monotonic() - began < 15
    assert runs([hung], s.id, 1) == 1 and hung.p.poll() is None, "the hung worker ran it, and is still there"
    assert w.p.poll() is None


def test_an_ended_job_is_deleted_once_its_retention_passed(deployment):
    url, start = deployment
    r = raw(url)
    # the retention every language's upkeep reads, short enough to be seen working
    r.hset("hero:meta:config", "retention_ms", 1500)
    start()
    res = duties_app.echo.delay("kept a while")
    assert res.get(LIMIT) == "kept a while"
    key = f"hero:job:{res.id}"
    assert r.exists(key), "kept right after its end"
    wait_until("the ended job's record to be deleted", lambda: not r.exists(key), LIMIT)
    assert r.xlen("hero:meta:retention") == 0


def test_a_clean_stop_hands_the_duties_back_to_the_next_worker_at_once(deployment):
    url, start = deployment
    r = raw(url)
    a = start()
    wait_until("the worker to hold the duties", lambda: r.hget("hero:meta:duties", "holder") == a.consumer, LIMIT)
    assert a.stop() == 0
    # handed back, not left to run out its lease (3 s)
    assert not r.exists("hero:meta:duties")
    b = start()
    wait_until("the next worker to hold the duties", lambda: r.hget("hero:meta:duties", "holder") == b.consumer, 5)
    assert duties_app.echo.apply_async(("after",), countdown=0.2).get(LIMIT) == "after"


def redis_sockets(pid: int, port: int) -> int:
    """How many TCP connections to `port` process `pid` holds (Linux: its socket inodes matched
    against /proc/net/tcp)."""
    fd_dir = f"/proc/{pid}/fd"
    inodes = set()
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table) as f:
            for row in f.readlines()[1:]:
                cols = row.split()
                if int(cols[2].rsplit(":", 1)[1], 16) == port and cols[9] in inodes:
                    n += 1
    return n


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc (Linux)")
def test_a_process_pool_does_the_upkeep_once_in_its_parent(deployment):
    url, start = deployment
    r = raw(url)
    w = start(pool="process", concurrency=3)
    res = duties_app.echo.apply_async(("pooled",), countdown=0.5)
    assert res.get(LIMIT) == "pooled"
    # the holder is the worker process itself
    assert r.hget("hero:meta:duties", "holder") == w.consumer
    # and only it talks to Redis: its children run handlers and hold no connection, so none of
    # them calls hero_duties (nor holds a lease of its own)
    port = r.connection_pool.connection_kwargs["port"]
    children = [int(p) for p in subprocess.run(["pgrep", "-P", str(w.p.pid)], capture_output=True,
                                               text=True).stdout.split()]
    assert len(children) >= 3, f"the pool's children run: {children}"
    assert redis_sockets(w.p.pid, port) > 0
    assert [redis_sockets(pid, port) for pid in children] == [0] * len(children)
    assert r.hget("hero:meta:duties", "holder") == w.consumer


def test_duties_false_leaves_the_upkeep_to_other_processes(redis_url):
    url = f"{redis_url}/{DB}"
    r = raw(url)
    c = hero.Client(url)
    with pytest.raises(hero.InvalidInput, match="duties"):
        hero.Worker(lambda job, ctx: None, ["off"], url, duties="no")
    app = hero.App(url, queue="off")
    assert app.worker(duties=False).duties is False and app.worker().duties is True
    w = hero.Worker(lambda job, ctx: "ran", ["off"], url, duties=False)
    t = threading.Thread(target=w.run, kwargs={"install_signals": False}, daemon=True)
    t.start()
    try:
        s = c.submit("x", "off", delay=0.2)
        # a bounded look at what does not happen: past its time, nobody promotes it
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            assert c.status(s.id) == "waiting" and not r.exists("hero:meta:duties")
            time.sleep(0.1)
        # a worker that does the duties (the default) runs it
        on = hero.Worker(lambda job, ctx: "ran", ["off"], url)
        t2 = threading.Thread(target=on.run, kwargs={"install_signals": False}, daemon=True)
        t2.start()
        assert c.wait(s.id, LIMIT).output == "ran"
        on.stop()
        t2.join(timeout=LIMIT)
        assert not t2.is_alive()
    finally:
        w.stop()
        t.join(timeout=LIMIT)
    assert redis.Redis.from_url(redis_url).keys("*") == [], "db 0 untouched"


def test_several_workers_promote_and_run_each_delayed_job_once(deployment):
    url, start = deployment
    workers = [start() for _ in range(3)]
    c = hero.Client(url)
    ids = [f"d{n}" for n in range(60)]
    results = [duties_app.echo.apply_async((i,), countdown=1, id=i) for i in ids]
    assert [res.get(LIMIT) for res in results] == ids
    started = {i: runs(workers, i, 1) for i in ids}
    assert set(started.values()) == {1}, started
    stats = raw(url).hgetall("hero:meta:stats")
    total = lambda suffix: sum(int(v) for k, v in stats.items() if k.endswith(suffix))  # noqa: E731
    assert (total("|finished"), total("|delayed")) == (60, 0), stats
    holders = {w.consumer for w in workers}
    assert raw(url).hget("hero:meta:duties", "holder") in holders


def tick_jobs(r: redis.Redis, name: str) -> dict[int, str]:
    """The jobs recurring job `name` fired so far, by tick (ms): their ids."""
    prefix = f"hero:job:cron-{name}-"
    return {int(k[len(prefix):]): k[len("hero:job:"):] for k in r.keys(prefix + "*")}


def test_recurring_jobs_are_fired_by_the_workers_each_tick_once_and_go_on_when_the_holder_dies(deployment):
    url, start = deployment
    r = raw(url)
    # a presence TTL of 1.5 s: the killed holder's own jobs are recovered soon after, too
    workers = [start(presence_ms=1500) for _ in range(3)]
    wait_until("a worker to hold the duties", lambda: r.hget("hero:meta:duties", "holder"), LIMIT)
    first = duties_app.app.beat("tick", "every 1s", duties_app.echo, args=("tick",))
    assert first % 1000 == 0
    fired = wait_until("three ticks fired", lambda: len(tick_jobs(r, "tick")) >= 3 and tick_jobs(r, "tick"), LIMIT)
    ticks = sorted(fired)
    assert ticks[0] >= first and [b - a for a, b in zip(ticks, ticks[1:])] == [1000] * (len(ticks) - 1), ticks
    c = hero.Client(url)
    for tick in ticks:
        j = ended(c, fired[tick])
        assert (j.status, j.output, j.attempts) == ("finished", "tick", 1), j
        assert "cron:tick" in j.tags, j.tags
    # the holder dies without a word: once its lease (3 s) ran out another worker takes the
    # duties, and the ticks go on within about 5 s (those that came meanwhile, more than 1 s
    # late, are skipped: the default policy)
    holder = r.hget("hero:meta:duties", "holder")
    dead = next(w for w in workers if w.consumer == holder)
    secs, micros = r.time()
    killed_ms = int(secs) * 1000 + int(micros) // 1000
    dead.kill9()
    live = [w for w in workers if w is not dead]
    # a tick more than 1 s after the kill is the next holder's (the dead one may have fired the
    # one due at the very moment it was killed)
    after = lambda: sorted(t for t in tick_jobs(r, "tick") if t > killed_ms + 1000)  # noqa: E731
    resumed = wait_until("two ticks after the kill", lambda: len(after()) >= 2 and after(), LIMIT)
    assert resumed[0] - killed_ms <= 5500, f"the first tick after the kill is {resumed[0] - killed_ms} ms after it"
    assert resumed[1] - resumed[0] == 1000, resumed
    assert r.hget("hero:meta:duties", "holder") in {w.consumer for w in live}
    for tick in resumed[:2]:
        assert ended(c, f"cron-tick-{tick}").status == "finished"
    # each tick once: one job per tick, started once over every worker (twice only for one the
    # killed holder was running, recovered), and the count the duties keep agrees, read together
    pipe = r.pipeline(transaction=True)
    pipe.keys("hero:job:cron-tick-*")
    pipe.hget("hero:meta:cron:next", "tick|fires")
    keys, fires = pipe.execute()
    assert int(fires) == len(keys)
    for key in keys:
        job_id = key[len("hero:job:"):]
        j = ended(c, job_id)
        n = runs(workers, job_id, 1)
        assert n == 1 or (n == 2 and dead.starts(job_id) == 1 and j.attempts == 2), (job_id, n)


def test_a_batch_over_interleaved_streams_is_answered_job_by_job_in_the_order_given(redis_url):
    """Protocol 34's hero_complete takes each stream once and the jobs grouped by it: `complete`
    groups a batch whose streams interleave and puts the answers back in the order given."""
    r = redis.Redis.from_url(redis_url)
    p = Protocol(r, Keys())
    p.ensure_library()
    c = hero.Client(redis_url)
    for job_id, queue in (("mix-a1", "mixa"), ("mix-a2", "mixa"), ("mix-b1", "mixb")):
        c.submit("x", queue, id=job_id)
    k = Keys()
    sa, sb = k.work("mixa"), k.work("mixb")
    got = p.fetch([sa], "g:m:1", 2).jobs + p.fetch([sb], "g:m:1", 1).jobs
    lease = {job_id: entry for _, entry, job_id in got}
    assert sorted(lease) == ["mix-a1", "mix-a2", "mix-b1"]

    def done(job_id, stream, outcome, entry=None):
        return {"id": job_id, "stream": stream, "lease": entry or lease[job_id], "outcome": outcome,
                "text": job_id, "retry_at": 0, "reply": "", "ran_ms": 3}

    answers = p.complete("g:m:1", [done("mix-a1", sa, "done"), done("mix-b1", sb, "done", "1-1"),
                                   done("mix-a2", sa, "abort")])
    assert answers == ["completed", "lease_lost", "completed"]
    assert [c.status(j) for j in ("mix-a1", "mix-b1", "mix-a2")] == ["finished", "started", "error"]
