"""hero.aio.Client against a real redis-server and `hero broker`: submit, run, wait, get, status,
stop and events awaited on one event loop; a thousand waits at once take no thread each; async
task functions and handlers run on the worker's own loop."""
from __future__ import annotations

import asyncio
import threading

import pytest

import hero


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


def client_threads() -> int:
    """The process's threads but the worker's handler threads (a pool of up to its concurrency,
    made as jobs come)."""
    return sum(1 for t in threading.enumerate() if not t.name.startswith("hero-job-"))


async def handler(job, ctx):
    await asyncio.sleep(0.01)
    return job.script.upper()


def test_the_asyncio_client_awaits_every_call_on_one_loop(broker):
    with running(hero.Worker(handler, ["aio"], broker, concurrency=16)):
        async def main():
            async with hero.aio.Client(broker) as c:
                s = await c.submit("one", "aio")
                assert (await c.wait(s.id, 20)).output == "ONE"
                assert await c.status(s.id) == "finished"
                assert (await c.get(s.id)).output == "ONE"
                assert (await c.run("two", "aio", wait=20)).output == "TWO"
                later = await c.submit("x", "aio", delay=600)
                assert await c.stop(later.id) == "cancelled"
                threads = client_threads()
                subs = await c.submit_many([c.job(f"j{i}", "aio") for i in range(300)])
                results = await asyncio.gather(*(c.wait(s.id, 30) for s in subs))
                assert [r.output for r in results] == [f"J{i}" for i in range(300)]
                assert client_threads() <= threads + 1, "no thread per wait"
                with pytest.raises(TimeoutError):
                    await c.wait((await c.submit("x", "nobody")).id, 0.3)
                with pytest.raises(hero.JobNotFound):
                    await c.get("no-such-job")
                seen = []
                async for e in c.events(type="aio", since="0"):
                    seen.append(e.event)
                    if seen.count("finished") >= 2:
                        break
                assert "submitted" in seen
                # a feature a live older process lacks is refused, as the threaded client does
                await c.r.hset("hero:meta:config", "fleet_lacks", '{"job_policy": {"what": "a job\'s own '
                               'back-off or retention", "since": 30, "processes": ["worker old29"]}}')
                with pytest.raises(hero.OlderProcesses, match="old29"):
                    await c.submit("x", "aio", keep=60)
                await c.r.hdel("hero:meta:config", "fleet_lacks")
        asyncio.run(main())


def test_async_task_functions_run_on_the_workers_loop(broker):
    app = hero.App(broker, queue="aiotasks")

    @app.task
    async def slow_add(x, y):
        await asyncio.sleep(0.01)
        return x + y
    w = app.worker(concurrency=4)
    with running(w):
        assert slow_add.delay(20, 22).get(20) == 42
