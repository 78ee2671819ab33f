"""Failed-job tooling and a queue's cleanup (issue 60) against a real redis-server, as
tests/tests/cleanup.rs holds hero-admin's: a failed job retried runs again and another status is
refused; clean deletes ended jobs by queue, status and age and nothing else; drain deletes a
queue's waiting jobs (and, asked, its delayed ones) and leaves other queues; obliterate is refused
while a job of the queue runs, then removes the queue whole; is_paused answers what pause and
resume did; each over every shard of a sharded namespace."""
from __future__ import annotations

import threading

import pytest

import hero
from conftest import hero as hero_cli
from conftest import wait_until
from test_queue import run_worker


def ended(c: hero.Client, job_id: str) -> str:
    wait_until(f"{job_id} ended", lambda: c.status(job_id) in ("finished", "error"))
    return c.status(job_id)


def test_a_failed_job_retried_runs_again_and_another_status_is_refused(broker):
    q = hero.Queue("rt", broker)
    c = q.client
    runs = []

    def handler(job, ctx):
        runs.append(job.id)
        if job.script == "fail" and len(runs) == 1:
            raise hero.Abort("first time fails")
        return "ok"
    with run_worker(broker, ["rt"], handler):
        c.submit("fail", "rt", id="f1")
        assert ended(c, "f1") == "error"
        assert q.retry("f1") is None
        wait_until("the retried job finished", lambda: c.status("f1") == "finished")
        assert runs == ["f1", "f1"]
        with pytest.raises(hero.InvalidInput, match="job f1 is finished, not failed"):
            q.retry("f1")
        with pytest.raises(hero.JobNotFound):
            q.retry("nobody")


def test_clean_deletes_ended_jobs_by_queue_status_and_age_and_nothing_else(broker):
    qa, qb = hero.Queue("ca", broker), hero.Queue("cb", broker)
    c = qa.client

    def handler(job, ctx):
        if job.script == "always-fail":
            raise hero.Abort("fails")
        return "ok"
    ids = [(f"a-ok-{i}", "ca", "ok") for i in range(10)] + [(f"a-bad-{i}", "ca", "always-fail") for i in range(5)] \
        + [(f"b-bad-{i}", "cb", "always-fail") for i in range(3)]
    with run_worker(broker, ["ca", "cb"], handler):
        for job_id, ty, script in ids:
            c.submit(script, ty, id=job_id)
        for job_id, _, _ in ids:
            ended(c, job_id)
    # younger than an hour: nothing
    assert qa.clean(3600, "error", 100) == []
    assert qa.clean(3600, "FAILURE") == [] and qa.clean(3600, "SUCCESS") == [], "Celery's words taken"
    assert qa.clean(older_than="1h") == []
    gone = sorted(qa.clean(status="error", limit=100))
    assert gone == [f"a-bad-{i}" for i in range(5)]
    for job_id, _, _ in ids:
        assert bool(c.r.exists(c.keys.job(job_id))) == (job_id not in gone), job_id
    for bad in ({"status": "waiting"}, {"older_than": -1}, {"older_than": "soon"}, {"limit": -1}):
        with pytest.raises(hero.InvalidInput):
            qa.clean(**bad)
    with pytest.raises(hero.InvalidInput, match="drain.. deletes waiting ones"):
        qa.clean(status="waiting")
    # a limit, then everything ended of the queue; another queue's stay until cleaned
    assert len(qa.clean(limit=4)) == 4
    assert len(qa.clean(limit=100)) == 6
    assert qb.clean(status="finished") == []
    assert sorted(qb.clean()) == [f"b-bad-{i}" for i in range(3)]
    assert qa.clean() == [] and qb.clean() == []


def test_drain_deletes_a_queues_waiting_jobs_and_delayed_ones_when_asked(broker):
    q = hero.Queue("dr", broker)
    c = q.client
    c.submit_many([c.job("x", "dr", id=f"w{i}") for i in range(1200)])
    for i in range(3):
        c.submit("x", "dr", id=f"d{i}", delay=3600)
    c.submit("x", "other", id="o1")
    assert q.drain() == 1200
    counts = q.job_counts()
    assert (counts.waiting, counts.delayed) == (0, 3), counts
    assert not c.r.exists(c.keys.job("w7"))
    assert q.drain(delayed=True) == 3
    assert q.job_counts().delayed == 0
    assert q.drain(True) == 0
    assert c.status("o1") == "dispatched", "another queue's job stays"


def test_obliterate_is_refused_while_a_job_runs_then_removes_the_queue_whole(broker):
    q = hero.Queue("ob", broker)
    c = q.client
    release = threading.Event()

    def handler(job, ctx):
        if job.script == "hold":
            release.wait(30)
        return "ok"
    q.set_policy(retries=2)
    with run_worker(broker, ["ob"], handler):
        for i in range(5):
            c.submit("x", "ob", id=f"e{i}")
        for i in range(5):
            ended(c, f"e{i}")
        c.submit("hold", "ob", id="held")
        wait_until("the held job runs", lambda: c.status("held") == "started")
        assert not q.is_paused()
        q.pause()
        for i in range(4):
            c.submit("x", "ob", id=f"q{i}")
        assert q.is_paused()
        with pytest.raises(hero.InvalidInput, match="1 jobs of ob are running"):
            q.obliterate()
        assert c.status("q0") == "dispatched", "nothing deleted"
        release.set()
        ended(c, "held")
    assert q.obliterate() == 10, "4 waiting, 6 ended"
    stream = c.keys.work("ob")
    assert not c.r.exists(stream), "its stream is gone"
    registered = {s.decode() for s in c.r.sunion(c.keys.queues(), c.keys.paused_queues())}
    assert stream not in registered, registered
    assert not q.is_paused()
    assert q.policy() == {}
    assert q.job_counts().waiting == 0
    assert q.obliterate() == 0


def test_is_paused_answers_what_pause_and_resume_did(broker):
    q = hero.Queue("ip", broker)
    g = hero.Queue("ip", broker, group="g1")
    assert not q.is_paused() and not g.is_paused()
    q.pause()
    assert q.is_paused() and not g.is_paused(), "by the name itself"
    g.pause()
    q.resume()
    assert not q.is_paused() and g.is_paused()
    g.resume()
    assert not g.is_paused()


def test_cleanup_reaches_every_shard_of_a_sharded_namespace(broker):
    hero_cli("shards", "set", "3", url=broker)
    q = hero.Queue("sh", broker)
    c = q.client
    subs = c.submit_many([c.job("x", "sh") for _ in range(30)])
    assert len({hero.shards.shard_of_id(s.id) or 0 for s in subs}) == 3
    assert q.drain() == 30
    assert q.job_counts().waiting == 0
    with run_worker(broker, ["sh"], lambda job, ctx: "ok"):
        subs = c.submit_many([c.job("x", "sh") for _ in range(30)])
        for s in subs:
            ended(c, s.id)
    assert len(q.clean(limit=7)) == 7
    assert len(q.clean()) == 23
    subs = c.submit_many([c.job("x", "sh") for _ in range(12)])
    q.pause()
    assert q.is_paused()
    assert q.obliterate() == 12
    assert not q.is_paused()
    assert q.job_counts().waiting == 0
