#!/usr/bin/env python3
"""A hero-broker producer and worker in Python, written only from docs/protocol.md with the
`redis` package from PyPI. The test suite runs it against the real broker and Rust peers.

  hero_interop.py submit --url U --type T --script S [--wait SECS]
      submits one job (run-and-wait when --wait is given) and prints one JSON line:
      {"id", "answer"} or, with --wait, {"id", "status", "output", "error"}
  hero_interop.py worker --url U --type T --label L [--jobs N]
      serves type T until it has completed N jobs, answering "<label>:<script>"; prints
      "ready <consumer>", "completion <id> <answer>" and, for each job, the answer to the same
      completion sent again, "resend <id> <answer>" (the lease fences it: already_completed)
      With --hold-ms M it holds each job M ms before completing it, renewing its lease every
      second whatever the answer (a worker that ignores time limits), and prints
      "renew <id> <answer>" for each renewal. With --fail every attempt fails (retry-at 0: the
      queue's policy decides when it runs again).
"""
import argparse
import json
import os
import socket
import sys
import time
import uuid
from datetime import datetime, timezone

import redis

NS = "hero"
GROUP = "workers"  # the consumer group of every work stream
VERSION = "27"  # the protocol version this peer speaks: its functions are hero_v27_<name>
LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "hero-library.lua")


def fn(name):
    return f"hero_v{VERSION}_{name}"


def ensure_library(r):
    """Loads docs/hero-library.lua unless this version's library is on the server."""
    try:
        if r.fcall(fn("version"), 0) == VERSION:
            return
    except redis.ResponseError as e:
        if "Function not found" not in str(e):
            raise
    with open(LIBRARY) as f:
        r.function_load(f.read(), replace=True)


def now_ms():
    return int(time.time() * 1000)


def iso(ms=None):
    ms = now_ms() if ms is None else ms
    dt = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def work_stream(script_type, group=None, instance=None, priority=5):
    key = f"{NS}:q:work:type:{script_type}"
    if group:
        key += f":group:{group}"
        if instance:
            key += f":inst:{instance}"
    if priority != 5:
        key += f":prio:{priority}"
    return key


def say(line):
    print(line, flush=True)


def submit(r, args):
    job_id = str(uuid.uuid4())
    now = iso()
    fields = {
        "id": job_id,
        "script": args.script,
        "script_type": args.type,
        "created_at": now,
        "updated_at": now,
        "caller_id": "python",
    }
    if args.wait is not None:
        fields["reply"] = "1"
    pairs = [x for kv in fields.items() for x in kv]
    keys = [f"{NS}:meta:delayed", f"{NS}:meta:queues", f"{NS}:meta:bridge", f"{NS}:meta:config",
            f"{NS}:meta:events", f"{NS}:meta:stats", f"{NS}:job:{job_id}", work_stream(args.type)]
    answer = r.fcall(fn("submit"), len(keys), *keys, GROUP, job_id, 0, len(pairs), *pairs)
    kind, status = answer[0], answer[1]
    if args.wait is None:
        say(json.dumps({"id": job_id, "answer": kind, "status": status}))
        return
    got = r.blpop([f"{NS}:q:reply:{job_id}"], timeout=args.wait)
    if got is not None:
        reply = json.loads(got[1])
    else:  # the reply list expired or none was pushed: the hash has the answer
        h = r.hgetall(f"{NS}:job:{job_id}")
        reply = {"status": h.get("status"), "output": h.get("output", ""), "error": h.get("error", "")}
    say(json.dumps({"id": job_id, **reply}))


def worker(r, args):
    instance = f"py-{os.getpid()}"
    consumer = f"default:{instance}:{uuid.uuid4().hex[:8]}"
    ttl_ms = 15000
    started = iso()
    presence = f"{NS}:meta:actor:inst:{args.type}:default:{instance}"

    def heartbeat():
        body = json.dumps({"pid": os.getpid(), "hostname": socket.gethostname(), "started_at": started,
                           "version": "interop", "capabilities": [args.type], "last_heartbeat": iso()})
        r.set(presence, body, px=ttl_ms)
        r.zadd(f"{NS}:meta:consumers", {consumer: now_ms() + ttl_ms})

    # precedence: instance -> group -> type, priority 0..9 within each
    streams = []
    for g, i in (("default", instance), ("default", None), (None, None)):
        for p in range(10):
            streams.append(work_stream(args.type, g, i, p))

    heartbeat()
    last_beat = time.time()
    say(f"ready {consumer}")
    done = 0
    while done < args.jobs:
        if time.time() - last_beat > ttl_ms / 3000:
            heartbeat()
            last_beat = time.time()
        jobs, dropped, cursors, _limited = r.fcall(fn("fetch"), len(streams) + 4, f"{NS}:meta:queues", f"{NS}:meta:config",
                                         f"{NS}:meta:events", f"{NS}:meta:stats", *streams, GROUP, consumer, 1,
                                         f"{NS}:job:", iso(), 0)
        for k in range(0, len(jobs), 3):
            index, entry, job_id = jobs[k:k + 3]
            record = r.hgetall(f"{NS}:job:{job_id}")
            if record.get("status") != "started" or record.get("lease") != entry:
                continue  # stopped or recovered since the fetch: no longer ours
            stream = streams[int(index) - 1]
            began = time.time()
            output = f"{args.label}:{record.get('script', '')}"
            held_until = time.time() + args.hold_ms / 1000
            while time.time() < held_until:
                time.sleep(min(1.0, max(0.0, held_until - time.time())))
                renewed = r.fcall(fn("renew"), 2, f"{NS}:job:{job_id}", stream, entry, GROUP, consumer)
                say(f"renew {job_id} {renewed}")
            ran_ms = int((time.time() - began) * 1000)
            keys = [f"{NS}:meta:delayed", f"{NS}:meta:config", f"{NS}:meta:retention", f"{NS}:meta:events",
                    f"{NS}:meta:stats", f"{NS}:meta:queues", f"{NS}:job:{job_id}", stream, f"{NS}:q:reply:{job_id}"]
            outcome = "fail" if args.fail else "done"
            argv = [GROUP, iso(), 0, job_id, consumer, "", entry, outcome, output, 0, job_id, record.get("reply", ""),
                    ran_ms]
            answer = r.fcall(fn("complete"), len(keys), *keys, *argv)[0]
            say(f"completion {job_id} {answer}")
            again = r.fcall(fn("complete"), len(keys), *keys, *argv)[0]
            say(f"resend {job_id} {again}")
            done += 1
        if cursors and done < args.jobs:
            watch = {s: c for s, c in zip(streams, cursors) if c}
            if len(cursors) > len(streams):  # the registry's signal stream: a new queue wakes us
                watch[f"{NS}:meta:queues:new"] = cursors[-1]
            r.xread(watch, count=1, block=1000)
    r.delete(presence)
    r.zrem(f"{NS}:meta:consumers", consumer)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["submit", "worker"])
    ap.add_argument("--url", required=True)
    ap.add_argument("--type", required=True)
    ap.add_argument("--script", default="x")
    ap.add_argument("--wait", type=int)
    ap.add_argument("--label", default="python")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--hold-ms", type=int, default=0)
    ap.add_argument("--fail", action="store_true", help="answer every job with the outcome fail")
    args = ap.parse_args()
    r = redis.Redis.from_url(args.url, decode_responses=True)
    ensure_library(r)
    submit(r, args) if args.mode == "submit" else worker(r, args)


if __name__ == "__main__":
    sys.exit(main())
