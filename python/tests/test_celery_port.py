"""The traps a Celery team met porting a Celery 5 app to hero-py (issue 60, findings 5 to 10),
each held here against a real redis-server, hero-py workers alone doing the queue's upkeep (no
`hero broker`): a process-pool child killed mid-job runs its job again; tasks sent from asyncio
keep every option and answer values; `hero.Retry` and `autoretry_for` get Celery's budget of 3
retries when a task names none; `apply_async(queue=)`; `app.AsyncResult(id)` with Celery's
states; a task context (`bind=True`, `hero.current_task()`) with the attempt and a cancel flag
that a time limit and a revoke set; a soft time limit raised in the task; a hard one that frees
the slot on the thread pool; and a worker that says at start what it serves."""
from __future__ import annotations

import asyncio
import logging
import os
import time
import sys
import threading

import pytest

import hero
from conftest import wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
import celery_port_app as ported  # noqa: E402


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


def test_a_pool_child_killed_mid_job_runs_again_and_finishes(redis_url, tmp_path):
    app = ported.app
    app.url, app._client = redis_url, None
    marker = str(tmp_path / "died")
    with running(app.worker(concurrency=2, pool="process", shutdown_s=2)):
        r = ported.die_once.delay(marker)
        assert r.get(30) == "survived"
        assert os.path.exists(marker), "its first child was killed"
        assert app.client.get(r.id).attempts == 2, "the killed attempt counts, as a dead worker's does"
        # one that kills its child on every attempt ends as recovery leaves a dead worker's job:
        # dead-lettered once the attempts it gets (the broker's max attempts, 5 by default) are
        # spent, each death said in its log lines; never rerun forever
        runs = tmp_path / "deaths"
        bad = ported.die_always.delay(str(runs))
        with pytest.raises(hero.TaskError, match="abandoned after 5 attempts"):
            bad.get(60)
        job = app.client.get(bad.id)
        assert (job.status, job.attempts, job.error) == ("error", 5, "abandoned after 5 attempts"), job
        assert len(runs.read_text().splitlines()) == 5, "five runs, each in a child of its own"
        assert job.raw.get("dead"), "its record names its dead letter"
        assert [d.job_id for d in hero.Queue(ported.app.queue, client=app.client).dead_letters()] == [bad.id]
        assert sum("killed by signal 9" in line for line in job.log) == 5, job.log
        # the soft time limit is raised in the child too, which may clean up and return
        assert ported.soft_in_child.delay().get(30) == "cleaned up on attempt 1"
        assert ported.die_once.delay(marker).get(30) == "survived", "the pool still serves"
        # a child's hero.Retry keeps Celery's budget of 3 for a task that declares none
        assert ported.retried.delay(str(tmp_path / "runs")).get(30) == 3


def test_tasks_sent_from_asyncio_keep_their_options_and_answer_values(redis_url):
    app = hero.App(redis_url)
    calls = []

    @app.task(name="flaky", retries=3, backoff=hero.Backoff("fixed", 0.2, jitter=0),
              autoretry_for=(ConnectionError,), time_limit=60, priority=2)
    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("not yet")
        return {"calls": len(calls)}

    @app.task(name="add")
    def add(x, y):
        return x + y

    @app.task(name="total")
    def total(values, extra=0):
        return sum(values) + extra

    with running(app.worker()):
        async def main():
            r = await flaky.delay_async()
            assert await r.get(20) == {"calls": 3}, "retried: its retries=3 went with the job"
            job = await r.job()
            assert (job.retries, job.timeout, job.priority, job.attempts) == (3, 60, 2, 3), job
            assert await r.state() == "SUCCESS"
            later = await add.apply_async_async((1, 2), countdown=0.3, priority=1)
            assert (await later.job()).priority == 1
            assert await later.get(10) == 3
            assert await (await (add.s(2, 3) | add.s(10)).delay_async()).get(10) == 15
            assert await (await hero.group(add.s(i, i) for i in range(3)).delay_async()).get(10) == [0, 2, 4]
            chord = await hero.chord_async([add.s(1, 1), add.s(2, 2)], total.s(extra=100))
            assert await chord.get(10) == 106
            assert await (await add.s(20, 22).delay_async()).get(10) == 42
            await app.aclose()
        asyncio.run(main())


def test_retry_and_autoretry_without_retries_get_celerys_budget_of_3(redis_url):
    app = hero.App(redis_url)
    seen = {"again": 0, "always": 0, "auto": 0}

    @app.task(name="again")
    def again():
        seen["again"] += 1
        if seen["again"] < 3:
            raise hero.Retry("not yet", 0.1)
        return seen["again"]

    @app.task(name="always")
    def always():
        seen["always"] += 1
        raise hero.Retry("never", 0.1)

    @app.task(name="auto", autoretry_for=(ConnectionError,), backoff="fixed:100ms")
    def auto():
        seen["auto"] += 1
        if seen["auto"] < 4:
            raise ConnectionError("down")
        return seen["auto"]

    assert auto.retries == 3 and app.tasks["again"].retries == 0
    with running(app.worker()):
        assert again.delay().get(20) == 3
        r = always.delay()
        with pytest.raises(hero.TaskError, match=r"max retries \(3\) exceeded"):
            r.get(20)
        assert seen["always"] == 4, "the first run and 3 retries"
        r = auto.delay()
        assert r.get(20) == 4, "3 retries, as Celery's max_retries"
        assert app.client.get(r.id).retries == 3


def test_apply_async_takes_celerys_queue_and_app_asyncresult_has_celerys_states(redis_url):
    app = hero.App(redis_url)
    gate = threading.Event()

    @app.task(name="add")
    def add(x, y):
        return x + y

    @app.task(name="held")
    def held():
        gate.wait(20)
        return "let go"

    @app.task(name="boom")
    def boom():
        raise ValueError("bad input")

    @app.task(name="later", retries=2)
    def later():
        raise hero.Retry("wait", 30)

    other = app.worker(queues=["other"])
    assert other.types == ["other"]
    with pytest.raises(hero.InvalidInput, match="queue="):
        add.apply_async((5, 5), type="default")
    r = add.apply_async((5, 5), queue="other")
    assert app.client.get(r.id).script_type == "other"
    assert app.AsyncResult(r.id).state == "PENDING"
    assert app.AsyncResult("no-such-task").state == "PENDING", "Celery's answer for an id it never saw"
    with running(app.worker(queues=["tasks"])):
        time.sleep(0.5)
        assert app.client.status(r.id) == "dispatched", "a worker of queue tasks does not take it"
        with running(other):
            assert r.get(timeout=10) == 10
        res = app.AsyncResult(r.id)
        assert (res.state, res.status, res.result, res.successful(), res.failed(), res.traceback) == \
            ("SUCCESS", "SUCCESS", 10, True, False, None)
        h = held.delay()
        wait_until("held to start", lambda: app.AsyncResult(h.id).state == "STARTED")
        gate.set()
        assert app.AsyncResult(h.id).get(timeout=10) == "let go"
        b = boom.delay()
        with pytest.raises(hero.TaskError, match="ValueError: bad input"):
            app.AsyncResult(b.id).get(timeout=10)
        res = app.AsyncResult(b.id)
        assert (res.state, res.successful(), res.failed()) == ("FAILURE", False, True)
        assert isinstance(res.result, hero.TaskError) and "bad input" in str(res.result)
        assert 'raise ValueError("bad input")' in res.traceback
        assert str(res.get(timeout=1, propagate=False)) == str(res.result)
        lt = later.delay()
        wait_until("later to wait for its retry", lambda: app.AsyncResult(lt.id).state == "RETRY")
        lt.revoke()
        assert app.AsyncResult(lt.id).state == "REVOKED"
        with pytest.raises(TimeoutError):
            held.apply_async(queue="nobody").get(timeout=0.3)


def test_a_task_context_shows_the_attempt_and_a_cancel_a_revoke_and_time_limits_set(redis_url):
    app = hero.App(redis_url)
    attempts: list = []
    flags: dict = {}

    @app.task(name="counted", bind=True)
    def counted(self):
        attempts.append((self.request.id, self.request.retries, self.request.attempt,
                         hero.current_task().request.attempt, hero.current_task() is self))
        if self.request.retries < 2:
            raise self.retry(countdown=0.1)
        return self.request.retries

    @app.task(name="patient", bind=True)
    def patient(self):
        while not self.request.cancelled:
            time.sleep(0.02)
        flags["patient"] = self.request.cancel_reason

    @app.task(name="soft", bind=True, soft_time_limit=0.5)
    def soft(self):
        try:
            while True:
                time.sleep(0.02)
        except hero.SoftTimeLimitExceeded:
            return "cleaned up"

    @app.task(name="soft_uncaught", soft_time_limit=0.3)
    def soft_uncaught():
        while True:
            time.sleep(0.02)

    @app.task(name="async_soft", soft_time_limit=0.3)
    async def async_soft():
        try:
            await asyncio.sleep(20)
        except asyncio.CancelledError:  # an async task's soft limit cancels it at its await
            return "async cleaned up"

    @app.task(name="stuck", time_limit=1)
    def stuck():
        time.sleep(30)  # blocked in C: no exception reaches it before it returns

    @app.task(name="spin", time_limit=1)
    def spin():
        try:
            while True:
                pass
        finally:
            flags["spin"] = "unwound"

    @app.task(name="quick")
    def quick():
        return "quick"

    assert hero.current_task() is None
    with running(app.worker(concurrency=1)) as w:
        r = counted.delay()
        assert r.get(20) == 2
        assert [a[1:] for a in attempts] == [(0, 1, 1, True), (1, 2, 2, True), (2, 3, 3, True)], attempts
        assert {a[0] for a in attempts} == {r.id}
        p = patient.delay()
        wait_until("patient to start", lambda: app.AsyncResult(p.id).state == "STARTED")
        p.revoke()
        wait_until("the revoke to reach the task", lambda: "patient" in flags)
        assert flags["patient"] == "stopped"
        assert soft.delay().get(10) == "cleaned up"
        with pytest.raises(hero.TaskError, match="SoftTimeLimitExceeded: the task ran past its soft_time_limit"):
            soft_uncaught.delay().get(10)
        assert async_soft.delay().get(10) == "async cleaned up"
        # the hard limit: a thread cannot be killed, but its slot is not held past it
        s = stuck.delay()
        with pytest.raises(hero.TaskError, match="timeout"):
            s.get(15)
        began = time.monotonic()
        assert quick.delay().get(10) == "quick"
        assert time.monotonic() - began < 5, "the only slot was held by the timed-out task"
        # a task running Python code gets TimeLimitExceeded raised in it at the hard limit
        with pytest.raises(hero.TaskError, match="timeout"):
            spin.delay().get(15)
        wait_until("spin to unwind", lambda: flags.get("spin") == "unwound", limit=5)
        assert w.abandoned >= 1


def test_a_worker_says_at_start_what_it_serves(redis_url, caplog):
    app = hero.App(redis_url)

    @app.task(name="a")
    def a():
        return 1

    @app.task(name="b", queue="reports")
    def b():
        return 2

    with caplog.at_level(logging.INFO, logger="hero"):
        with running(app.worker(concurrency=3)):
            wait_until("the start line", lambda: any("serving" in m for m in caplog.messages))
    line = next(m for m in caplog.messages if "serving" in m)
    port = redis_url.rsplit(":", 1)[1]
    for part in (f"127.0.0.1:{port}/0", "reports, tasks", "concurrency 3", "pool thread"):
        assert part in line, line
