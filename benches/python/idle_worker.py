"""One idle hero-py worker for benches/idle-duties: serves a type no job is submitted to, with
its duties on or off (HERO_DUTIES=on|off), until killed."""
import os
import sys

import hero


def handler(job, ctx):
    return job.script


if __name__ == "__main__":
    hero.Worker(handler, ["idle"], sys.argv[1], concurrency=1,
                duties=os.environ.get("HERO_DUTIES", "on") != "off").run()
