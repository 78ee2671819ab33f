"""hero.Queue, the operator's side of a queue, and the submit options of issue 48 against a real
redis-server and `hero broker`: pause and resume, counts, the policy set and shown as the Rust
CLI shows it, dead letters retried and purged, a job promoted and removed, a recurring job with
a payload (fired by a worker's duties, no broker), a job's own back-off and retention, a
parent's children's results, and fair share (issue 52): its policy fields, the keys with work,
one key held and released."""
from __future__ import annotations

import json
import threading
import time

import pytest

import hero
from conftest import hero as hero_cli
from conftest import wait_until


class run_worker:
    """A worker thread for a `with` block: stopped and joined at its end, before the test's
    Redis goes."""

    def __init__(self, url: str, types: list[str], handler):
        self.w = hero.Worker(handler, types, url, concurrency=4)
        self.t = threading.Thread(target=self.w.run, kwargs={"install_signals": False}, daemon=True)
        self.t.start()

    def __enter__(self):
        return self.w

    def __exit__(self, *exc):
        self.w.stop()
        self.t.join(timeout=30)


def test_pause_resume_and_counts(broker):
    q = hero.Queue("qc", broker)
    c = q.client
    for i in range(3):
        c.submit("x", "qc", id=f"w{i}")
    c.submit("x", "qc", id="hi", priority=1)
    c.submit("x", "qc", id="later", delay=3600)
    counts = q.job_counts()
    assert counts.as_dict() == {"waiting": 4, "delayed": 1, "running": 0, "finished": 0, "failed": 0, "dead": 0}
    assert len(counts.streams) == 2
    assert q.pause() == 2
    with run_worker(broker, ["qc"], lambda job, ctx: "done"):
        # paused: nothing starts; the CLI's table says so too
        rows = json.loads(hero_cli("--json", "queues", url=broker).stdout)
        assert all(q["paused"] for q in rows["queues"]), rows
        assert all(s.paused for s in q.job_counts().streams)
        assert q.job_counts().finished == 0
        q.resume()
        wait_until("the four jobs to finish", lambda: q.job_counts().finished == 4)
        q.promote("later")
        wait_until("the promoted job to finish", lambda: c.status("later") == "finished")
        with pytest.raises(hero.InvalidInput, match="not delayed"):
            q.promote("w0")
        # remove: an ended job goes, a missing one is JobNotFound
        q.remove("w0")
        with pytest.raises(hero.JobNotFound):
            c.get("w0")


def test_the_policy_is_set_checked_and_shown_as_the_cli_shows_it(broker):
    q = hero.Queue("qp", broker)
    p = q.set_policy(retries=3, backoff="exponential:100ms:2s,jitter=0", timeout=30, rate="100/s",
                     concurrency=4, retention="1h", aging=60, key_rate=(5, 1), lease="45s")
    assert p == {"retries": 3, "backoff": {"kind": "exponential", "base_ms": 100, "cap_ms": 2000, "jitter": 0.0},
                 "timeout_ms": 30000, "rate": {"max": 100, "per_ms": 1000}, "concurrency": 4,
                 "retention_ms": 3600000, "aging_ms": 60000, "key_rate": {"max": 5, "per_ms": 1000},
                 "lease_ms": 45000}
    shown = json.loads(hero_cli("--json", "queue", "show", "qp", url=broker).stdout)
    assert shown["policies"] == [{"queue": "qp", "policy": p}], shown
    assert q.set_policy(retries=1)["rate"] == {"max": 100, "per_ms": 1000}, "the other fields stay"
    for bad in ({"concurrency": 0}, {"rate": "0/s"}, {"backoff": "linear:1s"}, {"aging": 0}, {"timeout": "soon"}):
        with pytest.raises(hero.InvalidInput):
            q.set_policy(**bad)
    with pytest.raises(TypeError):
        q.set_policy(attempts=3)  # not an option: an error naming it, never dropped
    assert q.clear_policy() is True
    assert q.policy() == {}


def test_dead_letters_listed_retried_and_purged(broker):
    q = hero.Queue("qd", broker)
    c = q.client
    # a job whose record is on a worker that vanished, dead-lettered by the CLI's own path
    for i in range(2):
        c.submit("x", "qd", id=f"d{i}")
    r = c.r
    for i in range(2):
        entry = r.xadd("hero:meta:dead", {"j": f"d{i}", "reason": "too many deliveries",
                                          "queue": "hero:q:work:type:qd"})
        assert entry
        r.hset(f"hero:job:d{i}", mapping={"status": "error", "error": "dead"})
    letters = q.dead_letters()
    assert [d.job_id for d in letters] == ["d0", "d1"]
    assert q.retry_dead(["d0"]) == {"d0": "requeued"}
    assert q.purge_dead() == {"d1": "purged"}
    assert q.dead_letters() == []
    with pytest.raises(hero.JobNotFound):
        c.get("d1")


def test_a_jobs_own_back_off_retention_and_its_childrens_results(broker):
    c = hero.Client(broker)

    def handler(job, ctx):
        if job.script == "fail":
            raise RuntimeError("always")
        if job.script == "parent":
            return ",".join(f"{k}={v.output}" for k, v in sorted(job.results.items()))
        return "v-" + job.script
    with run_worker(broker, ["qo"], handler):
        s = c.submit("fail", "qo", retries=1, backoff=hero.Backoff("fixed", 0.3, jitter=0), keep_failed="2h")
        assert c.wait(s.id, 20).status == "error"
        ttl = c.r.pttl(c.keys.job(s.id))
        assert 7_100_000 < ttl <= 7_200_000, ttl
        rec = c.get(s.id)
        assert rec.backoff == {"kind": "fixed", "base_ms": 300, "cap_ms": 300, "jitter": 0} and rec.keep_failed == 7_200_000
        quick = c.submit("a", "qo", keep=0)
        assert c.wait(quick.id, 20).output == "v-a"
        assert 0 < c.r.pttl(c.keys.job(quick.id)) <= 10_000
        one = c.submit("one", "qo", id="k1", keep=0)
        c.wait(one.id, 20)
        parent = c.submit("parent", "qo", id="par", after=["k1"])
        assert c.wait(parent.id, 20).output == "k1=v-one"
        c.r.delete(c.keys.job("k1"))
        kids = c.children("par")
        assert kids == {"k1": hero.ChildResult("finished", "v-one", None)}
        for bad in ({"backoff": "soon"}, {"keep": -1}, {"keep_failed": "forever"}):
            with pytest.raises(hero.InvalidInput):
                c.submit("x", "qo", **bad)


def test_a_recurring_job_carries_its_payload(redis_url):
    # no broker: the worker's own duties fire the ticks (protocol 32)
    q = hero.Queue("qr", redis_url)
    seen = []

    def handler(job, ctx):
        seen.append(job.payload)
        return "ok"
    with run_worker(redis_url, ["qr"], handler):
        nxt = q.cron_add("tick", "every 1s", "s", payload=b"\x82\xa1n\x07\xa2to\xa5a@b.c", keep="1h")
        assert isinstance(nxt, int) and nxt % 1000 == 0, nxt
        listed = q.cron_list()
        assert [e["name"] for e in listed] == ["tick"]
        assert listed[0]["job"]["payload"] == b"\x82\xa1n\x07\xa2to\xa5a@b.c"
        with pytest.raises(hero.InvalidInput, match="MessagePack bytes"):
            q.cron_add("dict", "every 1s", "s", payload={"n": 7})
        wait_until("a tick to run", lambda: seen, limit=20)
        assert seen[0] == b"\x82\xa1n\x07\xa2to\xa5a@b.c"
        ran = wait_until("the tick's record", lambda: q.client.r.keys("hero:job:cron-tick-*"), limit=5)
        assert q.client.r.hget(ran[0], "keep") == b"3600000", "the template's options ride on each tick's job"
        with pytest.raises(hero.InvalidInput, match="whenever"):
            q.cron_add("bad", "whenever", "s")
        assert q.cron_remove("tick") is True
        assert q.cron_remove("tick") is False
        assert q.cron_list() == []


def test_the_queue_reaches_every_shard_of_a_sharded_namespace(broker):
    hero_cli("shards", "set", "3", url=broker)
    q = hero.Queue("qs", broker)
    c = q.client
    subs = c.submit_many([c.job("x", "qs") for _ in range(30)])
    assert len({hero.shards.shard_of_id(s.id) or 0 for s in subs}) == 3
    counts = q.job_counts()
    assert counts.waiting == 30 and {s.shard for s in counts.streams} == {0, 1, 2}, counts
    assert q.pause() == 3
    # each shard holds its share of a concurrency limit; the whole policy is shown as set
    assert q.set_policy(concurrency=7)["concurrency"] == 7
    shares = []
    for n in range(3):
        keys = c._shard(n)[0]
        shares.append(json.loads(c.r.hget(keys.policy(), "qs"))["concurrency"])
    assert sorted(shares) == [2, 2, 3] and q.policy()["concurrency"] == 7
    shown = json.loads(hero_cli("--json", "queue", "show", "qs", url=broker).stdout)
    assert shown["policies"][0]["policy"]["concurrency"] == 7, shown
    assert q.resume() == 3


def test_a_fair_queue_counts_its_keys_and_holds_one_while_the_others_run(broker):
    q = hero.Queue("fq", broker)
    c = q.client
    # refusals: a key of a first-in, first-out queue, a key's cap without fair, fair off, bad weights
    with pytest.raises(hero.InvalidInput, match="is not fair"):
        q.pause_key("A")
    with pytest.raises(hero.InvalidInput, match="key_concurrency needs fair share"):
        q.set_policy(key_concurrency=2)
    assert q.policy() == {}, "a refused policy writes nothing"
    with pytest.raises(hero.InvalidInput, match="clear its policy"):
        q.set_policy(fair=False)
    with pytest.raises(hero.InvalidInput, match="'gold'"):
        q.set_policy(fair=True, fair_weights={"silver": 2, "gold": 0})
    for bad in ({"key_concurrency": 0}, {"fair_weights": {"a b": 1}}, {"fair_weights": [("a", 1)]}):
        with pytest.raises(hero.InvalidInput):
            q.set_policy(fair=True, **bad)
    p = q.set_policy(fair=True, key_concurrency=2, fair_weights={"B": 2})
    assert p == {"fair": True, "key_concurrency": 2, "fair_weights": {"B": 2}}
    shown = json.loads(hero_cli("--json", "queue", "show", "fq", url=broker).stdout)
    assert shown["policies"] == [{"queue": "fq", "policy": p}], shown
    # a group's key cap rides on its type's fair share
    assert hero.Queue("fq", broker, group="g").set_policy(key_concurrency=1) == {"key_concurrency": 1}
    assert q.pause_key("A") == 0, "A has no jobs yet: held, in no stream"
    jobs = [c.job("x", "fq", id=f"A-{i}", limit_key="A") for i in range(10)]
    jobs += [c.job("x", "fq", id=f"A-p{i}", limit_key="A", priority=1) for i in range(2)]
    jobs += [c.job("x", "fq", id=f"B-{i}", limit_key="B") for i in range(6)]
    jobs += [c.job("x", "fq", id=f"C-{i}", limit_key="C") for i in range(2)]
    jobs += [c.job("x", "fq", id=f"none-{i}") for i in range(2)]
    c.submit_many(jobs)
    # summed over both priority levels; ties by key ('' for the jobs without one)
    want = hero.FairKeys(4, [hero.KeyWaiting("A", 12), hero.KeyWaiting("B", 6), hero.KeyWaiting("", 2),
                             hero.KeyWaiting("C", 2)], ["fq|A"])
    assert _shape(q.keys()) == _shape(want)
    assert q.keys().next is None, "one page read them all"
    assert _shape(q.keys(top=1)) == _shape(hero.FairKeys(4, [hero.KeyWaiting("A", 12)], ["fq|A"]))
    cli = json.loads(hero_cli("--json", "queues", "--keys", "fq", url=broker).stdout)
    assert cli == {"queue": "fq", **q.keys().as_dict()}, "as the Rust CLI counts them"
    lock, started, running, most = threading.Lock(), [], {}, {}

    def handler(job, ctx):
        key = job.id.split("-")[0]
        with lock:
            started.append(job.id)
            running[key] = running.get(key, 0) + 1
            most[key] = max(most.get(key, 0), running[key])
        time.sleep(0.05)
        with lock:
            running[key] -= 1
        return "ok"
    with run_worker(broker, ["fq"], handler):
        wait_until("B's, C's and the keyless jobs to start", lambda: len(started) >= 10)
        time.sleep(0.5)  # a few more fetches: A stays held
        with lock:
            assert len(started) == 10 and not any(s.startswith("A-") for s in started), started
        assert q.keys().top[0] == hero.KeyWaiting("A", 12)
        assert q.job_counts().waiting == 12, "the held key's jobs count as waiting"
        assert q.resume_key("A") == 2, "A is back in turn in both of its streams"
        wait_until("A's jobs to run once resumed", lambda: q.job_counts().finished == 22)
    assert sorted(started) == sorted(j[0] for j in jobs), "every job ran once"
    assert max(most.values()) == 2 and most["A"] == 2, most
    assert _shape(q.keys()) == (0, [], [])


def _shape(k: hero.FairKeys) -> tuple:
    """What a key view says, without its paging (read, next)."""
    return (k.keys, k.top, k.held)


def test_fair_share_on_a_sharded_namespace(broker):
    hero_cli("shards", "set", "3", url=broker)
    q = hero.Queue("fs", broker)
    c = q.client
    p = q.set_policy(fair=True, key_concurrency=3, concurrency=7)
    # the concurrency is split; fair share's fields are whole on every shard (a key has one home)
    shares = [json.loads(c.r.hget(c._shard(n)[0].policy(), "fs")) for n in range(3)]
    assert [(s["fair"], s["key_concurrency"]) for s in shares] == [(True, 3)] * 3
    assert sorted(s["concurrency"] for s in shares) == [2, 2, 3] and q.policy() == p
    keys = [f"k{i}" for i in range(8)]
    c.submit_many([c.job("x", "fs", limit_key=k) for k in keys for _ in range(int(k[1:]) + 1)])
    assert len({c._map.home(k) for k in keys}) > 1, "the keys live on more than one shard"
    got = q.keys(top=3)
    assert (got.keys, got.top) == (8, [hero.KeyWaiting("k7", 8), hero.KeyWaiting("k6", 7), hero.KeyWaiting("k5", 6)])
    assert q.pause_key("k7") == 1 and q.keys().held == ["fs|k7"]
    assert q.resume_key("k7") == 1 and q.keys().held == []


def test_a_name_covers_the_streams_under_it():
    # as the Rust admin's fair.rs reads names: a queue covers its groups and instances at any
    # priority, never a longer name that merely starts the same
    under, k = hero.fair.under, hero.Keys()
    assert under("osis", "osis") and under("osis prio 2", "osis") and under("osis/io/a", "osis")
    assert under("osis/io", "osis/io") and not under("osis2", "osis") and not under("osis", "osis/io")
    assert k.queue_name(k.work("osis", "io", "3")) == "osis/io/3"
    assert k.queue_name(k.work("osis", "io", priority=0)) == "osis/io prio 0"
    assert k.queue_name("other:key") == "other:key"
