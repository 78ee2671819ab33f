"""hero-py against a real redis-server and a real `hero broker`: the README's example as
written, the producer's options, the worker's precedence, concurrency, fencing, stop, time
limit, progress and logs, retries, batches, SIGTERM, and a worker of the previous protocol."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import redis

import hero
from conftest import HERO as HERO_BIN, ROOT, hero as hero_cli, python_proc, wait_until


def start(worker: hero.Worker) -> threading.Thread:
    t = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    t.start()
    return t


def stop(worker: hero.Worker, t: threading.Thread) -> None:
    worker.stop()
    t.join(timeout=20)
    assert not t.is_alive(), "the worker stopped"


def test_the_readme_example_runs_as_written(broker):
    readme = open(os.path.join(ROOT, "python", "README.md"), encoding="utf-8").read()
    code = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    p = python_proc(code, broker)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert out.strip() == "finished HELLO FROM PYTHON", out + err


def test_submit_writes_every_option_and_refuses_bad_input(redis_url):
    c = hero.Client(redis_url)
    first = c.submit("x", "py", id="pre")
    s = c.submit("work", "py", id="full", group="io", instance="i1", priority=2, timeout=30, retries=3,
                 unique="u-1", tags=["nightly", "red"], limit_key="cust-7", env={"A": "1"},
                 batch="b1", caller_id="me", after=[first.id])
    assert s.created and s.status == "waiting"
    j = c.get("full")
    assert (j.script_type, j.group, j.instance, j.priority, j.timeout, j.retries) == ("py", "io", "i1", 2, 30, 3)
    assert (j.unique, j.tags, j.limit_key, j.env_vars, j.batch) == ("u-1", ["nightly", "red"], "cust-7", {"A": "1"}, "b1")
    assert j.prerequisites == ["pre"]
    # the uniqueness key is held: a second submit answers the holder
    dup = c.submit("again", "py", unique="u-1")
    assert dup.duplicate_of == "full" and not dup.created
    # delayed
    d = c.submit("later", "py", delay=60)
    assert d.status == "waiting" and c.get(d.id).raw["run_at"]
    # bad input is said clearly and nothing is written
    with pytest.raises(hero.InvalidInput, match="priority 12"):
        c.submit("x", "py", priority=12)
    with pytest.raises(hero.InvalidInput, match="script type"):
        c.submit("x", "no spaces")
    with pytest.raises(hero.InvalidInput, match="needs a group"):
        c.submit("x", "py", instance="i1")
    with pytest.raises(hero.InvalidJob, match="prerequisite nope does not exist"):
        c.submit("x", "py", id="orphan", after=["nope"])
    with pytest.raises(hero.JobNotFound):
        c.get("orphan")


def test_the_worker_takes_instance_then_group_then_type_priority_0_first(redis_url):
    c = hero.Client(redis_url)
    backlog = [("type-p5", None, None, 5), ("group-p1", "g", None, 1), ("inst-p5", "g", "i1", 5),
               ("type-p0", None, None, 0), ("group-p0", "g", None, 0), ("inst-p0", "g", "i1", 0)]
    c.submit_many([c.job("x", "py", id=i, group=g, instance=n, priority=p) for i, g, n, p in backlog])
    order = []
    w = hero.Worker(lambda job, ctx: order.append(job.id), ["py"], redis_url, group="g", instance="i1",
                    concurrency=1)
    t = start(w)
    wait_until("six jobs", lambda: w.completed == 6)
    stop(w, t)
    assert order == ["inst-p0", "inst-p5", "group-p0", "group-p1", "type-p0", "type-p5"]


def test_handlers_run_concurrently_up_to_the_limit_sync_and_async(redis_url):
    c = hero.Client(redis_url)
    lock, now, most = threading.Lock(), [0], [0]

    async def handler(job, ctx):
        import asyncio
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        await asyncio.sleep(0.2)
        with lock:
            now[0] -= 1
        return "async " + job.id

    c.submit_many([c.job("x", "py", id=f"j{n}") for n in range(12)])
    w = hero.Worker(handler, ["py"], redis_url, concurrency=4)
    t = start(w)
    wait_until("twelve jobs", lambda: w.completed == 12)
    stop(w, t)
    assert most[0] == 4
    assert c.get("j3").output == "async j3"


def test_a_stopped_job_interrupts_its_handler_and_its_result_is_fenced(redis_url):
    c = hero.Client(redis_url)
    seen = threading.Event()

    def handler(job, ctx):
        seen.set()
        ctx.wait(20)
        return "too late"

    events = []
    w = hero.Worker(handler, ["py"], redis_url, on_event=lambda k, j, d: events.append((k, j, d)))
    t = start(w)
    c.submit("x", "py", id="long")
    assert seen.wait(10)
    assert c.stop("long") == "interrupted"
    wait_until("the handler to be interrupted", lambda: ("interrupted", "long", "stopped") in events)
    stop(w, t)
    j = c.get("long")
    assert (j.status, j.error, j.output) == ("error", "stopped", None)


def test_a_job_past_its_time_limit_fails_with_timeout(redis_url):
    c = hero.Client(redis_url)
    w = hero.Worker(lambda job, ctx: ctx.wait(30) and "cancelled", ["py"], redis_url)
    t = start(w)
    r = c.run("x", "py", timeout=1, wait=20)
    stop(w, t)
    assert (r.status, r.error) == ("error", "timeout")


def test_a_failing_handler_is_retried_within_its_budget_then_ends_error(redis_url):
    c = hero.Client(redis_url)
    # the broker promotes retries from the delayed set
    calls = []

    def handler(job, ctx):
        calls.append(ctx.attempt)
        raise ValueError("boom")

    w = hero.Worker(handler, ["py"], redis_url)
    t = start(w)
    c.submit("x", "py", id="flaky", retries=1)
    wait_until("the first attempt to fail", lambda: c.status("flaky") == "waiting")
    stop(w, t)
    assert c.get("flaky").error == "ValueError: boom"
    assert calls == [1]
    # the attempt's traceback is stored with it, as Python prints it
    trace = c.get("flaky").trace
    assert trace.startswith("Traceback") and 'raise ValueError("boom")' in trace, trace
    assert trace.rstrip().endswith("ValueError: boom"), trace


def test_retries_run_through_the_broker_and_abort_ends_at_once(broker):
    c = hero.Client(broker)

    def handler(job, ctx):
        if job.script == "abort":
            raise hero.Abort("no use")
        if ctx.attempt < 2:
            raise hero.Retry("again", delay=0.1)
        return f"attempt {ctx.attempt}"

    w = hero.Worker(handler, ["py"], broker)
    t = start(w)
    assert c.run("retry", "py", retries=2, wait=20).output == "attempt 2"
    r = c.run("abort", "py", retries=5, wait=20)
    stop(w, t)
    assert (r.status, r.error) == ("error", "no use")


def test_progress_and_log_lines_are_kept_and_hero_status_shows_them(redis_url):
    c = hero.Client(redis_url)
    step = threading.Event()

    def handler(job, ctx):
        for n in range(2000):  # a tight loop: coalesced into a few calls
            ctx.progress(n / 20, f"item {n}")
            ctx.log(f"item {n}")
        step.wait(10)
        return "ok"

    w = hero.Worker(handler, ["py"], redis_url)
    t = start(w)
    c.submit("x", "py", id="p")
    wait_until("the progress to arrive", lambda: (c.get("p").progress or hero.Progress(0)).percent == 99.95)
    out = json.loads(hero_cli("--json", "status", "p", url=redis_url).stdout)
    assert out["status"] == "started"
    assert out["progress"] == {"percent": 99.95, "message": "item 1999"}
    assert len(out["log"]) == 100 and out["log"][-1] == "item 1999"
    step.set()
    wait_until("the job to finish", lambda: c.status("p") == "finished")
    stop(w, t)
    r = redis.Redis.from_url(redis_url)
    progress_events = sum(1 for _, f in r.xrange("hero:meta:events") if f[b"e"] == b"progress")
    assert 1 <= progress_events <= 10, progress_events


def test_a_batch_calls_back_once_when_its_members_ended(redis_url):
    c = hero.Client(redis_url)
    for n in range(20):
        c.submit("ok" if n != 3 else "fail", "py", id=f"m{n}", batch="nightly")
    info = c.close_batch("nightly", on_complete=("report()", "cb"), on_success=("party()", "cb"))
    assert (info.state, info.total, info.pending) == ("closed", 20, 20)

    def handler(job, ctx):
        if job.script == "fail":
            raise hero.Abort("bad member")
        return "ok"

    w = hero.Worker(handler, ["py"], redis_url)
    t = start(w)
    done = wait_until("the batch to be done", lambda: (c.batch("nightly") or None) and
                      c.batch("nightly").state == "done" and c.batch("nightly"))
    stop(w, t)
    assert (done.finished, done.failed, done.complete_id, done.success_id) == (19, 1, "batch-nightly-complete", None)
    cb = c.get("batch-nightly-complete")
    assert cb.env_vars["BATCH_FAILED"] == "1" and cb.status == "dispatched"
    with pytest.raises(hero.InvalidJob, match="batch nightly is done"):
        c.submit("x", "py", batch="nightly")


def test_sigterm_finishes_the_running_job_and_hands_the_rest_back(redis_url):
    c = hero.Client(redis_url)
    c.submit_many([c.job("x", "py", id=f"s{n}") for n in range(3)])
    code = (
        "import hero, time\n"
        "def h(job, ctx):\n"
        "    print('running', job.id, flush=True); time.sleep(1.0); return 'done'\n"
        "hero.Worker(h, ['py'], concurrency=1, shutdown_s=10,\n"
        "            on_event=lambda k, j, d: print(k, j, d, flush=True)).run()\n"
        "print('exited', flush=True)\n"
    )
    p = python_proc(code, redis_url)
    line = p.stdout.readline()
    while not line.startswith("running"):
        line = p.stdout.readline()
    first = line.split()[1]
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "exited" in out
    assert c.get(first).status == "finished", "the running job finished before the exit"
    left = [c.get(f"s{n}") for n in range(3) if f"s{n}" != first]
    assert all(j.status in ("dispatched", "finished") for j in left), [j.status for j in left]
    r = redis.Redis.from_url(redis_url)
    assert r.zcard("hero:meta:consumers") == 0, "its consumer left"


def test_a_worker_of_the_previous_protocol_serves_beside_brokers_of_this_one(broker):
    """Protocol 26's library (as it shipped) and this package's calls at version 26: jobs that
    `hero submit` (27) queued run and finish through hero_v26_*, beside hero_v27."""
    v26 = os.path.join(ROOT, "python", "tests", "fixtures", "hero-library-v26.lua")
    for n in range(5):
        assert hero_cli("submit", "--type", "py", "--id", f"old-{n}", f"job {n}", url=broker).returncode == 0
    w = hero.Worker(lambda job, ctx: "v26 ran " + job.script, ["py"], broker, protocol="26", library=v26)
    t = start(w)
    c = hero.Client(broker)
    wait_until("five jobs", lambda: all(c.status(f"old-{n}") == "finished" for n in range(5)))
    stop(w, t)
    assert c.get("old-3").output == "v26 ran job 3"
    r = redis.Redis.from_url(broker)
    libs = {dict(zip(lib[::2], lib[1::2]))[b"library_name"].decode() for lib in r.function_list()}
    assert {"hero_v26", f"hero_v{hero.PROTOCOL_VERSION}"} <= libs


def test_a_release_of_the_previous_protocol_works_beside_brokers_and_processes_of_this_one(broker):
    """The compatibility matrix's cheap row (docs/protocol.md §8): a producer and a worker of
    protocol 28 (its library as 0.3.0 shipped it) beside brokers, a producer and a worker of
    this protocol, on jobs that use every feature: a batch with a callback, a limit key, a
    uniqueness key, tags, a payload, a delay, a retry, progress and log lines. Every job ends
    right, once, counted once, and the audit is clean."""
    v28 = os.path.join(ROOT, "python", "tests", "fixtures", "hero-library-v28.lua")
    old_c = hero.Client(broker, protocol="28", library=v28)
    new_c = hero.Client(broker)
    tries: dict[str, int] = {}

    def handler(job, ctx):
        ctx.progress(50, "half")
        ctx.log("line")
        tries[job.id] = tries.get(job.id, 0) + 1
        if job.script == "flaky" and tries[job.id] == 1:
            raise RuntimeError("first try fails")
        return f"{job.script}:{len(job.payload or b'')}"

    old_w = hero.Worker(handler, ["cm"], broker, protocol="28", library=v28, instance="old28", lease_ms=2000)
    new_w = hero.Worker(handler, ["cm"], broker, instance="new29", lease_ms=2000)
    threads = [start(old_w), start(new_w)]
    ids = []
    for n, c in enumerate([old_c, new_c, old_c, new_c]):
        who = "old" if c is old_c else "new"
        ids.append(c.submit("plain", "cm", id=f"{who}-plain-{n}", tags=["t1", "t2"], unique=f"u-{n}",
                            limit_key=f"k{n % 2}", batch="mix", payload=bytes([0x81, 0xA1, 0x6E, n])).id)
        ids.append(c.submit("flaky", "cm", id=f"{who}-flaky-{n}", retries=2, batch="mix").id)
        ids.append(c.submit("later", "cm", id=f"{who}-later-{n}", delay=0.3).id)
    new_c.close_batch("mix", on_complete=("callback", "cm"))
    wait_until("every job ended", lambda: all(new_c.status(i) in ("finished", "error") for i in ids), limit=40)
    ran_by = set()
    for i in ids:
        j = new_c.get(i)
        assert j.status == "finished", (i, j.status, j.error)
        ran_by.add(j.worker_id.split(":")[1])
    assert ran_by == {"old28", "new29"}, ran_by
    b = new_c.batch("mix")
    assert (b.total, b.finished, b.failed, b.pending) == (8, 8, 0, 0), b
    wait_until("the callback ran", lambda: new_c.batch("mix").complete_id and
               new_c.status(new_c.batch("mix").complete_id) == "finished")
    for w, t in zip([old_w, new_w], threads):
        stop(w, t)
    audit = hero_cli("audit", url=broker, check=False)
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_batch_members_a_worker_of_protocol_26_ended_are_counted_by_the_broker(broker):
    """A library of protocol 26 knows no batches: its calls end members without counting them.
    The broker counts those ends from the event log (hero_batch_ends, once a live worker of 26
    shows in the fleet), so the batch is done and calls back once."""
    c = hero.Client(broker)
    for n in range(3):
        c.submit("x", "py26", id=f"bm-{n}", batch="old")
    c.submit("fail", "py26", id="bm-f", batch="old")
    c.close_batch("old", on_complete=("callback", "cb26"))

    def handler(job, ctx):
        if job.script == "fail":
            raise hero.Abort("fails for good")
        return "ok"

    v26 = os.path.join(ROOT, "python", "tests", "fixtures", "hero-library-v26.lua")
    old = hero.Worker(handler, ["py26"], broker, protocol="26", library=v26, instance="old26b")
    t = start(old)
    ids = [f"bm-{n}" for n in range(3)] + ["bm-f"]
    wait_until("the members ended", lambda: all(c.status(i) in ("finished", "error") for i in ids))
    wait_until("the batch done", lambda: c.batch("old").complete_id, limit=30)
    b = c.batch("old")
    assert (b.total, b.finished, b.failed, b.pending) == (4, 3, 1, 0), b
    stop(old, t)
    # called back once: one callback job, queued (no worker serves its type)
    r = redis.Redis.from_url(broker)
    assert c.status(b.complete_id) == "dispatched"
    assert r.xlen("hero:q:work:type:cb26") == 1


def test_the_fleet_knows_each_process_protocol_and_holds_back_what_an_older_one_refuses(broker):
    """A live worker of protocol 26 (as hero-py 0.26 was) would refuse a batch member's `batch`
    field: while it runs, `hero submit --batch` is refused naming it, and `hero actors` shows
    each process's protocol; once it is gone, the batch is accepted."""
    v26 = os.path.join(ROOT, "python", "tests", "fixtures", "hero-library-v26.lua")
    old = hero.Worker(lambda job, ctx: "old", ["py"], broker, protocol="26", library=v26, instance="old26")
    def reporting(job, ctx):
        if job.script == "fail":
            raise RuntimeError("failed on purpose")
        ctx.progress(50, "half")
        ctx.log("a line")
        return "new"

    new = hero.Worker(reporting, ["py", "py29"], broker, instance="new")
    t_old, t_new = start(old), start(new)
    r = redis.Redis.from_url(broker)
    wait_until("both registered", lambda: r.zcard("hero:meta:consumers") == 2)
    actors = json.loads(hero_cli("--json", "actors", url=broker).stdout)
    protocols = {a["consumer"].split(":")[1]: a["protocol"] for a in actors["actors"]}
    assert protocols == {"old26": 26, "new": int(hero.PROTOCOL_VERSION)}, actors
    assert [b["protocol"] for b in actors["brokers"]] == [int(hero.PROTOCOL_VERSION)], actors
    refused = hero_cli("submit", "--type", "py", "--batch", "b1", "x", url=broker, check=False)
    assert refused.returncode != 0
    assert "a batch" in refused.stderr and "old26" in refused.stderr and "protocol 26" in refused.stderr, refused.stderr
    # a plain job is no feature of anyone's: it goes
    assert hero_cli("submit", "--type", "py", "plain", url=broker).returncode == 0
    # the brokers publish what the fleet lacks (each settings pass, 10 s apart); the producers in
    # Python and Node refuse by it
    wait_until("the brokers' summary", lambda: b"old26" in (r.hget("hero:meta:config", "fleet_lacks") or b""), limit=15)
    with pytest.raises(hero.OlderProcesses, match="old26"):
        hero.Client(broker).submit("x", "py", batch="b1")
    # a job's own back-off or retention: a library before 30 would not apply it
    with pytest.raises(hero.OlderProcesses, match="back-off or retention"):
        hero.Client(broker).submit("x", "py", keep=60)
    node_dist = os.path.join(ROOT, "node", "dist", "esm", "index.js")
    script = (f"import {{ Client }} from {json.dumps(node_dist)};"
              f"const c = await Client.connect({json.dumps(broker)});"
              "try { await c.submit({ type: 'py', script: 'x', removeOnComplete: true }); console.log('accepted'); }"
              "catch (e) { console.log(e.name, e.message); } finally { await c.close(); }")
    out = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("OlderProcesses") and "old26" in out.stdout, out.stdout + out.stderr
    # a worker of this protocol holds its progress and log lines back meanwhile (once its
    # heartbeat read the summary): the worker of 26 would end a job carrying them in error
    c = hero.Client(broker)

    def reported(n: int) -> bool | None:
        c.submit("x", "py29", id=f"rep-{n}")
        wait_until("it ran", lambda: c.status(f"rep-{n}") == "finished")
        j = c.get(f"rep-{n}")
        return j.progress is not None or bool(j.log)

    n = 0
    while reported(n):
        n += 1
        assert n < 40, "reports were never held back"
        time.sleep(0.25)
    # a failure's traceback too: the worker of 26 refuses a record with a field it does not know
    c.submit("fail", "py29", id="held-trace")
    wait_until("it failed", lambda: c.status("held-trace") == "error")
    assert c.get("held-trace").trace is None
    # and so does the Rust worker (`hero worker`, a Rhai script reporting), by the same summary
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERO_")}
    rust = subprocess.Popen([HERO_BIN, "--redis-url", broker, "worker", "--types", "rh29", "--presence-ms", "900"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until("the Rust worker's presence", lambda: r.zcard("hero:meta:consumers") == 3)
        time.sleep(0.5)  # a heartbeat after its first: the summary read
        hero_cli("submit", "--type", "rh29", "--id", "rh-held", 'progress(50, "half"); log("a line"); 7', url=broker)
        wait_until("the Rhai job ran", lambda: c.status("rh-held") == "finished")
        held = c.get("rh-held")
        assert held.progress is None and not held.log, (held.progress, held.log)
        hero_cli("submit", "--type", "rh29", "--id", "rh-trace", 'throw "on purpose"', url=broker)
        wait_until("the Rhai job failed", lambda: c.status("rh-trace") == "error")
        assert c.get("rh-trace").trace is None
    finally:
        rust.terminate()
        rust.wait(timeout=20)
    stop(old, t_old)
    wait_until("the summary cleared", lambda: r.hget("hero:meta:config", "fleet_lacks") is None, limit=15)
    assert hero.Client(broker).submit("x", "py", batch="b1", id="py-member").created
    # and sends them again once no older worker is left
    while not reported(n):
        n += 1
        assert n < 80, "reports were never sent again"
        time.sleep(0.25)
    c.submit("fail", "py29", id="sent-trace")
    wait_until("it failed", lambda: c.status("sent-trace") == "error")
    assert "failed on purpose" in c.get("sent-trace").trace
    accepted = hero_cli("submit", "--type", "py", "--batch", "b1", "--id", "member", "x", url=broker, check=False)
    assert accepted.returncode == 0, accepted.stderr
    wait_until("the members ran", lambda: c.status("member") == "finished" and c.status("py-member") == "finished")
    stop(new, t_new)


def test_homes_are_the_ones_the_rust_client_computes():
    from hero.shards import fnv1a, jump
    # the same five homes are asserted by hero-protocol (shard::tests)
    homes = [jump(fnv1a(k), n) for k, n in [("k1", 4), ("acct-7", 8), ("u3", 4), ("customer-42", 64), ("x", 2)]]
    assert homes == [2, 2, 3, 61, 1]
    assert fnv1a("acct-7") == 0xEADD7EBDB5B16A96


def test_a_sharded_namespace_is_served_by_the_python_producer_and_worker(broker):
    hero_cli("shards", "set", "3", url=broker)
    c = hero.Client(broker)
    assert c.shard_map().k == 3
    done = []
    w = hero.Worker(lambda job, ctx: done.append(job.id) or job.script.upper(), ["py"], broker, concurrency=4)
    t = start(w)
    subs = c.submit_many([c.job(f"job {i}", "py") for i in range(60)])
    ids = [s.id for s in subs]
    shards = {hero.shards.shard_of_id(i) or 0 for i in ids}
    assert shards == {0, 1, 2}, ids
    routed = c.submit_many([c.job("r", "py", route="acct-7") for _ in range(10)])
    assert len({hero.shards.shard_of_id(s.id) or 0 for s in routed}) == 1
    wait_until("every job finished", lambda: all(c.status(i) == "finished" for i in ids + [s.id for s in routed]))
    assert c.get(ids[1]).output == "JOB 1"
    # a Rust client reads the Python client's jobs where they are
    out = hero_cli("status", ids[2], url=broker).stdout
    assert "finished" in out, out
    # and the Python worker serves jobs the Rust CLI submits to any shard
    rust_ids = [hero_cli("submit", "--type", "py", f"rust {i}", url=broker).stdout.strip() for i in range(6)]
    wait_until("the Rust-submitted jobs finished", lambda: all(c.status(i) == "finished" for i in rust_ids))
    # producers that live for one job each (a script, a serverless function) spread over every
    # shard too: each client starts its turn at a random shard (missing one of 3 in 30 tries:
    # 3 x (2/3)^30, about 2 in 100,000)
    one_each = []
    for i in range(30):
        short = hero.Client(broker)
        one_each.append(short.submit(f"one {i}", "py").id)
        short.r.close()
    assert {hero.shards.shard_of_id(i) or 0 for i in one_each} == {0, 1, 2}, one_each
    stop(w, t)


def test_on_event_reports_each_end_as_what_it_was(broker):
    redis_url = broker  # the broker promotes the retry
    c = hero.Client(redis_url)
    events = []

    def handler(job, ctx):
        if job.script == "fail":
            raise ValueError("no")
        return "ok"
    w = hero.Worker(handler, ["ev"], redis_url, on_event=lambda k, j, d: events.append((k, j, d)))
    t = start(w)
    c.run("ok", "ev", id="e-ok", wait=20)
    c.run("fail", "ev", id="e-retry", retries=1, wait=20)
    stop(w, t)
    kinds = [(k, j) for k, j, _ in events if j.startswith("e-") and k not in ("started",)]
    assert ("finished", "e-ok") in kinds
    assert ("retrying", "e-retry") in kinds and ("failed", "e-retry") in kinds, kinds
    assert ("failed", "e-retry", "ValueError: no") in events
    assert not [k for k, j in kinds if k == "finished" and j == "e-retry"], "a failure is never reported as finished"


def test_an_sdist_builds_and_installs_outside_the_repository_and_a_bare_copy_is_refused(tmp_path):
    """What python/README.md says of installing elsewhere: the sdist carries the server library,
    so a wheel built from it outside the repository loads it; a copy of python/ alone (no
    ../docs/hero-library.lua) is refused rather than built without it."""
    import shutil
    import tarfile
    sys.path.insert(0, os.path.join(ROOT, "python", "_build"))
    try:
        import backend
    finally:
        sys.path.pop(0)
    sdist = backend.build_sdist(str(tmp_path))
    with tarfile.open(tmp_path / sdist) as t:
        names = t.getnames()
        assert any(n.endswith("hero/hero-library.lua") for n in names), names
        t.extractall(tmp_path / "unpacked")  # our own archive, just built
    src = next((tmp_path / "unpacked").iterdir())
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          str(src), "-w", str(tmp_path / "wheels")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    wheel = next((tmp_path / "wheels").glob("hero_py-*.whl"))
    import zipfile
    assert "hero/hero-library.lua" in zipfile.ZipFile(wheel).namelist()
    bare = tmp_path / "bare" / "python"
    shutil.copytree(os.path.join(ROOT, "python"), bare, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          str(bare), "-w", str(tmp_path / "bare-wheels")], capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "hero-library.lua" in out.stderr + out.stdout, out.stderr
