"""The package's errors: what went wrong, from the caller's side."""
from __future__ import annotations

import redis


class HeroError(Exception):
    """A call failed; the message says what was wrong and what to do."""

    @staticmethod
    def from_server(e: redis.ResponseError) -> "HeroError":
        text = str(e)
        for code, cls in (("HERO_INVALID_JOB", InvalidJob), ("HERO_JOB_NOT_FOUND", JobNotFound),
                          ("HERO_BAD_ARG", InvalidInput)):
            if code in text:
                return cls(text.split(code, 1)[1].strip())
        if text.startswith("OOM"):
            return HeroError("Redis is full (maxmemory with noeviction): the job was not accepted; "
                             "free memory or raise maxmemory")
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
