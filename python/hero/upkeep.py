"""Nothing waits silently (issue 59), as the Rust client says it: a producer that submits a job
only the queue's upkeep can move (a delayed job, one with a retry budget), or stores a recurring
job (its ticks are fired by the upkeep too, protocol 32), into a namespace where no live process
does that upkeep (no holder of the duty lease: no worker with duties on, no `hero broker`) is
told once, as a WARNING of the logger `hero` naming the namespace, the Redis and its db. Looked
at once per client, at its first such submit or `cron_add` (one EXISTS, that once)."""
from __future__ import annotations

import logging
import threading
from typing import Any, Iterable, Mapping
from urllib.parse import quote

from .protocol import now_ms

log = logging.getLogger("hero")

HIDDEN = "***"

UPKEEP_WARNING = (
    "no live process does the queue's upkeep in this namespace (no worker with duties on, no `hero broker`, "
    "on this Redis and db): delayed jobs, retries and recurring jobs' ticks wait until one runs. Start a "
    "worker (workers do it by default) or `hero broker` with the same URL, db and namespace")


def shown_url(r: Any) -> str:
    """The Redis a connection (`redis.Redis`, `redis.asyncio.Redis`, or a cluster client) talks
    to, as a URL with its db and its password hidden: for messages and logs."""
    pool = getattr(r, "connection_pool", None)
    kw: Mapping[str, Any] = getattr(pool, "connection_kwargs", None) or {}
    if not kw:
        try:  # a cluster client: its default node (a cluster has db 0 only)
            node = r.get_default_node()
            return f"redis://{node.host}:{node.port}/0 (cluster)"
        except Exception:
            return "(unknown Redis)"
    user, password = kw.get("username"), kw.get("password")
    auth = ""
    if user and password:
        auth = f"{quote(str(user), safe='')}:{HIDDEN}@"
    elif password:
        auth = f"{HIDDEN}@"
    elif user:
        auth = f"{quote(str(user), safe='')}@"
    db = kw.get("db", 0) or 0
    if kw.get("path"):
        return f"unix://{auth}{kw['path']}?db={db}"
    cls = getattr(pool, "connection_class", None)
    scheme = "rediss" if cls is not None and "SSL" in cls.__name__ else "redis"
    host = kw.get("host", "localhost")
    if ":" in str(host):
        host = f"[{host}]"
    return f"{scheme}://{auth}{host}:{kw.get('port', 6379)}/{db}"


def needs_upkeep(jobs: Iterable[tuple[str, str, int, dict[str, Any]]]) -> bool:
    """Whether one of `jobs` waits on the upkeep at some point: a run-at in the future, or a
    retry budget."""
    now = now_ms()
    for _, _, run_at, fields in jobs:
        if run_at and int(run_at) > now:
            return True
        retries = fields.get("retries")
        if retries not in (None, "", "0", 0):
            return True
    return False


class Upkeep:
    """Whether a client has looked yet (each client looks once)."""

    def __init__(self) -> None:
        self._looked = False
        self._lock = threading.Lock()

    def _first(self) -> bool:
        """True for the one caller that looks (the first with something that needs the upkeep)."""
        if self._looked:
            return False
        with self._lock:
            if self._looked:
                return False
            self._looked = True
            return True

    def note(self, r: Any, keys: Any, jobs) -> None:
        """Looks once (threaded client), when one of `jobs` needs the upkeep."""
        # the flag first: once looked, a submit pays nothing more
        if not self._looked and needs_upkeep(jobs):
            self.needed(r, keys)

    def needed(self, r: Any, keys: Any) -> None:
        """Looks once (threaded client): something this client stored waits on the upkeep (a
        recurring job's ticks, or a job of `note`)."""
        if not self._first():
            return
        try:
            held = r.exists(keys.duties())
        except Exception as e:  # the call itself says what is wrong with Redis
            log.debug("could not look for the duty lease: %s", e)
            return
        if not held:
            say_no_upkeep(keys, r)

    async def note_async(self, r: Any, keys: Any, jobs) -> None:
        """Looks once (asyncio client), when one of `jobs` needs the upkeep."""
        if self._looked or not needs_upkeep(jobs) or not self._first():
            return
        try:
            held = await r.exists(keys.duties())
        except Exception as e:
            log.debug("could not look for the duty lease: %s", e)
            return
        if not held:
            say_no_upkeep(keys, r)


def say_no_upkeep(keys: Any, r: Any) -> None:
    log.warning("%s (namespace %s, Redis %s)", UPKEEP_WARNING, keys.prefix, shown_url(r))
