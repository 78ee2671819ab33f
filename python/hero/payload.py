"""A job's payload as MessagePack, as every language reads it: `pack(value)` for `submit(payload=)`
and `unpack(job.payload)` (or `job.data`) for a handler. Each Python type travels as MessagePack's
own: `datetime` as the timestamp extension (a naive one read as UTC, the package's rule), `bytes`
as `bin`, a `dict` as a map (any keys), an `int` as a 64-bit integer; so a Node producer's `Date`,
`Buffer`, `Map` and `BigInt` arrive here as an aware `datetime`, `bytes`, `dict` and `int`, and
come back to Node as what they were."""
from __future__ import annotations

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
