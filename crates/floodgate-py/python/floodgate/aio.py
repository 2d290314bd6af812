"""floodgate for asyncio: the same limiters, awaited without blocking the event loop.

``floodgate.aio.KeyedLimiter`` takes the constructor of ``floodgate.KeyedLimiter``. On a
``RedisStore`` each decision's round trip runs on the module's I/O threads and the
coroutine awaits it; in process a decision is a few arithmetic operations and is taken
at once. ``acquire`` waits for admission with ``asyncio.sleep``, so hundreds of waiting
callers cost the loop nothing. The decisions are the native module's; this file only
waits.
"""

from __future__ import annotations

import asyncio
import time

from floodgate._floodgate import ConfigError, Decision, Limiter, RateLimitExceeded, RedisStore
from floodgate._floodgate import KeyedLimiter as _KeyedLimiter

__all__ = ["KeyedLimiter", "RateLimitExceeded"]


class KeyedLimiter:
    """Per-key limits for asyncio code: ``await lim.check(key)``,
    ``await lim.acquire(key, timeout_s=2.0)``. Same arguments as
    ``floodgate.KeyedLimiter``; ``sync`` is the underlying limiter (for the methods that
    need no waiting: ``set_key_algorithm``, ``stats``...)."""

    def __init__(
        self,
        algorithm: Limiter,
        max_keys: int | None = None,
        *,
        store: RedisStore | None = None,
        name: str = "default",
        on_failure: str = "allow",
    ) -> None:
        self.sync = _KeyedLimiter(algorithm, max_keys, store=store, name=name,
                                  on_failure=on_failure)
        self._shared = store is not None

    async def check(self, key: str | bytes, cost: int = 1) -> Decision:
        """Decide on a request of ``cost`` units for ``key``, consuming when admitted."""
        if self._shared:
            return await self.sync.check_async(key, cost)
        return self.sync.check(key, cost=cost)

    async def allow(self, key: str | bytes, cost: int = 1) -> bool:
        """As ``check``, the bool."""
        return (await self.check(key, cost)).allowed

    async def peek(self, key: str | bytes, cost: int = 1) -> Decision:
        """The Decision ``check`` would return, consuming nothing."""
        if self._shared:
            return await self.sync.peek_async(key, cost)
        return self.sync.peek(key, cost=cost)

    async def acquire(
        self, key: str | bytes, cost: int = 1, timeout_s: float | None = None
    ) -> Decision:
        """Wait until a request of ``cost`` units for ``key`` is admitted (and for a
        LeakyQueue's delay); returns its Decision. Raises RateLimitExceeded when the
        cost can never be admitted, or at once when the next admission would come after
        ``timeout_s`` seconds (None: wait as long as it takes)."""
        if timeout_s is not None and not (timeout_s >= 0 and timeout_s != float("inf")):
            raise ConfigError(
                f"timeout_s must be a finite number of seconds >= 0, got {timeout_s!r}")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            d = await self.check(key, cost)
            if d.allowed:
                if d.delay > 0:
                    await asyncio.sleep(d.delay)
                return d
            if d.retry_after is None:
                raise _exceeded(f"never admitted: {d.reason}", d)
            if deadline is not None and time.monotonic() + d.retry_after > deadline:
                raise _exceeded(
                    f"not admitted within timeout_s={timeout_s}: the next admission is "
                    f"{d.retry_after:.3f} s away", d)
            await asyncio.sleep(max(d.retry_after, 0.001))

    @property
    def store(self) -> RedisStore | None:
        return self.sync.store

    @property
    def name(self) -> str | None:
        return self.sync.name

    def __repr__(self) -> str:
        return f"aio.{self.sync!r}"


def _exceeded(message: str, decision: Decision) -> RateLimitExceeded:
    e = RateLimitExceeded(message)
    e.decision = decision
    return e
