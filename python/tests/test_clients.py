"""docs/clients.md's Python column against a real redis-server and `hero broker`: every capability
the table names in Python is called here once, and a name the table gives that this file never
calls fails the check."""
from __future__ import annotations

import os
import re
import threading

import hero
from conftest import ROOT


def column(doc: str, header: str) -> list[str]:
    """The first backticked name of each cell of `header`'s column, in every table of `doc`."""
    out, at = [], None
    for line in doc.splitlines():
        if not line.startswith("|"):
            at = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "capability":
            at = cells.index(header) if header in cells else None
            continue
        if at is not None and at < len(cells):
            m = re.search(r"`([^`]+)`", cells[at])
            if m:
                out.append(m.group(1))
    return out


def call_token(name: str) -> str:
    return re.split(r"[.:]", name.split("(")[0])[-1]


def test_every_python_name_the_table_gives_is_called_here():
    with open(os.path.join(ROOT, "docs", "clients.md"), encoding="utf-8") as f:
        names = column(f.read(), "Python")
    with open(__file__, encoding="utf-8") as f:
        body = f.read().split("def test_every_capability_of_the_python_column")[-1]
    assert len(names) >= 15, names
    # a call, or a field read (`job.results.items()`)
    missing = [n for n in names if f"{call_token(n)}(" not in body and f".{call_token(n)}." not in body]
    assert not missing, f"named in docs/clients.md, never called: {missing}"


def test_every_capability_of_the_python_column_answers_against_a_real_broker(broker):
    def handler(job, ctx):
        ctx.progress(50, "half")
        ctx.log("a line")
        if job.script == "retry" and job.attempts < 2:
            raise hero.Retry("again", 0.01)
        if job.script == "abort":
            raise hero.Abort("no")
        if job.script == "fail":
            raise OSError("disk full")
        if job.script == "parent":
            return ",".join(r.output for r in job.results.values())
        return job.script.upper()
    w = hero.Worker(handler, ["c"], broker, concurrency=4)
    t = threading.Thread(target=w.run, kwargs={"install_signals": False}, daemon=True)
    t.start()
    try:
        c = hero.Client(broker)
        with c.events(type="c") as sub:
            s = c.submit("one", "c")
            assert c.submit_many([c.job("two", "c")])[0].created
            assert c.run("ran", "c", wait=20).output == "RAN"
            assert c.wait(s.id, 20).output == "ONE"
            assert c.status(s.id) == "finished"
            assert c.get(s.id).output.lower() == "one", "text stays text: a str"
            assert c.run("retry", "c", wait=20, retries=1).status == "finished"
            assert c.run("abort", "c", wait=20).status == "error"
            failed = c.run("fail", "c", wait=20)
            assert c.get(failed.id).trace.rstrip().endswith("OSError: disk full")
            later = c.submit("x", "c", delay=600).id
            assert c.stop(later) == "cancelled"
            e = sub.next(timeout=20)
            while e.event != "finished":
                e = sub.next(timeout=20)
            assert e.output is not None
        c.submit("member", "c", batch="b1")
        c.close_batch("b1", on_complete=("done", "c"))
        assert c.batch("b1") is not None
        assert c.shard_map().k == 1
        # a flow, a job's own back-off and retention, children's results
        child = c.submit("child", "c")
        parent = c.submit("parent", "c", after=[child.id])
        assert c.wait(parent.id, 20).output == "CHILD"
        assert c.children(parent.id)[child.id].output == "CHILD"
        assert c.run("own", "c", wait=20, backoff="fixed:1s", keep=60, keep_failed=60).ok
        # operator
        q = hero.Queue("c", client=c)
        q.pause()
        q.resume()
        assert q.job_counts().finished >= 1
        assert q.set_policy(retries=2)["retries"] == 2
        assert q.policy()["retries"] == 2
        assert q.clear_policy()
        fq = hero.Queue("fq", client=c)
        fq.set_policy(fair=True)
        fq.pause_key("acme")
        fq.resume_key("acme")
        assert fq.keys().keys == 0
        idle = hero.Queue("dl", client=c)
        for i in range(2):
            c.submit("x", "dl", id=f"dead-{i}")
            c.r.xadd(c.keys.dead_letter(), {"j": f"dead-{i}", "reason": "too many deliveries",
                                            "queue": c.keys.work("dl")})
            c.r.hset(c.keys.job(f"dead-{i}"), "status", "error")
        assert len(idle.dead_letters()) == 2
        assert idle.retry_dead(["dead-0"]) == {"dead-0": "requeued"}
        assert idle.purge_dead() == {"dead-1": "purged"}
        assert idle.requeue("dead-0")
        later = c.submit("x", "dl", delay=600).id
        idle.promote(later)
        idle.remove(later)
        # failed-job tooling and cleanup
        q.retry(failed.id)
        assert c.wait(failed.id, 20).status == "error"
        assert failed.id in q.clean(status="error")
        assert not idle.is_paused()
        assert [j.id for j in q.get_jobs("error", limit=10)] == []
        c.submit("x", "dl", delay=600)
        assert idle.drain(delayed=True) == 2, "dead-0 requeued, and the delayed one"
        c.submit("x", "dl")
        assert idle.obliterate() == 1
        nxt = q.cron_add("nightly", "0 3 * * *", "x", payload=b"\x01")
        assert len(q.cron_list()) == 1
        assert q.cron_next("0 3 * * *", n=2) == [nxt, nxt + 86_400_000]
        assert q.cron_remove("nightly")
    finally:
        w.stop()
        t.join(timeout=20)
