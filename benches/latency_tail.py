#!/usr/bin/env python3
"""Where the latency scenario's tail comes from, from `hero-bench --latency-trace FILE`.

Each line of the trace is one job: when it was made, when its submit was answered and when it
started (microseconds since the epoch). For the jobs slower than --over ms (submit→start) this
prints how many there were and which part of the path held each one most:
- made late: the job was made after a gap of 3 ms or more in the 1 ms ticks, so the benchmark
  process itself did not run (a page fault, another task or the hypervisor took the core);
- answer: the submit's answer took longer than the rest (Redis, or the process reading it);
- worker: the answer came promptly and the start did not (wake-up, fetch, record read);
and the episodes: runs of slow jobs less than 20 ms apart, with their length.

Usage: benches/latency_tail.py FILE [--over MS]
"""
import argparse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--over", type=float, default=5.0, help="slow means above this many ms")
    args = ap.parse_args()
    rows = []
    with open(args.trace) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            made, answered, started = map(int, line.split())
            rows.append((made, answered, started))
    if not rows:
        print("no jobs in", args.trace)
        return
    rows.sort()
    over = args.over * 1000
    gap_before = [0] + [rows[i][0] - rows[i - 1][0] for i in range(1, len(rows))]
    slow = [(r, g) for r, g in zip(rows, gap_before) if r[2] - r[0] > over]
    lat = sorted(r[2] - r[0] for r in rows)
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] / 1000
    print(f"{len(rows)} jobs; submit→start p50 {p(0.5):.2f} ms, p99 {p(0.99):.2f} ms, "
          f"max {lat[-1] / 1000:.2f} ms; {len(slow)} above {args.over} ms")
    made_late = sum(1 for _, g in slow if g >= 3000)
    answer = sum(1 for (m, a, s), g in slow if g < 3000 and a - m >= s - a)
    worker = len(slow) - made_late - answer
    print(f"  held most by: made late {made_late}, the answer {answer}, the worker's path {worker}")
    episodes = []
    for (m, _, _), _ in slow:
        if episodes and m - episodes[-1][1] < 20000:
            episodes[-1][1] = m
            episodes[-1][2] += 1
        else:
            episodes.append([m, m, 1])
    t0 = rows[0][0]
    print(f"  {len(episodes)} episodes; the largest:")
    for a, b, n in sorted(episodes, key=lambda e: -e[2])[:8]:
        print(f"    at {(a - t0) / 1e6:7.3f} s, {(b - a) / 1000:6.1f} ms long, {n} slow jobs")


if __name__ == "__main__":
    main()
