#!/usr/bin/env python3
"""Python workers side by side on one Redis: hero-py, RQ and Celery each run the same N trivial
jobs (each one INCRs a counter, the same one Redis call for all three), queued before the
worker starts. The figure is jobs per second of the jobs themselves: from the moment the
counter passes a tenth of N (the worker started, imported, connected and running: its start-up
is not the jobs') to the last job's counter, read every 2 ms; how long the start took is shown
apart. Workers as their users run them: hero-py one process of `--concurrency` threads, and its
process pool of 2 (`pool="process"`, one child a core) beside Celery's prefork of 2 (its default
on this machine's 2 cores); RQ `rq worker --burst` (a fork per job, its default) and its
SimpleWorker (no fork); Celery one worker process with the threads pool of `--concurrency`.
Then CPU-bound jobs (a sum of squares each) on 2 processes: hero-py's process pool beside
Celery's prefork, and hero-py's threads (held by the GIL) for contrast.
What each does a job is not the same: hero-py records every job's result and lease in Redis
(fenced, retried, timed), Celery's tasks here ignore their result (`ignore_result=True`) and are
acknowledged when received (its default), RQ keeps each job's result.
Every row but RQ's runs `--rounds` times (3), the rows interleaved, each on a fresh Redis; a
row's figure is its median. Prints a table and writes JSON (--out)."""
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


def wait_count(r, n, limit, started):
    """Waits until the counter reaches `n` (the worker was started at monotonic `started`);
    answers (jobs measured, their seconds, start-up seconds): measured from the moment the
    counter passed a tenth of `n`, so the worker's start-up and first fetches are not counted."""
    deadline = time.monotonic() + limit
    warm = max(1, n // 10)
    done = 0
    t0 = n0 = None
    while done < n:
        done = int(r.get(COUNTER) or 0)
        now = time.monotonic()
        if t0 is None and done >= warm:
            t0, n0 = now, done
        if now > deadline:
            raise SystemExit(f"only {done} of {n} jobs ran within {limit} s")
        if done < n:
            time.sleep(0.002)
    t1 = time.monotonic()
    return n - n0, max(t1 - t0, 1e-6), t0 - started


HERO_NOOP = """
import os, redis
r = redis.Redis.from_url(os.environ["BENCH_URL"])
def tick(job, ctx):
    r.incr("bench:done")
"""


def run_hero(url, r, n, concurrency, pool, tmp):
    """No-op jobs on hero-py's threads or its process pool (the handler in a module, as a process
    pool's children import it)."""
    import hero
    with open(os.path.join(tmp, "bench_noop.py"), "w") as f:
        f.write(HERO_NOOP)
    c = hero.Client(url)
    for k in range(0, n, 500):
        c.submit_many([c.job("x", "bench") for _ in range(min(500, n - k))])
    code = ("import hero, os, bench_noop\n"
            f"hero.Worker(bench_noop.tick, ['bench'], os.environ['BENCH_URL'], concurrency={concurrency},"
            f" pool='{pool}').run()\n")
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-c", code], cwd=tmp, env=dict(os.environ, BENCH_URL=url, PYTHONPATH=tmp))
    took = wait_count(r, n, 600, t0)
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
    took = wait_count(r, n, 600, t0)
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
    took = wait_count(r, n, 600, t0)
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
    took = wait_count(r, n, 900, t0)
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
    took = wait_count(r, n, 600, t0)
    p.terminate()
    p.wait(timeout=30)
    return took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--out")
    ap.add_argument("--cpu-jobs", type=int, default=400, help="CPU-bound jobs (0: none)")
    ap.add_argument("--cpu-loops", type=int, default=300000, help="squares summed by each CPU-bound job")
    ap.add_argument("--cpu-concurrency", type=int, default=2, help="processes (cores) for the CPU-bound rows")
    ap.add_argument("--only-cpu", action="store_true")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of every row but RQ's, interleaved; each row's median is its figure (the machine's "
                         "speed moves between rows)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="hero-peers-tasks-")
    with open(os.path.join(tmp, "bench_tasks.py"), "w") as f:
        f.write(TASKS)
    rows = []
    trivial = [
        ("hero-py (threads)", lambda url, r: run_hero(url, r, a.jobs, a.concurrency, "thread", tmp)),
        (f"hero-py (processes, {a.cpu_concurrency})",
         lambda url, r: run_hero(url, r, a.jobs, a.cpu_concurrency, "process", tmp)),
        ("RQ (fork per job, default)", lambda url, r: run_rq(url, r, a.jobs, False, tmp)),
        ("RQ SimpleWorker (no fork)", lambda url, r: run_rq(url, r, a.jobs, True, tmp)),
        ("Celery (threads pool)", lambda url, r: run_celery(url, r, a.jobs, a.concurrency, "threads", tmp)),
        (f"Celery (prefork, {a.cpu_concurrency}, default)",
         lambda url, r: run_celery(url, r, a.jobs, a.cpu_concurrency, "prefork", tmp)),
    ]
    # CPU-bound jobs at the same concurrency: hero-py's process pool beside Celery's prefork
    cc, cl, cj = a.cpu_concurrency, a.cpu_loops, a.cpu_jobs
    cpu = [
        (f"CPU-bound: hero-py (processes, {cc})", lambda url, r: run_hero_cpu(url, r, cj, cc, cl, "process", tmp)),
        (f"CPU-bound: Celery (prefork, {cc})", lambda url, r: run_celery_cpu(url, r, cj, cc, cl, tmp)),
        (f"CPU-bound: hero-py (threads, {cc})", lambda url, r: run_hero_cpu(url, r, cj, cc, cl, "thread", tmp)),
    ] if cj > 0 else []
    plan = [x for x in ([] if a.only_cpu else trivial) + cpu]
    runs: dict[str, list[dict]] = {name: [] for name, _ in plan}
    for k in range(max(1, a.rounds)):
        for name, run in plan:
            if k > 0 and name.startswith("RQ"):
                continue  # far behind, and its fork-per-job row alone takes half a minute
            n_jobs = cj if name.startswith("CPU") else a.jobs
            p, d, url, r = start_redis()
            try:
                measured, took, start = run(url, r)
            finally:
                p.kill()
                p.wait()
                shutil.rmtree(d, ignore_errors=True)
            runs[name].append({"jobs": n_jobs, "measured": measured, "seconds": round(took, 3),
                               "jobs_per_s": round(measured / took), "start_s": round(start, 2)})
            print(f"round {k + 1}: {name:38} {measured / took:8.0f} jobs/s  ({measured} jobs in {took:.2f} s, after "
                  f"{start:.2f} s of start-up)", flush=True)
    for name, _ in plan:
        got = sorted(runs[name], key=lambda x: x["jobs_per_s"])
        mid = dict(got[len(got) // 2])
        rows.append({"worker": name, **mid, "rounds": [x["jobs_per_s"] for x in runs[name]]})
    print()
    for x in rows:
        print(f"{x['worker']:38} {x['jobs_per_s']:8} jobs/s  (median of {x['rounds']})")
    best = max((x["jobs_per_s"] for x in rows if x["worker"].startswith("Celery")), default=0)
    cpu_celery = next((x["jobs_per_s"] for x in rows if x["worker"].startswith("CPU-bound: Celery")), 0)
    for x in rows:
        if x["worker"].startswith("hero-py") and best:
            x["vs_celery_best"] = round(x["jobs_per_s"] / best, 2)
        elif x["worker"].startswith("CPU-bound: hero-py") and cpu_celery:
            x["vs_celery"] = round(x["jobs_per_s"] / cpu_celery, 2)
    for x in rows:
        if "vs_celery_best" in x or "vs_celery" in x:
            print(f"{x['worker']:38} {x.get('vs_celery_best', x.get('vs_celery'))}x Celery's "
                  f"{'best pool' if 'vs_celery_best' in x else 'prefork'}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d"), "concurrency": a.concurrency, "rounds": a.rounds,
                       "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
