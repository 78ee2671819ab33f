#!/usr/bin/env python3
"""Python workers side by side on one Redis: hero-py, RQ and Celery each run the same N trivial
jobs (each one INCRs a counter, the same one Redis call for all three), queued before the
worker starts; the figure is jobs per second from the worker's start to the last job's counter.
Workers as their users run them by default: hero-py one process of `--concurrency` threads; RQ
`rq worker --burst` (a fork per job, its default) and its SimpleWorker (no fork); Celery one
worker process with the threads pool of `--concurrency` (prefork, its default, as a second row).
Then CPU-bound jobs (a sum of squares each) at the same concurrency: hero-py's process pool
(`pool="process"`) beside Celery's prefork, and hero-py's threads (held by the GIL) for contrast.
Prints a table and writes JSON (--out)."""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
COUNTER = "bench:done"

TASKS = '''
import os, redis
r = redis.Redis.from_url(os.environ["BENCH_URL"])
def tick(n):
    r.incr("bench:done")
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis():
    port = free_port()
    d = tempfile.mkdtemp(prefix="hero-peers-")
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                          "no", "--dir", d], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}"
    r = redis.Redis.from_url(url)
    for _ in range(500):
        try:
            r.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.01)
    return p, d, url, r


def wait_count(r, n, limit):
    deadline = time.monotonic() + limit
    while int(r.get(COUNTER) or 0) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {int(r.get(COUNTER) or 0)} of {n} jobs ran within {limit} s")
        time.sleep(0.005)


def run_hero(url, r, n, concurrency):
    import hero
    c = hero.Client(url)
    for k in range(0, n, 500):
        c.submit_many([c.job("x", "bench") for _ in range(min(500, n - k))])
    code = (
        "import hero, os, redis, threading\n"
        "r = redis.Redis.from_url(os.environ['BENCH_URL'])\n"
        f"w = hero.Worker(lambda job, ctx: r.incr('{COUNTER}'), ['bench'], os.environ['BENCH_URL'],"
        f" concurrency={concurrency})\n"
        "w.run()\n"
    )
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, BENCH_URL=url))
    wait_count(r, n, 600)
    took = time.monotonic() - t0
    p.terminate()
    p.wait(timeout=30)
    return took


HERO_CPU = """
import os, redis
r = redis.Redis.from_url(os.environ["BENCH_URL"])
LOOPS = int(os.environ["BENCH_LOOPS"])
def handler(job, ctx):
    s = sum(i * i for i in range(LOOPS))
    r.incr("bench:done")
    return s
"""


def run_hero_cpu(url, r, n, concurrency, loops, pool, tmp):
    """CPU-bound jobs (a sum of squares each): hero-py's threads (the GIL) or its process pool."""
    import hero
    with open(os.path.join(tmp, "bench_hero.py"), "w") as f:
        f.write(HERO_CPU)
    c = hero.Client(url)
    for k in range(0, n, 500):
        c.submit_many([c.job("x", "cpu") for _ in range(min(500, n - k))])
    code = ("import hero, os, bench_hero\n"
            f"hero.Worker(bench_hero.handler, ['cpu'], os.environ['BENCH_URL'], concurrency={concurrency},"
            f" pool='{pool}').run()\n")
    env = dict(os.environ, BENCH_URL=url, BENCH_LOOPS=str(loops), PYTHONPATH=tmp)
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-c", code], cwd=tmp, env=env)
    wait_count(r, n, 600)
    took = time.monotonic() - t0
    p.terminate()
    p.wait(timeout=30)
    return took


def run_celery_cpu(url, r, n, concurrency, loops, tmp):
    app_src = ("from celery import Celery\nimport os, redis\n"
               "app = Celery('bench_cpu', broker=os.environ['BENCH_URL'])\n"
               "r = redis.Redis.from_url(os.environ['BENCH_URL'])\n"
               "LOOPS = int(os.environ['BENCH_LOOPS'])\n"
               "@app.task(ignore_result=True)\ndef burn(n):\n"
               "    s = sum(i * i for i in range(LOOPS))\n    r.incr('bench:done')\n    return s\n")
    with open(os.path.join(tmp, "bench_cpu.py"), "w") as f:
        f.write(app_src)
    env = dict(os.environ, BENCH_URL=url, BENCH_LOOPS=str(loops), PYTHONPATH=tmp)
    subprocess.run([sys.executable, "-c", f"import bench_cpu\nfor k in range({n}): bench_cpu.burn.delay(k)\n"],
                   cwd=tmp, env=env, check=True)
    args = [os.path.join(os.path.dirname(sys.executable), "celery"), "-A", "bench_cpu", "worker", "-P", "prefork",
            "-c", str(concurrency), "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING"]
    t0 = time.monotonic()
    p = subprocess.Popen(args, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_count(r, n, 600)
    took = time.monotonic() - t0
    p.terminate()
    p.wait(timeout=30)
    return took


def run_rq(url, r, n, simple, tmp):
    import rq
    os.environ["BENCH_URL"] = url  # the task module's connection, in this process too
    sys.path.insert(0, tmp)
    import bench_tasks
    q = rq.Queue("bench", connection=redis.Redis.from_url(url))
    with q.connection.pipeline() as pipe:
        for k in range(n):
            q.enqueue(bench_tasks.tick, k, pipeline=pipe)
        pipe.execute()
    args = [os.path.join(os.path.dirname(sys.executable), "rq"), "worker", "--burst", "--url", url, "-q", "bench"]
    if simple:
        args += ["--worker-class", "rq.worker.SimpleWorker"]
    t0 = time.monotonic()
    p = subprocess.Popen(args, cwd=tmp, env=dict(os.environ, BENCH_URL=url, PYTHONPATH=tmp),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_count(r, n, 900)
    took = time.monotonic() - t0
    p.wait(timeout=60)
    return took


def run_celery(url, r, n, concurrency, pool, tmp):
    app_src = TASKS.replace("def tick(n):", "@app.task(ignore_result=True)\ndef tick(n):")
    app_src = "from celery import Celery\nimport os\napp = Celery('bench_app', broker=os.environ['BENCH_URL'])\n" + app_src
    with open(os.path.join(tmp, "bench_app.py"), "w") as f:
        f.write(app_src)
    env = dict(os.environ, BENCH_URL=url, PYTHONPATH=tmp)
    enqueue = ("import bench_app\n"
               f"for k in range({n}): bench_app.tick.delay(k)\n")
    subprocess.run([sys.executable, "-c", enqueue], cwd=tmp, env=env, check=True)
    args = [os.path.join(os.path.dirname(sys.executable), "celery"), "-A", "bench_app", "worker", "-P", pool,
            "-c", str(concurrency), "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING"]
    t0 = time.monotonic()
    p = subprocess.Popen(args, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_count(r, n, 600)
    took = time.monotonic() - t0
    p.terminate()
    p.wait(timeout=30)
    return took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--out")
    ap.add_argument("--cpu-jobs", type=int, default=200, help="CPU-bound jobs (0: none)")
    ap.add_argument("--cpu-loops", type=int, default=300000, help="squares summed by each CPU-bound job")
    ap.add_argument("--cpu-concurrency", type=int, default=2, help="processes (cores) for the CPU-bound rows")
    ap.add_argument("--only-cpu", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="hero-peers-tasks-")
    with open(os.path.join(tmp, "bench_tasks.py"), "w") as f:
        f.write(TASKS)
    rows = []
    trivial = [
        ("hero-py (threads)", lambda url, r: run_hero(url, r, a.jobs, a.concurrency)),
        ("RQ (fork per job, default)", lambda url, r: run_rq(url, r, a.jobs, False, tmp)),
        ("RQ SimpleWorker (no fork)", lambda url, r: run_rq(url, r, a.jobs, True, tmp)),
        ("Celery (threads pool)", lambda url, r: run_celery(url, r, a.jobs, a.concurrency, "threads", tmp)),
        ("Celery (prefork, default)", lambda url, r: run_celery(url, r, a.jobs, 2, "prefork", tmp)),
    ]
    # CPU-bound jobs at the same concurrency: hero-py's process pool beside Celery's prefork
    cc, cl, cj = a.cpu_concurrency, a.cpu_loops, a.cpu_jobs
    cpu = [
        (f"CPU-bound: hero-py (processes, {cc})", lambda url, r: run_hero_cpu(url, r, cj, cc, cl, "process", tmp)),
        (f"CPU-bound: Celery (prefork, {cc})", lambda url, r: run_celery_cpu(url, r, cj, cc, cl, tmp)),
        (f"CPU-bound: hero-py (threads, {cc})", lambda url, r: run_hero_cpu(url, r, cj, cc, cl, "thread", tmp)),
    ] if cj > 0 else []
    for name, run in ([] if a.only_cpu else trivial) + cpu:
        n_jobs = cj if name.startswith("CPU") else a.jobs
        p, d, url, r = start_redis()
        try:
            took = run(url, r)
        finally:
            p.kill()
            p.wait()
            shutil.rmtree(d, ignore_errors=True)
        rows.append({"worker": name, "jobs": n_jobs, "seconds": round(took, 2), "jobs_per_s": round(n_jobs / took)})
        print(f"{name:38} {n_jobs / took:8.0f} jobs/s  ({took:.2f} s)", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d"), "concurrency": a.concurrency, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
