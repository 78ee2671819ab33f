"""Careless input to hero-py, as a new user types it (a catalogue like the Rust one,
tests/tests/catalogue.rs): each call fails at once with an error that names the option and the
form it wants, and nothing in Redis changes. Then the client still submits."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import hero


def snapshot(r) -> dict:
    return {k: r.dump(k) for k in sorted(r.keys("*")) if b":meta:fleet" not in k}


def test_every_careless_input_fails_naming_what_was_wrong_and_changes_nothing(redis_url):
    c = hero.Client(redis_url)
    q = hero.Queue("cat", client=c)
    app = hero.App(redis_url)

    @app.task
    def add(x, y):
        return x + y

    cases = [
        # (what a user typed, the call, the error's class, words the message must have)
        ("a duration as text it cannot read", lambda: c.submit("x", "py", timeout="five minutes"), hero.InvalidInput, "timeout"),
        ("a timeout under a second", lambda: c.submit("x", "py", timeout=0.2), hero.InvalidInput, "under a second"),
        ("a script that is a dict", lambda: c.submit({"a": 1}, "py"), hero.InvalidInput, "script is dict"),
        ("a payload that is an object", lambda: c.submit("x", "py", payload=object()), hero.InvalidInput, "payload is object"),
        ("a payload that is text", lambda: c.submit("x", "py", payload="text"), hero.InvalidInput, "MessagePack bytes"),
        ("a priority in words", lambda: c.submit("x", "py", priority="high"), hero.InvalidInput, "priority"),
        ("a priority out of range", lambda: c.submit("x", "py", priority=10), hero.InvalidInput, "0 to 9"),
        ("retries as text", lambda: c.submit("x", "py", retries="3"), hero.InvalidInput, "retries"),
        ("negative retries", lambda: c.submit("x", "py", retries=-1), hero.InvalidInput, "retries"),
        ("a type with a dot", lambda: c.submit("x", "proj.tasks"), hero.InvalidInput, "script type"),
        ("a type that is not text", lambda: c.submit("x", 5), hero.InvalidInput, "script type"),
        ("an id with a space", lambda: c.submit("x", "py", id="my job"), hero.InvalidInput, "job id"),
        ("an id that is a number", lambda: c.submit("x", "py", id=7), hero.InvalidInput, "id is int"),
        ("after as one id, not a list", lambda: c.submit("x", "py", after="abc"), hero.InvalidInput, "after is str"),
        ("tags as one string", lambda: c.submit("x", "py", tags="urgent"), hero.InvalidInput, "tags is str"),
        ("a tag that is a number", lambda: c.submit("x", "py", tags=[1]), hero.InvalidInput, "tags holds 1"),
        ("an env value that is a number", lambda: c.submit("x", "py", env={"N": 5}), hero.InvalidInput, "env"),
        ("at as text", lambda: c.submit("x", "py", at="2030-01-01"), hero.InvalidInput, "at is str"),
        ("both delay and at", lambda: c.submit("x", "py", delay=5, at=datetime.now(timezone.utc)), hero.InvalidInput, "delay or at"),
        ("a delay with prerequisites", lambda: c.submit("x", "py", after=["j1"], delay=5), hero.InvalidInput, "prerequisites"),
        ("Celery's countdown", lambda: c.submit("x", "py", countdown=5), hero.InvalidInput, "use delay"),
        ("Celery's max_retries", lambda: c.submit("x", "py", max_retries=3), hero.InvalidInput, "use retries"),
        ("a typo'd option", lambda: c.submit("x", "py", retires=3), hero.InvalidInput, "no option 'retires'"),
        ("a uniqueness TTL without a key", lambda: c.submit("x", "py", unique_ttl=5), hero.InvalidInput, "unique key"),
        ("an empty uniqueness key", lambda: c.submit("x", "py", unique=""), hero.InvalidInput, "uniqueness key"),
        ("an instance without a group", lambda: c.submit("x", "py", instance="i1"), hero.InvalidInput, "group"),
        ("a back-off in words", lambda: c.submit("x", "py", backoff="slowly"), hero.InvalidInput, "back-off"),
        ("a negative keep", lambda: c.submit("x", "py", keep=-5), hero.InvalidInput, "negative"),
        ("stop of a job that does not exist", lambda: c.stop("bad-id"), hero.JobNotFound, "no job bad-id"),
        ("get of a job that does not exist", lambda: c.get("nope"), hero.JobNotFound, "no job nope"),
        ("a task given an object", lambda: add.delay(object(), 1), hero.InvalidInput, "MessagePack"),
        ("a task's args as text", lambda: add.submit(args="12"), hero.InvalidInput, "args is a list or tuple"),
        ("a task option it lacks", lambda: add.submit(args=(1, 2), countdown=3), hero.InvalidInput, "use delay"),
        ("a policy's rate in words", lambda: q.set_policy(rate="fast"), hero.InvalidInput, "rate"),
        ("a policy's zero concurrency", lambda: q.set_policy(concurrency=0), hero.InvalidInput, "pause the queue"),
        ("a recurring job's bad schedule", lambda: q.cron_add("n", "sometimes", "x"), hero.InvalidInput, "schedule"),
        ("promote of a job that does not exist", lambda: q.promote("nope"), hero.JobNotFound, "nope"),
        ("a namespace with a colon", lambda: hero.Client(redis_url, namespace="a:b"), hero.InvalidInput, "namespace"),
    ]
    assert len(cases) >= 25
    before = snapshot(c.r)
    for what, call, cls, words in cases:
        with pytest.raises(cls) as e:
            call()
        assert words in str(e.value), f"{what}: {e.value}"
    assert snapshot(c.r) == before, "nothing changed"
    # and the client still works, with the forms the errors asked for
    s = c.submit("x", "py", timeout="5m", delay=timedelta(seconds=30), tags=["urgent"], env={"N": "5"})
    assert c.get(s.id).timeout == 300
    naive = c.submit("x", "py", at=datetime(2030, 1, 1, 12, 0))
    assert c.r.zscore("hero:meta:delayed", naive.id) == datetime(2030, 1, 1, 12, tzinfo=timezone.utc).timestamp() * 1000
