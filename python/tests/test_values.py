"""Results as values (protocol 33, issue 60): what a handler returns comes back as it was
returned, in every reader (`AsyncResult.get()` and `.result`, `Job.output`, `Client.run/wait`,
a parent's children results, a chain's next task), with the JSON text beside it in the record's
`output` for older readers; a `str` stays text, a value MessagePack cannot carry fails naming
its type, and a record written as text alone (an older or foreign worker) reads as that str.
Against a real redis-server, hero-py workers alone (no `hero broker`)."""
from __future__ import annotations

import base64
import os
import sys
import threading
from datetime import datetime, timezone

import pytest
import redis

import hero

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
import pool_handlers  # noqa: E402

WHEN = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
RAW = b"\x00\xffbytes"
# each value, and the `output` text an older reader finds beside it
VALUES = [
    ({"a": 1, "n": [1, 2]}, '{"a":1,"n":[1,2]}'),
    ([1, "x"], '[1,"x"]'),
    (None, "null"),
    (WHEN, '"2026-01-02T03:04:05.678Z"'),
    (RAW, '"' + base64.b64encode(RAW).decode() + '"'),
    (42, "42"),
    # a str that looks like JSON stays that str; a task's str is a value too, its text JSON (what
    # a producer of 0.29 json.loads)
    ('{"a":1}', '"{\\"a\\":1}"'),
]


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


def _app(url: str) -> tuple[hero.App, dict]:
    app = hero.App(url)

    @app.task(name="give")
    def give(i):
        return VALUES[i][0]

    @app.task(name="echo")
    def echo(value):
        return value

    @app.task(name="a_set")
    def a_set():
        return {1, 2}

    @app.task(name="an_object")
    def an_object():
        return object()

    return app, {"give": give, "echo": echo, "a_set": a_set, "an_object": an_object}


def test_a_task_returns_values_every_reader_gives_back(redis_url):
    app, t = _app(redis_url)
    with running(app.worker(concurrency=4)):
        for i, (value, text) in enumerate(VALUES):
            r = t["give"].delay(i)
            assert r.get(20) == value, (i, value)
            assert type(r.get(20)) is type(value), (i, value)
            assert r.result == value
            job = app.client.get(r.id)
            assert job.output == value and job.output_text == text, (job.output, job.output_text)
            # a task's result carries its MessagePack value, a str's too
            assert job.value is not None, job
            assert job.raw.get("output") == text, "the JSON text stays for older readers"
            assert app.client.wait(r.id, 5).output == value
            # a chain: the next task gets the value, and its record keeps it as its child's
            chained = (t["give"].s(i) | t["echo"].s()).delay()
            assert chained.get(20) == value
            parent = app.client.get(chained.id)
            (child,) = parent.prerequisites
            got = app.client.children(chained.id)[child]
            assert (got.status, got.output) == ("finished", value), got
            assert got.output_text == text
            assert parent.results[child].output == value
            assert f"value:{child}" in {k.decode() for k in app.client.r.hkeys(app.client.keys.job(chained.id))}, \
                "the child's value is kept beside its result text"
        # a chord's callback gets its members' values as a list, in order
        members = [t["give"].s(i) for i in range(len(VALUES))]
        assert hero.chord(members, t["echo"].s()).get(20) == [v for v, _ in VALUES]
        # a value MessagePack cannot carry fails the task naming its type, never dropped
        with pytest.raises(hero.TaskError, match="set"):
            t["a_set"].delay().get(20)
        with pytest.raises(hero.TaskError, match="object"):
            t["an_object"].delay().get(20)


def test_a_record_of_text_alone_reads_as_that_str(redis_url):
    """A record an older or foreign worker wrote: `output` text and no `value`."""
    app, _ = _app(redis_url)
    r = redis.Redis.from_url(redis_url)
    k = app.client.keys
    now = "2026-01-02T03:04:05.000Z"
    r.hset(k.job("old-1"), mapping={"id": "old-1", "status": "finished", "script": "give", "script_type": "tasks",
                                    "output": '{"a":1}', "created_at": now, "finished_at": now})
    r.hset(k.job("old-2"), mapping={"id": "old-2", "status": "finished", "script": "echo", "script_type": "tasks",
                                    "prerequisites": '["old-1"]', "result:old-1": 'finished:{"a":1}',
                                    "output": "42", "created_at": now, "finished_at": now})
    # a task's result of text alone was written as JSON by hero-py before 1.1: read as it
    assert app.AsyncResult("old-1").get(5) == {"a": 1}
    assert app.AsyncResult("old-1").result == {"a": 1}
    assert app.client.get("old-1").output == '{"a":1}'
    assert app.client.wait("old-1", 5).output == '{"a":1}'
    assert app.client.get("old-2").output == "42", "text, not the number JSON would read"
    assert app.client.children("old-2")["old-1"].output == '{"a":1}'
    # a value field is binary: bytes that are not UTF-8 read back whole
    r.hset(k.job("new-1"), mapping={"id": "new-1", "status": "finished", "script": "give", "output": '"..."',
                                    "value": hero.pack(RAW), "created_at": now})
    assert app.client.get("new-1").output == RAW


def test_a_plain_worker_and_a_process_pool_record_values(redis_url):
    c = hero.Client(redis_url)

    def handler(job, ctx):
        if job.script == "none":
            return None
        if job.script == "set":
            return {1}
        return {"when": WHEN, "script": job.script}

    with running(hero.Worker(handler, ["plain"], redis_url, concurrency=2)):
        with c.events(type="plain", event="finished") as sub:
            assert c.run("x", "plain", wait=20).output == {"when": WHEN, "script": "x"}
            assert sub.next(timeout=20).output == {"when": WHEN, "script": "x"}, "an event gives the value too"
        r = c.run("none", "plain", wait=20)
        assert (r.status, r.output, r.output_text) == ("finished", None, "null")
        bad = c.run("set", "plain", wait=20)
        assert bad.status == "error" and "set" in bad.error, bad
    w = hero.Worker(pool_handlers.handler, ["pooled-values"], redis_url, concurrency=1, pool="process",
                    shutdown_s=2)
    with running(w):
        r = c.run("value", "pooled-values", wait=30)
        assert r.output == {"at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), "raw": b"\x00\x01",
                            "none": None}, r
        assert r.output_text == '{"at":"2026-01-02T03:04:05.000Z","raw":"AAE=","none":null}'
        bad = c.run("set", "pooled-values", wait=30)
        assert bad.status == "error" and "set" in bad.error, bad
