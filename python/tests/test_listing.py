"""A queue's jobs by state (hero_list, protocol 33; issue 60): `Queue.get_jobs` and its short
names answer real jobs, failed by a failing handler, finished, delayed by a countdown, waiting
while no slot is free, running while a handler blocks; a page that needs several hero_list
calls (1,500 finished jobs before 5 failures) still finds every failure; `get_job`; states
named in other queues' words taken when they mean one state, refused otherwise. The same on
asyncio (`hero.aio.Queue`). Against a real redis-server, hero-py workers alone."""
from __future__ import annotations

import asyncio
import threading

import pytest

import hero
from conftest import wait_until


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


def _handler(release: threading.Event):
    def handler(job, ctx):
        if job.script == "block":
            release.wait(30)
            return "unblocked"
        if job.script.startswith("fail"):
            raise hero.Abort(f"{job.script} failed")
        return {"done": job.script}
    return handler


def _setup(url: str, release: threading.Event) -> tuple[hero.Client, dict[str, list[str]], "running"]:
    """Jobs of queue `lst` in every state: 3 finished, 2 failed (one at a time, so in order),
    then one running (blocking the only slot), 2 waiting and 1 delayed."""
    c = hero.Client(url)
    ids: dict[str, list[str]] = {"finished": [], "error": []}
    ctx = running(hero.Worker(_handler(release), ["lst"], url, concurrency=1))
    ctx.__enter__()
    for script in ("ok-1", "fail-1", "ok-2", "fail-2", "ok-3"):
        r = c.run(script, "lst", wait=20)
        ids[r.status].append(r.id)
    ids["running"] = [c.submit("block", "lst").id]
    wait_until("the blocking job to run", lambda: c.status(ids["running"][0]) == "started")
    ids["waiting"] = [c.submit(f"w-{i}", "lst").id for i in range(2)]
    ids["delayed"] = [c.submit("later", "lst", delay=600).id]
    c.submit("elsewhere", "other")  # another queue's job is never listed
    return c, ids, ctx


def test_jobs_are_listed_by_state(redis_url):
    release = threading.Event()
    c, ids, ctx = _setup(redis_url, release)
    try:
        q = hero.Queue("lst", redis_url)
        newest = lambda xs: list(reversed(xs))  # noqa: E731
        assert [j.id for j in q.get_failed()] == newest(ids["error"])
        assert [j.error for j in q.get_failed()] == ["fail-2 failed", "fail-1 failed"]
        assert [j.id for j in q.get_completed()] == newest(ids["finished"])
        assert q.get_completed()[0].output == {"done": "ok-3"}, "records read whole, values as values"
        assert [j.id for j in q.get_active()] == ids["running"]
        assert [j.id for j in q.get_waiting()] == ids["waiting"]
        assert [j.id for j in q.get_delayed()] == ids["delayed"]
        assert [j.id for j in q.get_completed(limit=2)] == newest(ids["finished"])[:2]
        # several states, in the order given, within the limit
        assert [j.id for j in q.get_jobs(["failed", "completed"], limit=4)] == \
            newest(ids["error"]) + newest(ids["finished"])[:2]
        # other queues' words that mean one state
        assert [j.id for j in q.get_jobs("active")] == ids["running"]
        assert [j.id for j in q.get_jobs("SUCCESS")] == newest(ids["finished"])
        for word in ("PENDING", "retry", "nope"):
            with pytest.raises(hero.InvalidInput, match="finished, error, delayed, waiting, running"):
                q.get_jobs(word)
        with pytest.raises(hero.InvalidInput, match="limit"):
            q.get_jobs("error", limit=0)
        job = q.get_job(ids["error"][0])
        assert job is not None and job.status == "error"
        assert q.get_job("no-such-job") is None
        assert hero.Queue("other", redis_url).get_job(ids["error"][0]) is None, "another queue's job"
        # a failed job found is retried
        q.retry(ids["error"][0])
        assert [j.id for j in q.get_failed()] == [ids["error"][1]]
    finally:
        release.set()
        ctx.__exit__()


def test_a_listing_reads_on_past_pages_that_hold_no_match(redis_url):
    """5 failures, then 1,500 finished jobs: the failures are past the first 1,000 candidates
    of the retention stream, so hero_list answers empty pages first; get_failed reads on."""
    c = hero.Client(redis_url)
    with running(hero.Worker(_handler(threading.Event()), ["many"], redis_url, concurrency=16)):
        failed = [c.run(f"fail-{i}", "many", wait=20).id for i in range(5)]
        c.submit_many([c.job(f"ok-{i}", "many") for i in range(1500)])
        q = hero.Queue("many", redis_url)
        wait_until("1,500 jobs to finish", lambda: q.job_counts().finished >= 1500, 60)
    first = q.client.proto.list_page("error", "many", "", 100)
    assert first[1] == [] and first[0], "the first page holds no failure, with a cursor to go on"
    assert sorted(j.id for j in q.get_failed(100)) == sorted(failed)
    assert len(q.get_completed(1200)) == 1200
    assert len(q.get_completed(10_000)) == 1500


def test_an_asyncio_queue_lists_and_cleans(redis_url):
    release = threading.Event()
    c, ids, ctx = _setup(redis_url, release)
    try:
        async def main():
            async with hero.aio.Queue("lst", redis_url) as q:
                assert [j.id for j in await q.get_failed()] == list(reversed(ids["error"]))
                assert [j.id for j in await q.get_completed(limit=1)] == [ids["finished"][-1]]
                assert [j.id for j in await q.get_active()] == ids["running"]
                assert [j.id for j in await q.get_waiting()] == ids["waiting"]
                assert [j.id for j in await q.get_delayed()] == ids["delayed"]
                assert [j.id for j in await q.get_jobs(["delayed", "waiting"])] == ids["delayed"] + ids["waiting"]
                with pytest.raises(hero.InvalidInput, match="ambiguous"):
                    await q.get_jobs("pending")
                assert (await q.get_job(ids["running"][0])).status == "started"
                assert await q.get_job("nothing") is None
                # cleanup, as the threaded Queue's
                assert not await q.is_paused()
                await q.retry(ids["error"][0])
                with pytest.raises(hero.InvalidInput, match="not failed"):
                    await q.retry(ids["finished"][0])
                with pytest.raises(hero.JobNotFound):
                    await q.retry("nothing")
                assert sorted(await q.clean(0, "finished", limit=2)) == sorted(ids["finished"][:2])
                assert await q.drain(delayed=True) >= 2
                assert await q.get_delayed() == []
                with pytest.raises(hero.InvalidInput, match="running"):
                    await q.obliterate()
                release.set()
                await asyncio.to_thread(c.wait, ids["running"][0], 20)
                deleted = await q.obliterate()
                assert deleted >= 3, deleted
                assert await q.get_jobs(["finished", "error", "waiting", "delayed"]) == []
        asyncio.run(main())
    finally:
        release.set()
        ctx.__exit__()
