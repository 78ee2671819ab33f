"""hero-py's job events and wait against a real redis-server, a real `hero broker` and Rust
workers (`hero worker`): a subscriber sees every job of a 10,000-job run end exactly once with its
output, through retries and a worker's SIGKILL; one that stops reading past the log's cap gets a
`gap` with the count; the log off refuses a subscription and `wait` still works; `wait` after a
plain submit returns within milliseconds of the end."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import time
from datetime import datetime

import pytest
import redis

import hero
from conftest import HERO, hero as hero_cli, wait_until


def rhai_worker(url: str, concurrency: int = 8) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERO_")}
    p = subprocess.Popen([HERO, "--redis-url", url, "worker", "--types", "rhai", "--concurrency", str(concurrency)],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = redis.Redis.from_url(url)
    before = r.zcard("hero:meta:consumers")
    wait_until("the worker to register", lambda: r.zcard("hero:meta:consumers") > before)
    return p


def test_a_subscriber_sees_every_job_end_once_with_its_output_through_retries_and_a_sigkill(broker):
    c = hero.Client(broker)
    sub = c.events(type="rhai")
    a, b = rhai_worker(broker), rhai_worker(broker)
    n = 10_000
    ends: dict[str, list[tuple[str, str | None]]] = {}
    retried = recovered = 0
    # a throwing job's second attempt follows either its retry or, when the SIGKILL took its
    # first attempt, its recovery (the recovery spends the attempt, so no `retried` follows)
    second_attempt: set[str] = set()
    submitted, killed = 0, False
    deadline = time.monotonic() + 300
    try:
        while len(ends) < n:
            assert time.monotonic() < deadline, f"{len(ends)} of {n} ended"
            if submitted < n:
                # every 100th job throws: retried once, then it ends `error`
                c.submit_many([c.job('throw "on purpose"' if i % 100 == 0 else f"{i} * 2", "rhai", id=f"p{i}",
                                     retries=1) for i in range(submitted, min(n, submitted + 500))])
                submitted = min(n, submitted + 500)
            if not killed and len(ends) > n // 4:
                a.send_signal(signal.SIGKILL)
                killed = True
            try:
                e = sub.next(timeout=0.005 if submitted < n else 30)
            except queue.Empty:
                continue
            assert e.event != "gap", e
            if e.event in ("finished", "error"):
                ends.setdefault(e.job_id, []).append((e.event, e.output))
            retried += e.event == "retried"
            recovered += e.event == "recovered"
            if e.event in ("retried", "recovered"):
                second_attempt.add(e.job_id)
        try:
            while True:
                e = sub.next(timeout=0.5)
                if e.event in ("finished", "error"):
                    ends.setdefault(e.job_id, []).append((e.event, e.output))
        except queue.Empty:
            pass
    finally:
        sub.close()
        a.kill()
        b.kill()
    assert not [k for k, v in ends.items() if len(v) != 1], "each job ended once"
    assert sum(v[0][0] == "error" for v in ends.values()) == n // 100
    throwers = {f"p{i}" for i in range(0, n, 100)}
    assert throwers <= second_attempt, sorted(throwers - second_attempt)[:5]
    assert recovered > 0, "the killed worker's jobs were recovered"
    for i in range(1, n, 97):
        if i % 100:
            assert ends[f"p{i}"] == [("finished", str(i * 2))], ends[f"p{i}"]
    print(f"10,000 jobs: {retried} retried, {recovered} recovered, each end seen once")


def test_a_subscriber_that_stops_reading_past_the_cap_gets_a_gap_with_the_count(redis_url):
    c = hero.Client(redis_url)
    c.r.hset("hero:meta:config", "events_max", 100)
    with c.events() as sub:
        n = 2000
        for i in range(n):  # one entry a submit
            c.submit("1", "rhai", id=f"g{i}")
        seen = missed = gaps = 0
        while seen + missed < n:
            e = sub.next(timeout=30)
            if e.event == "gap":
                assert e.missed is not None
                missed += e.missed
                gaps += 1
            else:
                assert e.event == "submitted"
                seen += 1
        assert seen + missed == n and gaps >= 1 and missed > 0, (seen, missed, gaps)
        c.submit("1", "rhai", id="after")
        assert sub.next(timeout=30).job_id == "after"


def test_with_the_log_off_a_subscription_is_refused_and_wait_still_works(redis_url):
    c = hero.Client(redis_url)
    c.r.hset("hero:meta:config", "events_max", 0)
    with pytest.raises(hero.EventLogOff, match="events_max"):
        c.events()
    w = rhai_worker(redis_url, 1)
    try:
        r = c.wait(c.submit("40 + 2", "rhai").id, 20)
        assert (r.status, r.output) == ("finished", "42")
    finally:
        w.kill()


def test_wait_after_a_plain_submit_returns_within_milliseconds_of_the_end(redis_url):
    c = hero.Client(redis_url)
    done = []

    def slow(job, ctx):
        time.sleep(0.2)
        return "slept"
    w = hero.Worker(slow, ["py"], redis_url, concurrency=4)
    import threading
    t = threading.Thread(target=w.run, kwargs={"install_signals": False}, daemon=True)
    t.start()
    worst = 0.0
    try:
        for _ in range(10):
            s = c.submit("x", "py")
            r = c.wait(s.id, 20)
            back = time.time()
            assert r.status == "finished"
            end = datetime.fromisoformat(c.get(s.id).finished_at.replace("Z", "+00:00")).timestamp()
            worst = max(worst, back - end)
            done.append(s.id)
    finally:
        w.stop()
        t.join(timeout=20)
    print(f"worst wait after the end: {worst * 1000:.1f} ms")
    assert worst < 0.15, f"wait returned {worst:.3f} s after the end"


def test_a_subscription_resumes_after_an_event_id(redis_url):
    c = hero.Client(redis_url)
    for i in range(3):
        c.submit("1", "rhai", id=f"r{i}")
    with c.events(since="0") as sub:
        seen = [sub.next(timeout=10) for _ in range(3)]
    assert [e.job_id for e in seen] == ["r0", "r1", "r2"]
    with c.events(since=seen[0].id) as sub:
        assert sub.next(timeout=10).job_id == "r1"
