"""Each test gets its own redis-server on a free loopback port (never 6379), killed by pid, and
where it asks a real `hero broker` of this repository (target/debug/hero, or HERO_BIN)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import redis

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERO = os.environ.get("HERO_BIN", os.path.join(ROOT, "target", "debug", "hero"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what: str, check, limit: float = 20.0, every: float = 0.02):
    deadline = time.monotonic() + limit
    while True:
        v = check()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit} s waiting for {what}")
        time.sleep(every)


@pytest.fixture
def redis_url():
    port = free_port()
    d = tempfile.mkdtemp(prefix="hero-py-redis-")
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", d], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}"
    r = redis.Redis.from_url(url)

    def up():
        try:
            return r.ping()
        except redis.ConnectionError:
            return False
    wait_until("redis-server to answer", up)
    yield url
    p.kill()
    p.wait()
    shutil.rmtree(d, ignore_errors=True)


def hero(*args: str, url: str, check: bool = True) -> subprocess.CompletedProcess:
    """`hero <args>` against `url`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERO_")}
    env["HERO_REDIS_URL"] = url
    return subprocess.run([HERO, *args], env=env, capture_output=True, text=True, timeout=60, check=check)


@pytest.fixture
def broker(redis_url):
    """A `hero broker` (HTTP off) on the test's Redis, lease 2 s and quick presence checks."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERO_")}
    p = subprocess.Popen([HERO, "--redis-url", redis_url, "broker", "--http", "off", "--lease-ms", "2000"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    r = redis.Redis.from_url(redis_url)
    wait_until("the broker to load its functions", lambda: r.exists("hero:meta:config") or p.poll() is not None)
    assert p.poll() is None, p.stderr.read() if p.stderr else "the broker exited"
    yield redis_url
    p.terminate()
    try:
        p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()


def python_proc(code: str, url: str) -> subprocess.Popen:
    """A Python process running `code` with the package, HERO_REDIS_URL set, output piped."""
    env = dict(os.environ, HERO_REDIS_URL=url, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
