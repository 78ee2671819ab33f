"""Nothing waits silently (issue 59), as the Rust client says it: a producer whose job needs the
queue's upkeep (a countdown, an eta, retries) in a namespace where no live process does it (no
holder of the duty lease) is told once per client, a WARNING naming the namespace and the Redis
with its db (its password hidden); so is one that stores a recurring job there (its ticks are
fired by the duties too, protocol 32). With a worker (duties on) or a broker there, nothing."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import threading
from datetime import datetime, timedelta, timezone

import pytest
import redis

import hero
from conftest import HERO, wait_until
from hero.upkeep import shown_url

DB = 3
UPKEEP = "no live process does the queue's upkeep"
TICKS = "recurring jobs' ticks wait until one runs"
LIMIT = 20.0


def said(caplog, words: str) -> list[logging.LogRecord]:
    return [x for x in caplog.records if x.name == "hero" and words in x.getMessage()]


def raw(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


def live_broker(url: str) -> bool:
    r = raw(url)
    secs, micros = r.time()
    now = secs * 1000 + micros // 1000
    for v in r.hgetall("hero:meta:fleet").values():
        e = json.loads(v)
        if e.get("role") == "broker" and int(e.get("expires_ms") or 0) >= now:
            return True
    return False


@pytest.fixture
def db3_broker(redis_url):
    """A `hero broker` (HTTP off) on db 3 of the test's Redis, once the fleet shows it live and
    it holds the duty lease."""
    url = f"{redis_url}/{DB}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERO_")}
    p = subprocess.Popen([HERO, "--redis-url", url, "broker", "--http", "off", "--lease-ms", "2000"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def up():
            if p.poll() is not None:
                raise AssertionError(f"the broker exited: {p.stderr.read() if p.stderr else ''}")
            return live_broker(url) and raw(url).exists("hero:meta:duties")
        wait_until("the broker in the fleet, holding the duties", up, LIMIT)
        yield url
    finally:
        p.terminate()
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_the_shown_url_names_the_db_and_hides_the_password():
    assert shown_url(redis.Redis.from_url("redis://127.0.0.1:6390/3")) == "redis://127.0.0.1:6390/3"
    assert shown_url(redis.Redis.from_url("redis://127.0.0.1:6390")) == "redis://127.0.0.1:6390/0"
    shown = shown_url(redis.Redis.from_url("redis://alice:s3cret@example.com:6390/5"))
    assert shown == "redis://alice:***@example.com:6390/5" and "s3cret" not in shown
    assert shown_url(redis.Redis.from_url("redis://:s3cret@h:1/2")) == "redis://***@h:1/2"
    assert shown_url(redis.Redis.from_url("rediss://:pw@h:1/4")) == "rediss://***@h:1/4"
    assert shown_url(redis.Redis.from_url("unix:///tmp/r.sock?db=3&password=pw")) == "unix://***@/tmp/r.sock?db=3"


def test_a_delayed_or_retried_submit_with_no_upkeep_is_told_once_per_client(redis_url, caplog):
    url = f"{redis_url}/{DB}"
    app = hero.App(url, queue="upkeep")

    @app.task
    def echo(v):
        return v

    with caplog.at_level(logging.WARNING, logger="hero"):
        # a job needing no upkeep looks at nothing and says nothing
        app.client.submit("x", "upkeep")
        assert said(caplog, UPKEEP) == []
        echo.apply_async(("a",), countdown=30)
        echo.apply_async(("b",), eta=datetime.now(timezone.utc) + timedelta(minutes=5))
        app.client.submit("x", "upkeep", retries=2)
        one = said(caplog, UPKEEP)
        assert len(one) == 1 and one[0].levelno == logging.WARNING, one
        text = one[0].getMessage()
        port = redis_url.rsplit(":", 1)[1]
        assert f"127.0.0.1:{port}/{DB}" in text and "namespace hero" in text, text
        assert "Start a worker (workers do it by default) or `hero broker`" in text
        # another client looks once again: retries alone need the upkeep too
        hero.Client(url).submit_many([hero.Client(url).job("x", "upkeep", retries=1)])
        assert len(said(caplog, UPKEEP)) == 2
    assert raw(url).zcard("hero:meta:delayed") >= 2
    assert redis.Redis.from_url(redis_url).keys("*") == [], "db 0 untouched"


def test_the_asyncio_client_is_told_once_too(redis_url, caplog):
    url = f"{redis_url}/{DB}"

    async def main():
        async with hero.aio.Client(url) as c:
            await c.submit("x", "upkeep")
            await c.submit("x", "upkeep", delay=30)
            await c.submit("x", "upkeep", delay=30)
    with caplog.at_level(logging.WARNING, logger="hero"):
        asyncio.run(main())
    one = said(caplog, UPKEEP)
    assert len(one) == 1 and f"/{DB}" in one[0].getMessage(), one


def test_a_worker_doing_the_upkeep_means_nothing_is_said(redis_url, caplog):
    url = f"{redis_url}/{DB}"
    w = hero.Worker(lambda job, ctx: "ran", ["upkeep"], url)
    t = threading.Thread(target=w.run, kwargs={"install_signals": False}, daemon=True)
    t.start()
    try:
        wait_until("the worker to hold the duty lease", lambda: raw(url).exists("hero:meta:duties"), LIMIT)
        with caplog.at_level(logging.WARNING, logger="hero"):
            c = hero.Client(url)
            c.submit("x", "upkeep", delay=30)
            c.submit("x", "upkeep", retries=3)
            assert said(caplog, UPKEEP) == []
    finally:
        w.stop()
        t.join(timeout=LIMIT)
    assert not t.is_alive()


def test_a_recurring_job_stored_with_no_upkeep_is_told_once_per_client(redis_url, caplog):
    url = f"{redis_url}/{DB}"
    app = hero.App(url, queue="upkeep")

    @app.task
    def tick():
        return "tick"

    with caplog.at_level(logging.WARNING, logger="hero"):
        q = hero.Queue("upkeep", url)
        q.cron_add("nightly", "0 3 * * *", "x")
        app.beat("every-minute", "every 1m", tick)
        # each client looks once: not again at its next cron_add, nor at its delayed submit
        q.cron_add("hourly", "@hourly", "x")
        q.client.submit("x", "upkeep", delay=30)
        app.beat("every-hour", "every 1h", tick)
    got = said(caplog, UPKEEP)
    assert len(got) == 2 and all(x.levelno == logging.WARNING for x in got), got
    port = redis_url.rsplit(":", 1)[1]
    for x in got:
        text = x.getMessage()
        assert TICKS in text and f"127.0.0.1:{port}/{DB}" in text and "namespace hero" in text, text
        assert "Start a worker (workers do it by default) or `hero broker`" in text
    assert raw(url).hexists("hero:meta:cron", "nightly"), "stored all the same"
    assert redis.Redis.from_url(redis_url).keys("*") == [], "db 0 untouched"


def test_a_recurring_job_stored_while_a_worker_does_the_upkeep_is_not_told(redis_url, caplog):
    url = f"{redis_url}/{DB}"
    w = hero.Worker(lambda job, ctx: "ran", ["upkeep"], url)
    t = threading.Thread(target=w.run, kwargs={"install_signals": False}, daemon=True)
    t.start()
    try:
        wait_until("the worker to hold the duty lease", lambda: raw(url).exists("hero:meta:duties"), LIMIT)
        with caplog.at_level(logging.WARNING, logger="hero"):
            hero.Queue("upkeep", url).cron_add("nightly", "0 3 * * *", "x")
        assert said(caplog, UPKEEP) == []
    finally:
        w.stop()
        t.join(timeout=LIMIT)
    assert not t.is_alive()


def test_with_a_broker_running_nothing_is_said(db3_broker, caplog):
    url = db3_broker
    with caplog.at_level(logging.WARNING, logger="hero"):
        hero.Queue("upkeep", url).cron_add("nightly", "0 3 * * *", "x")
        hero.Client(url).submit("x", "upkeep", delay=30)
    assert said(caplog, UPKEEP) == []
