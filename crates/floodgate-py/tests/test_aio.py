"""asyncio: floodgate.aio.KeyedLimiter never blocks the event loop (a ticker keeps
ticking while hundreds of acquires wait), admits exactly the limit under concurrency on
Redis, and acquire (async and blocking) waits, times out and refuses as documented."""

import asyncio
import os
import signal
import threading
import shutil
import subprocess
import time
import uuid

import pytest

from floodgate import (GCRA, ConfigError, KeyedLimiter, LeakyQueue, Policy, RateLimitExceeded,
                       RedisStore, RequestLimiter)
from floodgate import aio
from web_servers import own_redis  # noqa: F401 - a fixture

PREFIX = f"floodgate-pytest-aio-{uuid.uuid4().hex}:"


@pytest.fixture(scope="module", autouse=True)
def cleanup():
    yield
    if shutil.which("redis-cli"):
        cli = ["redis-cli", "-h", "127.0.0.1", "-p", "6379"]
        keys = subprocess.run([*cli, "--scan", "--pattern", f"{PREFIX}*"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.split()
        if keys:
            subprocess.run([*cli, "DEL", *keys], capture_output=True, timeout=10, check=True)


async def with_ticker(work):
    """Runs `work` beside a task ticking every 5 ms; returns (result, the longest gap
    between two ticks in seconds, ticks)."""
    ticks = []
    stop = asyncio.Event()

    async def ticker():
        while not stop.is_set():
            ticks.append(time.monotonic())
            await asyncio.sleep(0.005)

    t = asyncio.create_task(ticker())
    try:
        result = await work
    finally:
        stop.set()
        await t
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    return result, max(gaps, default=0.0), len(ticks)


@pytest.mark.parametrize("on_redis", [False, True], ids=["in-process", "redis"])
def test_the_loop_keeps_ticking_while_hundreds_of_acquires_wait(on_redis):
    store = RedisStore(prefix=PREFIX, timeout_s=2.0) if on_redis else None
    # 400 a second, one at once: 200 acquires of one key take about 0.5 s
    lim = aio.KeyedLimiter(GCRA(rate_per_s=400, capacity=1), store=store,
                           name=f"tick-{uuid.uuid4().hex}")

    async def main():
        t0 = time.monotonic()
        done = await asyncio.gather(*(lim.acquire("k", timeout_s=30) for _ in range(200)))
        return done, time.monotonic() - t0

    (done, took), gap, ticks = asyncio.run(with_ticker(main()))
    assert len(done) == 200 and all(d.allowed for d in done)
    assert took >= 0.45  # they did wait for the rate
    # the loop was never held: the ticker ran all along
    assert ticks >= 50 and gap < 0.25, (ticks, gap)


def test_concurrent_checks_on_redis_admit_exactly_the_limit():
    lim = aio.KeyedLimiter(GCRA(limit=50, period_s=3600, capacity=50),
                           store=RedisStore(prefix=PREFIX, timeout_s=2.0), name="exact")

    async def main():
        return await asyncio.gather(*(lim.check("k") for _ in range(200)))

    decisions = asyncio.run(main())
    assert sum(d.allowed for d in decisions) == 50
    # and the sync limiter on the same store and name sees the same count
    same = KeyedLimiter(GCRA(limit=50, period_s=3600, capacity=50),
                        store=RedisStore(prefix=PREFIX, timeout_s=2.0), name="exact")
    assert not same.check("k").allowed


def test_async_acquire_times_out_and_refuses_the_impossible():
    lim = aio.KeyedLimiter(GCRA(limit=1, period_s=60))

    async def main():
        assert (await lim.acquire("k")).allowed
        with pytest.raises(RateLimitExceeded, match="timeout_s") as info:
            await lim.acquire("k", timeout_s=0.5)
        assert info.value.decision.retry_after > 50
        with pytest.raises(RateLimitExceeded, match="never") as info:
            await lim.acquire("other", cost=2)
        assert info.value.decision.never
        with pytest.raises(ConfigError, match="timeout_s"):
            await lim.acquire("k", timeout_s=float("nan"))
        assert not await lim.allow("k")
        peeked = await lim.peek("other")
        assert peeked.allowed and peeked.remaining == 0  # after this request, had it been one

    asyncio.run(main())


def test_blocking_acquire_sleeps_until_admitted():
    lim = KeyedLimiter(GCRA(rate_per_s=20, capacity=1))
    t0 = time.monotonic()
    for _ in range(5):
        assert lim.acquire("k").allowed
    assert time.monotonic() - t0 >= 0.19  # 4 waits of 50 ms
    exhausted = KeyedLimiter(GCRA(limit=1, period_s=60))
    assert exhausted.allow("k")
    t0 = time.monotonic()
    with pytest.raises(RateLimitExceeded, match="timeout_s") as info:
        exhausted.acquire("k", timeout_s=0.1)
    assert info.value.decision.retry_after > 50
    assert time.monotonic() - t0 < 0.1  # refused at once: waiting could not help
    with pytest.raises(RateLimitExceeded, match="never") as info:
        lim.acquire("k", cost=5)
    assert info.value.decision.never
    with pytest.raises(ConfigError, match="timeout_s"):
        lim.acquire("k", timeout_s=-1.0)
    # a delaying leaky queue: acquire also waits out the delay it is given
    q = KeyedLimiter(LeakyQueue(rate_per_s=10, burst=5))
    t0 = time.monotonic()
    for _ in range(3):
        q.acquire("k")
    assert time.monotonic() - t0 >= 0.15



def request_limiter(limit, name):
    """A RequestLimiter on the shared Redis: one global GCRA policy of `limit` an hour."""
    return RequestLimiter([Policy(name, f"{limit}/h", algorithm="gcra", capacity=limit,
                                  key="global")],
                          store=RedisStore(prefix=PREFIX, timeout_s=2.0))


def test_decide_async_never_blocks_the_loop_while_redis_does_not_answer(own_redis):
    # 300 decisions wait on a paused Redis (SIGSTOP) for 0.4 s: the ticker keeps
    # ticking all along, and when Redis answers again every future is completed on the
    # loop's thread (many per wake), each request counted once
    proc, url = own_redis
    lim = RequestLimiter([Policy("paused", "250/h", algorithm="gcra", capacity=250,
                                 key="global")],
                         store=RedisStore(url, prefix="t:", timeout_s=5.0),
                         on_store_failure="deny")
    assert lim.decide("GET", "/").allowed  # connected

    async def main():
        waiting = asyncio.gather(*(lim.decide_async("GET", "/") for _ in range(300)))
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(0.4)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        return await waiting

    verdicts, gap, ticks = asyncio.run(with_ticker(main()))
    assert sum(v.allowed for v in verdicts) == 249
    assert all(v.response[0] == 429 for v in verdicts if not v.allowed)  # not 503
    assert ticks >= 40 and gap < 0.25, (ticks, gap)


def test_decide_async_on_redis_in_new_loops_and_threads_and_after_a_cancel():
    # every loop gets its own results: loops one after another (asyncio.run closes
    # each), two loops on two threads at once, and a cancelled decision, which is
    # still counted and leaves the others alone
    lim = request_limiter(1000, f"loops-{uuid.uuid4().hex}")

    async def batch(n):
        return sum(v.allowed for v in
                   await asyncio.gather(*(lim.decide_async("GET", "/") for _ in range(n))))

    for _ in range(3):
        assert asyncio.run(batch(50)) == 50
    counts = []
    threads = [threading.Thread(target=lambda: counts.append(asyncio.run(batch(100))))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert counts == [100, 100]

    async def cancel_one():
        doomed = asyncio.ensure_future(lim.decide_async("GET", "/"))
        await asyncio.sleep(0)
        doomed.cancel()
        n = await batch(20)
        with pytest.raises(asyncio.CancelledError):
            await doomed
        return n

    assert asyncio.run(cancel_one()) == 20
    # 150 + 200 + 20 + the cancelled one (sent before the 20, on the same connection):
    # 371 of 1000 charged
    assert asyncio.run(batch(700)) == 629


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_awaits_decisions_on_its_own_loop():
    # the parent's loop saw decisions before the fork; the child's loop gets its own
    # wake-up socket (and the child its own connection and I/O threads)
    lim = request_limiter(100, f"fork-{uuid.uuid4().hex}")

    async def batch(n):
        return sum(v.allowed for v in
                   await asyncio.gather(*(lim.decide_async("GET", "/") for _ in range(n))))

    assert asyncio.run(batch(10)) == 10
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if asyncio.run(asyncio.wait_for(batch(10), 10)) == 10 else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung awaiting decide_async")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0
    assert asyncio.run(batch(85)) == 80  # 10 + 10 counted before: 80 of 100 left
