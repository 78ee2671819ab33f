#!/usr/bin/env python3
"""Instructions Redis executes per job in each step of the hot path, counted by callgrind.

Wall-clock and CPU-time figures on a shared machine move by ±15 % from run to run; instruction
counts do not, so this is how a change to a server-side function is judged before the full
benchmark. It runs redis-server under `valgrind --tool=callgrind`, loads the function library
from docs/hero-library.lua (the library as client/src/function/mod.rs assembles it), and measures, per job:
submit (batches of 50), fetch (25 a call), the worker's plain HGETALL, and complete (25 a call),
as the Rust client and worker call them. The callgrind dump of each step stays in --out for
`callgrind_annotate --inclusive=yes <file>`.

Needs valgrind (apt-get install valgrind) and the `redis` package (scripts/interop-setup makes a
virtualenv with it): target/interop-venv/bin/python benches/profile_functions.py [--jobs N]
"""
import argparse
import glob
import os
import re
import socket
import subprocess
import sys
import time
import uuid

import redis

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
STREAM = "hero:q:work:type:bench"
ISO = "2026-11-21T10:00:00.123Z"


LIBRARY = os.path.join(ROOT, "docs", "hero-library.lua")


def library():
    """The library as FUNCTION LOAD gets it: the file shipped for other languages (or the one
    --library names, e.g. an older commit's: `git show <commit>:docs/hero-library.lua`)."""
    return open(LIBRARY).read()


def version():
    return re.search(r"^local VERSION = '([^']+)'", library(), re.M).group(1)


def fn(name):
    """The registered name of a function of the shipped library's version."""
    return f"hero_v{version()}_{name}"


def complete_args(batch):
    """hero_complete's keys and arguments for `batch`, (entry, job id, reply field) each, every
    job on STREAM, done in 1 ms, as the Rust worker passes them: since protocol 34 the stream
    once and four arguments a job (a `w<i>` pair for a job someone waits on); before it, three
    keys and seven arguments a job, the stream standing in for the reply list of a job no one
    waits on. Since protocol 26 the sixth argument is the queue policies' retention per job ('':
    no policy)."""
    v = int(version())
    keys = ["hero:meta:delayed", "hero:meta:config", "hero:meta:retention", "hero:meta:events",
            "hero:meta:stats", "hero:meta:queues"]
    argv = ["workers", ISO, 0, " ".join(job for _, job, _ in batch), "g:a:1"] + ([""] if v >= 26 else [])
    if v >= 34:
        keys.append(STREAM)
        argv += ["hero:job:", len(batch)]
        for entry, job, _ in batch:
            argv += [entry, job, "d1", ""]
        for i, (_, _, reply) in enumerate(batch):
            if reply:
                argv += [f"w{i}", reply]
        return keys, argv
    for entry, job, reply in batch:
        keys += ["hero:job:" + job, STREAM, "hero:q:reply:" + job if reply else STREAM]
        argv += [entry, "done", "", 0, job, reply, 1]
    return keys, argv


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def streams_named(count):
    """The streams a worker names: a type's 30 (instance, then group, then type level; priority
    0..9, the default 5 has no suffix), the job's in the 26th, after `count - 30` other types'."""
    streams = [f"{STREAM}:{lvl}:prio:{p}" for lvl in ("group:g:inst:i", "group:g") for p in range(10)]
    streams += [f"{STREAM}:prio:{p}" if p != 5 else STREAM for p in range(10)]
    streams = [f"hero:q:work:type:other{k}" for k in range(max(0, count - 30))] + streams
    if count < 30:
        streams = streams[-count:]
        if STREAM not in streams:
            streams[0] = STREAM
    return streams


def cycle(r, streams, view):
    """One job through the light-load path: a one-job submit, a fetch of up to 25 that finds it
    and hands its record back (a worker keeping up), a one-job completion. Yields the steps. The
    fetch names the registered streams only, as the Rust worker does (`view`: the signal id and
    the registered streams a fetch that asked answered; empty until one asked)."""
    keys, argv = submit_args(1, plain_job)
    job = argv[3] if int(version()) >= 35 else argv[1]
    yield "submit", r.fcall(fn("submit"), len(keys), *keys, *argv)
    named, cursor = (view["streams"], view["signal"]) if view else (streams, "*")
    reply = r.fcall(fn("fetch"), len(named) + 4, "hero:meta:queues", "hero:meta:config",
                    "hero:meta:events", "hero:meta:stats", *named, "workers", "bench:1:x", 25,
                    "hero:job:", ISO, 0, "", "1", cursor)
    yield "fetch", reply
    if reply[6] == "stale":
        sys.exit("the registry moved during the light cycle")
    if not view:
        view["signal"], view["streams"] = reply[5], [streams[i - 1] for i in reply[6]]
    jobs, records = reply[0], reply[4]
    assert len(jobs) == 3 and jobs[2] == job, jobs
    record = dict(zip(records[0][::2], records[0][1::2]))
    keys, argv = complete_args([(jobs[1], job, record.get("reply", ""))])
    answers = r.fcall(fn("complete"), len(keys), *keys, *argv)
    assert answers == ["completed"], answers
    yield "complete", answers


def native_clock(r, stream, per_ms=50):
    """Under callgrind a submit runs some fifty times slower, so each entry it appends gets a
    millisecond of its own, where at full speed the 50 of a call share one or two; and the fetch
    works out its wait samples once per millisecond its entries span (sample_waits in
    lib/stats.lua). So before the fetch is counted the stream's entries are written again as a
    submit at full speed leaves them, 50 to a millisecond, in the same order (not counted)."""
    entries = r.xrange(stream)
    if not entries:
        return
    groups = [g["name"] for g in r.xinfo_groups(stream)]
    base = int(entries[0][0].split("-")[0])
    pipe = r.pipeline(transaction=False)
    pipe.delete(stream)
    for k, (_, fields) in enumerate(entries):
        pipe.xadd(stream, fields, id=f"{base + k // per_ms}-{k % per_ms}")
    for g in groups:
        pipe.xgroup_create(stream, g, id="0")
    pipe.execute()


def plain_job(job):
    """A plain job's arguments to hero_submit, as the Rust client passes them."""
    return [job, 0, 6, "script", "noop", "script_type", "bench", "created_at", ISO]


def submit_args(count, job_argv):
    """hero_submit's keys and arguments for `count` new jobs, `job_argv(id)` giving each one's as
    protocols before 35 took them (id, run-at, value count, field/value pairs), as the Rust
    client passes them: since protocol 35 the stream once, and per job its id, a code
    (`<stream>.<values>[@<run-at>]`) and its pairs without `created_at` and `script_type`, which
    the function writes."""
    keys = ["hero:meta:delayed", "hero:meta:queues", "hero:meta:bridge", "hero:meta:config",
            "hero:meta:events", "hero:meta:stats"]
    if int(version()) >= 35:
        keys.append(STREAM)
        argv = ["workers", "hero:job:", int(time.time() * 1000)]
        for _ in range(count):
            job, run_at, _, *pairs = job_argv(str(uuid.uuid4()))
            kept = [x for k, v in zip(pairs[::2], pairs[1::2])
                    if k not in ("created_at", "script_type") for x in (k, v)]
            argv += [job, f"1.{len(kept)}" + (f"@{run_at}" if run_at else ""), *kept]
        return keys, argv
    argv = ["workers"]
    for _ in range(count):
        job = str(uuid.uuid4())
        keys += ["hero:job:" + job, STREAM]
        argv += job_argv(job)
    return keys, argv


def per_call(r, k, instructions):
    """--per-call: instructions a call of the fetch and of the completion costs, with 1 job and
    with k, on one stream named with the registry cursor; the fixed part and the part a job adds
    follow (cost(k) - cost(1)) / (k - 1). An empty fetch is what an idle worker's call costs."""
    def submit(count):
        keys, argv = submit_args(count, plain_job)
        r.fcall(fn("submit"), len(keys), *keys, *argv)

    def fetch(count, cursor):
        return r.fcall(fn("fetch"), 5, "hero:meta:queues", "hero:meta:config", "hero:meta:events",
                       "hero:meta:stats", STREAM, "workers", "bench:1:x", count, "hero:job:", ISO, 0,
                       "", "", cursor)

    def complete(batch):
        keys, argv = complete_args([(entry, job, "") for _, entry, job in batch])
        return r.fcall(fn("complete"), len(keys), *keys, *argv)

    submit(1)
    first = fetch(25, "*")
    signal = first[5]
    complete([first[0][0:3]])
    calls = 400
    instructions()
    for _ in range(calls):
        fetch(25, signal)
    empty = instructions() / calls
    cost = {}
    for count in (1, k):
        for _ in range(calls):
            submit(count)
        instructions()
        got = []
        for _ in range(calls):
            jobs = fetch(count, signal)[0]
            got.append([jobs[i:i + 3] for i in range(0, len(jobs), 3)])
        fetched = instructions() / calls
        for batch in got:
            complete(batch)
        cost[count] = (fetched, instructions() / calls)
    print(f"Redis instructions a call (one stream, {calls} calls each, library from {LIBRARY}):")
    print(f"  empty fetch   {empty:>11,.0f}")
    for step, at in (("fetch", 0), ("complete", 1)):
        one, many = cost[1][at], cost[k][at]
        job = (many - one) / (k - 1)
        print(f"  {step:<9} of 1 {one:>11,.0f}  of {k} {many:>11,.0f}  = {one - job:>9,.0f} a call "
              f"+ {job:>7,.0f} a job")


def light_cycle(r, args, n, instructions, commands, pid, dumps):
    """--light: instructions per job of the whole one-job cycle, then (collection off) the
    redis.calls of each step, counted over a shorter run."""
    streams = streams_named(args.streams)
    view = {}
    for _ in range(n):
        for _ in cycle(r, streams, view):
            pass
    total = instructions()
    subprocess.run(["callgrind_control", "-i", "off", str(pid)], capture_output=True, check=True)
    calls = {"submit": 0, "fetch": 0, "complete": 0}
    m = max(1, n // 5)
    commands()
    for _ in range(m):
        for step, _ in cycle(r, streams, view):
            calls[step] += commands()
    print(f"Redis instructions per job ({n} jobs, light load: one job a call, {len(streams)} streams, "
          f"library from docs/hero-library.lua): {total / n:,.0f}   {dumps[-1]}")
    print("redis.calls per job: " + ", ".join(f"{k} {v / m:.2f}" for k, v in calls.items()) +
          f", total {sum(calls.values()) / m:.2f}")


def ceiling(r, n, submit_batch, fetch_batch, complete_batch, instructions):
    """Instructions for `n` jobs through the ceiling's plain commands (benches/src/ceiling.rs):
    per job XADD of the entry and HSET of a four-field record, pipelined by the submit batch;
    XREADGROUP of the fetch batch; XACK and HSET of the result, pipelined by the completion
    batch. The worker's read of the record is not in it: the ceiling's worker takes the id
    from the entry."""
    r.xgroup_create("ceiling:q", "workers", id="0", mkstream=True)
    instructions()
    pipe = r.pipeline(transaction=False)
    for b in range(n // submit_batch):
        for _ in range(submit_batch):
            job = str(uuid.uuid4())
            pipe.xadd("ceiling:q", {"j": job})
            pipe.hset("ceiling:job:" + job, mapping={"script": "noop", "script_type": "bench",
                                                     "created_at": ISO, "status": "dispatched"})
        pipe.execute()
    read = []
    while len(read) < n:
        reply = r.xreadgroup("workers", "c", {"ceiling:q": ">"}, count=fetch_batch)
        read += [(eid, fields["j"]) for eid, fields in reply[0][1]]
    for b in range(0, n, complete_batch):
        for eid, job in read[b:b + complete_batch]:
            pipe.xack("ceiling:q", "workers", eid)
            pipe.hset("ceiling:job:" + job, mapping={"status": "finished", "output": "", "finished_at": ISO})
        pipe.execute()
    return instructions()


# The least a library of server functions does for a job with a record, a status check at fetch,
# a lease and a fenced completion: no event log, no stats, no checks at submit, no precedence
# over several streams, no trimming. What hero's functions cost above it is what they do for
# those; what it costs above the ceiling is what running a job's steps inside functions costs.
FLOOR_LIBRARY = """#!lua name=floor
redis.register_function('floor_submit', function(keys, args)
  local stream = keys[1]
  for i = 2, #keys do
    local p = 2 * (i - 2) + 1
    redis.call('XADD', stream, '*', 'j', args[p])
    redis.call('HSET', keys[i], 'status', 'dispatched', 'script', 'noop', 'script_type', 'bench',
      'created_at', args[p + 1])
  end
  return #keys - 1
end)
redis.register_function('floor_fetch', function(keys, args)
  local res = redis.call('XREADGROUP', 'GROUP', 'workers', args[2], 'COUNT', args[1], 'STREAMS', keys[1], '>')
  local jobs = {}
  if not res then return jobs end
  local read = res[1][2]
  for k = 1, #read do
    local id, job_id = read[k][1], read[k][2][2]
    local key = 'floor:job:' .. job_id
    if redis.call('HGET', key, 'status') == 'dispatched' then
      redis.call('HSET', key, 'status', 'started', 'lease', id, 'worker_id', args[2], 'started_at', args[3])
      jobs[#jobs + 1] = id
      jobs[#jobs + 1] = job_id
    end
  end
  return jobs
end)
redis.register_function('floor_complete', function(keys, args)
  local stream, n = keys[1], #keys - 1
  local ids = {}
  for i = 1, n do ids[i] = args[i + 1] end
  redis.call('XACK', stream, 'workers', unpack(ids))
  for i = 1, n do
    redis.call('HSET', keys[i + 1], 'status', 'finished', 'output', '', 'finished_at', args[1])
  end
  return n
end)
"""


def floor(r, n, submit_batch, fetch_batch, complete_batch, instructions):
    """Instructions of the FLOOR_LIBRARY's job: submit, fetch, the worker's HGETALL and complete,
    batched as hero's steps are."""
    r.function_load(FLOOR_LIBRARY, replace=True)
    r.xgroup_create("floor:q", "workers", id="0", mkstream=True)
    instructions()
    pipe = r.pipeline(transaction=False)
    for _ in range(n // submit_batch):
        keys, argv = ["floor:q"], []
        for _ in range(submit_batch):
            job = str(uuid.uuid4())
            keys.append("floor:job:" + job)
            argv += [job, ISO]
        pipe.fcall("floor_submit", len(keys), *keys, *argv)
    pipe.execute()
    got = []
    while len(got) < n:
        reply = r.fcall("floor_fetch", 1, "floor:q", fetch_batch, "c", ISO)
        got += [(reply[k], reply[k + 1]) for k in range(0, len(reply), 2)]
    for b in range(0, n, 100):
        for _, job in got[b:b + 100]:
            pipe.hgetall("floor:job:" + job)
        pipe.execute()
    for b in range(0, n, complete_batch):
        batch = got[b:b + complete_batch]
        pipe.fcall("floor_complete", 1 + len(batch), "floor:q", *["floor:job:" + j for _, j in batch],
                   ISO, *[e for e, _ in batch])
    pipe.execute()
    return instructions()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=10000, help="jobs per step (multiple of 50)")
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "callgrind"))
    ap.add_argument("--light", action="store_true",
                    help="light load: one job per submit, fetch (records handed back) and complete "
                         "call, as at 5,000 jobs/s; the fixed cost of each call shows")
    ap.add_argument("--streams", type=int, default=30,
                    help="streams the worker names (the job waits in the last-but-four)")
    ap.add_argument("--events-max", type=int, default=100000,
                    help="the event log's cap, as a broker publishes it (0: the log off)")
    ap.add_argument("--ceiling", action="store_true",
                    help="also count the ceiling's plain commands (hero-bench's ceiling scenario: "
                         "XADD + HSET of a 4-field record, XREADGROUP, XACK + HSET of the result), "
                         "so the total reads as a multiple of the least work a job needs")
    ap.add_argument("--floor", action="store_true",
                    help="also count the least a library of server functions does for a job with "
                         "a record, a status check, a lease and a fenced completion (no event log, "
                         "stats, checks, precedence or trimming): what running the steps inside "
                         "functions costs by itself")
    ap.add_argument("--features", action="store_true",
                    help="jobs as in hero-bench's end-to-end-features: retries, a uniqueness key, "
                         "two tags and a small payload")
    ap.add_argument("--keys", type=int, default=0,
                    help="give the jobs limit keys, k0 .. k<N-1> in turn (0: none)")
    ap.add_argument("--fair", action="store_true",
                    help="make the queue fair (its jobs wait in a gate and the fetch releases them "
                         "in turns): compare with the same --keys without it")
    ap.add_argument("--complete", type=int, default=25,
                    help="jobs per completion call (the Rust worker's batches run 25 to 50 under load)")
    ap.add_argument("--fetch", type=int, default=25,
                    help="jobs a fetch asks for (a worker under load fetches the few slots a "
                         "completion freed, in the completion's round trip)")
    ap.add_argument("--per-call", action="store_true",
                    help="split the fetch's and the completion's cost into what a call costs "
                         "whatever its jobs and what each job adds (one stream, as the Rust "
                         "worker names the registered ones): calls of 1 and of --fetch jobs")
    ap.add_argument("--library", default=None,
                    help="the library file to load, to count an older version beside this one")
    args = ap.parse_args()
    if args.library:
        global LIBRARY
        LIBRARY = args.library
    n = args.jobs - args.jobs % 50
    submit_batch, fetch_batch, complete_batch = 50, args.fetch, args.complete
    os.makedirs(args.out, exist_ok=True)
    for f in glob.glob(os.path.join(args.out, "redis.out*")):
        os.remove(f)
    port = free_port()
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={args.out}/redis.out",
         "redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port, decode_responses=True)
        for _ in range(300):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        r.function_load(library(), replace=True)
        r.hset("hero:meta:config", "events_max", args.events_max)
        if args.fair:
            r.fcall(fn("policy"), 2, "hero:meta:policy", "hero:meta:config", "bench", '{"fair":true}')
        dumps = []

        calls = {}

        def commands():
            """Commands run inside functions since the last call (INFO commandstats, then reset)."""
            stats = r.info("commandstats")
            r.config_resetstat()
            return sum(v["calls"] for k, v in stats.items()
                       if k not in ("cmdstat_fcall", "cmdstat_info", "cmdstat_ping", "cmdstat_config|resetstat",
                                    "cmdstat_config"))

        def instructions():
            """Instructions since the last call (callgrind dump, then zero)."""
            r.ping()
            subprocess.run(["callgrind_control", "-d", str(server.pid)], capture_output=True, check=True)
            subprocess.run(["callgrind_control", "-z", str(server.pid)], capture_output=True, check=True)
            latest = max(glob.glob(os.path.join(args.out, "redis.out.*")), key=os.path.getmtime)
            dumps.append(latest)
            with open(latest) as f:
                return next(int(line.split()[1]) for line in f if line.startswith("totals:"))

        results = {}
        instructions()
        if args.light:
            light_cycle(r, args, n, instructions, commands, server.pid, dumps)
            return
        if args.per_call:
            per_call(r, args.fetch, instructions)
            return
        pipe = r.pipeline(transaction=False)
        commands()
        for b in range(n // submit_batch):
            def job_argv(job, b=b, made=[0]):
                made[0] += 1
                if args.features:
                    # the end-to-end-features scenario's job: retries, a uniqueness key, two tags
                    # and a small payload (MessagePack bytes as the Rust client sends them)
                    return [job, 0, 14, "script", "noop", "script_type", "bench", "created_at", ISO,
                            "retries", "3", "unique", f"order-{job}", "tags", '["bench","features"]',
                            "payload", "\x84\xa5order\xcd\x01\x00\xa8customer\xa7c-20417"]
                if args.keys:
                    # the limit key of the job's place in the run, in turn
                    return [job, 0, 8, "script", "noop", "script_type", "bench", "created_at", ISO,
                            "limit_key", f"k{(b * submit_batch + 6 + 2 * made[0]) % args.keys}"]
                return plain_job(job)
            keys, argv = submit_args(submit_batch, job_argv)
            pipe.fcall(fn("submit"), len(keys), *keys, *argv)
            if b % 8 == 7:
                pipe.execute()
        pipe.execute()
        results["submit"] = instructions()
        calls["submit"] = commands()
        if not args.fair:
            native_clock(r, STREAM)
            instructions()
            dumps.pop()
            commands()

        # a worker names 30 streams per type; a plain job waits in the 26th
        # (instance, then group, then type level; priority 0..9, the default 5 has no suffix)
        streams = streams_named(args.streams)
        fetched = []
        records = {}
        while len(fetched) < n:
            reply = r.fcall(fn("fetch"), len(streams) + 4, "hero:meta:queues", "hero:meta:config",
                            "hero:meta:events", "hero:meta:stats", *streams, "workers", "bench:1:x",
                            fetch_batch, "hero:job:", ISO, 0)
            jobs = reply[0]
            got = [jobs[k:k + 3] for k in range(0, len(jobs), 3)]
            fetched += got
        results["fetch"] = instructions()
        calls["fetch"] = commands()

        for b in range(0, len(fetched), 100):
            batch = fetched[b:b + 100]
            pipe = r.pipeline(transaction=False)
            for _, _, job in batch:
                pipe.hgetall("hero:job:" + job)
            for (_, _, job), record in zip(batch, pipe.execute()):
                records[job] = record
        results["hgetall"] = instructions()
        calls["hgetall"] = commands()

        for b in range(0, len(fetched), complete_batch):
            keys, argv = complete_args([(entry, job, records[job].get("reply", ""))
                                        for _, entry, job in fetched[b:b + complete_batch]])
            answers = r.fcall(fn("complete"), len(keys), *keys, *argv)
            assert all(a == "completed" for a in answers), answers
        results["complete"] = instructions()
        calls["complete"] = commands()
        if len(fetched) != n or r.xlen(STREAM) != 0:
            sys.exit(f"expected {n} jobs fetched and an empty stream, got {len(fetched)}, {r.xlen(STREAM)}")

        mode = f"submit 50, fetch {fetch_batch} and complete {complete_batch} a call" + (", jobs with features" if args.features else "")
        print(f"Redis instructions and redis.calls per job ({n} jobs, {mode}, {len(streams)} streams, "
              "library from docs/hero-library.lua):")
        for (step, count), dump in zip(results.items(), dumps[1:]):
            print(f"  {step:<9} {count / n:>9,.0f}  {calls[step] / n:>6.2f} calls   {dump}")
        worker = results["fetch"] + results.get("hgetall", 0) + results["complete"]
        wcalls = calls["fetch"] + calls.get("hgetall", 0) + calls["complete"]
        print(f"  {'worker':<9} {worker / n:>9,.0f}  {wcalls / n:>6.2f} calls   (fetch + hgetall + complete)")
        total = worker + results["submit"]
        print(f"  {'total':<9} {total / n:>9,.0f}  {(wcalls + calls['submit']) / n:>6.2f} calls")
        if args.ceiling:
            base = ceiling(r, n, submit_batch, fetch_batch, complete_batch, instructions)
            print(f"  {'ceiling':<9} {base / n:>9,.0f}  (plain commands, pipelined alike; hero's total "
                  f"is {total / base:.2f}× it)")
        if args.floor:
            least = floor(r, n, submit_batch, fetch_batch, complete_batch, instructions)
            print(f"  {'floor':<9} {least / n:>9,.0f}  (the least a function library does for such a job"
                  + (f": {least / base:.2f}× the ceiling" if args.ceiling else "") + ")")
    finally:
        server.kill()
        server.wait()



if __name__ == "__main__":
    main()
