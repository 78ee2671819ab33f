"""Celery's canvas: a task with its arguments not sent yet (`add.s(2, 3)`), chains (each result
the next task's first argument), groups (in parallel) and chords (a callback given the list of
its members' results), each sent in one call. A chain's link and a chord's callback are jobs
submitted `after` the ones they wait on, so the server runs them when those finish, whatever
worker ran them, and a failed one fails them (`dependency failed: <id>`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from .errors import InvalidInput
from .results import AioGroupResult, AioResult, AsyncResult, GroupResult

# tasks.py's Task, typed loosely: this module sits below tasks.py and does not import it


@dataclass
class Signature:
    """A task with its arguments, not sent yet (Celery's `add.s(2, 3)`): `.delay()` sends it,
    `|` chains it, `group(...)` and `chord(...)` gather several."""

    task: Any
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)

    def __or__(self, other: "Signature | Chain") -> "Chain":
        return Chain([self]) | other

    def set(self, **options: Any) -> "Signature":
        """The submit's options (`queue`, `priority`, `countdown`, ...), as Celery's `.set()`."""
        self.options.update(options)
        return self

    def delay(self) -> AsyncResult:
        return self.task.apply_async(self.args, self.kwargs, **self.options)

    def apply_async(self, **options: Any) -> AsyncResult:
        return self.task.apply_async(self.args, self.kwargs, **{**self.options, **options})

    async def delay_async(self, **options: Any) -> AioResult:
        """Sends it from asyncio, with every option `delay` carries."""
        return await self.task.apply_async_async(self.args, self.kwargs, **{**self.options, **options})


class Chain:
    """Tasks run one after another, each given the result before it as its first argument
    (Celery's `chain` / `a.s() | b.s()`). `.delay()` sends them all in one call."""

    def __init__(self, steps: list[Signature]):
        self.steps = steps

    def __or__(self, other: "Signature | Chain") -> "Chain":
        return Chain(self.steps + (other.steps if isinstance(other, Chain) else [other]))

    def _specs(self) -> list:
        specs, prev = [], None
        for s in self.steps:
            spec = s.task._job(s.args, s.kwargs, chained=prev, **s.task._celery(s.options))
            specs.append(spec)
            prev = spec[0]
        return specs

    def delay(self) -> AsyncResult:
        app = self.steps[0].task.app
        specs = self._specs()
        app.client.submit_many(specs)
        return AsyncResult(app, specs[-1][0])

    async def delay_async(self) -> AioResult:
        """Sends the chain from asyncio: the last task's result."""
        app = self.steps[0].task.app
        specs = self._specs()
        await app.aio_client().submit_many(specs)
        return AioResult(app, specs[-1][0])


def chain(*steps: Signature) -> Chain:
    return Chain(list(steps))


class Group:
    """Tasks sent at once, run in parallel (Celery's `group`)."""

    def __init__(self, members: Iterable[Signature]):
        self.members = list(members)
        if not self.members:
            raise InvalidInput("a group needs at least one task")

    def _specs(self) -> list:
        return [m.task._job(m.args, m.kwargs, **m.task._celery(m.options)) for m in self.members]

    def delay(self) -> GroupResult:
        app = self.members[0].task.app
        specs = self._specs()
        app.client.submit_many(specs)
        return GroupResult([AsyncResult(app, s[0]) for s in specs])

    async def delay_async(self) -> AioGroupResult:
        app = self.members[0].task.app
        specs = self._specs()
        await app.aio_client().submit_many(specs)
        return AioGroupResult([AioResult(app, s[0]) for s in specs])


def group(*members: Signature | Iterable[Signature]) -> Group:
    if len(members) == 1 and not isinstance(members[0], Signature):
        return Group(members[0])  # group(generator)
    return Group(members)  # type: ignore[arg-type]


def _chord_specs(header: Group | Iterable[Signature], body: Signature) -> list:
    members = header.members if isinstance(header, Group) else list(header)
    if not members:
        raise InvalidInput("a chord needs at least one task before its callback")
    specs = [m.task._job(m.args, m.kwargs, **m.task._celery(m.options)) for m in members]
    specs.append(body.task._job(body.args, body.kwargs, chord_of=[s[0] for s in specs],
                                **body.task._celery(body.options)))
    return specs


def chord(header: Group | Iterable[Signature], body: Signature | None = None) -> Any:
    """Runs `header`'s tasks in parallel, then `body` with the list of their results as its
    first argument, all sent in one call; answers the callback's result. Celery's spelling
    `chord(header)(body)` works too: without `body`, it answers what takes it. A member that
    fails fails the callback (`dependency failed: <id>`)."""
    if body is None:
        members = list(header) if not isinstance(header, Group) else header
        return lambda body: chord(members, body)
    specs = _chord_specs(header, body)
    body.task.app.client.submit_many(specs)
    return AsyncResult(body.task.app, specs[-1][0])


async def chord_async(header: Group | Iterable[Signature], body: Signature) -> AioResult:
    """`chord` sent from asyncio: the callback's result."""
    specs = _chord_specs(header, body)
    await body.task.app.aio_client().submit_many(specs)
    return AioResult(body.task.app, specs[-1][0])
