"""Tasks as a Celery user writes them (`hero.App`, `@app.task`), against a real redis-server and
`hero broker`: arguments in, the return value itself out, chains, groups and chords passing
results, `autoretry_for` on the task's back-off, any other exception ending the task at once
with its reason, and clear refusals."""
from __future__ import annotations

import json
import threading
import time

import pytest

import hero
from conftest import hero as hero_cli


def make_app(url: str) -> hero.App:
    app = hero.App(url)
    flaky_calls = []

    @app.task
    def add(x, y):
        return x + y

    @app.task(name="proj.tasks.mul")
    def mul(x, y):
        return x * y

    @app.task
    def total(values, extra=0):
        return sum(values) + extra

    @app.task
    def describe(name, *, tags=()):
        return {"name": name, "tags": list(tags), "n": len(name)}

    @app.task(retries=3, backoff=hero.Backoff("fixed", 0.2, jitter=0), autoretry_for=(ConnectionError,))
    def flaky():
        flaky_calls.append(time.monotonic())
        if len(flaky_calls) < 3:
            raise ConnectionError("try again")
        return len(flaky_calls)

    @app.task(retries=3)
    def broken():
        raise KeyError("no such template")

    @app.task
    def returns_a_set():
        return {1, 2}

    app.flaky_calls = flaky_calls
    return app


class running:
    def __init__(self, app: hero.App):
        self.w = app.worker(concurrency=4)
        self.t = threading.Thread(target=self.w.run, kwargs={"install_signals": False}, daemon=True)

    def __enter__(self):
        self.t.start()
        return self.w

    def __exit__(self, *exc):
        self.w.stop()
        self.t.join(timeout=30)


def test_a_task_sent_with_its_arguments_answers_its_return_value(broker):
    app = make_app(broker)
    tasks = app.tasks
    with running(app):
        add = tasks["test_tasks.make_app.<locals>.add"]
        assert add.delay(2, 3).get(10) == 5
        assert add(2, 3) == 5, "called, it runs here"
        r = tasks["test_tasks.make_app.<locals>.describe"].submit(args=["ada"], kwargs={"tags": ("x",)})
        assert r.get(10) == {"name": "ada", "tags": ["x"], "n": 3}
        # the output is JSON text every reader shows
        out = json.loads(hero_cli("--json", "status", r.id, url=broker).stdout)
        assert json.loads(out["output"]) == {"name": "ada", "tags": ["x"], "n": 3}
        assert tasks["proj.tasks.mul"].apply_async((6, 7), countdown=0.2).get(10) == 42


def test_chains_groups_and_chords_pass_results(broker):
    app = make_app(broker)
    t = app.tasks
    add, mul, total = t["test_tasks.make_app.<locals>.add"], t["proj.tasks.mul"], t["test_tasks.make_app.<locals>.total"]
    with running(app):
        assert (add.s(2, 3) | mul.s(10) | add.s(1)).delay().get(10) == 51
        g = hero.group(add.s(i, i) for i in range(4)).delay()
        assert g.get(10) == [0, 2, 4, 6]
        assert hero.chord([add.s(1, 1), add.s(2, 2)], total.s(extra=100)).get(10) == 106
        assert hero.chord([add.s(1, 1), add.s(2, 2)])(total.s(extra=100)).get(10) == 106, "Celery's chord(header)(body)"
        assert hero.chain(add.s(1, 1), mul.s(3)).delay().get(10) == 6


def test_autoretry_for_retries_on_the_back_off_and_other_exceptions_end_the_task(broker):
    app = make_app(broker)
    t = app.tasks
    with running(app):
        assert t["test_tasks.make_app.<locals>.flaky"].delay().get(20) == 3
        gaps = [b - a for a, b in zip(app.flaky_calls, app.flaky_calls[1:])]
        assert all(0.15 < g < 1.5 for g in gaps), gaps
        r = t["test_tasks.make_app.<locals>.broken"].delay()
        with pytest.raises(hero.TaskError, match="KeyError: 'no such template'"):
            r.get(10)
        job = app.client.get(r.id)
        assert job.attempts == 1, "not retried: not in autoretry_for"
        # the task's own traceback, where it raised, not the layer's
        assert job.trace.startswith("Traceback (most recent call last):"), job.trace
        assert 'raise KeyError("no such template")' in job.trace and "in broken" in job.trace, job.trace
        assert job.trace.rstrip().endswith("KeyError: 'no such template'"), job.trace
        assert "hero/tasks.py" not in job.trace, job.trace
        shown = hero_cli("status", r.id, url=broker).stdout
        assert "trace of the last failed attempt:" in shown and "in broken" in shown, shown
        with pytest.raises(hero.TaskError, match="returned a value holding a set"):
            t["test_tasks.make_app.<locals>.returns_a_set"].delay().get(10)
        other = hero.App(broker)

        @other.task(name="not.served")
        def nowhere():
            return 1
        with pytest.raises(hero.TaskError, match="no task named 'not.served'"):
            nowhere.delay().get(10)


def test_a_task_rate_spaces_its_starts_on_a_worker(broker):
    app = hero.App(broker)
    starts = []

    @app.task(rate="5/s", name="paced")
    def paced(i):
        starts.append(time.monotonic())
        return i

    @app.task(name="free")
    def free(i):
        return i

    with running(app):
        rs = [paced.delay(i) for i in range(6)]
        assert [r.get(20) for r in rs] == list(range(6))
        starts.sort()
        gaps = [b - a for a, b in zip(starts, starts[1:])]
        assert all(g > 0.17 for g in gaps), gaps
        began = time.monotonic()
        assert [free.delay(i).get(10) for i in range(3)] == [0, 1, 2]
        assert time.monotonic() - began < 5, "a task without a rate is not paced"
    with pytest.raises(hero.InvalidInput, match="rate"):
        app.task(rate="fast", name="bad")(lambda: 1)


def test_a_beat_entry_sends_its_task_with_its_arguments(redis_url):
    # no broker and no beat process: the worker's duties fire the ticks (protocol 32)
    app = make_app(redis_url)
    add = app.tasks["test_tasks.make_app.<locals>.add"]
    assert isinstance(app.beat("every-second", "every 1s", add, args=(40, 2)), int)
    listed = json.loads(hero_cli("--json", "cron", "list", url=redis_url).stdout)
    assert [c["name"] for c in listed["cron"]] == ["every-second"], listed
    with running(app):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            done = [j for j in app.client.r.keys("hero:job:cron-every-second-*")]
            outs = [app.client.r.hget(k, "output") for k in done]
            if b"42" in outs:
                break
            time.sleep(0.1)
        assert b"42" in outs, outs


def test_bad_task_input_is_refused_naming_it(broker):
    app = make_app(broker)
    add = app.tasks["test_tasks.make_app.<locals>.add"]
    with pytest.raises(hero.InvalidInput, match="MessagePack"):
        add.delay(object(), 1)
    with pytest.raises(hero.InvalidInput, match="args is a list or tuple"):
        add.submit(args="12")
    with pytest.raises(hero.InvalidInput, match="registered twice"):
        app.task(name="proj.tasks.mul")(lambda: 1)
    with pytest.raises(hero.InvalidInput, match="priority"):
        app.task(name="p", priority=12)(lambda: 1)
    with pytest.raises(hero.InvalidInput, match="autoretry_for"):
        app.task(name="a", autoretry_for=("IOError",))(lambda: 1)
    with pytest.raises(hero.InvalidInput, match="payload is the task's own"):
        add.submit(args=(1, 2), payload=b"x")
    # Celery's words name hero's
    with pytest.raises(hero.InvalidInput, match="no option 'max_retries'; use retries"):
        app.task(name="m", max_retries=3)(lambda: 1)
    with pytest.raises(hero.InvalidInput, match="no option 'acks_late'; use .none needed"):
        app.task(name="b", acks_late=True)(lambda: 1)
    with pytest.raises(hero.InvalidInput, match="soft_time_limit .* is not shorter than its time_limit"):
        app.task(name="s", soft_time_limit=10, time_limit=5)(lambda: 1)
    assert app.task(name="one-class", autoretry_for=ConnectionError)(lambda: 1).autoretry_for == (ConnectionError,)
    assert app.task(name="spelled", rate="10/minute")(lambda: 1).rate == {"max": 10, "per_ms": 60_000}
    with pytest.raises(hero.InvalidInput, match="args is a list or tuple, got str"):
        app.beat("b", "every 5s", add, args="hello")
