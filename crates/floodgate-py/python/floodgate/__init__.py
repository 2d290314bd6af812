"""floodgate: rate limiting that names its guarantee at the window boundary.

Every algorithm of the Rust core as a class taking keyword arguments in seconds::

    from floodgate import TokenBucket
    bucket = TokenBucket(capacity=10, refill_per_s=2.0)
    if bucket.allow():          # monotonic clock; or bucket.allow(now=12.5)
        ...
    d = bucket.check()          # Decision(allowed=..., limit=..., remaining=..., retry_after=...)

Classes: FixedWindow, SlidingLog, SlidingCounter, TokenBucket, LeakyBucket (alias
LeakyMeter), LeakyQueue, GCRA, all subclasses of Limiter; KeyedLimiter for per-key limits
(KeyedLimiter.reserve returns a Reservation, settled with the actual cost);
InFlight for at most n calls at once per key (leases: Lease, InFlightFull);
Decision; ConfigError (a ValueError). throttle() is redis-cell's CL.THROTTLE on any Redis
(RedisError, RedisTimeoutError when Redis cannot answer).

On Redis: KeyedLimiter(..., store=RedisStore(url), name=...) keeps every algorithm's keys
in Redis, shared with other processes and with `floodgate proxy` (StoreUnavailable when
Redis cannot answer and on_failure="raise"). acquire() waits until admitted
(RateLimitExceeded). floodgate.aio.KeyedLimiter is the same limiter for asyncio.

For requests: RequestLimiter(policies=[Policy(...)], routes=[Route(...)]) is the decision
procedure of `floodgate proxy` (keys, denials, headers); decide() returns a Verdict.
"""

from floodgate._floodgate import (
    ConfigError,
    Decision,
    FixedWindow,
    GCRA,
    InFlight,
    InFlightFull,
    KeyedLimiter,
    LeakyBucket,
    LeakyMeter,
    LeakyQueue,
    Lease,
    Limiter,
    Policy,
    RateLimitExceeded,
    RedisError,
    RedisStore,
    RedisTimeoutError,
    RequestLimiter,
    Reservation,
    Route,
    SlidingCounter,
    SlidingLog,
    StoreUnavailable,
    TokenBucket,
    Verdict,
    throttle,
    __version__,
)

__all__ = [
    "ConfigError",
    "Decision",
    "FixedWindow",
    "GCRA",
    "InFlight",
    "InFlightFull",
    "KeyedLimiter",
    "LeakyBucket",
    "LeakyMeter",
    "LeakyQueue",
    "Lease",
    "Limiter",
    "Policy",
    "RateLimitExceeded",
    "RedisError",
    "RedisStore",
    "RedisTimeoutError",
    "RequestLimiter",
    "Reservation",
    "Route",
    "SlidingCounter",
    "SlidingLog",
    "StoreUnavailable",
    "throttle",
    "TokenBucket",
    "Verdict",
    "__version__",
]
