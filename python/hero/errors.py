"""The package's errors: what went wrong, from the caller's side; and which of Redis's refusals
are an outage (a write refused for a while: full, read-only, too few replicas, ...) rather than
a verdict on the call."""
from __future__ import annotations

import redis
import redis.exceptions as rx

# The codes of a write Redis refuses for a while, not for good (protocol/src/error.rs
# `refused_write`): full (OOM), a failing disk (MISCONF), turned replica (READONLY), too few
# replicas (NOREPLICAS), loading, a busy script, a replica cut from its master, a cluster between
# states. A worker keeps what it was writing and sends it again with back-off.
REFUSED_WRITE = frozenset({"OOM", "MISCONF", "READONLY", "NOREPLICAS", "LOADING", "BUSY", "MASTERDOWN",
                           "TRYAGAIN", "CLUSTERDOWN"})

# redis-py strips the code of the errors it maps to a class of its own: the class says it
_CODE_OF_CLASS = ((rx.OutOfMemoryError, "OOM"), (rx.ReadOnlyError, "READONLY"), (rx.BusyLoadingError, "LOADING"),
                  (rx.TryAgainError, "TRYAGAIN"), (rx.MasterDownError, "MASTERDOWN"),
                  (rx.ClusterDownError, "CLUSTERDOWN"))
_PIPELINE = "of pipeline caused error: "


def error_code(e: BaseException) -> str:
    """The code of a Redis error reply (`OOM`, `NOREPLICAS`, `HERO_BAD_ARG`, ...), '' when it
    has none: from redis-py's class where it stripped the code, else the text's first word (a
    pipeline's error has its command named first: that part is skipped)."""
    for cls, code in _CODE_OF_CLASS:
        if isinstance(e, cls):
            return code
    if not isinstance(e, rx.ResponseError):
        return ""
    text = str(e)
    if _PIPELINE in text:
        text = text.split(_PIPELINE, 1)[1]
    word = text.split(" ", 1)[0]
    return word if word.isupper() else ""


def refused_write(e: BaseException) -> str:
    """The code when `e` is a write Redis refuses for a while (`REFUSED_WRITE`), else ''."""
    code = error_code(e)
    return code if code in REFUSED_WRITE else ""


def transient(e: BaseException) -> bool:
    """True for an outage, not a verdict: Redis out of reach (a broken connection, a timeout)
    or refusing writes for a while. What was being written is kept and sent again."""
    return isinstance(e, (redis.ConnectionError, redis.TimeoutError)) or bool(refused_write(e))


class HeroError(Exception):
    """A call failed; the message says what was wrong and what to do."""

    @staticmethod
    def from_server(e: redis.ResponseError) -> "HeroError":
        text = str(e)
        # HERO_INVALID_CRON: a recurring job's spec or schedule the cron engine refuses (protocol 32)
        for code, cls in (("HERO_INVALID_JOB", InvalidJob), ("HERO_JOB_NOT_FOUND", JobNotFound),
                          ("HERO_BAD_ARG", InvalidInput), ("HERO_INVALID_CRON", InvalidInput)):
            if code in text:
                return cls(text.split(code, 1)[1].strip())
        if "HERO_EVICTING" in text:
            return Evicting(text.split("HERO_EVICTING", 1)[1].strip().split(" ", 1)[0] or "unknown")
        if error_code(e) == "OOM":
            return OutOfMemory(text)
        return HeroError(text)


class InvalidInput(HeroError, ValueError):
    """An argument is not of the form the call takes."""


class OlderProcesses(HeroError):
    """A job uses a feature that live processes of an older protocol would refuse or not serve
    (the brokers' `fleet_lacks`, docs/protocol.md §8): upgrade them, or wait until they are gone."""


class InvalidJob(HeroError):
    """The server refused a job a worker would refuse (nothing of the call was written)."""


class JobNotFound(HeroError, KeyError):
    """No such job (never submitted, or deleted after its retention time)."""

    def __str__(self) -> str:
        return f"no job {self.args[0]} (never submitted, or deleted after its retention time)"


class OutOfMemory(HeroError):
    """Redis reached its maxmemory (policy noeviction) and refused the write: nothing of the
    call was written; send it again once there is room."""

    def __init__(self, detail: str = ""):
        self.detail = detail
        super().__init__(
            "Redis is full: it reached its maxmemory and refuses writes that add data (policy noeviction), so "
            f"nothing was written and the job was not accepted ({detail or 'OOM'}). Free memory (a shorter "
            "--retention-secs, fewer waiting jobs, `hero dead purge`) or raise maxmemory, then send it again")


class Evicting(HeroError):
    """Redis's maxmemory-policy may evict keys, a job's record among them: hero accepts no job
    until it is noeviction, or the brokers accept that policy by name."""

    def __init__(self, policy: str):
        self.policy = policy
        super().__init__(
            f"Redis's maxmemory-policy is {policy}: under it Redis may evict any key, a job's record included, "
            "losing the job without a trace, so hero accepts no job (nothing was written). Set "
            "`maxmemory-policy noeviction` (CONFIG SET or redis.conf; on a managed Redis, its parameter group), "
            f"or accept the loss with `hero broker --accept-eviction {policy}`")


class WorkerFailed(HeroError):
    """A worker could not go on (a thread of it failed for good): it stopped taking jobs, handed
    its jobs back, removed its presence, and `Worker.run` raises this, naming why."""
