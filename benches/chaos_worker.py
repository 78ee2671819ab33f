"""The chaos soak's worker in Python (hero-py), the twin of `hero-bench worker --ledger`: each job
sleeps `--run-ms`, writes `ran <id> <token>` to its ledger and returns the token; each completion
the server accepted writes `accepted <id> <token>`. Prints `ready`, `started <id> <ms>` and
`done <id>` as the Rust one does (benches/src/chaos/ledger.rs says why the ledger is the judge).
It uses only what hero-py has had since 0.28, so the upgrade phase runs it under an earlier
release's package as well as this one's."""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import hero


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--redis-url", required=True)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--presence-ms", type=int, default=1000)
    p.add_argument("--lease-ms", type=int, default=2000)
    p.add_argument("--run-ms", type=int, default=20)
    p.add_argument("--ledger", required=True)
    a = p.parse_args()
    fd = os.open(a.ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    lock = threading.Lock()
    tokens: dict[str, str] = {}
    runs = [0]

    def line(text: str) -> None:
        # one write per line: a SIGKILL cuts between lines, never inside one
        os.write(fd, text.encode())

    def say(text: str) -> None:
        with lock:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()

    def handler(job, ctx):
        time.sleep(a.run_ms / 1000)
        with lock:
            runs[0] += 1
            token = f"{os.getpid()}-{runs[0]}"
            tokens[job.id] = token
        line(f"ran {job.id} {token}\n")
        return token

    def on_event(kind: str, job_id: str, detail: str) -> None:
        if kind == "ready":
            say("ready")
        elif kind == "started":
            say(f"started {job_id} {int(time.time() * 1000)}")
        # recorded as the job's end (hero-py 0.29 said `completion` / `completed` for both)
        elif kind in ("finished", "failed") or (kind == "completion" and detail == "completed"):
            with lock:
                token = tokens.pop(job_id, "")
            line(f"accepted {job_id} {token}\n")
            say(f"done {job_id}")

    w = hero.Worker(handler, ["bench"], a.redis_url, concurrency=a.concurrency, lease_ms=a.lease_ms,
                    presence_ttl_ms=a.presence_ms, on_event=on_event, instance=f"py-{os.getpid()}")
    w.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
