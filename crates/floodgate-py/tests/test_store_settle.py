"""A KeyedLimiter on a RedisStore (the shared Redis on 127.0.0.1:6379, under a prefix of
this run's own, deleted afterwards): reserve and settle through the engine's decision
store, the same decisions as in process; peek, sweep, stats and len as documented."""

import shutil
import subprocess
import time
import uuid

import pytest

from floodgate import KeyedLimiter, RedisStore, StoreUnavailable, TokenBucket
from web_servers import own_redis  # noqa: F401 - a fixture

PREFIX = f"floodgate-pytest-settle-{uuid.uuid4().hex}:"


def redis_cli(*args):
    return subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", "6379", *args],
                          capture_output=True, text=True, timeout=10, check=True).stdout


@pytest.fixture(scope="module", autouse=True)
def cleanup():
    yield
    if shutil.which("redis-cli"):
        keys = redis_cli("--scan", "--pattern", f"{PREFIX}*").split()
        if keys:
            redis_cli("DEL", *keys)


def budget():
    # 1,000 tokens an hour: no whole token comes back between two calls of a test
    return TokenBucket(capacity=1000, refill_per_s=1000 / 3600)


def on_redis(name):
    return KeyedLimiter(budget(), store=RedisStore(prefix=PREFIX, timeout_s=2.0), name=name)


def sequence(lim):
    """Reserve, settle above, below and at the estimate, deny, settle twice: what each
    step answers, as (allowed, remaining) and (charged, refunded)."""
    out = []
    r = lim.reserve("k", estimate=100)
    out.append((r.allowed, r.decision.remaining))
    d = r.settle(300)
    out.append((r.charged, r.refunded, d.remaining))
    r = lim.reserve("k", estimate=400)
    d = r.settle(50)
    out.append((r.charged, r.refunded, d.remaining))
    with pytest.raises(ValueError, match="settled already"):
        r.settle(1)
    denied = lim.reserve("k", estimate=5000)
    out.append((denied.allowed, denied.decision.never))
    with pytest.raises(ValueError, match="not admitted"):
        denied.settle(1)
    # into debt, then even an estimate of 0 waits
    r = lim.reserve("k", estimate=1)
    d = r.settle(2000)
    out.append((r.charged, d.remaining))
    waiting = lim.reserve("k", estimate=0)
    out.append((waiting.allowed, waiting.decision.retry_after is not None))
    with lim.reserve("ctx", estimate=10) as r:
        r.cost = 4
    out.append((r.charged, r.refunded, lim.peek("ctx", cost=0).remaining))
    return out


def test_reserve_and_settle_on_redis_decide_as_in_process():
    expected = sequence(KeyedLimiter(budget()))
    assert expected[:3] == [(True, 900), (200, 0, 700), (0, 350, 650)]
    assert sequence(on_redis("seq")) == expected


def test_two_limiters_on_one_redis_see_each_others_settled_costs():
    a, b = on_redis("shared"), on_redis("shared")
    r = a.reserve("user", estimate=10)
    assert b.peek("user", cost=0).remaining == 990
    r.settle(600)
    assert b.peek("user", cost=0).remaining == 400
    r = b.reserve("user", estimate=300)
    r.settle(0)
    assert a.peek("user", cost=0).remaining == 400
    assert not a.reserve("user", estimate=401).allowed
    assert b.reserve("user", estimate=400).allowed


@pytest.mark.parametrize("bad", [-1, 1.5, float("nan"), "300", 2**64, None])
def test_bad_actual_costs_on_redis_change_nothing(bad):
    lim = on_redis(f"bad-{uuid.uuid4().hex}")
    r = lim.reserve("k", estimate=100)
    with pytest.raises((ValueError, TypeError), match="actual"):
        r.settle(bad)
    assert lim.peek("k", cost=0).remaining == 900
    assert r.settle(100).remaining == 900


def test_a_settle_redis_cannot_answer_raises_and_stays_open(own_redis):
    server, url = own_redis
    store = RedisStore(url, prefix="t:", timeout_s=0.5)
    lim = KeyedLimiter(budget(), store=store, name="down")
    wait_until(store.reachable)
    r = lim.reserve("k", estimate=100)
    assert r.allowed
    server.kill()
    server.wait()
    with pytest.raises(StoreUnavailable):
        r.settle(10)
    assert r.charged is None and "open" in repr(r)
    # admitted by the fault policy with Redis gone: nothing charged, nothing to settle
    fault = lim.reserve("k", estimate=100)
    assert fault.allowed
    assert fault.settle(10).allowed and fault.charged is None
    strict = KeyedLimiter(budget(), store=store, name="down", on_failure="raise")
    with pytest.raises(StoreUnavailable):
        strict.reserve("k", estimate=1)


def test_peek_sweep_stats_and_len_on_redis():
    lim = on_redis("look")
    local = KeyedLimiter(budget())
    for one in (lim, local):
        one.check("k", cost=998)
    # a peek answers as a request of its cost would be answered, charging nothing: on
    # Redis as in process
    for cost in (0, 1, 2, 3, 5000):
        d = lim.peek("k", cost=cost)
        assert (d.allowed, d.remaining) == (cost <= 2, max(2 - cost, 0) if cost <= 2 else 2)
        assert d.allowed == local.peek("k", cost=cost).allowed
    assert lim.peek("k").remaining == 1
    assert lim.peek("k", cost=0).remaining == 2  # nothing was charged
    assert lim.sweep() == 0
    with pytest.raises(TypeError, match="no per-process key table"):
        len(lim)
    with pytest.raises(TypeError, match="no per-process key table"):
        lim.stats()


def wait_until(ready, limit=50):
    for _ in range(limit):
        if ready():
            return
        time.sleep(0.1)
    raise AssertionError("Redis did not come up within 5 s")
