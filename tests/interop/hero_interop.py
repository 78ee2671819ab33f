#!/usr/bin/env python3
"""A producer and a deliberately plain worker on the `hero` Python package (python/): the
producer is `hero.Client`; the worker drives the package's protocol calls one by one
(`hero.protocol.Protocol`: fetch, renew, complete) so that a test can make it misbehave the way
a worker in another language might. The test suite runs it against the real broker and Rust
peers.

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
import sys
import time
import uuid

import redis

import hero
from hero.job import Job
from hero.protocol import Protocol


def say(line):
    print(line, flush=True)


def submit(c, args):
    job_id = str(uuid.uuid4())
    s = c.submit(args.script, args.type, id=job_id, caller_id="python", wait=args.wait is not None)
    if args.wait is None:
        say(json.dumps({"id": s.id, "answer": "created" if s.created else "exists", "status": s.status}))
        return
    r = c.wait(job_id, args.wait)
    say(json.dumps({"id": job_id, "status": r.status, "output": r.output, "error": r.error}))


def worker(c, args):
    proto = Protocol(c.r, c.keys)
    instance = f"py-{os.getpid()}"
    consumer = f"default:{instance}:{uuid.uuid4().hex[:8]}"
    ttl_ms = 15000
    presence = c.keys.presence(args.type, "default", instance)

    def heartbeat():
        c.r.set(presence, json.dumps({"pid": os.getpid(), "capabilities": [args.type], "version": "interop",
                                      "consumer": consumer, "last_heartbeat": hero.protocol.iso()}), px=ttl_ms)
        c.r.zadd(c.keys.consumers(), {consumer: hero.protocol.now_ms() + ttl_ms})

    streams = c.keys.precedence([args.type], "default", instance)
    heartbeat()
    last_beat = time.time()
    say(f"ready {consumer}")
    done = 0
    while done < args.jobs:
        if time.time() - last_beat > ttl_ms / 3000:
            heartbeat()
            last_beat = time.time()
        jobs, _dropped, cursors, records = proto.fetch(streams, consumer, 1)
        for index, entry, job_id in jobs:
            rec = records.get(job_id) or c.r.hgetall(c.keys.job(job_id))
            job = Job.from_record(job_id, rec)
            if job.status != "started" or job.lease != entry:
                continue  # stopped or recovered since the fetch: no longer ours
            stream = streams[index]
            began = time.time()
            held_until = time.time() + args.hold_ms / 1000
            while time.time() < held_until:
                time.sleep(min(1.0, max(0.0, held_until - time.time())))
                say(f"renew {job_id} {proto.renew(job_id, stream, entry, consumer)}")
            done_item = {"id": job_id, "stream": stream, "lease": entry, "outcome": "fail" if args.fail else "done",
                         "text": f"{args.label}:{job.script}", "retry_at": 0, "reply": job.reply,
                         "ran_ms": int((time.time() - began) * 1000)}
            say(f"completion {job_id} {proto.complete(consumer, [done_item])[0]}")
            say(f"resend {job_id} {proto.complete(consumer, [done_item])[0]}")
            done += 1
        if cursors and done < args.jobs:
            watch = {s: cur for s, cur in zip(streams, cursors) if cur}
            if len(cursors) > len(streams):  # the registry's signal stream: a new queue wakes us
                watch[c.keys.queue_signal()] = cursors[-1]
            c.r.xread(watch, count=1, block=1000)
    c.r.delete(presence)
    c.r.zrem(c.keys.consumers(), consumer)


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
    c = hero.Client(args.url)
    submit(c, args) if args.mode == "submit" else worker(c, args)


if __name__ == "__main__":
    sys.exit(main())
