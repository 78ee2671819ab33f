"""The job record (docs/protocol.md §3) as Python sees it, and what calls answer."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

DEFAULT_TIMEOUT_S = 300


# The record's fields this version knows (docs/protocol.md §3), with the bridge's bookkeeping.
KNOWN_FIELDS = frozenset((
    "id", "status", "script", "script_type", "group", "instance", "priority", "timeout",
    "retries", "attempts", "run_at", "concurrent", "reply", "created_at", "updated_at",
    "started_at", "finished_at", "env_vars", "prerequisites", "dependencies", "dependents",
    "tags", "caller_id", "context_id", "worker_id", "log_path", "traceparent", "unique",
    "unique_ttl", "limit_key", "output", "error", "trace", "lease", "entry", "payload", "deps_left",
    "batch", "progress", "log", "bridge", "bridge_stop", "bridge_taken", "dead", "backoff", "keep",
    "keep_failed", "value"
))
# a prerequisite's result in its dependent's record: `result:<id>` = `<status>:<text>`, and
# (protocol 33) `value:<id>` = its value's MessagePack bytes when it returned one
RESULT_PREFIX = "result:"
VALUE_PREFIX = "value:"
# the record's binary fields: read as bytes, never decoded as text
BINARY_FIELDS = frozenset(("payload", "value"))


def _binary(name: str) -> bool:
    return name in BINARY_FIELDS or name.startswith(VALUE_PREFIX)


@dataclass(frozen=True)
class ChildResult:
    """A prerequisite's end as its dependent keeps it: status 'finished' (with `output`, the
    value it returned by the reading rule: its `value:<id>` bytes unpacked when it has them,
    else its text; the text itself is `output_text`) or 'error' (with `error`); read from a
    producer, a child not yet ended has its status only."""

    status: str
    output: Any = None
    error: str | None = None
    # the text as the record keeps it (a value's JSON); not compared: `output` is the result
    output_text: str | None = field(default=None, compare=False)

    @classmethod
    def parse(cls, text: str, value: bytes | None = None) -> "ChildResult | None":
        status, sep, rest = text.partition(":")
        if not sep or status not in ("finished", "error"):
            return None
        if status == "finished":
            return cls(status, _read(rest, value), None, rest)
        return cls(status, None, rest)


def _read(text: str | None, value: bytes | None) -> Any:
    """The reading rule, with a `value` that does not decode read as the text (said once)."""
    from .payload import value_of
    try:
        return value_of(text, value)
    except Exception as e:  # bytes that are not MessagePack: a foreign writer's; its text stands
        import logging
        logging.getLogger("hero").warning("a record's value (%d bytes) is not MessagePack (%s): its output "
                                          "text is read instead", len(value or b""), e)
        return text


@dataclass(frozen=True)
class Progress:
    percent: float
    message: str = ""


@dataclass
class Job:
    """A job record, read as the protocol describes it (absent fields at their defaults)."""

    id: str
    status: str
    script: str
    script_type: str | None = None
    group: str | None = None
    instance: str | None = None
    priority: int = 5
    timeout: int | None = None
    retries: int = 0
    attempts: int = 0
    env_vars: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    prerequisites: list[str] = field(default_factory=list)
    # the value the handler returned, by the reading rule: the record's `value` unpacked when it
    # has one (protocol 33: a dict, a list, None, a datetime, bytes, a number), else its `output`
    # text as a str (a handler that returned text, an older or foreign worker); None without one
    output: Any = None
    error: str | None = None
    # the last failed attempt's traceback (a Python traceback, a Node stack, a Rust error chain),
    # as its worker recorded it: kept when a retry then succeeds
    trace: str | None = None
    worker_id: str = ""
    lease: str | None = None
    created_at: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    batch: str | None = None
    unique: str | None = None
    limit_key: str | None = None
    progress: Progress | None = None
    log: list[str] = field(default_factory=list)
    payload: bytes | None = None
    reply: str = ""
    backoff: dict | None = None
    keep: int | None = None
    keep_failed: int | None = None
    results: dict[str, ChildResult] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict, repr=False)
    # the record's `output` text as written (a value's JSON, for readers older than 33)
    output_text: str | None = None
    # the record's `value` bytes (MessagePack), None when the handler returned text
    value: bytes | None = field(default=None, repr=False)

    @property
    def unknown_fields(self) -> dict[str, str]:
        """Fields this version does not know, as read: a newer version wrote them. They are
        not bad input (a job carrying them runs), and nothing here removes them."""
        return {k: v for k, v in self.raw.items() if k not in KNOWN_FIELDS
                and not (k.startswith(RESULT_PREFIX) and k[len(RESULT_PREFIX):] in self.results)
                and not (k.startswith(VALUE_PREFIX) and k[len(VALUE_PREFIX):] in self.results)}

    @property
    def data(self) -> Any:
        """The payload decoded (`hero.unpack`): a Node `Date` as an aware datetime, a `Buffer` as
        bytes, a `Map` as a dict, a `BigInt` as an int; None without one."""
        from .payload import unpack
        return unpack(self.payload)

    @property
    def time_limit(self) -> int:
        return self.timeout if self.timeout is not None else DEFAULT_TIMEOUT_S

    @property
    def ended(self) -> bool:
        return self.status in ("finished", "error")

    @classmethod
    def from_record(cls, job_id: str, rec: dict[Any, Any]) -> "Job":
        """A record as HGETALL gives it (bytes or text); the binary fields (`payload`, `value`,
        `value:<id>`) stay bytes. Every worker reads one a job: the fields a plain job lacks cost
        nothing here."""
        text: dict[str, str] = {}
        binary: dict[str, bytes] = {}
        results_at: list[str] = []
        for k, v in rec.items():
            if k.__class__ is bytes:
                k = k.decode("utf-8", "replace")
            if k in BINARY_FIELDS or k.startswith(VALUE_PREFIX):
                binary[k] = v if v.__class__ is bytes else str(v).encode()
                continue
            text[k] = v.decode("utf-8", "replace") if v.__class__ is bytes else v
            if k.startswith(RESULT_PREFIX):
                results_at.append(k)
        get = text.get

        def num(name: str, default: int | None) -> int | None:
            v = get(name)
            return int(v) if v and v.isdigit() else default

        def lst(name: str) -> list[str]:
            v = get(name)
            if not v:
                return []
            try:
                out = json.loads(v)
            except ValueError:
                return []
            return [str(x) for x in out] if isinstance(out, list) else []

        progress = None
        if get("progress"):
            try:
                p = json.loads(text["progress"])
                progress = Progress(float(p.get("percent", 0)), str(p.get("message", "")))
            except (ValueError, AttributeError):
                progress = None
        env: Any = {}
        if get("env_vars"):
            try:
                env = json.loads(text["env_vars"])
            except ValueError:
                env = {}
        status = get("status", "")
        results = {}
        for k in results_at:
            r = ChildResult.parse(text[k], binary.get(VALUE_PREFIX + k[len(RESULT_PREFIX):]))
            if r is not None:
                results[k[len(RESULT_PREFIX):]] = r
        backoff = None
        if get("backoff"):
            try:
                backoff = json.loads(text["backoff"])
            except ValueError:
                backoff = None
        attempts = num("attempts", None)
        if attempts is None:
            attempts = 1 if status in ("started", "finished", "error") and get("started_at") else 0
        output_text = get("output")
        value = binary.get("value")
        return cls(
            id=get("id") or job_id,
            status=status,
            script=get("script", ""),
            script_type=get("script_type"),
            group=get("group") or None,
            instance=get("instance") or None,
            priority=num("priority", 5) or 0,
            timeout=num("timeout", None),
            retries=num("retries", 0) or 0,
            attempts=attempts,
            env_vars=env if isinstance(env, dict) else {},
            tags=lst("tags"),
            prerequisites=lst("prerequisites") or lst("dependencies"),
            output=_read(output_text, value) if output_text is not None or value is not None else None,
            error=get("error"),
            trace=get("trace") or None,
            worker_id=get("worker_id", ""),
            lease=get("lease") or None,
            created_at=get("created_at", ""),
            started_at=get("started_at"),
            finished_at=get("finished_at"),
            batch=get("batch") or None,
            unique=get("unique") or None,
            limit_key=get("limit_key") or None,
            progress=progress,
            log=lst("log"),
            payload=binary.get("payload"),
            reply=get("reply", ""),
            backoff=backoff if isinstance(backoff, dict) else None,
            keep=num("keep", None),
            keep_failed=num("keep_failed", None),
            results=results,
            raw=text,
            output_text=output_text,
            value=value,
        )


@dataclass(frozen=True)
class Submitted:
    id: str
    created: bool
    status: str
    duplicate_of: str | None = None


@dataclass(frozen=True)
class Result:
    """How a job ended: `status` is 'finished' or 'error'; `output` the value it returned by
    the reading rule (`Job.output`), `output_text` the record's text."""

    id: str
    status: str
    output: Any = None
    error: str = ""
    output_text: str = field(default="", compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "finished"


@dataclass(frozen=True)
class BatchInfo:
    name: str
    total: int
    pending: int
    finished: int
    failed: int
    state: str
    complete_id: str | None = None
    success_id: str | None = None
