#!/usr/bin/env python3
"""What one hero-py worker process costs a job: N no-op jobs (each one INCR, as in peers.py)
queued on a throwaway Redis, then one worker process of `--concurrency` threads (or
`--pool process`) runs them; prints the jobs/s and the worker process's CPU per job, both
measured from its `--warm`th job to its last (its start-up excluded), and the Redis calls a job
(INFO commandstats: a function's own calls counted too). `--spy FILE` samples the worker with
py-spy (`pip install py-spy` into the venv; only while a thread holds the GIL: where its Python
time goes) into a flame graph (`.svg`) or, with a `.txt` name, collapsed stacks, and prints
the top functions by their own samples and by their callees'. Run with the bench venv:
`target/bench-venv/bin/python benches/python/worker_cpu.py --jobs 5000`."""
import argparse
import collections
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import COUNTER, start_redis  # noqa: E402

WORKER = """
import os, redis
r = redis.Redis.from_url(os.environ['BENCH_URL'])
def handler(job, ctx):
    r.incr('bench:done')
"""
RUN = ("import hero, os, bench_worker\n"
       "hero.Worker(bench_worker.handler, ['bench'], os.environ['BENCH_URL'], concurrency=int(os.environ['BENCH_C']),"
       " pool=os.environ['BENCH_POOL']).run()\n")


def cpu_s(pid: int) -> float:
    """The CPU seconds (user + system) of `pid` and its children that ended, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return sum(int(x) for x in fields[11:15]) / tick


def tree_cpu_s(pid: int) -> float:
    """`pid`'s CPU and its live children's (a process pool's)."""
    total = cpu_s(pid)
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(x) for x in f.read().split()]
    except OSError:
        kids = []
    for k in kids:
        try:
            total += cpu_s(k)
        except OSError:
            pass
    return total


def top(path: str, n: int = 25) -> None:
    """The top functions of py-spy's collapsed stacks: by their own samples, then with callees."""
    own: collections.Counter = collections.Counter()
    within: collections.Counter = collections.Counter()
    total = 0
    with open(path) as f:
        text = f.read()
    # a line is `frame;frame;... count`; the process's own name may span lines
    for m in re.finditer(r"(.*?) (\d+)\n", text, re.S):
        frames = m.group(1).split(";")[1:] or ["(no Python frame)"]
        count = int(m.group(2))
        total += count
        own[frames[-1]] += count
        for fr in set(frames):
            within[fr] += count
    print(f"  {total} samples; own:")
    for fr, c in own.most_common(n):
        print(f"  {c / total * 100:5.1f}% {fr}")
    print("  with callees:")
    for fr, c in within.most_common(n + 10):
        print(f"  {c / total * 100:5.1f}% {fr}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--pool", default="thread")
    ap.add_argument("--warm", type=int, default=200)
    ap.add_argument("--spy", help="py-spy record into this file (.svg flame graph, .txt collapsed stacks)")
    a = ap.parse_args()
    import hero
    p, d, url, r = start_redis()
    tmp = d
    with open(os.path.join(tmp, "bench_worker.py"), "w") as f:
        f.write(WORKER)
    try:
        c = hero.Client(url)
        for k in range(0, a.jobs, 500):
            c.submit_many([c.job("x", "bench") for _ in range(min(500, a.jobs - k))])
        env = dict(os.environ, BENCH_URL=url, BENCH_C=str(a.concurrency), BENCH_POOL=a.pool, PYTHONPATH=tmp)
        w = subprocess.Popen([sys.executable, "-c", RUN],
                             cwd=tmp, env=env)
        while int(r.get(COUNTER) or 0) < a.warm:
            time.sleep(0.001)
        n0, t0, c0 = int(r.get(COUNTER) or 0), time.monotonic(), tree_cpu_s(w.pid)
        spy = None
        if a.spy:
            fmt = ["--format", "raw"] if a.spy.endswith(".txt") else []
            # sampled without pausing it, only while a thread holds the GIL: where its CPU goes
            spy = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "-s",
                                    "-r", "250", "--nonblocking", "--nolineno", "--gil", "-o", a.spy, *fmt,
                                    "--pid", str(w.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r.config_resetstat()
        while int(r.get(COUNTER) or 0) < a.jobs:
            time.sleep(0.002)
        stats = r.info("commandstats")
        t1, c1 = time.monotonic(), tree_cpu_s(w.pid)
        n = a.jobs - n0
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=30)
        w.terminate()
        w.wait(timeout=30)
        print(f"{a.pool} c={a.concurrency}: {n / (t1 - t0):.0f} jobs/s, worker CPU {(c1 - c0) / n * 1e6:.0f} µs/job "
              f"({n} jobs after the first {n0})")
        # Redis calls a job (the bench's own GETs and INCR excluded)
        calls = {k[len("cmdstat_"):]: v["calls"] / n for k, v in stats.items()
                 if k not in ("cmdstat_get", "cmdstat_incr", "cmdstat_config|resetstat")}
        print("  calls a job: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(calls.items(), key=lambda x: -x[1])))
        if a.spy and a.spy.endswith(".txt"):
            top(a.spy)
    finally:
        p.kill()
        p.wait()


if __name__ == "__main__":
    main()
