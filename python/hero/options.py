"""The values an option takes beyond plain text, read as the Rust crates read them: durations
(`500ms`, `30s`, `5m`, a number of seconds, a timedelta), back-off (`Backoff`: fixed or
exponential, with jitter; `exponential:1s:1m,jitter=0.2` as the CLI writes it) and rates
(`100/s`, `10/1m`). A value that does not read fails at once with `InvalidInput`, naming it."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .errors import InvalidInput

_UNITS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h|d)\s*$")


def duration_ms(what: str, v: Any) -> int:
    """`v` (seconds as a number, a timedelta, or text such as `500ms`, `30s`, `1h`) in ms."""
    if isinstance(v, bool):
        raise InvalidInput(f"{what} {v!r} is not a duration: give seconds, a timedelta or text such as '30s'")
    if isinstance(v, timedelta):
        ms = v.total_seconds() * 1000
    elif isinstance(v, (int, float)):
        ms = float(v) * 1000
    elif isinstance(v, str):
        total, rest = 0.0, v.strip()
        # humantime's compound form, e.g. 1h30m
        for num, unit in re.findall(r"(\d+(?:\.\d+)?)\s*(ms|sec|min|s|m|h|d)", rest):
            total += float(num) * _UNITS[unit]
        if not rest or re.sub(r"(\d+(?:\.\d+)?)\s*(ms|sec|min|s|m|h|d)", "", rest).strip():
            raise InvalidInput(f"{what} {v!r} is not a duration: write e.g. 500ms, 30s, 5m or 1h30m")
        ms = total
    else:
        raise InvalidInput(f"{what} {v!r} is not a duration: give seconds, a timedelta or text such as '30s'")
    if ms < 0 or ms != ms:
        raise InvalidInput(f"{what} {v!r} is negative")
    return int(round(ms))


@dataclass(frozen=True)
class Backoff:
    """The delay before each retry: `fixed` (always `base` seconds) or `exponential` (`base`
    doubling per attempt, at most `cap`), each varied by up to `jitter` (0 to 1) either way.
    The server applies the longer of a job's and its queue policy's (docs/operations.md)."""

    kind: str = "exponential"
    base: float = 1.0
    cap: float | None = None
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "exponential"):
            raise InvalidInput(f"back-off kind {self.kind!r}: use 'fixed' or 'exponential'")
        if not 0 <= self.jitter <= 1:
            raise InvalidInput(f"back-off jitter {self.jitter!r} is not from 0 to 1")

    @classmethod
    def parse(cls, text: str) -> "Backoff":
        """`fixed:<delay>` or `exponential:<base>[:<cap>]`, optionally `,jitter=<0..1>`."""
        spec, _, jitter = text.partition(",jitter=")
        parts = spec.split(":")
        kind = {"exp": "exponential"}.get(parts[0], parts[0])
        if kind not in ("fixed", "exponential") or len(parts) not in (2, 3):
            raise InvalidInput(f"back-off {text!r}: give fixed:<delay> or exponential:<base>[:<cap>], "
                               "optionally ,jitter=0.2")
        try:
            j = float(jitter) if jitter else 0.2
        except ValueError:
            raise InvalidInput(f"back-off {text!r}: jitter is not a number from 0 to 1") from None
        base = duration_ms("back-off", parts[1]) / 1000
        cap = duration_ms("back-off cap", parts[2]) / 1000 if len(parts) == 3 else None
        return cls(kind, base, cap, j)

    @classmethod
    def of(cls, v: Any) -> "Backoff":
        """A Backoff, its CLI text, or its JSON form (`{kind, base_ms, cap_ms, jitter}`)."""
        if isinstance(v, Backoff):
            return v
        if isinstance(v, str):
            return cls.parse(v)
        if isinstance(v, dict):
            unknown = set(v) - {"kind", "base_ms", "cap_ms", "jitter"}
            if unknown:
                raise InvalidInput(f"back-off field {sorted(unknown)[0]!r} is not one of kind, base_ms, cap_ms, jitter")
            cap = v.get("cap_ms")
            return cls(v.get("kind", "exponential"), v.get("base_ms", 1000) / 1000,
                       None if cap is None else cap / 1000, v.get("jitter", 0.2))
        raise InvalidInput(f"back-off {v!r}: give a hero.Backoff, text such as 'exponential:1s:1m' or its JSON form")

    def to_json(self) -> dict[str, Any]:
        base = int(round(self.base * 1000))
        cap = int(round(self.cap * 1000)) if self.cap is not None else (base if self.kind == "fixed" else 3_600_000)
        return {"kind": self.kind, "base_ms": base, "cap_ms": max(cap, base), "jitter": self.jitter}


def rate(what: str, v: Any) -> dict[str, int]:
    """`100/s`, `10/1m`, `(max, seconds)` or `{max, per_ms}` as the policy stores it."""
    if isinstance(v, dict) and set(v) == {"max", "per_ms"}:
        mx, per = v["max"], v["per_ms"]
    elif isinstance(v, tuple) and len(v) == 2:
        mx, per = v[0], duration_ms(what, v[1])
    elif isinstance(v, str) and "/" in v:
        m, _, w = v.partition("/")
        w = w.strip()
        # Celery's spelled-out windows: 10/minute is 10/m
        w = {"second": "s", "sec": "s", "minute": "m", "min": "m", "hour": "h", "day": "d"}.get(w, w)
        try:
            mx = int(m)
        except ValueError:
            raise InvalidInput(f"{what} {v!r}: the max is not a whole number; write e.g. 100/s") from None
        per = duration_ms(what, w if w[:1].isdigit() else "1" + w)
    else:
        raise InvalidInput(f"{what} {v!r}: write <max>/<window>, e.g. 100/s, 10/1m or 5/500ms")
    if not isinstance(mx, int) or mx < 1 or per < 1:
        raise InvalidInput(f"{what} {v!r}: the max and the window are each at least 1")
    return {"max": mx, "per_ms": per}
