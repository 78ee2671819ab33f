"""`Worker(pool="process")` against a real redis-server and `hero broker`: handlers run in child
processes; a stuck CPU-bound handler is killed at its time limit (the job ends `timeout`) and
at a stop, its child replaced so the next job runs; progress and log lines cross back; tasks
run in the pool too."""
from __future__ import annotations

import os
import sys
import threading
import time

import pytest

import hero
from conftest import wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
import pool_handlers  # noqa: E402


class running:
    def __init__(self, w: hero.Worker):
        self.w = w
        self.t = threading.Thread(target=w.run, kwargs={"install_signals": False}, daemon=True)

    def __enter__(self):
        self.t.start()
        return self.w

    def __exit__(self, *exc):
        self.w.stop()
        self.t.join(timeout=30)


def test_a_stuck_handler_is_killed_at_its_time_limit_and_at_a_stop(broker):
    c = hero.Client(broker)
    w = hero.Worker(pool_handlers.handler, ["pp"], broker, concurrency=2, pool="process", shutdown_s=2)
    with running(w):
        r = c.run("200000", "pp", wait=30)
        assert (r.status, r.output) == ("finished", sum(i * i for i in range(200000))), "an int comes back an int"
        assert int(c.run("pid", "pp", wait=30).output) != os.getpid(), "run in a child process"
        began = time.monotonic()
        stuck = c.submit("spin", "pp", timeout=2)
        r = c.wait(stuck.id, 30)
        assert (r.status, r.error) == ("error", "timeout"), r
        assert time.monotonic() - began < 10
        # both slots still serve: the killed child was replaced
        assert [c.run("pid", "pp", wait=30).status for _ in range(3)] == ["finished"] * 3
        spinning = c.submit("spin", "pp", timeout=300)
        wait_until("the spinning job to start", lambda: c.status(spinning.id) == "started")
        assert c.stop(spinning.id) == "interrupted"
        wait_until("its child to be killed", lambda: w._pool.replaced >= 2, limit=10)
        assert c.run("10", "pp", wait=30).output == 285
        rep = c.run("report", "pp", wait=30)
        job = c.get(rep.id)
        assert rep.output == "reported" and job.progress is not None and job.progress.message == "half"
        assert "a line" in job.log
        bad = c.run("boom", "pp", wait=30)
        assert (bad.status, bad.error) == ("error", "ValueError: boom")
        # the child's traceback crosses back with the failure
        trace = c.get(bad.id).trace
        assert "pool_handlers.py" in trace and 'raise ValueError("boom")' in trace, trace


def test_tasks_run_in_the_pool_and_a_stuck_one_ends_at_its_time_limit(broker):
    app = pool_handlers.app
    app.url = broker
    with running(app.worker(concurrency=2, pool="process", shutdown_s=2)):
        assert pool_handlers.burn.delay(1000).get(30) == sum(i * i for i in range(1000))
        assert pool_handlers.pid.delay().get(30) != os.getpid()
        with pytest.raises(hero.TaskError, match="timeout"):
            pool_handlers.burn.delay(-1).get(30)
        assert pool_handlers.burn.delay(10).get(30) == 285


def test_a_handler_a_child_cannot_import_is_refused_naming_why(redis_url):
    with pytest.raises(hero.InvalidInput, match="module's top level"):
        hero.Worker(lambda job, ctx: 1, ["pp"], redis_url, pool="process")
    with pytest.raises(hero.InvalidInput, match="pool 'fork'"):
        hero.Worker(pool_handlers.handler, ["pp"], redis_url, pool="fork")


def test_a_job_that_kills_every_child_is_dead_lettered_as_recovery_leaves_it(redis_url, tmp_path):
    """A child killed on every attempt: the job runs as many times as recovery gives a dead
    worker's job (the broker's max attempts, else 5; or its retries + 1, the larger), then is
    dead-lettered as hero_recover leaves it, its dependents failed; the pool serves on."""
    c = hero.Client(redis_url)
    w = hero.Worker(pool_handlers.handler, ["pd"], redis_url, concurrency=2, pool="process", shutdown_s=2)
    with running(w):
        runs = tmp_path / "a"
        a = c.submit(f"die:{runs}", "pd")
        after = c.submit("10", "pd", after=[a.id])
        r = c.wait(a.id, 60)
        assert (r.status, r.error) == ("error", "abandoned after 5 attempts"), r
        assert len(runs.read_text().splitlines()) == 5
        job = c.get(a.id)
        assert job.attempts == 5 and job.raw.get("dead"), job
        assert [d.job_id for d in hero.Queue("pd", client=c).dead_letters()] == [a.id]
        assert c.wait(after.id, 10).error == f"dependency failed: {a.id}"
        # its own retries, when larger, are its budget; the broker's max attempts too
        more = tmp_path / "b"
        assert c.run(f"die:{more}", "pd", retries=6, wait=60).error == "abandoned after 7 attempts"
        assert len(more.read_text().splitlines()) == 7
        c.r.hset(c.keys.config(), "max_attempts", 2)
        fewer = tmp_path / "c"
        assert c.run(f"die:{fewer}", "pd", wait=60).error == "abandoned after 2 attempts"
        assert len(fewer.read_text().splitlines()) == 2
        assert c.run("10", "pd", wait=30).output == 285, "the pool still serves"
