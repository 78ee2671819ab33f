"""Recurring jobs as hero-py stores and shows them (protocol 32): a spec goes through
`hero_cron`, checked by the one cron engine in the function library (the one the duties fire
by), so a schedule or zone it does not take is `InvalidInput` naming what is wrong and nothing is
written; `Queue.cron_next` answers the engine's ticks, which are checked here against Python's
own zoneinfo (summer, winter, the days the clocks change). Against a real redis-server; the
ticks fired by workers alone are test_duties.py's."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
import redis

import hero
from hero.protocol import Duties

AMS = ZoneInfo("Europe/Amsterdam")


def ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def local(y: int, mo: int, d: int, h: int, mi: int = 0) -> int:
    """A wall-clock time in Amsterdam as ms (its first instant when it occurs twice)."""
    return ms(datetime(y, mo, d, h, mi, tzinfo=AMS))


def snapshot(r: redis.Redis) -> dict:
    return {k: r.dump(k) for k in sorted(r.keys("*"))}


def test_a_bad_schedule_zone_or_policy_is_refused_naming_it_and_nothing_is_stored(redis_url):
    q = hero.Queue("cr", redis_url)
    r = q.client.r
    before = snapshot(r)
    cases = [
        ({"schedule": "every soon"}, ["every soon", "not a duration"]),
        ({"schedule": "every 500ms"}, ["shortest interval is 1s"]),
        ({"schedule": "61 * * * *"}, ["61 * * * *", "minute", "out of range"]),
        ({"schedule": "* * * *"}, ["4 fields"]),
        ({"schedule": "sometimes"}, ["sometimes", "not a cron expression"]),
        ({"schedule": "0 3 * * *", "tz": "Mars/Base"}, ["Mars/Base", "IANA zone"]),
        ({"schedule": "0 3 * * *", "missed": "never"}, ["missed-tick policy", "never"]),
        ({"schedule": 5}, ["schedule is int"]),
    ]
    for given, words in cases:
        args = {"tz": "UTC", **given}
        with pytest.raises(hero.InvalidInput) as e:
            q.cron_add("n", args.pop("schedule"), "x", **args)
        for w in words:
            assert w in str(e.value), f"{given}: {e.value}"
    # the engine's refusal reaches cron_next the same way
    with pytest.raises(hero.InvalidInput, match="Mars/Base"):
        q.cron_next("0 3 * * *", "Mars/Base")
    with pytest.raises(hero.InvalidInput, match="every soon"):
        q.cron_next("every soon")
    for bad in ({"n": 0}, {"n": 101}, {"n": True}, {"after_ms": -1}, {"after_ms": "now"}):
        with pytest.raises(hero.InvalidInput):
            q.cron_next("every 1s", **bad)
    assert snapshot(r) == before, "nothing written"
    assert q.cron_list() == []


def test_cron_add_answers_the_next_tick_and_cron_remove_removes_the_state(redis_url):
    q = hero.Queue("cr", redis_url)
    r = q.client.r
    nxt = q.cron_add("nightly", "0 3 * * *", "x", tz="Europe/Amsterdam", payload=b"\x01")
    assert nxt == q.cron_next("0 3 * * *", "Europe/Amsterdam", n=1)[0]
    at = datetime.fromtimestamp(nxt / 1000, AMS)
    assert (at.hour, at.minute, at.second) == (3, 0, 0), at
    assert 0 < nxt - ms(datetime.now(timezone.utc)) <= 25 * 3600 * 1000
    # the state the duties keep is removed with the spec
    r.hset("hero:meta:cron:next", mapping={"nightly": nxt, "nightly|fires": 3, "nightly|last": nxt - 86_400_000})
    [listed] = q.cron_list()
    assert (listed["next_ms"], listed["fires"], listed["tz"]) == (nxt, 3, "Europe/Amsterdam")
    assert q.cron_remove("nightly") is True
    assert not r.hexists("hero:meta:cron", "nightly")
    assert not any(k.startswith(b"nightly") for k in r.hkeys("hero:meta:cron:next"))
    assert q.cron_remove("nightly") is False


def test_cron_next_answers_the_engines_ticks_as_zoneinfo_reads_them(redis_url):
    q = hero.Queue("cr", redis_url)
    # 03:00 in Amsterdam: 02:00Z in winter (CET), 01:00Z in summer (CEST)
    winter = ms(datetime(2026, 1, 10, 12, tzinfo=timezone.utc))
    assert q.cron_next("0 3 * * *", "Europe/Amsterdam", n=2, after_ms=winter) == [
        ms(datetime(2026, 1, 11, 2, tzinfo=timezone.utc)), ms(datetime(2026, 1, 12, 2, tzinfo=timezone.utc))]
    summer = ms(datetime(2026, 7, 1, tzinfo=timezone.utc))
    assert q.cron_next("0 3 * * *", "Europe/Amsterdam", n=1, after_ms=summer) == [
        ms(datetime(2026, 7, 1, 1, tzinfo=timezone.utc))]
    # across the spring change (29 March 2026, 02:00 CET -> 03:00 CEST) and the autumn one
    # (25 October 2026, 03:00 CEST -> 02:00 CET), day by day as zoneinfo reads them
    for start in (datetime(2026, 3, 27, tzinfo=timezone.utc), datetime(2026, 10, 23, tzinfo=timezone.utc)):
        want = [local(*(start + timedelta(days=i)).timetuple()[:3], 3) for i in range(4)]
        assert q.cron_next("0 3 * * *", "Europe/Amsterdam", n=4, after_ms=ms(start)) == want
    # a fixed time in the spring gap (02:30 does not exist that day) fires once, at the change;
    # one that occurs twice in autumn fires at its first instant
    utc = lambda *a: ms(datetime(*a, tzinfo=timezone.utc))  # noqa: E731
    spring = q.cron_next("30 2 * * *", "Europe/Amsterdam", n=3, after_ms=utc(2026, 3, 28))
    assert spring == [local(2026, 3, 28, 2, 30), utc(2026, 3, 29, 1), local(2026, 3, 30, 2, 30)]
    autumn = q.cron_next("30 2 * * *", "Europe/Amsterdam", n=1, after_ms=utc(2026, 10, 24, 12))
    assert autumn == [utc(2026, 10, 25, 0, 30)]
    # UTC by default; `every` ticks at whole multiples of its step since the epoch
    assert q.cron_next("*/15 * * * *", n=3, after_ms=ms(datetime(2026, 5, 5, 10, 7, tzinfo=timezone.utc))) == [
        ms(datetime(2026, 5, 5, 10, m, tzinfo=timezone.utc)) for m in (15, 30, 45)]
    assert q.cron_next("every 90s", n=3, after_ms=1_000_000) == [1_080_000, 1_170_000, 1_260_000]
    assert q.cron_next("@hourly", "UTC", n=1, after_ms=3_600_000) == [7_200_000]
    # after_ms None: now on Redis's clock
    secs, _ = q.client.r.time()
    [soon] = q.cron_next("every 1s", n=1)
    assert secs * 1000 < soon <= secs * 1000 + 2000 and soon % 1000 == 0
    assert len(q.cron_next("every 1s", n=100, after_ms=0)) == 100


def test_the_duties_answer_carries_the_ticks_and_an_older_one_is_read_too():
    ten = [1, b"w:1:a", 2, 0, 0, 0, 1, 0, 3, 1]
    d = Duties.parse(ten)
    assert (d.held, d.holder, d.promoted, d.expired, d.fired, d.skipped, d.moved) == (True, "w:1:a", 2, 1, 3, 1, 3)
    old = Duties.parse(ten[:8])
    assert (old.fired, old.skipped, old.promoted) == (0, 0, 2)
    with pytest.raises(hero.HeroError, match="expected 8 items"):
        Duties.parse([1, b"w"])
