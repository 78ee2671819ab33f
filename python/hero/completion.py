"""hero_complete's arguments: a batch of outcomes as the call of each protocol version takes it,
and the grouping by stream that protocol 34 takes (each stream once, the jobs grouped by it, four
arguments a job), with the answers put back in the order the batch was given."""
from __future__ import annotations

from typing import Any, Sequence

from .keys import GROUP, Keys

# an outcome's letter in a hero_complete code (protocol 34)
LETTERS = {"done": "d", "fail": "f", "retry": "r", "abort": "a", "again": "g"}


def by_stream(done: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """`done` grouped by stream, the streams in the order they first come (stable within one),
    and for each outcome of the grouped list its place in `done`: hero_complete answers in the
    grouped order, `in_order` puts the answers back."""
    first: dict[str, int] = {}
    for d in done:
        first.setdefault(d["stream"], len(first))
    order = sorted(range(len(done)), key=lambda i: first[done[i]["stream"]])
    return [done[i] for i in order], order


def in_order(answers: Sequence[Any], order: list[int]) -> list[Any]:
    """The answers of a grouped batch (`by_stream`) in the order of the batch as given."""
    out: list[Any] = [None] * len(order)
    for at, i in enumerate(order):
        out[i] = answers[at]
    return out


def complete_args(k: Keys, version: int, xackdel: str, now_iso: str, consumer: str,
                  done: Sequence[dict[str, Any]]) -> list[Any]:
    """hero_complete's key count, keys and arguments (after the function's name) for `done`,
    grouped by stream (`by_stream`), each a dict: id, stream, lease, outcome, text, retry_at,
    reply, ran_ms, trace, value (see `Protocol.complete`)."""
    keys = [k.delayed(), k.config(), k.retention(), k.events(), k.stats(), k.queues()]
    argv: list[Any] = [GROUP, now_iso, xackdel, " ".join(d["id"] for d in done), consumer, ""]
    if version >= 34:
        counts: dict[str, int] = {}
        for d in done:
            counts[d["stream"]] = counts.get(d["stream"], 0) + 1
        keys += list(counts)
        argv += [k.job_prefix(), " ".join(str(n) for n in counts.values())]
        pairs: list[Any] = []
        for i, d in enumerate(done):
            # the outcome's letter and the run time: most often one code for a whole batch
            argv += [d["lease"], d["id"], f"{LETTERS[d['outcome']]}{d.get('ran_ms', '')}", d["text"]]
            if d["outcome"] != "done" and d["outcome"] != "abort":
                pairs += [f"t{i}", d.get("retry_at", 0)]
            if d.get("reply"):
                pairs += [f"w{i}", d["reply"]]
            if d.get("trace") and d["outcome"] != "done":
                pairs += [i, d["trace"]]
            if d.get("value") is not None and d["outcome"] == "done":
                pairs += [f"v{i}", d["value"]]
        return [len(keys), *keys, *argv, *pairs]
    for d in done:
        # a job no one waits on has its reply list untouched: its stream stands in for it, a
        # key the call holds already (one string a job fewer for Redis to make)
        keys += [k.job(d["id"]), d["stream"], k.reply(d["id"]) if d.get("reply") else d["stream"]]
        argv += [d["lease"], d["outcome"], d["text"], d.get("retry_at", 0), d["id"], d.get("reply", ""),
                 d.get("ran_ms", "")]
    # then (index, trace) per failure that has a trace: a batch of successes sends none (nor
    # does a library before 30, which takes no traces: a test speaks it, as an older release)
    if version >= 30:
        for i, d in enumerate(done):
            if d.get("trace") and d["outcome"] != "done":
                argv += [i, d["trace"]]
    # then (v<index>, value) per success whose handler returned a value, not text (protocol
    # 33): its MessagePack, stored as the record's `value` beside the `output` JSON text
    if version >= 33:
        for i, d in enumerate(done):
            if d.get("value") is not None and d["outcome"] == "done":
                argv += [f"v{i}", d["value"]]
    return [len(keys), *keys, *argv]
