"""asyncio: floodgate.aio.KeyedLimiter never blocks the event loop (a ticker keeps
ticking while hundreds of acquires wait), admits exactly the limit under concurrency on
Redis, and acquire (async and blocking) waits, times out and refuses as documented."""

import asyncio
import shutil
import subprocess
import time
import uuid

import pytest

from floodgate import GCRA, ConfigError, KeyedLimiter, LeakyQueue, RateLimitExceeded, RedisStore
from floodgate import aio

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

