"""RedisStore: every algorithm of a KeyedLimiter kept in Redis (the shared Redis on
127.0.0.1:6379, under a prefix of this run's own, deleted afterwards), one key space with
a real `floodgate proxy` process, and the fault policy when Redis goes away (a
redis-server of the test's own, killed)."""

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid

import pytest

from floodgate import (GCRA, ConfigError, FixedWindow, KeyedLimiter, LeakyBucket, LeakyQueue,
                       Policy, RedisStore, RequestLimiter, SlidingCounter, SlidingLog,
                       StoreUnavailable, TokenBucket)
from proxyproc import Proxy, free_port
from web_servers import own_redis  # noqa: F401 - a fixture

PREFIX = f"floodgate-pytest-{uuid.uuid4().hex}:"


def redis_cli(*args, port=6379):
    return subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
                          capture_output=True, text=True, timeout=10, check=True).stdout


@pytest.fixture(scope="module", autouse=True)
def cleanup():
    yield
    if shutil.which("redis-cli"):
        keys = redis_cli("--scan", "--pattern", f"{PREFIX}*").split()
        if keys:
            redis_cli("DEL", *keys)


# slow rates: no refill between two calls of a sequence changes a whole unit
ALGORITHMS = {
    "fixed-window": lambda: FixedWindow(limit=5, window_s=3600),
    "sliding-log": lambda: SlidingLog(limit=5, window_s=3600),
    "sliding-counter": lambda: SlidingCounter(limit=5, window_s=3600),
    "token-bucket": lambda: TokenBucket(capacity=5, refill_per_s=0.001),
    "leaky-meter": lambda: LeakyBucket(capacity=5, rate_per_s=0.001),
    "leaky-queue": lambda: LeakyQueue(rate_per_s=0.001, burst=4, nodelay=True),
    "gcra": lambda: GCRA(limit=5, period_s=3600, capacity=5),
}


@pytest.mark.parametrize("kind", sorted(ALGORITHMS))
def test_every_algorithm_decides_on_redis_as_in_process(kind):
    store = RedisStore(prefix=PREFIX, timeout_s=2.0)
    on_redis = KeyedLimiter(ALGORITHMS[kind](), store=store, name=f"seq-{kind}")
    local = KeyedLimiter(ALGORITHMS[kind]())
    assert on_redis.store is store and on_redis.name == f"seq-{kind}"
    costs = [1, 2, 1, 3, 1, 1, 6, 1]

    def seq(lim):
        # a look at the key's state, as a request of cost 0 sees it, and as one of
        # cost 2 would be answered (nothing charged, on Redis as in process)
        out = [lim.peek("k", cost=0), lim.peek("k", cost=2)]
        out += [lim.check("k", cost=c) for c in costs]
        return [(d.allowed, d.limit, d.remaining) for d in out]

    expected = seq(local)
    assert seq(on_redis) == expected
    # a cost above the limit can never be admitted, on Redis too (on a key the store has
    # not seen denied: a remembered denial answers any cost as rate limited)
    never = on_redis.check("fresh", cost=6)
    assert never.never and never.retry_after is None and not never.allowed
    assert [a for a, *_ in expected[2:]] == [True, True, True, False, True, False, False, False]
    # a peek at a cost the key cannot admit now: denied, nothing charged
    assert [lim.peek("k", cost=3).allowed for lim in (local, on_redis)] == [False, False]


def test_a_python_limiter_and_a_floodgate_proxy_share_one_count(tmp_path):
    name = "shared"
    proxy = Proxy(tmp_path, f"""
[store]
type = "redis"

[store.redis]
url = "redis://127.0.0.1:6379"
prefix = "{PREFIX}"
timeout = "2s"

[[policy]]
name = "{name}"
algorithm = "gcra"
rate = "3/min"
capacity = 3
key = "ip"
""")
    try:
        lim = KeyedLimiter(GCRA(limit=3, period_s=60, capacity=3),
                           store=RedisStore(prefix=PREFIX, timeout_s=2.0), name=name)
        # the proxy counts its client by address: 127.0.0.1
        assert lim.check("127.0.0.1").remaining == 2
        assert proxy.get("/")[0] == 200
        assert lim.check("127.0.0.1").allowed  # the third unit
        assert proxy.get("/")[0] == 429
        assert not lim.check("127.0.0.1").allowed
        assert lim.check("127.0.0.2").allowed  # another client
    finally:
        proxy.stop()


def test_request_limiter_on_redis_counts_across_limiters():
    policies = [Policy("api", "2/min", algorithm="gcra", capacity=2, key="provided")]
    a = RequestLimiter(policies, store=RedisStore(prefix=PREFIX, timeout_s=2.0))
    b = RequestLimiter(policies, store=RedisStore(prefix=PREFIX, timeout_s=2.0))
    assert a.store_reachable()
    assert a.decide("GET", "/", keys="u1").allowed
    assert b.decide("GET", "/", keys="u1").allowed
    denied = a.decide("GET", "/", keys="u1")
    assert not denied.allowed and denied.response[0] == 429


def test_redis_down_fails_open_closed_or_raises_as_set(own_redis):
    proc, url = own_redis
    store = RedisStore(url, prefix="t:", timeout_s=0.2)
    lims = {f: KeyedLimiter(GCRA(limit=1, period_s=60), store=store, name="down", on_failure=f)
            for f in ("allow", "deny", "raise")}
    req = RequestLimiter([Policy("down", "1/min", algorithm="gcra", key="global")],
                         store=store, on_store_failure="deny")
    assert lims["allow"].check("k").allowed
    assert not lims["deny"].check("k").allowed  # the same key: counted in Redis
    assert req.decide("GET", "/").allowed
    proc.kill()
    proc.wait(timeout=10)
    # a fresh key: no denial remembered from before, every answer is the fault policy's
    assert lims["allow"].check("k2").allowed
    fault = lims["deny"].check("k2")
    assert not fault.allowed and fault.retry_after == 1.0
    with pytest.raises(StoreUnavailable):
        lims["raise"].check("k2")
    status, _, body = req.decide("GET", "/").response
    assert status == 503 and b"rate limiter unavailable" in body
    assert not store.reachable()


def test_bad_store_settings_and_in_process_only_methods():
    with pytest.raises(ConfigError, match="url"):
        RedisStore("http://127.0.0.1:6379")
    with pytest.raises(ConfigError, match="prefix"):
        RedisStore(prefix="a{b}")
    with pytest.raises(ConfigError, match="timeout_s"):
        RedisStore(timeout_s=0)
    with pytest.raises(ConfigError, match="connect_timeout_s"):
        RedisStore(connect_timeout_s=float("nan"))
    with pytest.raises(ConfigError, match="on_failure"):
        KeyedLimiter(GCRA(rate_per_s=1), store=RedisStore(prefix=PREFIX), on_failure="maybe")
    with pytest.raises(ConfigError, match="name"):
        KeyedLimiter(GCRA(rate_per_s=1), store=RedisStore(prefix=PREFIX), name="")
    lim = KeyedLimiter(GCRA(rate_per_s=1), store=RedisStore(prefix=PREFIX), name="x")
    with pytest.raises(ValueError, match="Redis TIME"):
        lim.check("k", now=1.0)
    with pytest.raises(ValueError, match="Redis TIME"):
        lim.reserve("k", now=1.0)
    with pytest.raises(ValueError, match="Redis TIME"):
        lim.sweep(now=1.0)
    for call in (lambda: len(lim), lim.stats):
        with pytest.raises(TypeError, match="no per-process key table"):
            call()
    for call in (lambda: lim.set_key_algorithm("k", GCRA(rate_per_s=2)),
                 lambda: lim.clear_key_algorithm("k"),
                 lambda: lim.set_algorithm(GCRA(rate_per_s=2))):
        with pytest.raises(TypeError, match="another name"):
            call()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_worker_decides_on_its_own_connection():
    # a pre-fork server (gunicorn) builds its limiters before forking: the child cannot
    # use the parent's connection or I/O threads, and connects again
    lim = KeyedLimiter(GCRA(limit=3, period_s=3600, capacity=3),
                       store=RedisStore(prefix=PREFIX, timeout_s=2.0), name="fork")
    req = RequestLimiter([Policy("fork-req", "3/h", algorithm="gcra", capacity=3,
                                 key="global")],
                         store=RedisStore(prefix=PREFIX, timeout_s=2.0))
    assert lim.check("k").remaining == 2 and req.decide("GET", "/").allowed
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            ok = lim.check("k").remaining == 1 and req.decide("GET", "/").allowed
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # the child's decisions counted in Redis, where the parent sees them
    assert lim.check("k").remaining == 0


def test_threads_connecting_at_once_share_one_count():
    # eight threads make the first decisions of a fresh store at once: one connection,
    # no thread left waiting, exactly the limit admitted
    lim = KeyedLimiter(GCRA(limit=20, period_s=3600, capacity=20),
                       store=RedisStore(prefix=PREFIX, timeout_s=2.0), name="threads")
    results = []

    def work():
        for _ in range(10):
            results.append(lim.check("k").allowed)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert len(results) == 80 and sum(results) == 20


def test_a_redis_that_stops_answering_times_out_into_the_fault_policy(own_redis):
    proc, url = own_redis
    store = RedisStore(url, prefix="t:", timeout_s=0.2)
    allow = KeyedLimiter(GCRA(limit=5, period_s=60), store=store, name="paused")
    strict = KeyedLimiter(GCRA(limit=5, period_s=60), store=store, name="paused",
                          on_failure="raise")
    assert allow.check("k").remaining == 4 and strict.check("k").remaining == 3
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreUnavailable):
            strict.check("k2")
        assert allow.check("k3").allowed  # fail open
        assert time.monotonic() - t0 < 2.0  # bounded by timeout_s, not by Redis
    finally:
        os.kill(proc.pid, signal.SIGCONT)
