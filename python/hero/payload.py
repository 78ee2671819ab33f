"""A job's payload as MessagePack, as every language reads it: `pack(value)` for `submit(payload=)`
and `unpack(job.payload)` (or `job.data`) for a handler. Each Python type travels as MessagePack's
own: `datetime` as the timestamp extension (a naive one read as UTC, the package's rule), `bytes`
as `bin`, a `dict` as a map (any keys), an `int` as a 64-bit integer; so a Node producer's `Date`,
`Buffer`, `Map` and `BigInt` arrive here as an aware `datetime`, `bytes`, `dict` and `int`, and
come back to Node as what they were."""
from __future__ import annotations

import base64
import json
import math
from datetime import datetime, timezone
from typing import Any

import msgpack

from .errors import InvalidInput


def _default(o: Any) -> Any:
    if isinstance(o, datetime) and o.tzinfo is None:
        return o.replace(tzinfo=timezone.utc)
    if isinstance(o, (set, frozenset)):
        raise InvalidInput(f"a payload holds a {o.__class__.__name__}: give a list (MessagePack has no sets)")
    raise InvalidInput(f"a payload holds a {o.__class__.__name__} ({o!r:.60}), which MessagePack cannot carry: "
                       "give dict, list, str, bytes, int, float, bool, None or datetime")


def pack(value: Any) -> bytes:
    """MessagePack bytes of `value` (what `submit(payload=)` takes)."""
    try:
        return msgpack.packb(value, use_bin_type=True, datetime=True, default=_default)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidInput(f"the payload cannot be MessagePack: {e}") from None


def unpack(raw: bytes | None) -> Any:
    """The value MessagePack bytes hold: str as str, bin as bytes, a timestamp as an aware
    `datetime` (UTC), a map as a dict (keys of any type); None for no payload."""
    if raw is None:
        return None
    return msgpack.unpackb(raw, raw=False, timestamp=3, strict_map_key=False)


# -- a handler's return value (protocol 33) ---------------------------------------------------
# A value that is not plain text travels as the payload does: its MessagePack bytes are the
# record's `value`, and its JSON text the record's `output`, for readers older than 33 (and the
# CLI): a datetime as ISO 8601 text, bytes as base64 text, None as null. A `str` is the `output`
# alone, as before. THE READING RULE, for every reader: `unpack(value)` when the record has
# `value`, else the `output` text as a str (None without one): `value_of`.


def _returned(o: Any) -> Any:
    if isinstance(o, datetime) and o.tzinfo is None:
        return o.replace(tzinfo=timezone.utc)
    if isinstance(o, (set, frozenset)):
        raise InvalidInput(f"the handler returned a value holding a {o.__class__.__name__}, which MessagePack "
                           "cannot carry: return a list")
    raise InvalidInput(f"the handler returned a value holding a {o.__class__.__name__} ({o!r:.60}), which "
                       "MessagePack cannot carry: return dict, list, str, bytes, int, float, bool, None or datetime")


def _iso(d: datetime) -> str:
    d = (d if d.tzinfo is not None else d.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"


def _jsonable(v: Any) -> Any:
    """`v` as JSON types: a datetime as ISO 8601 text, bytes as base64 text, a float that JSON
    lacks (NaN, infinities) as null, a map key that is not text as its JSON."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, datetime):
        return _iso(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            key = _jsonable(k)
            out[key if isinstance(key, str) else json.dumps(key, separators=(",", ":"))] = _jsonable(x)
        return out
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, msgpack.ExtType):
        return {"ext": v.code, "base64": base64.b64encode(v.data).decode("ascii")}
    return str(v)


class AsValue:
    """A return value recorded as a value even when it is a `str`: a task's (its JSON text in
    `output`, as hero-py before 1.1 wrote every task result, so a producer of 0.29 that
    json.loads a task's output reads it during a rolling upgrade)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def output_of(value: Any) -> tuple[str, bytes | None]:
    """What a handler's return value records: (the `output` text, the `value` bytes or None).
    A `str` is the text alone (unless wrapped in AsValue, a task's); any other value its JSON
    text and its MessagePack bytes. A value MessagePack cannot carry (a set, an object) is
    InvalidInput naming its type: never dropped, never a silent `str()`."""
    if isinstance(value, AsValue):
        value = value.value
    elif isinstance(value, str):
        return str(value), None
    try:
        raw = msgpack.packb(value, use_bin_type=True, datetime=True, default=_returned)
    except InvalidInput:
        raise
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidInput(f"the handler returned a {value.__class__.__name__} that MessagePack cannot carry: "
                           f"{e}") from None
    return json.dumps(_jsonable(value), separators=(",", ":"), ensure_ascii=False), raw


def value_of(output: str | bytes | None, value: bytes | None = None) -> Any:
    """A record's output by the reading rule: `unpack(value)` when it has `value`, else its
    `output` text as a str (None without one)."""
    if value is not None:
        return unpack(value)
    if isinstance(output, bytes):
        return output.decode("utf-8", "replace")
    return output
