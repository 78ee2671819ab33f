"""One scenario's answers from hero-py (tests/tests/vocabulary.rs compares them with Rust's and
Node's): queue `voc`'s counts, its policy as shown, and parent `flow-p`'s children's results,
as JSON on stdout. Usage: vocabulary.py <redis url>"""
import json
import sys

import hero

q = hero.Queue("voc", sys.argv[1])
kids = q.client.children("flow-p")
print(json.dumps({
    "counts": q.job_counts().as_dict(),
    "policy": q.policy(),
    "children": {k: {"status": v.status, "output": v.output, "error": v.error} for k, v in kids.items()},
}))
